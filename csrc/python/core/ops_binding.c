/* Python entry points of the three fused ops on NumPy arrays.
 *
 * Each entry point converts and checks every argument (shapes, dtypes, index ranges,
 * counts) before any work, so a bad call raises a Python exception naming the argument
 * and never reaches the C loops; then it releases the GIL around the op. */
#include "python/common/binding.h"

/* Holds every array an entry point converted, so one `goto done` releases them all. */
typedef struct {
    PyArrayObject *a[6];
    int n;
} arrays;

static PyArrayObject *keep(arrays *held, PyArrayObject *arr) {
    if (arr) held->a[held->n++] = arr;
    return arr;
}
static void release(arrays *held) {
    for (int i = 0; i < held->n; i++) Py_DECREF(held->a[i]);
}
#define DIM(arr, i) ((int64_t)PyArray_DIM(arr, i))

/* counts[b] in [0, L], then indices[b, l] in [0, M) for l < counts[b] (core/check.h). */
static int check_legal(const char *op, PyArrayObject *indices, PyArrayObject *counts, int64_t M) {
    mk_check c = {.legal = PyArray_DATA(indices), .counts = counts ? PyArray_DATA(counts) : NULL,
                  .B = DIM(indices, 0), .L = DIM(indices, 1), .M = M};
    mk_fault f;
    mk_find_fault(&c, &f);
    return f.kind == MK_FAULT_NONE ? 0 : mk_raise_fault(op, &c, &f, 0, 0, NULL);
}

/* Every token in [-1, V). */
static int check_tokens(const char *op, PyArrayObject *tokens, int64_t V, const char *vocab) {
    mk_check c = {.tokens = PyArray_DATA(tokens), .n_tokens = PyArray_SIZE(tokens), .V = V};
    mk_fault f;
    mk_find_fault(&c, &f);
    return f.kind == MK_FAULT_NONE ? 0 : mk_raise_fault(op, &c, &f, DIM(tokens, 1), DIM(tokens, 2), vocab);
}

static PyObject *new_float(int ndim, const int64_t *shape) {
    npy_intp dims[4];
    for (int i = 0; i < ndim; i++) dims[i] = (npy_intp)shape[i];
    return PyArray_SimpleNew(ndim, dims, NPY_FLOAT32);
}

#define FLT(arr) ((float *)PyArray_DATA(arr))
#define IDX(arr) ((int32_t *)PyArray_DATA(arr))
#define RUN(call)                        \
    do {                                 \
        Py_BEGIN_ALLOW_THREADS;          \
        status = (call);                 \
        Py_END_ALLOW_THREADS;            \
        if (status != MK_OK) {           \
            mk_raise_status(status);     \
            goto fail;                   \
        }                                \
    } while (0)

/* ---------------------------------------------------------------- GatherDot */

/* Converts and checks (hidden, table, indices, counts) shared by forward and backward. */
static int gather_dot_args(const char *op, arrays *held, PyObject *hidden_o, PyObject *table_o,
                           PyObject *indices_o, PyObject *counts_o, PyArrayObject **hidden,
                           PyArrayObject **table, PyArrayObject **indices,
                           PyArrayObject **counts) {
    if (!(*hidden = keep(held, mk_float_arg(hidden_o, op, "hidden", 2)))) return -1;
    if (!(*table = keep(held, mk_float_arg(table_o, op, "table", 2)))) return -1;
    if (!(*indices = keep(held, mk_index_arg(indices_o, op, "indices", 2)))) return -1;
    *counts = NULL;
    if (counts_o != Py_None && !(*counts = keep(held, mk_index_arg(counts_o, op, "counts", 1))))
        return -1;
    int64_t B = DIM(*hidden, 0), W = DIM(*hidden, 1);
    if (mk_expect_dim(DIM(*table, 1), W, op, "table.shape[1] must equal hidden.shape[1] (W)")) return -1;
    if (mk_expect_dim(DIM(*indices, 0), B, op, "indices.shape[0] must equal hidden.shape[0] (B)"))
        return -1;
    if (*counts && mk_expect_dim(DIM(*counts, 0), B, op, "counts.shape[0] must equal hidden.shape[0] (B)"))
        return -1;
    return check_legal(op, *indices, *counts, DIM(*table, 0));
}

static PyObject *py_gather_dot(PyObject *self, PyObject *args) {
    static const char op[] = "gather_dot";
    PyObject *hidden_o, *table_o, *indices_o, *counts_o = Py_None, *out = NULL;
    PyArrayObject *hidden, *table, *indices, *counts;
    arrays held = {0};
    mk_status status;
    if (!PyArg_ParseTuple(args, "OOO|O", &hidden_o, &table_o, &indices_o, &counts_o)) return NULL;
    if (gather_dot_args(op, &held, hidden_o, table_o, indices_o, counts_o, &hidden, &table,
                        &indices, &counts))
        goto fail;
    int64_t B = DIM(indices, 0), L = DIM(indices, 1), W = DIM(hidden, 1);
    if (!(out = new_float(2, (int64_t[]){B, L}))) goto fail;
    RUN(mk_gather_dot_cpu(FLT(hidden), FLT(table), IDX(indices), counts ? IDX(counts) : NULL, B, L, W,
                          FLT((PyArrayObject *)out)));
    release(&held);
    return out;
fail:
    Py_XDECREF(out);
    release(&held);
    return NULL;
}

static PyObject *py_gather_dot_backward(PyObject *self, PyObject *args) {
    static const char op[] = "gather_dot_backward";
    PyObject *grad_o, *hidden_o, *table_o, *indices_o, *counts_o = Py_None;
    PyObject *grad_hidden = NULL, *grad_table = NULL;
    PyArrayObject *grad, *hidden, *table, *indices, *counts;
    arrays held = {0};
    mk_status status;
    if (!PyArg_ParseTuple(args, "OOOO|O", &grad_o, &hidden_o, &table_o, &indices_o, &counts_o))
        return NULL;
    if (gather_dot_args(op, &held, hidden_o, table_o, indices_o, counts_o, &hidden, &table,
                        &indices, &counts))
        goto fail;
    if (!(grad = keep(&held, mk_float_arg(grad_o, op, "grad", 2)))) goto fail;
    int64_t B = DIM(indices, 0), L = DIM(indices, 1), W = DIM(hidden, 1), M = DIM(table, 0);
    if (mk_expect_dim(DIM(grad, 0), B, op, "grad.shape[0] must equal indices.shape[0] (B)") ||
        mk_expect_dim(DIM(grad, 1), L, op, "grad.shape[1] must equal indices.shape[1] (L)"))
        goto fail;
    if (!(grad_hidden = new_float(2, (int64_t[]){B, W}))) goto fail;
    if (!(grad_table = new_float(2, (int64_t[]){M, W}))) goto fail;
    RUN(mk_gather_dot_backward_cpu(FLT(grad), FLT(hidden), FLT(table), IDX(indices),
                                   counts ? IDX(counts) : NULL, B, L, W, M,
                                   FLT((PyArrayObject *)grad_hidden), FLT((PyArrayObject *)grad_table)));
    release(&held);
    return Py_BuildValue("NN", grad_hidden, grad_table);
fail:
    Py_XDECREF(grad_hidden);
    Py_XDECREF(grad_table);
    release(&held);
    return NULL;
}

/* ---------------------------------------------------------------- PowerSums */

static PyObject *py_power_sums(PyObject *self, PyObject *args) {
    static const char op[] = "power_sums";
    PyObject *emb_o, *tokens_o, *orders_o, *out = NULL;
    PyArrayObject *emb, *tokens;
    arrays held = {0};
    mk_status status;
    if (!PyArg_ParseTuple(args, "OOO", &emb_o, &tokens_o, &orders_o)) return NULL;
    int64_t K;
    if (mk_orders_arg(orders_o, op, &K) < 0) return NULL;
    if (!(emb = keep(&held, mk_float_arg(emb_o, op, "emb", 2)))) goto fail;
    if (!(tokens = keep(&held, mk_index_arg(tokens_o, op, "tokens", 3)))) goto fail;
    if (check_tokens(op, tokens, DIM(emb, 0), "emb has that many rows")) goto fail;
    int64_t B = DIM(tokens, 0), S = DIM(tokens, 1), T = DIM(tokens, 2), D = DIM(emb, 1);
    if (!(out = new_float(4, (int64_t[]){B, S, K, D}))) goto fail;
    RUN(mk_power_sums_cpu(FLT(emb), IDX(tokens), B * S, T, D, K, FLT((PyArrayObject *)out)));
    release(&held);
    return out;
fail:
    Py_XDECREF(out);
    release(&held);
    return NULL;
}

static PyObject *py_power_sums_backward(PyObject *self, PyObject *args) {
    static const char op[] = "power_sums_backward";
    PyObject *grad_o, *emb_o, *tokens_o, *out = NULL;
    PyArrayObject *grad, *emb, *tokens;
    arrays held = {0};
    mk_status status;
    if (!PyArg_ParseTuple(args, "OOO", &grad_o, &emb_o, &tokens_o)) return NULL;
    if (!(grad = keep(&held, mk_float_arg(grad_o, op, "grad", 4)))) goto fail;
    if (!(emb = keep(&held, mk_float_arg(emb_o, op, "emb", 2)))) goto fail;
    if (!(tokens = keep(&held, mk_index_arg(tokens_o, op, "tokens", 3)))) goto fail;
    int64_t B = DIM(tokens, 0), S = DIM(tokens, 1), T = DIM(tokens, 2);
    int64_t V = DIM(emb, 0), D = DIM(emb, 1), K = DIM(grad, 2);
    if (mk_expect_dim(DIM(grad, 0), B, op, "grad.shape[0] must equal tokens.shape[0] (B)") ||
        mk_expect_dim(DIM(grad, 1), S, op, "grad.shape[1] must equal tokens.shape[1] (S)") ||
        mk_expect_dim(DIM(grad, 3), D, op, "grad.shape[3] must equal emb.shape[1] (D)"))
        goto fail;
    if (K < 1) {
        PyErr_Format(PyExc_ValueError, "%s: grad.shape[2] (orders) must be >= 1, got 0", op);
        goto fail;
    }
    if (check_tokens(op, tokens, V, "emb has that many rows")) goto fail;
    if (!(out = new_float(2, (int64_t[]){V, D}))) goto fail;
    RUN(mk_power_sums_backward_cpu(FLT(grad), FLT(emb), IDX(tokens), B * S, T, D, K, V,
                                   FLT((PyArrayObject *)out)));
    release(&held);
    return out;
fail:
    Py_XDECREF(out);
    release(&held);
    return NULL;
}

/* ---------------------------------------------------------------- PairSums */

/* Checks that `num_pairs` = V (V + 1) / 2 for some V and that every token is below V. */
static int check_pair_rows(const char *op, const char *what, int64_t num_pairs,
                           PyArrayObject *tokens) {
    int64_t V = mk_pair_vocab_arg(num_pairs, op, what);
    if (V < 0) return -1;
    return check_tokens(op, tokens, V, "the pair table's vocabulary size V");
}

static PyObject *py_pair_sums(PyObject *self, PyObject *args) {
    static const char op[] = "pair_sums";
    PyObject *table_o, *tokens_o, *out = NULL;
    PyArrayObject *table, *tokens;
    arrays held = {0};
    mk_status status;
    if (!PyArg_ParseTuple(args, "OO", &table_o, &tokens_o)) return NULL;
    if (!(table = keep(&held, mk_float_arg(table_o, op, "pair_table", 2)))) goto fail;
    if (!(tokens = keep(&held, mk_index_arg(tokens_o, op, "tokens", 3)))) goto fail;
    if (check_pair_rows(op, "pair_table.shape[0]", DIM(table, 0), tokens)) goto fail;
    int64_t B = DIM(tokens, 0), S = DIM(tokens, 1), T = DIM(tokens, 2), P = DIM(table, 1);
    if (!(out = new_float(3, (int64_t[]){B, S, P}))) goto fail;
    RUN(mk_pair_sums_cpu(FLT(table), IDX(tokens), B * S, T, P, FLT((PyArrayObject *)out)));
    release(&held);
    return out;
fail:
    Py_XDECREF(out);
    release(&held);
    return NULL;
}

static PyObject *py_pair_sums_backward(PyObject *self, PyObject *args) {
    static const char op[] = "pair_sums_backward";
    PyObject *grad_o, *tokens_o, *out = NULL;
    long long num_pairs;
    PyArrayObject *grad, *tokens;
    arrays held = {0};
    mk_status status;
    if (!PyArg_ParseTuple(args, "OOL", &grad_o, &tokens_o, &num_pairs)) return NULL;
    if (!(grad = keep(&held, mk_float_arg(grad_o, op, "grad", 3)))) goto fail;
    if (!(tokens = keep(&held, mk_index_arg(tokens_o, op, "tokens", 3)))) goto fail;
    int64_t B = DIM(tokens, 0), S = DIM(tokens, 1), T = DIM(tokens, 2), P = DIM(grad, 2);
    if (mk_expect_dim(DIM(grad, 0), B, op, "grad.shape[0] must equal tokens.shape[0] (B)") ||
        mk_expect_dim(DIM(grad, 1), S, op, "grad.shape[1] must equal tokens.shape[1] (S)"))
        goto fail;
    if (check_pair_rows(op, "num_pairs", num_pairs, tokens)) goto fail;
    if (!(out = new_float(2, (int64_t[]){num_pairs, P}))) goto fail;
    RUN(mk_pair_sums_backward_cpu(FLT(grad), IDX(tokens), B * S, T, P, num_pairs,
                                  FLT((PyArrayObject *)out)));
    release(&held);
    return out;
fail:
    Py_XDECREF(out);
    release(&held);
    return NULL;
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
