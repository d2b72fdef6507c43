/* The fused ops on NumPy arrays (manaka._core): the array layer of the one entry point
 * (common/op_args.h), over the CPU backend's table. Index arrays become private int32
 * copies (binding.h: no other thread can change an index between its check and its use),
 * float arrays are read in place when they are float32 and C-contiguous already. */
#include "python/common/op_args.h"

/* The arrays one call converted, released together. */
typedef struct {
    PyArrayObject *a[MK_OP_ARRAYS + 2];
    int n;
} held;

static int obtain(void *ctx, const char *op, const char *name, int kind, int ndim, PyObject *obj,
                  mk_op_view *v) {
    held *h = ctx;
    PyArrayObject *arr = kind == MK_OP_INDEX ? mk_index_arg(obj, op, name, ndim)
                                             : mk_float_arg(obj, op, name, ndim);
    if (!arr) return -1;
    h->a[h->n++] = arr;
    if (kind == MK_OP_OUT && (PyObject *)arr != obj) { /* a converted copy: not the caller's */
        PyErr_Format(PyExc_ValueError, "%s: %s must be C-contiguous (results are written into it)",
                     op, name);
        return -1;
    }
    for (int d = 0; d < ndim; d++) v->shape[d] = (int64_t)PyArray_DIM(arr, d);
    v->data = PyArray_DATA(arr);
    v->readonly = !PyArray_ISWRITEABLE(arr);
    return 0;
}

static PyObject *empty(int ndim, const int64_t *shape, float **data) {
    npy_intp dims[MK_OP_DIMS];
    for (int d = 0; d < ndim; d++) dims[d] = (npy_intp)shape[d];
    PyObject *out = PyArray_SimpleNew(ndim, dims, NPY_FLOAT32);
    if (out) *data = PyArray_DATA((PyArrayObject *)out);
    return out;
}

static mk_status find_fault(const mk_check *rules, mk_fault *fault) {
    mk_find_fault(rules, fault);
    return MK_OK;
}

static void release(void *ctx) {
    held *h = ctx;
    for (int i = 0; i < h->n; i++) Py_DECREF(h->a[i]);
}

static const mk_op_layer numpy_layer = {
    .backend = &mk_backend_cpu,
    .held_bytes = sizeof(held),
    .obtain = obtain,
    .find_fault = find_fault,
    .empty = empty,
    .release = release,
};

/* ---------------------------------------------------------------- threads */

/* set_num_threads(n): an int (not a bool or a float: a TypeError naming n); its range is
 * mk_set_num_threads' rule (a value beyond int64, which C cannot hold, is worded here). */
static PyObject *py_set_num_threads(PyObject *self, PyObject *arg) {
    PyObject *value = mk_config_int_arg(arg, "set_num_threads", "n");
    if (!value) return NULL;
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow)
        PyErr_Format(PyExc_ValueError, "set_num_threads: n must be in [0, %d] (0 = default), got %S",
                     MK_MAX_THREADS, value);
    Py_DECREF(value);
    if (PyErr_Occurred()) return NULL;
    mk_status st = mk_set_num_threads(n);
    if (st != MK_OK) return mk_raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(mk_get_num_threads());
}

static PyMethodDef ops_methods[] = {
    {"set_num_threads", py_set_num_threads, METH_O, NULL},
    {"get_num_threads", py_get_num_threads, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

int mk_init_ops(PyObject *module) {
    if (mk_op_add_functions(module, &numpy_layer) < 0) return -1;
    return PyModule_AddFunctions(module, ops_methods);
}
