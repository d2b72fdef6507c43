/* The fused ops' Python entry points, once for every backend: manaka._core runs them on
 * NumPy arrays (python/core/ops_binding.c), manaka._cuda on GPU arrays
 * (python/cuda/cuda_ops.c), both through mk_op_add_functions.
 *
 * One mk_op_spec per op names its arrays (role, dimensions, optional), how their shapes
 * must agree, where the tokens' vocabulary V comes from, what the range check covers
 * (core/check.h) and the shapes of its results. The one entry point runs that description
 * over a call's arguments, in one order, so a bad call raises the same exception, worded
 * the same, on every backend; an extension gives only what truly differs, its array layer
 * (mk_op_layer): how a Python object becomes a buffer, where the range check runs, how a
 * result is made, and which backend's table runs the op. */
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
    int8_t n_positional;          /* the positional arguments: the arrays, then the scalar */
    int8_t scalar;                /* the last positional argument, checked before any array:
                                     MK_OP_ORDERS: an int >= 1; MK_OP_NUM_PAIRS: an int,
                                     V (V + 1) / 2 for some V */
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
    /* the results: float32 arrays of these shapes; out_names: the out= arrays' names */
    int8_t n_outs, out_ndim[2];
    mk_op_dim out[2][MK_OP_DIMS];
    const char *out_names[2];
} mk_op_spec;

extern const mk_op_spec mk_op_gather_dot, mk_op_gather_dot_backward, mk_op_power_sums,
    mk_op_power_sums_backward, mk_op_pair_sums, mk_op_pair_sums_backward;

/* One array of a call as its entry point holds it. */
typedef struct {
    int64_t shape[MK_OP_DIMS];
    const void *data; /* NULL for an absent optional array */
    int present;      /* 0: an optional array given as None */
    int readonly;     /* an out= array that may not be written */
} mk_op_view;

struct mk_op_call {
    mk_op_view a[MK_OP_ARRAYS]; /* indexed like mk_op_spec.args */
    int64_t scalar;             /* orders or num_pairs */
    int64_t V;                  /* the tokens' vocabulary, when the op has tokens */
    int64_t out[2][MK_OP_DIMS]; /* the results' shapes */
};

enum { MK_OP_FLOAT = 0, MK_OP_INDEX, MK_OP_OUT };

/* An extension's arrays as the ops read them. */
typedef struct {
    const mk_backend *backend; /* whose table runs the ops */
    size_t held_bytes;         /* the layer's state for one call (zeroed at its start) */
    /* Converts `obj` (never None) into the array `name` of `ndim` dimensions: MK_OP_INDEX
     * any integer dtype (as int32), MK_OP_FLOAT float32, MK_OP_OUT a float32 result array
     * written in place. Fills view->shape, view->readonly and view->data (or ready does);
     * keeps in `held` what release must drop. 0, or -1 with an exception naming op and name. */
    int (*obtain)(void *held, const char *op, const char *name, int kind, int ndim, PyObject *obj,
                  mk_op_view *view);
    /* Once every array is obtained: their data made readable by the backend (NULL: they are). */
    int (*ready)(void *held, const char *op);
    /* The range check, where the arrays are (called without the GIL). */
    mk_status (*find_fault)(const mk_check *rules, mk_fault *fault);
    /* A new float32 array of `shape`, *data its buffer; NULL with an exception. */
    PyObject *(*empty)(int ndim, const int64_t *shape, float **data);
    void (*release)(void *held);
} mk_op_layer;

/* Adds the six ops to `module`, run through `layer` (static: it outlives the module):
 * op(arrays..., [scalar], *, out=None, check=True), the positional arguments as
 * mk_op_spec.n_positional says; out= results written into these arrays instead of new ones
 * (gather_dot_backward: a (grad_hidden, grad_table) tuple); check=False skips the index
 * range check (an out-of-range index is then undefined behaviour: for the benchmarks). */
int mk_op_add_functions(PyObject *module, const mk_op_layer *layer);

/* Fills *call. Checks the scalar (the last of `positional`, the call's positional
 * arguments), converts every array through layer->obtain, checks the shape rules, finds V
 * and the results' shapes. 0, or -1 with the exception set. No index is read: the range
 * check is mk_op_rules'. */
int mk_op_prepare(const mk_op_spec *spec, PyObject *const *positional, const mk_op_layer *layer,
                  void *held, mk_op_call *call);

/* The range check of a prepared call (core/check.h), over call's data pointers. */
mk_check mk_op_rules(const mk_op_spec *spec, const mk_op_call *call);

/* 0 for MK_FAULT_NONE, else -1 with the op's ValueError for `fault`. */
int mk_op_fault(const mk_op_spec *spec, const mk_op_call *call, const mk_check *rules,
                const mk_fault *fault);

#endif
