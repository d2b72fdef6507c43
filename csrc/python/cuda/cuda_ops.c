/* Python entry points of the three fused ops on GPU arrays (manaka._cuda).
 *
 * The same positional arguments and the same checks and messages as the CPU entry points
 * (ops_binding.c), in the same order: dtypes and shapes (no device needed), then the
 * device (every array on the current one, producers' streams waited for), then the index
 * ranges by a small kernel that finds the first bad position, then the op, with the GIL
 * released. Results are new DeviceArrays; everything runs on the legacy default stream.
 *
 * Keyword-only extras, for the benchmark and the training step rather than for users:
 *   out=       write into these arrays (float32, exact shape, contiguous, writable) instead
 *              of allocating; gather_dot_backward takes (grad_hidden, grad_table)
 *   check=     False skips the index range checks (and their device round trip); an
 *              out-of-range index is then undefined behaviour
 *   deterministic=  False selects the atomicAdd backward (gather_dot, pair_sums) */
#include "cuda_binding.h"

#include "cuda/bench_variants.h"

#define MAX_ARGS 8

typedef struct {
    mk_gpu_array a[MAX_ARGS];
    int index[MAX_ARGS]; /* a[i] is an index array */
    int n;
    int device;
} call;

/* A float32 argument (dtype = &mk_float32) or an index argument (dtype = &mk_int32: any
 * integer dtype, narrowed to int32 at attach). */
static mk_gpu_array *arg(call *c, PyObject *obj, const char *op, const char *name,
                         const mk_dtype *dtype, int ndim) {
    mk_gpu_array *a = &c->a[c->n];
    c->index[c->n++] = dtype == &mk_int32; /* counted even on failure: parse may hold a tensor */
    if (mk_gpu_parse(obj, op, name, a) < 0) return NULL;
    if ((dtype == &mk_int32 ? mk_gpu_expect_index(a, op, ndim) : mk_gpu_expect(a, op, dtype, ndim)) < 0)
        return NULL;
    return a;
}

static void release(call *c) {
    for (int i = 0; i < c->n; i++) mk_gpu_release(&c->a[i]);
}

/* Finds the device, then checks every parsed array against it, orders their streams
 * before ours, and narrows index arrays to int32. */
static int attach(call *c, const char *op) {
    if (mk_gpu_current_device(op, &c->device) < 0) return -1;
    for (int i = 0; i < c->n; i++)
        if (mk_gpu_attach(&c->a[i], op, c->device, NULL) < 0 ||
            (c->index[i] && mk_gpu_narrow(&c->a[i], op) < 0))
            return -1;
    return 0;
}

/* An `out=` array, parsed with the inputs (NULL pointer in *parsed when not given). */
static int out_arg(call *c, PyObject *obj, const char *op, const char *name, int ndim,
                   mk_gpu_array **parsed) {
    *parsed = NULL;
    if (obj == Py_None) return 0;
    if (!(*parsed = arg(c, obj, op, name, &mk_float32, ndim))) return -1;
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

#define P32(a) ((a) ? (const int32_t *)(a)->ptr : NULL)
#define PF(a) ((const float *)(a)->ptr)
#define RUN(call_expr)                          \
    do {                                        \
        Py_BEGIN_ALLOW_THREADS;                 \
        status = (call_expr);                   \
        Py_END_ALLOW_THREADS;                   \
        if (status != MK_OK) {                  \
            mk_raise_where(op, status);               \
            goto fail;                          \
        }                                       \
    } while (0)

/* ---------------------------------------------------------------- index checks */

/* core/check.h's rules, run on the device by mk_find_fault_cuda, worded as on the CPU. */
static int find_fault(const char *op, const mk_check *c, int64_t S, int64_t T, const char *vocab) {
    mk_fault f;
    mk_status status;
    Py_BEGIN_ALLOW_THREADS;
    status = mk_find_fault_cuda(c, &f, NULL, 0, NULL);
    Py_END_ALLOW_THREADS;
    if (status != MK_OK) {
        mk_raise_where(op, status);
        return -1;
    }
    return f.kind == MK_FAULT_NONE ? 0 : mk_raise_fault(op, c, &f, S, T, vocab);
}

static int check_legal(const char *op, mk_gpu_array *indices, mk_gpu_array *counts, int64_t M) {
    mk_check c = {.legal = P32(indices), .counts = P32(counts), .B = indices->shape[0],
                  .L = indices->shape[1], .M = M};
    return find_fault(op, &c, 0, 0, NULL);
}

static int check_tokens(const char *op, mk_gpu_array *tokens, int64_t V, const char *vocab) {
    mk_check c = {.tokens = P32(tokens), .n_tokens = mk_shape_size(3, tokens->shape), .V = V};
    return find_fault(op, &c, tokens->shape[1], tokens->shape[2], vocab);
}

/* ---------------------------------------------------------------- GatherDot */

static int gather_dot_args(call *c, const char *op, PyObject *hidden_o, PyObject *table_o,
                           PyObject *indices_o, PyObject *counts_o, mk_gpu_array **hidden,
                           mk_gpu_array **table, mk_gpu_array **indices, mk_gpu_array **counts) {
    if (!(*hidden = arg(c, hidden_o, op, "hidden", &mk_float32, 2))) return -1;
    if (!(*table = arg(c, table_o, op, "table", &mk_float32, 2))) return -1;
    if (!(*indices = arg(c, indices_o, op, "indices", &mk_int32, 2))) return -1;
    *counts = NULL;
    if (counts_o != Py_None && !(*counts = arg(c, counts_o, op, "counts", &mk_int32, 1))) return -1;
    int64_t B = (*hidden)->shape[0], W = (*hidden)->shape[1];
    if (mk_expect_dim((*table)->shape[1], W, op, "table.shape[1] must equal hidden.shape[1] (W)")) return -1;
    if (mk_expect_dim((*indices)->shape[0], B, op, "indices.shape[0] must equal hidden.shape[0] (B)"))
        return -1;
    if (*counts && mk_expect_dim((*counts)->shape[0], B, op, "counts.shape[0] must equal hidden.shape[0] (B)"))
        return -1;
    return 0;
}

static PyObject *py_gather_dot(PyObject *self, PyObject *args, PyObject *kw) {
    static const char op[] = "gather_dot";
    static char *kwlist[] = {"hidden", "table", "indices", "counts", "out", "check", NULL};
    PyObject *hidden_o, *table_o, *indices_o, *counts_o = Py_None, *out_o = Py_None, *res = NULL;
    int check = 1;
    call c = {0};
    mk_gpu_array *hidden, *table, *indices, *counts, *out;
    mk_status status;
    float *logits;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O$Op:gather_dot", kwlist, &hidden_o, &table_o,
                                     &indices_o, &counts_o, &out_o, &check))
        return NULL;
    if (gather_dot_args(&c, op, hidden_o, table_o, indices_o, counts_o, &hidden, &table, &indices,
                        &counts) ||
        out_arg(&c, out_o, op, "out", 2, &out) || attach(&c, op))
        goto fail;
    int64_t B = indices->shape[0], L = indices->shape[1], W = hidden->shape[1];
    if (check && check_legal(op, indices, counts, table->shape[0])) goto fail;
    if (!(res = result(out_o, out, op, 2, (int64_t[]){B, L}, &logits))) goto fail;
    RUN(mk_gather_dot_cuda(PF(hidden), PF(table), P32(indices), P32(counts), B, L, W, logits, NULL));
    release(&c);
    return res;
fail:
    Py_XDECREF(res);
    release(&c);
    return NULL;
}

static PyObject *py_gather_dot_backward(PyObject *self, PyObject *args, PyObject *kw) {
    static const char op[] = "gather_dot_backward";
    static char *kwlist[] = {"grad", "hidden", "table", "indices", "counts",
                             "out", "check", "deterministic", NULL};
    PyObject *grad_o, *hidden_o, *table_o, *indices_o, *counts_o = Py_None, *out_o = Py_None;
    PyObject *gh_o = Py_None, *gt_o = Py_None, *gh = NULL, *gt = NULL;
    int check = 1, deterministic = 1;
    call c = {0};
    mk_gpu_array *grad, *hidden, *table, *indices, *counts, *gh_out, *gt_out;
    mk_status status;
    float *gh_data, *gt_data;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|O$Opp:gather_dot_backward", kwlist, &grad_o,
                                     &hidden_o, &table_o, &indices_o, &counts_o, &out_o, &check,
                                     &deterministic))
        return NULL;
    if (out_o != Py_None && !PyArg_ParseTuple(out_o, "OO", &gh_o, &gt_o)) {
        PyErr_Format(PyExc_TypeError, "%s: out must be a (grad_hidden, grad_table) tuple", op);
        return NULL;
    }
    if (gather_dot_args(&c, op, hidden_o, table_o, indices_o, counts_o, &hidden, &table, &indices,
                        &counts))
        goto fail;
    if (!(grad = arg(&c, grad_o, op, "grad", &mk_float32, 2))) goto fail;
    int64_t B = indices->shape[0], L = indices->shape[1], W = hidden->shape[1], M = table->shape[0];
    if (mk_expect_dim(grad->shape[0], B, op, "grad.shape[0] must equal indices.shape[0] (B)") ||
        mk_expect_dim(grad->shape[1], L, op, "grad.shape[1] must equal indices.shape[1] (L)"))
        goto fail;
    if (out_arg(&c, gh_o, op, "out[0] (grad_hidden)", 2, &gh_out) ||
        out_arg(&c, gt_o, op, "out[1] (grad_table)", 2, &gt_out) || attach(&c, op))
        goto fail;
    if (check && check_legal(op, indices, counts, M)) goto fail;
    if (!(gh = result(gh_o, gh_out, op, 2, (int64_t[]){B, W}, &gh_data))) goto fail;
    if (!(gt = result(gt_o, gt_out, op, 2, (int64_t[]){M, W}, &gt_data))) goto fail;
    RUN((deterministic ? mk_gather_dot_backward_cuda : mk_gather_dot_backward_atomic_cuda)(
        PF(grad), PF(hidden), PF(table), P32(indices), P32(counts), B, L, W, M, gh_data, gt_data,
        NULL));
    release(&c);
    return Py_BuildValue("NN", gh, gt);
fail:
    Py_XDECREF(gh);
    Py_XDECREF(gt);
    release(&c);
    return NULL;
}

/* ---------------------------------------------------------------- PowerSums */

static PyObject *py_power_sums(PyObject *self, PyObject *args, PyObject *kw) {
    static const char op[] = "power_sums";
    static char *kwlist[] = {"emb", "tokens", "orders", "out", "check", NULL};
    PyObject *emb_o, *tokens_o, *orders_o, *out_o = Py_None, *res = NULL;
    int check = 1;
    call c = {0};
    mk_gpu_array *emb, *tokens, *out;
    mk_status status;
    float *data;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|$Op:power_sums", kwlist, &emb_o, &tokens_o,
                                     &orders_o, &out_o, &check))
        return NULL;
    int64_t K;
    if (mk_orders_arg(orders_o, op, &K) < 0) return NULL;
    if (!(emb = arg(&c, emb_o, op, "emb", &mk_float32, 2))) goto fail;
    if (!(tokens = arg(&c, tokens_o, op, "tokens", &mk_int32, 3))) goto fail;
    if (out_arg(&c, out_o, op, "out", 4, &out) || attach(&c, op)) goto fail;
    if (check && check_tokens(op, tokens, emb->shape[0], "emb has that many rows")) goto fail;
    int64_t B = tokens->shape[0], S = tokens->shape[1], T = tokens->shape[2], D = emb->shape[1];
    if (!(res = result(out_o, out, op, 4, (int64_t[]){B, S, K, D}, &data))) goto fail;
    RUN(mk_power_sums_cuda(PF(emb), P32(tokens), B * S, T, D, K, data, NULL));
    release(&c);
    return res;
fail:
    Py_XDECREF(res);
    release(&c);
    return NULL;
}

static PyObject *py_power_sums_backward(PyObject *self, PyObject *args, PyObject *kw) {
    static const char op[] = "power_sums_backward";
    static char *kwlist[] = {"grad", "emb", "tokens", "out", "check", NULL};
    PyObject *grad_o, *emb_o, *tokens_o, *out_o = Py_None, *res = NULL;
    int check = 1;
    call c = {0};
    mk_gpu_array *grad, *emb, *tokens, *out;
    mk_status status;
    float *data;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|$Op:power_sums_backward", kwlist, &grad_o,
                                     &emb_o, &tokens_o, &out_o, &check))
        return NULL;
    if (!(grad = arg(&c, grad_o, op, "grad", &mk_float32, 4))) goto fail;
    if (!(emb = arg(&c, emb_o, op, "emb", &mk_float32, 2))) goto fail;
    if (!(tokens = arg(&c, tokens_o, op, "tokens", &mk_int32, 3))) goto fail;
    int64_t B = tokens->shape[0], S = tokens->shape[1], T = tokens->shape[2];
    int64_t V = emb->shape[0], D = emb->shape[1], K = grad->shape[2];
    if (mk_expect_dim(grad->shape[0], B, op, "grad.shape[0] must equal tokens.shape[0] (B)") ||
        mk_expect_dim(grad->shape[1], S, op, "grad.shape[1] must equal tokens.shape[1] (S)") ||
        mk_expect_dim(grad->shape[3], D, op, "grad.shape[3] must equal emb.shape[1] (D)"))
        goto fail;
    if (K < 1) {
        PyErr_Format(PyExc_ValueError, "%s: grad.shape[2] (orders) must be >= 1, got 0", op);
        goto fail;
    }
    if (out_arg(&c, out_o, op, "out", 2, &out) || attach(&c, op)) goto fail;
    if (check && check_tokens(op, tokens, V, "emb has that many rows")) goto fail;
    if (!(res = result(out_o, out, op, 2, (int64_t[]){V, D}, &data))) goto fail;
    RUN(mk_power_sums_backward_cuda(PF(grad), PF(emb), P32(tokens), B * S, T, D, K, V, data, NULL));
    release(&c);
    return res;
fail:
    Py_XDECREF(res);
    release(&c);
    return NULL;
}

/* ---------------------------------------------------------------- PairSums */

static PyObject *py_pair_sums(PyObject *self, PyObject *args, PyObject *kw) {
    static const char op[] = "pair_sums";
    static char *kwlist[] = {"pair_table", "tokens", "out", "check", NULL};
    PyObject *table_o, *tokens_o, *out_o = Py_None, *res = NULL;
    int check = 1;
    call c = {0};
    mk_gpu_array *table, *tokens, *out;
    mk_status status;
    float *data;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$Op:pair_sums", kwlist, &table_o, &tokens_o,
                                     &out_o, &check))
        return NULL;
    if (!(table = arg(&c, table_o, op, "pair_table", &mk_float32, 2))) goto fail;
    if (!(tokens = arg(&c, tokens_o, op, "tokens", &mk_int32, 3))) goto fail;
    int64_t V = mk_pair_vocab_arg(table->shape[0], op, "pair_table.shape[0]");
    if (V < 0) goto fail;
    if (out_arg(&c, out_o, op, "out", 3, &out) || attach(&c, op)) goto fail;
    if (check && check_tokens(op, tokens, V, "the pair table's vocabulary size V")) goto fail;
    int64_t B = tokens->shape[0], S = tokens->shape[1], T = tokens->shape[2], P = table->shape[1];
    if (!(res = result(out_o, out, op, 3, (int64_t[]){B, S, P}, &data))) goto fail;
    RUN(mk_pair_sums_cuda(PF(table), P32(tokens), B * S, T, P, data, NULL));
    release(&c);
    return res;
fail:
    Py_XDECREF(res);
    release(&c);
    return NULL;
}

static PyObject *py_pair_sums_backward(PyObject *self, PyObject *args, PyObject *kw) {
    static const char op[] = "pair_sums_backward";
    static char *kwlist[] = {"grad", "tokens", "num_pairs", "out", "check", "deterministic", NULL};
    PyObject *grad_o, *tokens_o, *out_o = Py_None, *res = NULL;
    long long num_pairs;
    int check = 1, deterministic = 1;
    call c = {0};
    mk_gpu_array *grad, *tokens, *out;
    mk_status status;
    float *data;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOL|$Opp:pair_sums_backward", kwlist, &grad_o,
                                     &tokens_o, &num_pairs, &out_o, &check, &deterministic))
        return NULL;
    if (!(grad = arg(&c, grad_o, op, "grad", &mk_float32, 3))) goto fail;
    if (!(tokens = arg(&c, tokens_o, op, "tokens", &mk_int32, 3))) goto fail;
    int64_t B = tokens->shape[0], S = tokens->shape[1], T = tokens->shape[2], P = grad->shape[2];
    if (mk_expect_dim(grad->shape[0], B, op, "grad.shape[0] must equal tokens.shape[0] (B)") ||
        mk_expect_dim(grad->shape[1], S, op, "grad.shape[1] must equal tokens.shape[1] (S)"))
        goto fail;
    int64_t V = mk_pair_vocab_arg(num_pairs, op, "num_pairs");
    if (V < 0) goto fail;
    if (out_arg(&c, out_o, op, "out", 2, &out) || attach(&c, op)) goto fail;
    if (check && check_tokens(op, tokens, V, "the pair table's vocabulary size V")) goto fail;
    if (!(res = result(out_o, out, op, 2, (int64_t[]){num_pairs, P}, &data))) goto fail;
    RUN((deterministic ? mk_pair_sums_backward_cuda : mk_pair_sums_backward_atomic_cuda)(
        PF(grad), P32(tokens), B * S, T, P, num_pairs, data, NULL));
    release(&c);
    return res;
fail:
    Py_XDECREF(res);
    release(&c);
    return NULL;
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
