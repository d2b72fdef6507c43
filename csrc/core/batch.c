/* Validation of a batch against a model's config: one pass per field, first error wins.
 * Finding the fault and wording it are separate so that a device check (the backends'
 * batch_check) reports a device batch in exactly the words of the host check. */
#include <math.h>

#include "batch.h"

mk_status mk_batch_check_shape(const char *op, const mk_batch *b, int64_t T, int with_targets) {
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
    return MK_OK;
}

static void found(mk_batch_fault *f, int kind, int64_t index, int64_t slot, int64_t count,
                  double value) {
    *f = (mk_batch_fault){kind, index, slot, count, value};
}

void mk_batch_find_fault(const mk_batch *b, int64_t V, int64_t M, int with_targets,
                         mk_batch_fault *f) {
    found(f, MK_FAULT_NONE, 0, 0, 0, 0.0);
    int64_t n_tok = b->B * b->S * b->T;
    for (int64_t i = 0; i < n_tok; i++)
        if (b->tokens[i] < -1 || b->tokens[i] >= V)
            return found(f, MK_FAULT_TOKEN, i, 0, 0, b->tokens[i]);
    for (int64_t r = 0; r < b->B; r++) {
        int64_t n = b->counts[r];
        if (n < 1 || n > b->L) return found(f, MK_FAULT_COUNT, r, 0, n, (double)n);
        const int32_t *legal = b->legal + r * b->L;
        for (int64_t l = 0; l < n; l++)
            if (legal[l] < 0 || legal[l] >= M) return found(f, MK_FAULT_LEGAL, r, l, n, legal[l]);
    }
    if (!with_targets) return;
    for (int64_t r = 0; r < b->B; r++)
        if (b->target[r] < 0 || b->target[r] >= b->counts[r])
            return found(f, MK_FAULT_TARGET, r, 0, b->counts[r], b->target[r]);
    for (int64_t r = 0; r < b->B; r++)
        if (!(b->value[r] >= 0.0f && b->value[r] <= 1.0f)) /* also rejects NaN */
            return found(f, MK_FAULT_VALUE, r, 0, 0, b->value[r]);
    if (!b->policy_target) return;
    for (int64_t r = 0; r < b->B; r++) {
        const float *pi = b->policy_target + r * b->L;
        double sum = 0.0;
        for (int64_t l = 0; l < b->counts[r]; l++) {
            if (!isfinite(pi[l]) || pi[l] < 0.0f)
                return found(f, MK_FAULT_SOFT_ENTRY, r, l, b->counts[r], pi[l]);
            sum += pi[l];
        }
        if (fabs(sum - 1.0) > MK_SOFT_TARGET_TOLERANCE)
            return found(f, MK_FAULT_SOFT_SUM, r, 0, b->counts[r], sum);
    }
}

mk_status mk_batch_fault_status(const char *op, const mk_batch *b, int64_t V, int64_t M,
                                const mk_batch_fault *f) {
    long long r = (long long)f->index, l = (long long)f->slot, n = (long long)f->count;
    switch (f->kind) {
    case MK_FAULT_NONE:
        return MK_OK;
    case MK_FAULT_TOKEN:
        return mk_fail(MK_ERR_VALUE,
                       "%s: tokens[%lld, %lld, %lld] = %d is out of range: must be -1 (empty) "
                       "or in [0, num_tokens = %lld)",
                       op, (long long)(f->index / (b->S * b->T)), (long long)(f->index / b->T % b->S),
                       (long long)(f->index % b->T), (int)f->value, (long long)V);
    case MK_FAULT_COUNT:
        return mk_fail(MK_ERR_VALUE, "%s: counts[%lld] = %lld is outside [1, L = %lld]", op, r, n,
                       (long long)b->L);
    case MK_FAULT_LEGAL:
        return mk_fail(MK_ERR_VALUE,
                       "%s: legal[%lld, %lld] = %d is out of range [0, num_moves = %lld) "
                       "(slots l < counts[b] = %lld are legal moves)",
                       op, r, l, (int)f->value, (long long)M, n);
    case MK_FAULT_TARGET:
        return mk_fail(MK_ERR_VALUE, "%s: target[%lld] = %d is outside [0, counts[%lld] = %d)", op,
                       r, (int)f->value, r, (int)n);
    case MK_FAULT_VALUE:
        return mk_fail(MK_ERR_VALUE, "%s: value[%lld] = %g must be finite and in [0, 1]", op, r,
                       f->value);
    case MK_FAULT_SOFT_ENTRY:
        return mk_fail(MK_ERR_VALUE, "%s: policy_target[%lld, %lld] = %g must be finite and >= 0",
                       op, r, l, f->value);
    case MK_FAULT_SOFT_SUM:
        return mk_fail(MK_ERR_VALUE,
                       "%s: policy_target[%lld] sums to %.6g over its %d legal slots, not 1 "
                       "(tolerance %g)",
                       op, r, f->value, (int)n, MK_SOFT_TARGET_TOLERANCE);
    }
    return mk_fail(MK_ERR_RUNTIME, "%s: unknown batch fault kind %d", op, f->kind);
}

mk_status mk_batch_check(const char *op, const mk_batch *b, int64_t V, int64_t M, int64_t T,
                         int with_targets) {
    mk_status st = mk_batch_check_shape(op, b, T, with_targets);
    if (st != MK_OK) return st;
    mk_batch_fault fault;
    mk_batch_find_fault(b, V, M, with_targets, &fault);
    return mk_batch_fault_status(op, b, V, M, &fault);
}
