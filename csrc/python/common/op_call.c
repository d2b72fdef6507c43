/* The fused ops' one entry point (op_args.h): a call's arguments, its range check, its
 * results and the op through the layer's backend table, the same for every backend. */
#include "op_args.h"

/* An op's function has as its `self` a capsule of the layer, the op's spec its context. */
#define LAYER_CAPSULE "manaka.op_layer"

/* The out= objects (Py_None: make new results). */
static int out_args(const mk_op_spec *s, PyObject *out, PyObject **outs) {
    outs[0] = outs[1] = Py_None;
    if (s->n_outs == 1 || out == Py_None) {
        outs[0] = out;
        return 0;
    }
    if (PyTuple_Check(out) && PyArg_ParseTuple(out, "OO", &outs[0], &outs[1])) return 0;
    PyErr_Format(PyExc_TypeError, "%s: out must be a (grad_hidden, grad_table) tuple", s->name);
    return -1;
}

/* Result `o`: the out= array (its shape checked) or a new one; new reference. */
static PyObject *result(const mk_op_spec *s, const mk_op_layer *layer, const mk_op_call *c,
                        int o, PyObject *out, const mk_op_view *view, float **data) {
    if (out == Py_None) return layer->empty(s->out_ndim[o], c->out[o], data);
    for (int d = 0; d < s->out_ndim[o]; d++)
        if (view->shape[d] != c->out[o][d]) {
            PyErr_Format(PyExc_ValueError, "%s: %s.shape[%d]: expected %lld, got %lld", s->name,
                         s->out_names[o], d, (long long)c->out[o][d], (long long)view->shape[d]);
            return NULL;
        }
    *data = (float *)view->data;
    return Py_NewRef(out);
}

/* The whole call: arguments, out= arrays, the arrays made ready, the range check (unless
 * check is 0), results, the op with the GIL released. */
static PyObject *call(const mk_op_spec *s, const mk_op_layer *layer, PyObject *const *positional,
                      PyObject *out, int check) {
    const char *op = s->name;
    void *held = PyMem_Calloc(1, layer->held_bytes);
    mk_op_call c; /* mk_op_prepare fills what is read (not zeroed: this is every call's path) */
    mk_op_view out_view[2];
    PyObject *outs[2], *res[2] = {NULL, NULL}, *result_o = NULL;
    float *data[2] = {NULL, NULL};
    mk_status status;
    if (!held) return PyErr_NoMemory();
    if (out_args(s, out, outs) < 0 || mk_op_prepare(s, positional, layer, held, &c) < 0)
        goto done;
    for (int o = 0; o < s->n_outs; o++) {
        if (outs[o] == Py_None) continue;
        if (layer->obtain(held, op, s->out_names[o], MK_OP_OUT, s->out_ndim[o], outs[o],
                          &out_view[o]) < 0)
            goto done;
        if (out_view[o].readonly) {
            PyErr_Format(PyExc_ValueError, "%s: %s is read-only", op, s->out_names[o]);
            goto done;
        }
    }
    if (layer->ready && layer->ready(held, op) < 0) goto done;
    if (check) {
        mk_check rules = mk_op_rules(s, &c);
        mk_fault fault;
        Py_BEGIN_ALLOW_THREADS;
        status = layer->find_fault(&rules, &fault);
        Py_END_ALLOW_THREADS;
        if (status != MK_OK) {
            mk_raise_where(op, status);
            goto done;
        }
        if (mk_op_fault(s, &c, &rules, &fault) < 0) goto done;
    }
    for (int o = 0; o < s->n_outs; o++)
        if (!(res[o] = result(s, layer, &c, o, outs[o], &out_view[o], &data[o]))) goto done;
    Py_BEGIN_ALLOW_THREADS;
    status = s->run(layer->backend, &c, data);
    Py_END_ALLOW_THREADS;
    if (status != MK_OK) {
        mk_raise_where(op, status);
        goto done;
    }
    result_o = s->n_outs == 1 ? Py_NewRef(res[0]) : Py_BuildValue("OO", res[0], res[1]);
done:
    Py_XDECREF(res[0]);
    Py_XDECREF(res[1]);
    layer->release(held);
    PyMem_Free(held);
    return result_o;
}

/* op(arrays..., [scalar], *, out=None, check=True): the positional arguments as the spec
 * says (an optional array may be left out), the two keywords as mk_op_add_functions says. */
static PyObject *py_op(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"out", "check", NULL};
    const mk_op_layer *layer = PyCapsule_GetPointer(self, LAYER_CAPSULE);
    const mk_op_spec *s = PyCapsule_GetContext(self);
    PyObject *positional[MK_OP_ARRAYS + 1], *out = Py_None, *empty = PyTuple_New(0);
    int check = 1, optional = 0;
    char format[48];
    for (int i = 0; i < s->n_args; i++) optional += s->args[i].optional;
    Py_ssize_t given = PyTuple_GET_SIZE(args), required = s->n_positional - optional;
    snprintf(format, sizeof format, "|$Op:%s", s->name);
    int parsed = empty && PyArg_ParseTupleAndKeywords(empty, kwargs, format, kwlist, &out, &check);
    Py_XDECREF(empty);
    if (!parsed) return NULL;
    if (given < required || given > s->n_positional) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd positional arguments%s (%zd given)", s->name,
                     required, optional ? " and an optional one" : "", given);
        return NULL;
    }
    for (int i = 0; i < s->n_positional; i++)
        positional[i] = i < given ? PyTuple_GET_ITEM(args, i) : Py_None;
    return call(s, layer, positional, out, check);
}

static const mk_op_spec *const SPECS[] = {&mk_op_gather_dot, &mk_op_gather_dot_backward,
                                          &mk_op_power_sums, &mk_op_power_sums_backward,
                                          &mk_op_pair_sums,  &mk_op_pair_sums_backward};
#define NUM_OPS (int)(sizeof SPECS / sizeof SPECS[0])

int mk_op_add_functions(PyObject *module, const mk_op_layer *layer) {
    /* one definition per op for every module: a function is its definition and its `self` */
    static PyMethodDef defs[NUM_OPS];
    PyObject *name = PyModule_GetNameObject(module);
    if (!name) return -1;
    for (int i = 0; i < NUM_OPS; i++) {
        defs[i] = (PyMethodDef){SPECS[i]->name, (PyCFunction)(void (*)(void))py_op,
                                METH_VARARGS | METH_KEYWORDS, NULL};
        PyObject *self = PyCapsule_New((void *)layer, LAYER_CAPSULE, NULL), *f = NULL;
        if (self && PyCapsule_SetContext(self, (void *)SPECS[i]) == 0)
            f = PyCFunction_NewEx(&defs[i], self, name);
        Py_XDECREF(self);
        if (!f || PyModule_AddObject(module, SPECS[i]->name, f) < 0) {
            Py_XDECREF(f);
            Py_DECREF(name);
            return -1;
        }
    }
    Py_DECREF(name);
    return 0;
}
