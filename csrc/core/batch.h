/* mk_batch: the positions of one step, and their validation.
 *
 * The check runs before any backend work, so a bad batch is rejected before a parameter,
 * a moment or the step count changes. A host batch is checked here; a batch whose arrays
 * already live in a device backend's memory (on_device) is checked there by the backend's
 * batch_check entry, which finds the same first fault (mk_batch_fault) so that
 * mk_batch_fault_status words it exactly as the host check does. */
#ifndef MANAKA_BATCH_H
#define MANAKA_BATCH_H

#include <stdint.h>

#include "manaka.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t B, S, T, L;
    const int32_t *tokens;      /* [B, S, T], -1 = empty slot, else in [0, V) */
    const int32_t *legal;       /* [B, L], legal[b, l] in [0, M) for l < counts[b] */
    const int32_t *counts;      /* [B], in [1, L] */
    const int32_t *target;      /* [B], in [0, counts[b]) (NULL for forward only) */
    const float *value;         /* [B], finite, in [0, 1] (NULL for forward only) */
    const float *policy_target; /* [B, L] soft targets or NULL: finite, >= 0, and summing
                                   to 1 (within 1e-3) over the slots l < counts[b] */
    int on_device;              /* 1: the arrays are in the backend's device memory (used in
                                   place, checked by backend->batch_check); 0: host arrays */
} mk_batch;

/* Tolerance on the sum of a soft-target row. */
#define MK_SOFT_TARGET_TOLERANCE 1e-3

/* MK_OK, or MK_ERR_VALUE naming the field and the first bad position. `op` prefixes the
 * message; V, M, T come from the model's config; `with_targets` also checks target, value
 * and policy_target. Host batches only (reads the arrays): mk_batch_check_shape, then
 * mk_batch_find_fault, then mk_batch_fault_status. */
mk_status mk_batch_check(const char *op, const mk_batch *batch, int64_t V, int64_t M, int64_t T,
                         int with_targets);

/* The checks that need no array data (B, S, T, L, targets present): valid for a batch
 * anywhere. */
mk_status mk_batch_check_shape(const char *op, const mk_batch *batch, int64_t T, int with_targets);

/* The first bad entry of a batch, in the order the checks run: tokens (flat order), then
 * rows in order with counts[r] before legal[r, l], then target, value, and policy_target
 * rows (entries before the row's sum). Later checks assume earlier ones passed (target
 * is compared with a valid count), so only the first fault is meaningful. */
enum {
    MK_FAULT_NONE = 0,
    MK_FAULT_TOKEN,      /* index: flat position in tokens; value: the token */
    MK_FAULT_COUNT,      /* index: row; value: counts[row] */
    MK_FAULT_LEGAL,      /* index: row, slot: l; value: legal[row, l]; count: counts[row] */
    MK_FAULT_TARGET,     /* index: row; value: target[row]; count: counts[row] */
    MK_FAULT_VALUE,      /* index: row; value: value[row] */
    MK_FAULT_SOFT_ENTRY, /* index: row, slot: l; value: policy_target[row, l] */
    MK_FAULT_SOFT_SUM,   /* index: row; value: the row's sum (double); count: counts[row] */
};
typedef struct {
    int kind; /* MK_FAULT_* */
    int64_t index, slot, count;
    double value; /* exact for every int32 and float32 */
} mk_batch_fault;

/* Host arrays: the first fault of a batch that passed mk_batch_check_shape. */
void mk_batch_find_fault(const mk_batch *batch, int64_t V, int64_t M, int with_targets,
                         mk_batch_fault *fault);
/* MK_OK for MK_FAULT_NONE, else MK_ERR_VALUE with mk_batch_check's message for it. */
mk_status mk_batch_fault_status(const char *op, const mk_batch *batch, int64_t V, int64_t M,
                                const mk_batch_fault *fault);

#ifdef __cplusplus
}
#endif
#endif
