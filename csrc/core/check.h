/* The range checks of every index and target an op or a step reads, written once.
 *
 * A caller describes what to check (mk_check) and gets the first bad entry back (mk_fault):
 * the ops' entry points (csrc/python: NumPy arrays on the host, GPU arrays through
 * mk_find_fault_cuda) and the batch check (batch.c, and the device backends' batch_check)
 * all find faults with the same rules in the same order, so one fault is reported the same
 * way on every path; only the wording differs between an op call and a batch
 * (csrc/python/common/op_args.c's mk_op_fault, batch.c's mk_batch_fault_status), because
 * their arguments have different names. Host arrays are checked by mk_find_fault below; device arrays by the
 * kernels of csrc/cuda/check.cu, which order their keys so they find the same fault. */
#ifndef MANAKA_CHECK_H
#define MANAKA_CHECK_H

#include <math.h>
#include <stdint.h>

#include "hash.h"
#include "manaka.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What to check. A NULL array is not checked (tokens for gather_dot, legal for the token
 * ops, the targets for a forward-only batch or an op). */
typedef struct {
    const int32_t *tokens; /* [n_tokens] (any shape, flat): -1 (empty slot) or in [0, V) */
    int64_t n_tokens, V;
    const int32_t *legal;  /* [B, L]: legal[r, l] in [0, M) for l < counts[r] */
    const int32_t *counts; /* [B] in [min_count, L]; NULL: every row holds L entries */
    int64_t B, L, M, min_count;
    const int32_t *target;      /* [B] in [0, counts[r]) (these three need counts) */
    const float *value;         /* [B] finite, in [0, 1] */
    const float *policy_target; /* [B, L]: finite, >= 0, and summing to 1 (within
                                   MK_SOFT_TARGET_TOLERANCE) over l < counts[r] */
} mk_check;

/* Tolerance on the sum of a soft-target row: they are float32 sums over up to ~600 slots,
 * so rounding is allowed and real mistakes are caught. */
#define MK_SOFT_TARGET_TOLERANCE 1e-3

/* The rules themselves, one predicate each (true: the entry breaks it), for every check:
 * mk_find_fault here, the dataset check (csrc/data/dataset_check.c) and the device kernels
 * of csrc/cuda/check.cu. */
MK_HOST_DEVICE static inline int mk_bad_token(int64_t t, int64_t V) { return t < -1 || t >= V; }
/* a legal move id against M, or a target against its row's count */
MK_HOST_DEVICE static inline int mk_bad_index(int64_t x, int64_t n) { return x < 0 || x >= n; }
MK_HOST_DEVICE static inline int mk_bad_value(float v) { return !(v >= 0.0f && v <= 1.0f); }
MK_HOST_DEVICE static inline int mk_bad_soft_entry(float p) { return !isfinite(p) || p < 0.0f; }
MK_HOST_DEVICE static inline int mk_bad_soft_sum(double sum) {
    return fabs(sum - 1.0) > MK_SOFT_TARGET_TOLERANCE;
}

/* The kinds of fault, in the order the checks run: tokens (flat order), every count, legal
 * entries (row-major), targets, values, then policy_target rows in order (a row's entries
 * before its sum). A count is judged before any legal entry, so every legal slot read
 * lies within a valid count, and the target is compared with a valid count; only the first
 * fault is meaningful. MK_FAULT_NARROW is the bindings' conversion of a wider integer array
 * to int32 (mk_narrow_to_int32 on the host, mk_narrow_to_int32_cuda on a device), reported
 * in the same struct. */
enum {
    MK_FAULT_NONE = 0,
    MK_FAULT_TOKEN,      /* index: flat position in tokens; value: the token */
    MK_FAULT_COUNT,      /* index: row; value: counts[row] */
    MK_FAULT_LEGAL,      /* index: row, slot: l; value: legal[row, l]; count: counts[row] */
    MK_FAULT_TARGET,     /* index: row; value: target[row]; count: counts[row] */
    MK_FAULT_VALUE,      /* index: row; real: value[row] */
    MK_FAULT_SOFT_ENTRY, /* index: row, slot: l; real: policy_target[row, l] */
    MK_FAULT_SOFT_SUM,   /* index: row; real: the row's sum (double); count: counts[row] */
    MK_FAULT_NARROW,     /* index: flat position; value: the element (its bit pattern as
                            int64 for a uint64 above INT64_MAX) */
    /* a dataset's own (mk_check_dataset, data/loader.h) */
    MK_FAULT_OFFSET_START, /* value: offsets[0], not 0 */
    MK_FAULT_OFFSET_END,   /* value: offsets[N], not the number of legal moves */
    MK_FAULT_DUPLICATE,    /* index: position; value: the move listed twice in its list */
};

/* The first bad entry: which array (kind), where (index, slot) and what (value or real). */
typedef struct {
    int kind;      /* MK_FAULT_* */
    int64_t index; /* flat position (tokens, narrowing) or row */
    int64_t slot;  /* column in the row (legal, policy_target entries), else 0 */
    int64_t count; /* counts[row] (L without counts) where the message names it, else 0 */
    int64_t value; /* the bad integer entry */
    double real;   /* the bad float entry, or a soft row's sum: exact for every float32 */
} mk_fault;

/* Host arrays: *fault = the first fault of `check` (kind MK_FAULT_NONE when none). */
void mk_find_fault(const mk_check *check, mk_fault *fault);

/* dst[i] = src[i] for a host integer array of `itemsize` bytes (1, 2, 4, 8; signed or
 * not), each element read once (src may be the caller's, written by another thread: the
 * value judged is the value stored); *fault = the first element outside the int32 range as
 * an MK_FAULT_NARROW, or MK_FAULT_NONE. The host twin of mk_narrow_to_int32_cuda. */
void mk_narrow_to_int32(const void *src, int itemsize, int is_signed, int64_t n, int32_t *dst,
                        mk_fault *fault);

#ifdef __cplusplus
}
#endif
#endif
