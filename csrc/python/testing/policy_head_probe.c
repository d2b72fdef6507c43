/* Test and benchmark hook that runs the policy_head entry of a backend's op table
 * (backend.h) on host arrays, so tests hold every backend's fused policy head to the NumPy
 * reference alone, not only through a whole training step; or, with head="split", the
 * three entries it replaces (gather_dot; softmax_xent; gather_dot_backward with
 * grad_table = NULL), so the two can be compared and timed op against op:
 *
 *   _testing.backend_policy_head(backend, q, table, legal, counts, target,
 *                                policy_target=None, grad_scale=1.0, head="fused",
 *                                repeats=1, table_grad=False)
 *       -> (dlogits, dq, row_loss, row_correct[, grad_table])
 *
 * table_grad=True also runs gather_dot_backward's grad_table [M, W] (every row written,
 * as the step with move_update="dense" does): the whole policy head of a training step;
 * the split head then computes dq and grad_table in one gather_dot_backward call, as the
 * step does.
 * repeats > 1 runs the head that many times on the same device buffers (for timing: the
 * copies in and out happen once).
 * backend: a name or a backend capsule (manaka._cuda.backend_table()); q float32 [B, W];
 * table float32 [M, W]; legal integer [B, L]; counts, target integer [B]; policy_target
 * float32 [B, L] or None. The batch is validated as a training step validates it
 * (mk_batch_check: counts in [1, L], legal ids in [0, M) in the legal slots, target in
 * its legal list, soft rows summing to 1), so a bad argument raises instead of crashing. */
#include "testing.h" /* Python.h first: it sets the feature macros */

#include <stdlib.h>
#include <string.h>

static PyObject *py_backend_policy_head(PyObject *self, PyObject *args, PyObject *kwargs) {
    static const char op[] = "backend_policy_head";
    static char *kw[] = {"backend", "q", "table", "legal", "counts", "target", "policy_target",
                         "grad_scale", "head", "repeats", "table_grad", NULL};
    PyObject *backend, *qo, *tableo, *legalo, *countso, *targeto, *softo = Py_None;
    PyObject *result = NULL;
    float grad_scale = 1.0f;
    const char *head = "fused";
    int repeats = 1, table_grad = 0;
    PyArrayObject *q = NULL, *table = NULL, *legal = NULL, *counts = NULL, *target = NULL,
                  *soft = NULL, *out[5] = {NULL, NULL, NULL, NULL, NULL};
    int32_t *no_tokens = NULL;
    float *values = NULL;
    mk_probe_buffers bf = {NULL, {0}, 0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO|Ofsip", kw, &backend, &qo, &tableo,
                                     &legalo, &countso, &targeto, &softo, &grad_scale, &head,
                                     &repeats, &table_grad) ||
        !(q = mk_float_arg(qo, op, "q", 2)) || !(table = mk_float_arg(tableo, op, "table", 2)) ||
        !(legal = mk_index_arg(legalo, op, "legal", 2)) ||
        !(counts = mk_index_arg(countso, op, "counts", 1)) ||
        !(target = mk_index_arg(targeto, op, "target", 1)) ||
        (softo != Py_None && !(soft = mk_float_arg(softo, op, "policy_target", 2))))
        goto done;
    const int split = strcmp(head, "split") == 0;
    if (!split && strcmp(head, "fused") != 0) {
        PyErr_Format(PyExc_ValueError, "%s: head must be 'fused' or 'split', got '%s'", op, head);
        goto done;
    }
    if (repeats < 1) {
        PyErr_Format(PyExc_ValueError, "%s: repeats must be >= 1, got %d", op, repeats);
        goto done;
    }
    const int64_t B = PyArray_DIM(q, 0), W = PyArray_DIM(q, 1), M = PyArray_DIM(table, 0);
    const int64_t L = PyArray_DIM(legal, 1);
    if (PyArray_DIM(table, 1) != W || PyArray_DIM(legal, 0) != B || PyArray_DIM(counts, 0) != B ||
        PyArray_DIM(target, 0) != B ||
        (soft && (PyArray_DIM(soft, 0) != B || PyArray_DIM(soft, 1) != L))) {
        PyErr_Format(PyExc_ValueError, "%s: shapes disagree: need q [B, W], table [M, W], legal "
                     "[B, L], counts [B], target [B], policy_target [B, L]", op);
        goto done;
    }
    if (!(bf.be = mk_backend_from_arg(backend))) goto done;
    /* The step's own validation, on a batch without tokens (one empty slot per side) */
    no_tokens = malloc((size_t)(B ? B : 1) * 2 * sizeof *no_tokens);
    values = calloc((size_t)(B ? B : 1), sizeof *values);
    if (!no_tokens || !values) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t i = 0; i < 2 * B; i++) no_tokens[i] = -1;
    mk_batch batch = {.B = B, .S = 2, .T = 1, .L = L, .tokens = no_tokens,
                      .legal = PyArray_DATA(legal), .counts = PyArray_DATA(counts),
                      .target = PyArray_DATA(target), .value = values,
                      .policy_target = soft ? PyArray_DATA(soft) : NULL};
    mk_status st = mk_batch_check(op, &batch, 1, M, 1, 1);
    if (st != MK_OK) {
        mk_raise_status(st);
        goto done;
    }
    npy_intp bl[2] = {B, L}, bw[2] = {B, W}, b1[1] = {B}, mw[2] = {M, W};
    out[0] = (PyArrayObject *)PyArray_SimpleNew(2, bl, NPY_FLOAT32);
    out[1] = (PyArrayObject *)PyArray_SimpleNew(2, bw, NPY_FLOAT32);
    out[2] = (PyArrayObject *)PyArray_SimpleNew(1, b1, NPY_FLOAT32);
    out[3] = (PyArrayObject *)PyArray_SimpleNew(1, b1, NPY_FLOAT32);
    if (table_grad) out[4] = (PyArrayObject *)PyArray_SimpleNew(2, mw, NPY_FLOAT32);
    const int outs = table_grad ? 5 : 4;
    if (!out[0] || !out[1] || !out[2] || !out[3] || (table_grad && !out[4])) goto done;
    Py_BEGIN_ALLOW_THREADS;
    const float *dq_in = mk_probe_put(&bf, PyArray_DATA(q), (size_t)(B * W) * 4, &st);
    const float *dtable = mk_probe_put(&bf, PyArray_DATA(table), (size_t)(M * W) * 4, &st);
    const int32_t *dlegal = mk_probe_put(&bf, PyArray_DATA(legal), (size_t)(B * L) * 4, &st);
    const int32_t *dcounts = mk_probe_put(&bf, PyArray_DATA(counts), (size_t)B * 4, &st);
    const int32_t *dtarget = mk_probe_put(&bf, PyArray_DATA(target), (size_t)B * 4, &st);
    const float *dsoft = soft ? mk_probe_put(&bf, PyArray_DATA(soft), (size_t)(B * L) * 4, &st) : NULL;
    float *dres[5] = {NULL};
    size_t sizes[5] = {(size_t)(B * L) * 4, (size_t)(B * W) * 4, (size_t)B * 4, (size_t)B * 4,
                       (size_t)(M * W) * 4};
    for (int i = 0; i < outs; i++) dres[i] = mk_probe_put(&bf, NULL, sizes[i], &st);
    float *logits = split ? mk_probe_put(&bf, NULL, sizes[0], &st) : NULL;
    /* grad_table's scratch, as a step has it (scratch_bytes for these shapes) */
    size_t work_bytes = 0;
    mk_step_shapes shapes = {.B = B, .L = L, .M = M};
    if (table_grad && st == MK_OK) st = bf.be->scratch_bytes(&shapes, &work_bytes);
    void *work = work_bytes ? mk_probe_put(&bf, NULL, work_bytes, &st) : NULL;
    for (int r = 0; r < repeats && st == MK_OK; r++) {
        if (!split) {
            st = bf.be->policy_head(NULL, dq_in, dtable, dlegal, dcounts, dtarget, dsoft, B, L, W,
                                    grad_scale, dres[0], dres[1], dres[2], dres[3]);
            if (st == MK_OK && table_grad)
                st = bf.be->gather_dot_backward(NULL, dres[0], dq_in, dtable, dlegal, dcounts, B,
                                                L, W, M, NULL, dres[4], NULL, work, work_bytes);
            continue;
        }
        st = bf.be->gather_dot(NULL, dq_in, dtable, dlegal, dcounts, B, L, W, logits);
        if (st == MK_OK)
            st = bf.be->softmax_xent(NULL, logits, dcounts, dtarget, dsoft, B, L, grad_scale,
                                     dres[0], dres[2], dres[3]);
        if (st == MK_OK)
            st = bf.be->gather_dot_backward(NULL, dres[0], dq_in, dtable, dlegal, dcounts, B, L, W,
                                            M, dres[1], dres[4], NULL, work, work_bytes);
    }
    for (int i = 0; i < outs && st == MK_OK; i++)
        st = bf.be->to_host(NULL, PyArray_DATA(out[i]), dres[i], sizes[i]);
    mk_probe_free(&bf);
    Py_END_ALLOW_THREADS;
    if (st != MK_OK) {
        mk_raise_status(st);
        goto done;
    }
    result = table_grad ? Py_BuildValue("(NNNNN)", out[0], out[1], out[2], out[3], out[4])
                        : Py_BuildValue("(NNNN)", out[0], out[1], out[2], out[3]);
    for (int i = 0; i < 5; i++) out[i] = NULL; /* stolen (or freed) by Py_BuildValue's N */
done:
    free(no_tokens);
    free(values);
    for (int i = 0; i < 5; i++) Py_XDECREF(out[i]);
    Py_XDECREF(q);
    Py_XDECREF(table);
    Py_XDECREF(legal);
    Py_XDECREF(counts);
    Py_XDECREF(target);
    Py_XDECREF(soft);
    return result;
}

static PyMethodDef policy_head_probe_methods[] = {
    {"backend_policy_head", (PyCFunction)(void (*)(void))py_backend_policy_head,
     METH_VARARGS | METH_KEYWORDS,
     "backend_policy_head(backend, q, table, legal, counts, target, policy_target=None, "
     "grad_scale=1.0, head='fused', repeats=1, table_grad=False) -> (dlogits, dq, row_loss, "
     "row_correct[, grad_table]): the backend's fused policy head, or the split ops it replaces, "
     "on copies (tests, benchmark)."},
    {NULL, NULL, 0, NULL},
};

int mk_init_policy_head_probe(PyObject *module) {
    return PyModule_AddFunctions(module, policy_head_probe_methods);
}
