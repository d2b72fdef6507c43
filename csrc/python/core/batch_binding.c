/* Batch arguments of Model.forward / loss_and_grad and Trainer.step: conversion and the
 * shape agreement between fields; value ranges are checked in C (batch.c). */
#include "model_binding.h"

void mk_batch_args_release(mk_batch_args *held) {
    for (int i = 0; i < 6; i++) Py_CLEAR(held->a[i]);
}

static int rows_match(const char *op, const char *name, PyArrayObject *arr, npy_intp B) {
    return mk_expect_rows(op, name, PyArray_DIM(arr, 0), B);
}

int mk_batch_from_args(const char *op, PyObject *tokens_o, PyObject *legal_o, PyObject *counts_o,
                       PyObject *target_o, PyObject *value_o, PyObject *soft_o,
                       mk_batch_args *held, mk_batch *batch) {
    memset(held, 0, sizeof *held);
    memset(batch, 0, sizeof *batch);
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
    PyObject *layout = PyObject_GetAttrString(holder, "layout");
    if (!layout) return -1;
    long long B, S, T, L;
    unsigned long long p[6];
    int ok = PyTuple_Check(layout) &&
             PyArg_ParseTuple(layout, "LLLLKKKKKK", &B, &S, &T, &L, &p[0], &p[1], &p[2], &p[3],
                              &p[4], &p[5]);
    Py_DECREF(layout);
    if (!ok) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s: a device batch's layout must be a tuple", op);
        return -1;
    }
    batch->B = B;
    batch->S = S;
    batch->T = T;
    batch->L = L;
    batch->tokens = (const int32_t *)(uintptr_t)p[0];
    batch->legal = (const int32_t *)(uintptr_t)p[1];
    batch->counts = (const int32_t *)(uintptr_t)p[2];
    batch->target = (const int32_t *)(uintptr_t)p[3];
    batch->value = (const float *)(uintptr_t)p[4];
    batch->policy_target = (const float *)(uintptr_t)p[5];
    batch->on_device = 1;
    return 0;
}
