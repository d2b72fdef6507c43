/* The arguments of the three fused ops, described once for both entry points: ops_binding.c
 * (NumPy arrays, manaka._core) and cuda_ops.c (GPU arrays, manaka._cuda).
 *
 * One mk_op_spec per op names its arrays (role, dimensions, optional), how their shapes
 * must agree, where the tokens' vocabulary V comes from, what the range check covers
 * (core/check.h) and the shapes of its results. mk_op_prepare runs that description over
 * the arrays an entry point obtained, in one order, so a bad call raises the same
 * exception, worded the same, on either path; an entry point keeps only what truly
 * differs: how it turns a Python object into a buffer (mk_op_obtain), where the range
 * check runs (mk_find_fault or mk_find_fault_cuda over mk_op_rules), and which backend's
 * table runs the op (mk_op_spec.run). */
#ifndef MANAKA_OP_ARGS_H
#define MANAKA_OP_ARGS_H

#include "binding.h"
#include "core/backend.h"

#define MK_OP_ARRAYS 5 /* most arrays an op takes */
#define MK_OP_DIMS 4   /* most dimensions of an op's array */
#define MK_OP_SCALAR (-1) /* in an mk_op_dim: the op's scalar argument */

typedef struct {
    const char *name; /* as the messages name it */
    int8_t index;     /* 1: an index array (any integer dtype, narrowed to int32); 0: float32 */
    int8_t ndim;
    int8_t optional;  /* may be None (gather_dot's counts) */
    int8_t position;  /* its place among the positional arguments */
} mk_op_arg;

/* Dimension `dim` of array `arg` (an index into mk_op_spec.args), or the op's scalar
 * (arg = MK_OP_SCALAR). */
typedef struct {
    int8_t arg, dim;
} mk_op_dim;

/* `a` must equal `b`: "a.shape[i] must equal b.shape[j] (what)", checked as soon as the
 * first `after` arrays are converted (an absent optional array skips the rule). */
typedef struct {
    mk_op_dim a, b;
    int8_t after;
    const char *what;
} mk_op_same;

enum { MK_OP_NO_SCALAR = 0, MK_OP_ORDERS, MK_OP_NUM_PAIRS };
enum { MK_VOCAB_NONE = 0, MK_VOCAB_ROWS, MK_VOCAB_PAIRS };

typedef struct mk_op_call mk_op_call;

typedef struct {
    const char *name;
    /* Runs the op on a prepared, checked call through `backend`'s table entry, into the
     * results' buffers, on the legacy default stream (the backward passes given no scratch:
     * the backend finds its own). The one mapping from a call's arrays to an entry's
     * arguments, for every backend. */
    mk_status (*run)(const mk_backend *backend, const mk_op_call *call, float *const *out);
    int8_t n_args;
    mk_op_arg args[MK_OP_ARRAYS]; /* in the order they are converted */
    int8_t scalar;                /* MK_OP_ORDERS: an int >= 1, checked before any array;
                                     MK_OP_NUM_PAIRS: V (V + 1) / 2 for some V */
    int8_t n_same;
    mk_op_same same[5];
    /* a dimension that must be >= 1 (power_sums_backward's orders), checked after `same`;
       what = NULL: none */
    mk_op_dim positive;
    const char *positive_what;
    /* the range check: tokens [B, S, T] against V, or legal [B, L] with counts against M;
       -1 where absent */
    int8_t tokens, legal, counts;
    mk_op_dim rows; /* M, the rows of the table the legal ids index */
    /* V: MK_VOCAB_ROWS: `vocab` itself; MK_VOCAB_PAIRS: the V of the `vocab` = V (V + 1) / 2
       pair rows (vocab_what names that number); vocab_words: where V comes from, for the
       messages */
    int8_t vocab_kind;
    mk_op_dim vocab;
    const char *vocab_what, *vocab_words;
    /* the results: float32 arrays of these shapes */
    int8_t n_outs, out_ndim[2];
    mk_op_dim out[2][MK_OP_DIMS];
} mk_op_spec;

extern const mk_op_spec mk_op_gather_dot, mk_op_gather_dot_backward, mk_op_power_sums,
    mk_op_power_sums_backward, mk_op_pair_sums, mk_op_pair_sums_backward;

/* One array of a call as its entry point holds it. */
typedef struct {
    int64_t shape[MK_OP_DIMS];
    const void *data; /* NULL for an absent optional array */
    int present;      /* 0: an optional array given as None */
} mk_op_view;

struct mk_op_call {
    mk_op_view a[MK_OP_ARRAYS]; /* indexed like mk_op_spec.args */
    int64_t scalar;             /* orders or num_pairs */
    int64_t V;                  /* the tokens' vocabulary, when the op has tokens */
    int64_t out[2][MK_OP_DIMS]; /* the results' shapes */
};

/* An entry point's conversion of `obj` (never None) into spec->args[i]: fills view->shape
 * (and view->data, or later), keeps what it must release in ctx. 0, or -1 with an
 * exception naming the argument. */
typedef int (*mk_op_obtain)(void *ctx, const mk_op_spec *spec, int i, PyObject *obj,
                            mk_op_view *view);

/* Fills *call, of which only call->scalar is read (MK_OP_NUM_PAIRS: num_pairs, set by the
 * caller). Checks `scalar` (MK_OP_ORDERS: the orders object), converts every array of
 * `positional` (the call's positional arguments) through `obtain`, checks the shape
 * rules, finds V and the results' shapes. 0, or -1 with the exception set. No index is read: the range check is mk_op_rules'. */
int mk_op_prepare(const mk_op_spec *spec, PyObject *const *positional, PyObject *scalar,
                  mk_op_obtain obtain, void *ctx, mk_op_call *call);

/* The range check of a prepared call (core/check.h), over call's data pointers. */
mk_check mk_op_rules(const mk_op_spec *spec, const mk_op_call *call);

/* 0 for MK_FAULT_NONE, else -1 with the op's ValueError for `fault`. */
int mk_op_fault(const mk_op_spec *spec, const mk_op_call *call, const mk_check *rules,
                const mk_fault *fault);

#endif
