/* The fused ops on GPU arrays (manaka._cuda): the array layer of the one entry point
 * (common/op_args.h), over the CUDA backend's table, so the positional arguments, checks and
 * messages are the CPU's. What is this file's own: GPU arrays as buffers (cuda_args.c),
 * ready on the device (every array on the current one, producers' streams waited for,
 * wider index arrays narrowed to int32), the range check by core/check.h's rules on the
 * device (mk_find_fault_cuda), and new DeviceArrays as results. Everything runs on the
 * legacy default stream. */
#include "cuda_binding.h"

#include "cuda/backend_cuda.h"
#include "python/common/op_args.h"

#define MAX_ARGS (MK_OP_ARRAYS + 2)

/* Every GPU array of one call (inputs, then out= arrays), released together. */
typedef struct {
    mk_gpu_array a[MAX_ARGS];
    int index[MAX_ARGS];       /* a[i] is an index array */
    mk_op_view *view[MAX_ARGS]; /* where a[i]'s pointer goes once it is ready */
    int n;
} held;

/* Float arrays (out= ones too) must be float32; index arrays may have any integer dtype,
 * narrowed to int32 by ready. */
static int obtain(void *ctx, const char *op, const char *name, int kind, int ndim, PyObject *obj,
                  mk_op_view *v) {
    held *h = ctx;
    mk_gpu_array *a = &h->a[h->n];
    h->index[h->n] = kind == MK_OP_INDEX;
    h->view[h->n++] = v; /* counted even on failure: parse may hold a tensor */
    if (mk_gpu_parse(obj, op, name, MK_LEGACY_STREAM, a) < 0) return -1;
    if ((kind == MK_OP_INDEX ? mk_gpu_expect_index(a, op, ndim)
                             : mk_gpu_expect(a, op, &mk_float32, ndim)) < 0)
        return -1;
    for (int d = 0; d < ndim; d++) v->shape[d] = a->shape[d];
    v->readonly = a->readonly;
    return 0; /* v->data once ready: narrowing may replace the pointer */
}

static int ready(void *ctx, const char *op) {
    held *h = ctx;
    int device;
    if (mk_gpu_current_device(op, &device) < 0) return -1;
    for (int i = 0; i < h->n; i++) {
        if (mk_gpu_attach(&h->a[i], op, device, NULL) < 0 ||
            (h->index[i] && mk_gpu_narrow(&h->a[i], op) < 0))
            return -1;
        h->view[i]->data = h->a[i].ptr;
    }
    return 0;
}

static mk_status find_fault(const mk_check *rules, mk_fault *fault) {
    return mk_find_fault_cuda(rules, fault, NULL, 0, NULL);
}

static PyObject *empty(int ndim, const int64_t *shape, float **data) {
    mk_device_array *arr = mk_device_array_empty(ndim, shape, &mk_float32);
    if (arr) *data = arr->ptr;
    return (PyObject *)arr;
}

static void release(void *ctx) {
    held *h = ctx;
    for (int i = 0; i < h->n; i++) mk_gpu_release(&h->a[i]);
}

static const mk_op_layer gpu_layer = {
    .backend = &mk_backend_cuda,
    .held_bytes = sizeof(held),
    .obtain = obtain,
    .ready = ready,
    .find_fault = find_fault,
    .empty = empty,
    .release = release,
};

/* ---------------------------------------------------------------- test hook */

/* _parse_array(obj, name="array") -> dict: what the binding reads from a GPU argument,
 * without touching the device (lets the tests check the protocol parsing on any machine). */
static PyObject *py_parse_array(PyObject *self, PyObject *args) {
    PyObject *obj;
    const char *name = "array";
    mk_gpu_array a;
    if (!PyArg_ParseTuple(args, "O|s", &obj, &name)) return NULL;
    if (mk_gpu_parse(obj, "_parse_array", name, MK_LEGACY_STREAM, &a) < 0) {
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
    {"_parse_array", py_parse_array, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

int mk_init_cuda_ops(PyObject *module) {
    if (mk_op_add_functions(module, &gpu_layer) < 0) return -1;
    return PyModule_AddFunctions(module, ops_methods);
}
