/* mk_batch: the positions of one step as host arrays, and their validation.
 *
 * The check runs on the host before any backend work, so a bad batch is rejected before
 * a parameter, a moment or the step count changes. */
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
} mk_batch;

/* Tolerance on the sum of a soft-target row. */
#define MK_SOFT_TARGET_TOLERANCE 1e-3

/* MK_OK, or MK_ERR_VALUE naming the field and the first bad position. `op` prefixes the
 * message; V, M, T come from the model's config; `with_targets` also checks target, value
 * and policy_target. */
mk_status mk_batch_check(const char *op, const mk_batch *batch, int64_t V, int64_t M, int64_t T,
                         int with_targets);

#ifdef __cplusplus
}
#endif
#endif
