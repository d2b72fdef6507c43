/* Test hooks that run one optimizer entry of a backend's op table (backend.h) on host
 * arrays: tests hold the CPU and CUDA implementations of adamw / adamw_bf16 and the fused
 * pair-table updates to the same bits on identical inputs, which a whole training step
 * cannot show (its gradients differ in the last bits between the backends' GEMMs).
 *
 *   _testing.backend_adamw(backend, p, g, m, v, hyper, seed=0, finite=True) -> (p, m, v)
 *   _testing.backend_pair_adamw(backend, grad, tokens, p, m, v, hyper, seed=0,
 *                               finite=True, work_bytes=None) -> (p, m, v)
 *   _testing.backend_scratch_bytes(backend, B=0, L=0, M=0, rows=0, T=0, V=0) -> int
 *
 * backend: a name or a backend capsule (manaka._cuda.backend_table()); p float32; g
 * float32 like p; m, v like p, float32 (the fp32 entry) or uint16 (bf16 bits: the *_bf16
 * entry); grad float32 [rows, P], tokens integer [rows, T] in [-1, V) with p [V (V+1)/2, P];
 * hyper = (lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2);
 * finite=False sets the stats flag that makes the update a no-op; work_bytes gives the
 * fused update that much scratch instead of the backend's scratch_bytes (to test that too
 * little is refused). Inputs are not modified: the results are new arrays. */
#include "testing.h"

void *mk_probe_put(mk_probe_buffers *pb, const void *host, size_t bytes, mk_status *st) {
    void *d = NULL;
    if (*st != MK_OK) return NULL;
    if (pb->n == MK_PROBE_BUFFERS) {
        *st = mk_fail(MK_ERR_RUNTIME, "backend probe: more than %d buffers", MK_PROBE_BUFFERS);
        return NULL;
    }
    if ((*st = pb->be->alloc(NULL, bytes ? bytes : 1, &d)) != MK_OK) return NULL;
    pb->dev[pb->n++] = d;
    if (host && bytes) *st = pb->be->to_device(NULL, d, host, bytes);
    return d;
}

void mk_probe_free(mk_probe_buffers *pb) {
    for (int i = 0; i < pb->n; i++) pb->be->free(NULL, pb->dev[i]);
}

/* m and v: both float32 or both uint16, each shaped like p. Returns 1 for bf16, 0 for
 * float32, -1 with an exception. New references in *m_out, *v_out. */
static int moments_arg(PyObject *m, PyObject *v, PyArrayObject *p, const char *op,
                       PyArrayObject **m_out, PyArrayObject **v_out) {
    *m_out = *v_out = NULL;
    PyObject *objs[2] = {m, v};
    PyArrayObject **outs[2] = {m_out, v_out};
    int bf16 = PyArray_Check(m) && PyArray_TYPE((PyArrayObject *)m) == NPY_UINT16;
    for (int i = 0; i < 2; i++) {
        if (!PyArray_Check(objs[i]) ||
            PyArray_TYPE((PyArrayObject *)objs[i]) != (bf16 ? NPY_UINT16 : NPY_FLOAT32)) {
            PyErr_Format(PyExc_TypeError, "%s: %s must be a float32 or uint16 (bf16) array, "
                         "both moments the same", op, i ? "v" : "m");
            return -1;
        }
        *outs[i] = (PyArrayObject *)PyArray_FROM_OTF(objs[i], bf16 ? NPY_UINT16 : NPY_FLOAT32,
                                                     NPY_ARRAY_IN_ARRAY | NPY_ARRAY_ENSURECOPY);
        if (!*outs[i]) return -1;
        if (PyArray_SIZE(*outs[i]) != PyArray_SIZE(p)) {
            PyErr_Format(PyExc_ValueError, "%s: %s must have as many elements as p", op, i ? "v" : "m");
            return -1;
        }
    }
    return bf16;
}

static int hyper_arg(PyObject *hyper, mk_adamw_args *a) {
    return PyArg_ParseTuple(hyper, "fffffff;hyper must be (lr, beta1, beta2, eps, weight_decay, "
                                   "bias_correction1, bias_correction2)",
                            &a->lr, &a->beta1, &a->beta2, &a->eps, &a->weight_decay,
                            &a->bias_correction1, &a->bias_correction2) ? 0 : -1;
}

/* Runs the entry (pair: the fused one) and returns (p, m, v) read back. Steals nothing. */
static PyObject *run(PyObject *backend_arg, PyArrayObject *p, PyArrayObject *g,
                     PyArrayObject *grad, PyArrayObject *tokens, PyArrayObject *m,
                     PyArrayObject *v, int bf16, const mk_adamw_args *args,
                     unsigned long long seed, int finite, Py_ssize_t work_bytes) {
    mk_probe_buffers pr = {mk_backend_from_arg(backend_arg), {0}, 0};
    if (!pr.be) return NULL;
    PyArrayObject *p_out = (PyArrayObject *)PyArray_NewCopy(p, NPY_CORDER);
    if (!p_out) return NULL;
    const int64_t n = PyArray_SIZE(p), msize = bf16 ? 2 : 4;
    float stats[MK_STAT_COUNT] = {0};
    stats[MK_STAT_FINITE] = finite ? 1.0f : 0.0f;
    mk_status st = MK_OK;
    float *dp = mk_probe_put(&pr, PyArray_DATA(p), (size_t)n * 4, &st);
    void *dm = mk_probe_put(&pr, PyArray_DATA(m), (size_t)(n * msize), &st);
    void *dv = mk_probe_put(&pr, PyArray_DATA(v), (size_t)(n * msize), &st);
    float *dstats = mk_probe_put(&pr, stats, sizeof stats, &st);
    Py_BEGIN_ALLOW_THREADS;
    if (g) {
        float *dg = mk_probe_put(&pr, PyArray_DATA(g), (size_t)n * 4, &st);
        if (st == MK_OK)
            st = bf16 ? pr.be->adamw_bf16(NULL, dp, dg, dm, dv, n, args, dstats, seed)
                      : pr.be->adamw(NULL, dp, dg, dm, dv, n, args, dstats);
    } else {
        const int64_t rows = PyArray_DIM(grad, 0), P = PyArray_DIM(grad, 1);
        const int64_t T = PyArray_DIM(tokens, 1), V = mk_vocab_of_pairs(PyArray_DIM(p, 0));
        const float *dgrad = mk_probe_put(&pr, PyArray_DATA(grad), (size_t)(rows * P) * 4, &st);
        const int32_t *dtok = mk_probe_put(&pr, PyArray_DATA(tokens), (size_t)(rows * T) * 4, &st);
        const mk_step_shapes shapes = {.rows = rows, .T = T, .V = V};
        size_t bytes = (size_t)work_bytes;
        if (st == MK_OK && work_bytes < 0) st = pr.be->scratch_bytes(&shapes, &bytes);
        void *work = mk_probe_put(&pr, NULL, bytes, &st);
        if (st == MK_OK)
            st = bf16 ? pr.be->pair_sums_backward_adamw_bf16(NULL, dgrad, dtok, rows, T, P, V, dp,
                                                             dm, dv, args, dstats, seed, work,
                                                             bytes)
                      : pr.be->pair_sums_backward_adamw(NULL, dgrad, dtok, rows, T, P, V, dp, dm,
                                                        dv, args, dstats, work, bytes);
    }
    if (st == MK_OK) st = pr.be->to_host(NULL, PyArray_DATA(p_out), dp, (size_t)n * 4);
    if (st == MK_OK) st = pr.be->to_host(NULL, PyArray_DATA(m), dm, (size_t)(n * msize));
    if (st == MK_OK) st = pr.be->to_host(NULL, PyArray_DATA(v), dv, (size_t)(n * msize));
    mk_probe_free(&pr);
    Py_END_ALLOW_THREADS;
    if (st != MK_OK) {
        Py_DECREF(p_out);
        return mk_raise_status(st);
    }
    return Py_BuildValue("(NOO)", p_out, m, v);
}

static PyObject *py_backend_adamw(PyObject *self, PyObject *args, PyObject *kwargs) {
    static const char op[] = "backend_adamw";
    static char *kw[] = {"backend", "p", "g", "m", "v", "hyper", "seed", "finite", NULL};
    PyObject *backend, *po, *go, *mo, *vo, *hyper, *out = NULL;
    unsigned long long seed = 0;
    int finite = 1;
    PyArrayObject *p = NULL, *g = NULL, *m = NULL, *v = NULL;
    mk_adamw_args a;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO|Kp", kw, &backend, &po, &go, &mo, &vo,
                                     &hyper, &seed, &finite) ||
        hyper_arg(hyper, &a) < 0 || !(p = mk_float_arg(po, op, "p", 1)) ||
        !(g = mk_float_arg(go, op, "g", 1)))
        goto done;
    if (PyArray_SIZE(g) != PyArray_SIZE(p)) {
        PyErr_Format(PyExc_ValueError, "%s: g must have as many elements as p", op);
        goto done;
    }
    int bf16 = moments_arg(mo, vo, p, op, &m, &v);
    if (bf16 >= 0) out = run(backend, p, g, NULL, NULL, m, v, bf16, &a, seed, finite, 0);
done:
    Py_XDECREF(p);
    Py_XDECREF(g);
    Py_XDECREF(m);
    Py_XDECREF(v);
    return out;
}

static PyObject *py_backend_pair_adamw(PyObject *self, PyObject *args, PyObject *kwargs) {
    static const char op[] = "backend_pair_adamw";
    static char *kw[] = {"backend", "grad", "tokens", "p", "m", "v", "hyper", "seed", "finite",
                         "work_bytes", NULL};
    PyObject *backend, *grado, *toko, *po, *mo, *vo, *hyper, *out = NULL, *work_arg = Py_None;
    unsigned long long seed = 0;
    int finite = 1;
    Py_ssize_t work_bytes = -1;
    PyArrayObject *grad = NULL, *tokens = NULL, *p = NULL, *m = NULL, *v = NULL;
    mk_adamw_args a;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOO|KpO", kw, &backend, &grado, &toko, &po,
                                     &mo, &vo, &hyper, &seed, &finite, &work_arg) ||
        hyper_arg(hyper, &a) < 0 || !(grad = mk_float_arg(grado, op, "grad", 2)) ||
        !(tokens = mk_index_arg(toko, op, "tokens", 2)) || !(p = mk_float_arg(po, op, "p", 2)))
        goto done;
    const int64_t V = mk_vocab_of_pairs(PyArray_DIM(p, 0));
    if (V < 0 || PyArray_DIM(p, 1) != PyArray_DIM(grad, 1) ||
        PyArray_DIM(tokens, 0) != PyArray_DIM(grad, 0)) {
        PyErr_Format(PyExc_ValueError, "%s: p must be [V (V + 1) / 2, P] with grad [rows, P] and "
                     "tokens [rows, T]", op);
        goto done;
    }
    const int32_t *tok = PyArray_DATA(tokens);
    for (npy_intp i = 0; i < PyArray_SIZE(tokens); i++)
        if (tok[i] < -1 || tok[i] >= V) {
            PyErr_Format(PyExc_ValueError, "%s: tokens[%zd] = %d is outside [-1, %lld)", op,
                         (Py_ssize_t)i, tok[i], (long long)V);
            goto done;
        }
    if (work_arg != Py_None) {
        work_bytes = PyNumber_AsSsize_t(work_arg, PyExc_OverflowError);
        if (work_bytes == -1 && PyErr_Occurred()) goto done;
        if (work_bytes < 0) {
            PyErr_Format(PyExc_ValueError, "%s: work_bytes must be >= 0, got %zd", op, work_bytes);
            goto done;
        }
    }
    int bf16 = moments_arg(mo, vo, p, op, &m, &v);
    if (bf16 >= 0) out = run(backend, p, NULL, grad, tokens, m, v, bf16, &a, seed, finite, work_bytes);
done:
    Py_XDECREF(grad);
    Py_XDECREF(tokens);
    Py_XDECREF(p);
    Py_XDECREF(m);
    Py_XDECREF(v);
    return out;
}

/* The backend's scratch_bytes for the shapes of mk_step_shapes (backend.h). */
static PyObject *py_backend_scratch_bytes(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"backend", "B", "L", "M", "rows", "T", "V", "C", "D", NULL};
    PyObject *backend;
    long long d[8] = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|LLLLLLLL", kw, &backend, &d[0], &d[1], &d[2],
                                     &d[3], &d[4], &d[5], &d[6], &d[7]))
        return NULL;
    for (int i = 0; i < 8; i++)
        if (d[i] < 0) {
            PyErr_Format(PyExc_ValueError, "backend_scratch_bytes: %s must be >= 0, got %lld",
                         kw[i + 1], d[i]);
            return NULL;
        }
    const mk_backend *be = mk_backend_from_arg(backend);
    if (!be) return NULL;
    const mk_step_shapes shapes = {.B = d[0], .L = d[1], .M = d[2], .rows = d[3], .T = d[4],
                                   .V = d[5], .C = d[6], .D = d[7]};
    size_t bytes = 0;
    mk_status st = be->scratch_bytes(&shapes, &bytes);
    if (st != MK_OK) return mk_raise_status(st);
    return PyLong_FromSize_t(bytes);
}

static PyMethodDef probe_methods[] = {
    {"backend_adamw", (PyCFunction)(void (*)(void))py_backend_adamw, METH_VARARGS | METH_KEYWORDS,
     "backend_adamw(backend, p, g, m, v, hyper, seed=0, finite=True) -> (p, m, v): one adamw "
     "(float32 m, v) or adamw_bf16 (uint16 m, v) of the backend on copies (tests)."},
    {"backend_pair_adamw", (PyCFunction)(void (*)(void))py_backend_pair_adamw,
     METH_VARARGS | METH_KEYWORDS,
     "backend_pair_adamw(backend, grad, tokens, p, m, v, hyper, seed=0, finite=True, "
     "work_bytes=None) -> (p, m, v): one fused pair-table update of the backend on copies, with "
     "the backend's scratch_bytes of scratch or work_bytes (tests)."},
    {"backend_scratch_bytes", (PyCFunction)(void (*)(void))py_backend_scratch_bytes,
     METH_VARARGS | METH_KEYWORDS,
     "backend_scratch_bytes(backend, B=0, L=0, M=0, rows=0, T=0, V=0) -> int: the scratch the "
     "backend's step primitives need for these shapes (tests)."},
    {NULL, NULL, 0, NULL},
};

int mk_init_backend_probe(PyObject *module) { return PyModule_AddFunctions(module, probe_methods); }
