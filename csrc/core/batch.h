/* mk_batch: the positions of one step, and their validation.
 *
 * The check runs before any backend work, so a bad batch is rejected before a parameter,
 * a moment or the step count changes. Its rules are check.h's (mk_batch_rules turns a
 * batch into an mk_check): a host batch is checked by mk_find_fault; a batch whose arrays
 * already live in a device backend's memory (on_device) is checked there by the backend's
 * batch_check entry, which finds the same first fault (mk_fault) so that
 * mk_batch_fault_status words it exactly as the host check does. */
#ifndef MANAKA_BATCH_H
#define MANAKA_BATCH_H

#include <stdint.h>

#include "check.h"
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
    int64_t checked_V, checked_M; /* > 0: whoever filled the arrays checked them with this
                                   file's rules (mk_find_fault over mk_batch_rules, targets
                                   included) for num_tokens = checked_V and num_moves =
                                   checked_M, found no fault, and nothing has written them
                                   since (the loader's producers, data/loader.c); 0:
                                   unchecked (every batch a binding converts) */
} mk_batch;

/* 1 when a model of num_tokens V and num_moves M need not scan `batch` again: its producer
 * checked it (checked_V > 0) within bounds at most the model's. mk_batch_check_shape still
 * runs (B, S, T and the targets' presence are the model's to judge). */
static inline int mk_batch_prechecked(const mk_batch *batch, int64_t V, int64_t M) {
    return batch->checked_V > 0 && batch->checked_V <= V && batch->checked_M > 0 &&
           batch->checked_M <= M;
}

/* The name of a PyCapsule of a `mk_batch *` whose arrays are in a device backend's memory:
 * how manaka._cuda hands a GPU batch to manaka._core (python/cuda/cuda_batch.c to
 * python/core/batch_binding.c), which refuses a capsule of any other name. */
#define MK_BATCH_CAPSULE "manaka.mk_batch"

/* MK_OK, or MK_ERR_VALUE naming the field and the first bad position. `op` prefixes the
 * message; V, M, T come from the model's config; `with_targets` also checks target, value
 * and policy_target. Host batches only (reads the arrays): mk_batch_check_shape, then
 * mk_find_fault over mk_batch_rules, then mk_batch_fault_status. */
mk_status mk_batch_check(const char *op, const mk_batch *batch, int64_t V, int64_t M, int64_t T,
                         int with_targets);

/* The checks that need no array data (B, S, T, L, targets present): valid for a batch
 * anywhere. */
mk_status mk_batch_check_shape(const char *op, const mk_batch *batch, int64_t T, int with_targets);

/* The rules of a batch that passed mk_batch_check_shape, as check.h's mk_check: tokens in
 * [-1, V), counts in [1, L], legal ids in [0, M) and, with_targets, target, value and
 * policy_target (when present). */
mk_check mk_batch_rules(const mk_batch *batch, int64_t V, int64_t M, int with_targets);
/* MK_OK for MK_FAULT_NONE, else MK_ERR_VALUE with mk_batch_check's message for it. */
mk_status mk_batch_fault_status(const char *op, const mk_batch *batch, int64_t V, int64_t M,
                                const mk_fault *fault);

#ifdef __cplusplus
}
#endif
#endif
