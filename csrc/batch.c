/* Validation of a batch against a model's config: one pass per field, first error wins. */
#include <math.h>

#include "batch.h"

mk_status mk_batch_check(const char *op, const mk_batch *b, int64_t V, int64_t M, int64_t T,
                         int with_targets) {
    if (b->B < 1) return mk_fail(MK_ERR_VALUE, "%s: the batch is empty (B = 0)", op);
    if (b->S != 2)
        return mk_fail(MK_ERR_VALUE, "%s: tokens.shape[1] must be 2 (perspectives), got %lld", op,
                       (long long)b->S);
    if (b->T != T)
        return mk_fail(MK_ERR_VALUE,
                       "%s: tokens.shape[2] = %lld does not match the model's tokens_per_side = %lld",
                       op, (long long)b->T, (long long)T);
    if (b->L < 1) return mk_fail(MK_ERR_VALUE, "%s: legal.shape[1] (L) must be >= 1, got 0", op);
    if (with_targets && (!b->target || !b->value))
        return mk_fail(MK_ERR_VALUE, "%s: target and value are required", op);

    int64_t n_tok = b->B * b->S * b->T;
    for (int64_t i = 0; i < n_tok; i++) {
        int32_t v = b->tokens[i];
        if (v < -1 || v >= V)
            return mk_fail(MK_ERR_VALUE,
                           "%s: tokens[%lld, %lld, %lld] = %d is out of range: must be -1 (empty) "
                           "or in [0, num_tokens = %lld)",
                           op, (long long)(i / (b->S * b->T)), (long long)(i / b->T % b->S),
                           (long long)(i % b->T), v, (long long)V);
    }
    for (int64_t r = 0; r < b->B; r++) {
        int64_t n = b->counts[r];
        if (n < 1 || n > b->L)
            return mk_fail(MK_ERR_VALUE, "%s: counts[%lld] = %lld is outside [1, L = %lld]", op,
                           (long long)r, (long long)n, (long long)b->L);
        const int32_t *legal = b->legal + r * b->L;
        for (int64_t l = 0; l < n; l++)
            if (legal[l] < 0 || legal[l] >= M)
                return mk_fail(MK_ERR_VALUE,
                               "%s: legal[%lld, %lld] = %d is out of range [0, num_moves = %lld) "
                               "(slots l < counts[b] = %lld are legal moves)",
                               op, (long long)r, (long long)l, legal[l], (long long)M,
                               (long long)n);
    }
    if (!with_targets) return MK_OK;
    for (int64_t r = 0; r < b->B; r++) {
        if (b->target[r] < 0 || b->target[r] >= b->counts[r])
            return mk_fail(MK_ERR_VALUE, "%s: target[%lld] = %d is outside [0, counts[%lld] = %d)",
                           op, (long long)r, b->target[r], (long long)r, b->counts[r]);
    }
    for (int64_t r = 0; r < b->B; r++) {
        float z = b->value[r];
        if (!(z >= 0.0f && z <= 1.0f)) /* also rejects NaN */
            return mk_fail(MK_ERR_VALUE, "%s: value[%lld] = %g must be finite and in [0, 1]", op,
                           (long long)r, (double)z);
    }
    if (!b->policy_target) return MK_OK;
    for (int64_t r = 0; r < b->B; r++) {
        const float *pi = b->policy_target + r * b->L;
        double sum = 0.0;
        for (int64_t l = 0; l < b->counts[r]; l++) {
            if (!isfinite(pi[l]) || pi[l] < 0.0f)
                return mk_fail(MK_ERR_VALUE,
                               "%s: policy_target[%lld, %lld] = %g must be finite and >= 0", op,
                               (long long)r, (long long)l, (double)pi[l]);
            sum += pi[l];
        }
        if (fabs(sum - 1.0) > MK_SOFT_TARGET_TOLERANCE)
            return mk_fail(MK_ERR_VALUE,
                           "%s: policy_target[%lld] sums to %.6g over its %d legal slots, not 1 "
                           "(tolerance %g)",
                           op, (long long)r, sum, b->counts[r], MK_SOFT_TARGET_TOLERANCE);
    }
    return MK_OK;
}
