/* Python entry points of the three fused ops on GPU arrays (manaka._cuda).
 *
 * The same positional arguments, checks and messages as the CPU entry points: both run
 * each op's one description (common/op_args.c) through mk_op_prepare, in the same order:
 * dtypes and shapes (no device needed), then the device (every array on the current one,
 * producers' streams waited for, wider index arrays narrowed to int32), then the range
 * check by core/check.h's rules on the device (mk_find_fault_cuda), then the op, with the
 * GIL released. What is this file's own: GPU arrays as buffers (cuda_args.c), the `out=`
 * arrays, and the CUDA backend's table. Results are new DeviceArrays; everything runs on the
 * legacy default stream.
 *
 * Keyword-only extras, for the benchmark and the training step rather than for users:
 *   out=       write into these arrays (float32, exact shape, contiguous, writable) instead
 *              of allocating; gather_dot_backward takes (grad_hidden, grad_table)
 *   check=     False skips the index range checks (and their device round trip); an
 *              out-of-range index is then undefined behaviour */
#include "cuda_binding.h"

#include "cuda/backend_cuda.h"
#include "python/common/op_args.h"

#define MAX_ARGS (MK_OP_ARRAYS + 2)

/* Every GPU array of one call (inputs, then out= arrays), released together. */
typedef struct {
    mk_gpu_array a[MAX_ARGS];
    int index[MAX_ARGS];           /* a[i] is an index array */
    mk_gpu_array *input[MK_OP_ARRAYS]; /* by mk_op_spec.args position; NULL: absent */
    int n;
} held;

/* A float32 argument (dtype = &mk_float32) or an index argument (dtype = &mk_int32: any
 * integer dtype, narrowed to int32 at attach). */
static mk_gpu_array *arg(held *h, PyObject *obj, const char *op, const char *name,
                         const mk_dtype *dtype, int ndim) {
    mk_gpu_array *a = &h->a[h->n];
    h->index[h->n++] = dtype == &mk_int32; /* counted even on failure: parse may hold a tensor */
    if (mk_gpu_parse(obj, op, name, a) < 0) return NULL;
    if ((dtype == &mk_int32 ? mk_gpu_expect_index(a, op, ndim) : mk_gpu_expect(a, op, dtype, ndim)) < 0)
        return NULL;
    return a;
}

static int obtain(void *ctx, const mk_op_spec *s, int i, PyObject *obj, mk_op_view *v) {
    held *h = ctx;
    const mk_op_arg *spec = &s->args[i];
    mk_gpu_array *a = arg(h, obj, s->name, spec->name, spec->index ? &mk_int32 : &mk_float32,
                          spec->ndim);
    if (!a) return -1;
    h->input[i] = a;
    for (int d = 0; d < spec->ndim; d++) v->shape[d] = a->shape[d];
    return 0; /* v->data once attached: narrowing may replace the pointer */
}

/* An `out=` array (NULL in *parsed when not given): float32 and writable; its shape is
 * checked by result(). */
static int out_arg(held *h, PyObject *obj, const char *op, const char *name, int ndim,
                   mk_gpu_array **parsed) {
    *parsed = NULL;
    if (obj == Py_None) return 0;
    if (!(*parsed = arg(h, obj, op, name, &mk_float32, ndim))) return -1;
    if ((*parsed)->readonly) {
        PyErr_Format(PyExc_ValueError, "%s: %s is read-only", op, name);
        return -1;
    }
    return 0;
}

/* The result array: `out` (checked against `shape`) or a new DeviceArray. New reference. */
static PyObject *result(PyObject *out_o, mk_gpu_array *out, const char *op, int ndim,
                        const int64_t *shape, float **data) {
    if (out) {
        for (int i = 0; i < ndim; i++)
            if (out->shape[i] != shape[i]) {
                PyErr_Format(PyExc_ValueError, "%s: %s.shape[%d]: expected %lld, got %lld", op,
                             out->name, i, (long long)shape[i], (long long)out->shape[i]);
                return NULL;
            }
        *data = out->ptr;
        Py_INCREF(out_o);
        return out_o;
    }
    mk_device_array *arr = mk_device_array_empty(ndim, shape, &mk_float32);
    if (!arr) return NULL;
    *data = arr->ptr;
    return (PyObject *)arr;
}

/* The whole call: arguments, out= arrays, the device, the range check (unless check=False),
 * results, the op with the GIL released. `outs`: the out= objects (Py_None: allocate). */
static PyObject *call(const mk_op_spec *s, PyObject *const *positional, PyObject *scalar,
                      int64_t scalar_value, PyObject *const *outs, const char *const *out_names,
                      int check) {
    const char *op = s->name;
    held h = {0};
    mk_op_call c = {.scalar = scalar_value};
    mk_gpu_array *out[2] = {NULL, NULL};
    PyObject *res[2] = {NULL, NULL}, *result_o = NULL;
    float *data[2] = {NULL, NULL};
    mk_status status;
    int device;
    if (mk_op_prepare(s, positional, scalar, obtain, &h, &c) < 0) goto done;
    for (int o = 0; o < s->n_outs; o++)
        if (out_arg(&h, outs[o], op, out_names[o], s->out_ndim[o], &out[o]) < 0) goto done;
    if (mk_gpu_current_device(op, &device) < 0) goto done;
    for (int i = 0; i < h.n; i++)
        if (mk_gpu_attach(&h.a[i], op, device, NULL) < 0 || (h.index[i] && mk_gpu_narrow(&h.a[i], op) < 0))
            goto done;
    for (int i = 0; i < s->n_args; i++)
        if (h.input[i]) c.a[i].data = h.input[i]->ptr;
    if (check) {
        mk_check rules = mk_op_rules(s, &c);
        mk_fault fault;
        Py_BEGIN_ALLOW_THREADS;
        status = mk_find_fault_cuda(&rules, &fault, NULL, 0, NULL);
        Py_END_ALLOW_THREADS;
        if (status != MK_OK) {
            mk_raise_where(op, status);
            goto done;
        }
        if (mk_op_fault(s, &c, &rules, &fault) < 0) goto done;
    }
    for (int o = 0; o < s->n_outs; o++)
        if (!(res[o] = result(outs[o], out[o], op, s->out_ndim[o], c.out[o], &data[o]))) goto done;
    Py_BEGIN_ALLOW_THREADS;
    status = s->run(&mk_backend_cuda, &c, data);
    Py_END_ALLOW_THREADS;
    if (status != MK_OK) {
        mk_raise_where(op, status);
        goto done;
    }
    result_o = s->n_outs == 1 ? Py_NewRef(res[0]) : Py_BuildValue("OO", res[0], res[1]);
done:
    Py_XDECREF(res[0]);
    Py_XDECREF(res[1]);
    for (int i = 0; i < h.n; i++) mk_gpu_release(&h.a[i]);
    return result_o;
}

static const char *const OUT[] = {"out"};

static PyObject *py_gather_dot(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"hidden", "table", "indices", "counts", "out", "check", NULL};
    PyObject *o[4] = {NULL, NULL, NULL, Py_None}, *out = Py_None;
    int check = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O$Op:gather_dot", kwlist, &o[0], &o[1], &o[2],
                                     &o[3], &out, &check))
        return NULL;
    return call(&mk_op_gather_dot, o, NULL, 0, &out, OUT, check);
}

static PyObject *py_gather_dot_backward(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"grad", "hidden", "table", "indices", "counts",
                             "out", "check", NULL};
    static const char *const names[] = {"out[0] (grad_hidden)", "out[1] (grad_table)"};
    PyObject *o[5] = {NULL, NULL, NULL, NULL, Py_None}, *out = Py_None;
    PyObject *outs[2] = {Py_None, Py_None};
    int check = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|O$Op:gather_dot_backward", kwlist, &o[0],
                                     &o[1], &o[2], &o[3], &o[4], &out, &check))
        return NULL;
    if (out != Py_None && !PyArg_ParseTuple(out, "OO", &outs[0], &outs[1])) {
        PyErr_Format(PyExc_TypeError, "gather_dot_backward: out must be a (grad_hidden, grad_table) tuple");
        return NULL;
    }
    return call(&mk_op_gather_dot_backward, o, NULL, 0, outs, names, check);
}

static PyObject *py_power_sums(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"emb", "tokens", "orders", "out", "check", NULL};
    PyObject *o[3], *out = Py_None;
    int check = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|$Op:power_sums", kwlist, &o[0], &o[1], &o[2],
                                     &out, &check))
        return NULL;
    return call(&mk_op_power_sums, o, o[2], 0, &out, OUT, check);
}

static PyObject *py_power_sums_backward(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"grad", "emb", "tokens", "out", "check", NULL};
    PyObject *o[3], *out = Py_None;
    int check = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|$Op:power_sums_backward", kwlist, &o[0],
                                     &o[1], &o[2], &out, &check))
        return NULL;
    return call(&mk_op_power_sums_backward, o, NULL, 0, &out, OUT, check);
}

static PyObject *py_pair_sums(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"pair_table", "tokens", "out", "check", NULL};
    PyObject *o[2], *out = Py_None;
    int check = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$Op:pair_sums", kwlist, &o[0], &o[1], &out,
                                     &check))
        return NULL;
    return call(&mk_op_pair_sums, o, NULL, 0, &out, OUT, check);
}

static PyObject *py_pair_sums_backward(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"grad", "tokens", "num_pairs", "out", "check", NULL};
    PyObject *o[2], *out = Py_None;
    long long num_pairs;
    int check = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOL|$Op:pair_sums_backward", kwlist, &o[0],
                                     &o[1], &num_pairs, &out, &check))
        return NULL;
    return call(&mk_op_pair_sums_backward, o, NULL, num_pairs, &out, OUT, check);
}

/* ---------------------------------------------------------------- test hook */

/* _parse_array(obj, name="array") -> dict: what the binding reads from a GPU argument,
 * without touching the device (lets the tests check the protocol parsing on any machine). */
static PyObject *py_parse_array(PyObject *self, PyObject *args) {
    PyObject *obj;
    const char *name = "array";
    mk_gpu_array a;
    if (!PyArg_ParseTuple(args, "O|s", &obj, &name)) return NULL;
    if (mk_gpu_parse(obj, "_parse_array", name, &a) < 0) {
        mk_gpu_release(&a);
        return NULL;
    }
    PyObject *shape = PyTuple_New(a.ndim);
    for (int i = 0; shape && i < a.ndim; i++) PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(a.shape[i]));
    PyObject *d = shape ? Py_BuildValue("{s:K,s:N,s:s,s:s,s:O,s:i,s:N,s:s}", "ptr",
                                        (unsigned long long)(uintptr_t)a.ptr, "shape", shape,
                                        "dtype", a.dtype ? a.dtype->name : "unsupported",
                                        "typestr", a.typestr, "readonly",
                                        a.readonly ? Py_True : Py_False, "device", a.device,
                                        "stream", a.has_stream ? PyLong_FromVoidPtr(a.stream) : Py_NewRef(Py_None),
                                        "source", a.source)
                        : NULL;
    mk_gpu_release(&a);
    return d;
}

static PyMethodDef ops_methods[] = {
    {"gather_dot", (PyCFunction)(void (*)(void))py_gather_dot, METH_VARARGS | METH_KEYWORDS, NULL},
    {"gather_dot_backward", (PyCFunction)(void (*)(void))py_gather_dot_backward,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"power_sums", (PyCFunction)(void (*)(void))py_power_sums, METH_VARARGS | METH_KEYWORDS, NULL},
    {"power_sums_backward", (PyCFunction)(void (*)(void))py_power_sums_backward,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"pair_sums", (PyCFunction)(void (*)(void))py_pair_sums, METH_VARARGS | METH_KEYWORDS, NULL},
    {"pair_sums_backward", (PyCFunction)(void (*)(void))py_pair_sums_backward,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"_parse_array", py_parse_array, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

int mk_init_cuda_ops(PyObject *module) { return PyModule_AddFunctions(module, ops_methods); }
