/* Python entry points of the three fused ops on NumPy arrays.
 *
 * Each op's arguments are described once (common/op_args.c, shared with the GPU entry
 * points): mk_op_prepare converts and checks every argument (dtypes, shapes), the range
 * check (core/check.h) reads the converted index arrays, and only then does the op run,
 * with the GIL released. So a bad call raises a Python exception naming the argument and
 * never reaches the C loops. What is this file's own: NumPy arrays as buffers (the index
 * arrays as private int32 copies, binding.h) and the CPU backend's table. */
#include "python/common/op_args.h"

/* The arrays one call converted, released together. */
typedef struct {
    PyArrayObject *a[MK_OP_ARRAYS];
} held;

static int obtain(void *ctx, const mk_op_spec *s, int i, PyObject *obj, mk_op_view *v) {
    const mk_op_arg *arg = &s->args[i];
    PyArrayObject *arr = arg->index ? mk_index_arg(obj, s->name, arg->name, arg->ndim)
                                    : mk_float_arg(obj, s->name, arg->name, arg->ndim);
    if (!arr) return -1;
    ((held *)ctx)->a[i] = arr;
    for (int d = 0; d < arg->ndim; d++) v->shape[d] = (int64_t)PyArray_DIM(arr, d);
    v->data = PyArray_DATA(arr);
    return 0;
}

/* The whole call: arguments, range check, outputs, the op through the CPU table (as the
 * model calls it) with the GIL released. */
static PyObject *call(const mk_op_spec *s, PyObject *const *positional, PyObject *scalar,
                      int64_t scalar_value) {
    held h = {{NULL}};
    mk_op_call c; /* mk_op_prepare fills what is read (not zeroed: this is every call's path) */
    c.scalar = scalar_value;
    PyObject *out[2] = {NULL, NULL}, *result = NULL;
    float *data[2] = {NULL, NULL};
    mk_status status;
    if (mk_op_prepare(s, positional, scalar, obtain, &h, &c) < 0) goto done;
    mk_check rules = mk_op_rules(s, &c);
    mk_fault fault;
    mk_find_fault(&rules, &fault);
    if (mk_op_fault(s, &c, &rules, &fault) < 0) goto done;
    for (int o = 0; o < s->n_outs; o++) {
        npy_intp dims[MK_OP_DIMS];
        for (int d = 0; d < s->out_ndim[o]; d++) dims[d] = (npy_intp)c.out[o][d];
        if (!(out[o] = PyArray_SimpleNew(s->out_ndim[o], dims, NPY_FLOAT32))) goto done;
        data[o] = PyArray_DATA((PyArrayObject *)out[o]);
    }
    Py_BEGIN_ALLOW_THREADS;
    status = s->run(&mk_backend_cpu, &c, data);
    Py_END_ALLOW_THREADS;
    if (status != MK_OK) {
        mk_raise_status(status);
        goto done;
    }
    result = s->n_outs == 1 ? Py_NewRef(out[0]) : Py_BuildValue("OO", out[0], out[1]);
done:
    Py_XDECREF(out[0]);
    Py_XDECREF(out[1]);
    for (int i = 0; i < s->n_args; i++) Py_XDECREF(h.a[i]);
    return result;
}

static PyObject *py_gather_dot(PyObject *self, PyObject *args) {
    PyObject *o[4] = {NULL, NULL, NULL, Py_None};
    if (!PyArg_ParseTuple(args, "OOO|O", &o[0], &o[1], &o[2], &o[3])) return NULL;
    return call(&mk_op_gather_dot, o, NULL, 0);
}

static PyObject *py_gather_dot_backward(PyObject *self, PyObject *args) {
    PyObject *o[5] = {NULL, NULL, NULL, NULL, Py_None};
    if (!PyArg_ParseTuple(args, "OOOO|O", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    return call(&mk_op_gather_dot_backward, o, NULL, 0);
}

static PyObject *py_power_sums(PyObject *self, PyObject *args) {
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2])) return NULL;
    return call(&mk_op_power_sums, o, o[2], 0);
}

static PyObject *py_power_sums_backward(PyObject *self, PyObject *args) {
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2])) return NULL;
    return call(&mk_op_power_sums_backward, o, NULL, 0);
}

static PyObject *py_pair_sums(PyObject *self, PyObject *args) {
    PyObject *o[2];
    if (!PyArg_ParseTuple(args, "OO", &o[0], &o[1])) return NULL;
    return call(&mk_op_pair_sums, o, NULL, 0);
}

static PyObject *py_pair_sums_backward(PyObject *self, PyObject *args) {
    PyObject *o[2];
    long long num_pairs;
    if (!PyArg_ParseTuple(args, "OOL", &o[0], &o[1], &num_pairs)) return NULL;
    return call(&mk_op_pair_sums_backward, o, NULL, num_pairs);
}

/* ---------------------------------------------------------------- threads */

static PyObject *py_set_num_threads(PyObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "set_num_threads: n must be >= 0 (0 = default), got %ld", n);
        return NULL;
    }
    mk_set_num_threads((int)n);
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(mk_get_num_threads());
}

static PyMethodDef ops_methods[] = {
    {"gather_dot", py_gather_dot, METH_VARARGS, NULL},
    {"gather_dot_backward", py_gather_dot_backward, METH_VARARGS, NULL},
    {"power_sums", py_power_sums, METH_VARARGS, NULL},
    {"power_sums_backward", py_power_sums_backward, METH_VARARGS, NULL},
    {"pair_sums", py_pair_sums, METH_VARARGS, NULL},
    {"pair_sums_backward", py_pair_sums_backward, METH_VARARGS, NULL},
    {"set_num_threads", py_set_num_threads, METH_O, NULL},
    {"get_num_threads", py_get_num_threads, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

int mk_init_ops(PyObject *module) { return PyModule_AddFunctions(module, ops_methods); }
