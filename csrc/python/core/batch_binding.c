/* Batch arguments of Model.forward / loss_and_grad and Trainer.step: a loader's batch taken
 * as its producer made it, or the conversion and the shape agreement between fields; value
 * ranges are checked in C (batch.c) unless the producer did (mk_batch_prechecked). */
#include "model_binding.h"

void mk_batch_args_release(mk_batch_args *held) {
    for (int i = 0; i < 6; i++) Py_CLEAR(held->a[i]);
    mk_loaded_batch_unpin(held->pin);
    held->pin = NULL;
}

static int rows_match(const char *op, const char *name, PyArrayObject *arr, npy_intp B) {
    return mk_expect_rows(op, name, PyArray_DIM(arr, 0), B);
}

int mk_batch_from_args(const char *op, PyObject *tokens_o, PyObject *legal_o, PyObject *counts_o,
                       PyObject *target_o, PyObject *value_o, PyObject *soft_o,
                       PyObject *loaded, mk_batch_args *held, mk_batch *batch) {
    memset(held, 0, sizeof *held);
    memset(batch, 0, sizeof *batch);
    if (loaded && loaded != Py_None) {
        PyObject *given[6] = {tokens_o, legal_o, counts_o, target_o, value_o,
                              target_o ? (soft_o ? soft_o : Py_None) : NULL};
        int taken = mk_loaded_batch(loaded, given, batch, &held->pin);
        if (taken != 0) return taken > 0 ? 0 : -1;
        memset(batch, 0, sizeof *batch);
    }
    PyArrayObject *tokens, *legal, *counts, *target = NULL, *value = NULL, *soft = NULL;
    if (!(tokens = held->a[0] = mk_index_arg(tokens_o, op, "tokens", 3))) goto fail;
    if (!(legal = held->a[1] = mk_index_arg(legal_o, op, "legal", 2))) goto fail;
    if (!(counts = held->a[2] = mk_index_arg(counts_o, op, "counts", 1))) goto fail;
    if (target_o && !(target = held->a[3] = mk_index_arg(target_o, op, "target", 1))) goto fail;
    if (value_o && !(value = held->a[4] = mk_float_arg(value_o, op, "value", 1))) goto fail;
    if (soft_o && soft_o != Py_None &&
        !(soft = held->a[5] = mk_float_arg(soft_o, op, "policy_target", 2)))
        goto fail;
    npy_intp B = PyArray_DIM(tokens, 0);
    if (rows_match(op, "legal", legal, B) || rows_match(op, "counts", counts, B) ||
        (target && rows_match(op, "target", target, B)) ||
        (value && rows_match(op, "value", value, B)) ||
        (soft && rows_match(op, "policy_target", soft, B)))
        goto fail;
    if (soft && mk_expect_soft_columns(op, PyArray_DIM(soft, 1), PyArray_DIM(legal, 1)))
        goto fail;
    batch->B = B;
    batch->S = PyArray_DIM(tokens, 1);
    batch->T = PyArray_DIM(tokens, 2);
    batch->L = PyArray_DIM(legal, 1);
    batch->tokens = PyArray_DATA(tokens);
    batch->legal = PyArray_DATA(legal);
    batch->counts = PyArray_DATA(counts);
    batch->target = target ? PyArray_DATA(target) : NULL;
    batch->value = value ? PyArray_DATA(value) : NULL;
    batch->policy_target = soft ? PyArray_DATA(soft) : NULL;
    return 0;
fail:
    mk_batch_args_release(held);
    return -1;
}

int mk_batch_from_device(const char *op, PyObject *holder, mk_batch *batch) {
    memset(batch, 0, sizeof *batch);
    PyObject *capsule = PyObject_GetAttrString(holder, "batch");
    if (!capsule) return -1;
    const mk_batch *b = PyCapsule_IsValid(capsule, MK_BATCH_CAPSULE)
                            ? PyCapsule_GetPointer(capsule, MK_BATCH_CAPSULE)
                            : NULL;
    if (!b) {
        const char *name = PyCapsule_CheckExact(capsule) ? PyCapsule_GetName(capsule) : NULL;
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s: a device batch's .batch must be a '%s' capsule (from "
                     "manaka._cuda.device_batch), got %s%s%s",
                     op, MK_BATCH_CAPSULE, Py_TYPE(capsule)->tp_name, name ? " named " : "",
                     name ? name : "");
        Py_DECREF(capsule);
        return -1;
    }
    *batch = *b; /* the holder, which the caller keeps, keeps the arrays alive */
    Py_DECREF(capsule);
    /* in the backend's memory, and checked there: whatever the struct says */
    batch->on_device = 1;
    batch->checked_V = batch->checked_M = 0;
    return 0;
}

/* check_batch(op, num_tokens, num_moves, tokens_per_side, tokens, legal, counts, target,
 * value, policy_target) -> None: the conversion and every check Model.loss_and_grad makes
 * of a host batch (mk_batch_from_args, then mk_batch_check), with its exception and words,
 * naming `op`. For code that computes the loss elsewhere (manaka.torch.Network.loss) and
 * must refuse exactly what the model refuses. */
PyObject *mk_py_check_batch(PyObject *self, PyObject *args) {
    const char *op;
    long long V, M, T;
    PyObject *tokens, *legal, *counts, *target, *value, *soft;
    if (!PyArg_ParseTuple(args, "sLLLOOOOOO:check_batch", &op, &V, &M, &T, &tokens, &legal,
                          &counts, &target, &value, &soft))
        return NULL;
    mk_batch_args held;
    mk_batch batch;
    if (mk_batch_from_args(op, tokens, legal, counts, target, value, soft, NULL, &held, &batch) < 0)
        return NULL;
    mk_status status;
    Py_BEGIN_ALLOW_THREADS; /* the message is thread-local (error.c) */
    status = mk_batch_check(op, &batch, V, M, T, 1);
    Py_END_ALLOW_THREADS;
    mk_batch_args_release(&held);
    if (status != MK_OK) return mk_raise_status(status);
    Py_RETURN_NONE;
}
