/* Test hook that runs a backend's gemm entry (backend.h) on host arrays, so tests can hold
 * the CPU GEMM to a float64 reference and to the same bits for every thread count, shape
 * by shape, which a whole training step shows only for the model's shapes.
 *
 *   _testing.backend_gemm(backend, a, b, c=None, trans_a=False, trans_b=False, alpha=1.0,
 *                         beta=0.0, dims=None) -> c'
 *
 * c' = alpha * op(a) @ op(b) + beta * c, op(x) = x.T when trans_x; a, b, c float32 2-D
 * (c [M, N], zeros when None); the leading dimensions are the arrays' row lengths.
 * dims = (M, N, K) passes smaller dimensions than the arrays' to the backend, or negative
 * ones, so that a test sees the backend refuse them itself. Inputs are not modified. */
#include "testing.h"

static PyObject *py_backend_gemm(PyObject *self, PyObject *args, PyObject *kwargs) {
    static const char op[] = "backend_gemm";
    static char *kw[] = {"backend", "a", "b", "c", "trans_a", "trans_b", "alpha", "beta", "dims",
                         NULL};
    PyObject *backend, *ao, *bo, *co = Py_None, *dims = Py_None, *out = NULL;
    int trans_a = 0, trans_b = 0;
    float alpha = 1.0f, beta = 0.0f;
    PyArrayObject *a = NULL, *b = NULL, *c = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|OppffO", kw, &backend, &ao, &bo, &co,
                                     &trans_a, &trans_b, &alpha, &beta, &dims) ||
        !(a = mk_float_arg(ao, op, "a", 2)) || !(b = mk_float_arg(bo, op, "b", 2)))
        goto done;
    const int64_t lda = PyArray_DIM(a, 1), ldb = PyArray_DIM(b, 1);
    int64_t M = trans_a ? PyArray_DIM(a, 1) : PyArray_DIM(a, 0);
    int64_t K = trans_a ? PyArray_DIM(a, 0) : PyArray_DIM(a, 1);
    int64_t Kb = trans_b ? PyArray_DIM(b, 1) : PyArray_DIM(b, 0);
    int64_t N = trans_b ? PyArray_DIM(b, 0) : PyArray_DIM(b, 1);
    if (Kb != K) {
        PyErr_Format(PyExc_ValueError, "%s: op(a) is [%lld, %lld] but op(b) is [%lld, %lld]", op,
                     (long long)M, (long long)K, (long long)Kb, (long long)N);
        goto done;
    }
    const int64_t ldc = N;
    const int64_t rows_c = M;
    if (co == Py_None) {
        npy_intp shape[2] = {(npy_intp)M, (npy_intp)N};
        c = (PyArrayObject *)PyArray_ZEROS(2, shape, NPY_FLOAT32, 0);
    } else if ((c = mk_float_arg(co, op, "c", 2)) &&
               (PyArray_DIM(c, 0) != M || PyArray_DIM(c, 1) != N)) {
        PyErr_Format(PyExc_ValueError, "%s: c must be [%lld, %lld]", op, (long long)M, (long long)N);
        goto done;
    }
    if (!c) goto done;
    if (dims != Py_None) {
        long long d[3];
        if (!PyArg_ParseTuple(dims, "LLL;dims must be (M, N, K)", &d[0], &d[1], &d[2])) goto done;
        if (d[0] > M || d[1] > N || d[2] > K) {
            PyErr_Format(PyExc_ValueError, "%s: dims (%lld, %lld, %lld) exceed the arrays' "
                         "(%lld, %lld, %lld)", op, d[0], d[1], d[2], (long long)M, (long long)N,
                         (long long)K);
            goto done;
        }
        M = d[0], N = d[1], K = d[2];
    }
    mk_probe_buffers pr = {mk_backend_from_arg(backend), {0}, 0};
    if (!pr.be) goto done;
    PyArrayObject *c_out = (PyArrayObject *)PyArray_NewCopy(c, NPY_CORDER);
    if (!c_out) goto done;
    const size_t a_bytes = (size_t)PyArray_SIZE(a) * 4, b_bytes = (size_t)PyArray_SIZE(b) * 4;
    const size_t c_bytes = (size_t)(rows_c * ldc) * 4;
    mk_status st = MK_OK;
    Py_BEGIN_ALLOW_THREADS;
    const float *da = mk_probe_put(&pr, PyArray_DATA(a), a_bytes, &st);
    const float *db = mk_probe_put(&pr, PyArray_DATA(b), b_bytes, &st);
    float *dc = mk_probe_put(&pr, PyArray_DATA(c), c_bytes, &st);
    if (st == MK_OK)
        st = pr.be->gemm(NULL, trans_a, trans_b, M, N, K, alpha, da, lda, db, ldb, beta, dc, ldc);
    if (st == MK_OK && c_bytes) st = pr.be->to_host(NULL, PyArray_DATA(c_out), dc, c_bytes);
    mk_probe_free(&pr);
    Py_END_ALLOW_THREADS;
    if (st != MK_OK) {
        Py_DECREF(c_out);
        mk_raise_status(st);
    } else {
        out = (PyObject *)c_out;
    }
done:
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_XDECREF(c);
    return out;
}

static PyMethodDef gemm_probe_methods[] = {
    {"backend_gemm", (PyCFunction)(void (*)(void))py_backend_gemm, METH_VARARGS | METH_KEYWORDS,
     "backend_gemm(backend, a, b, c=None, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, "
     "dims=None) -> alpha * op(a) @ op(b) + beta * c by the backend's gemm, on copies (tests)."},
    {NULL, NULL, 0, NULL},
};

int mk_init_gemm_probe(PyObject *module) { return PyModule_AddFunctions(module, gemm_probe_methods); }
