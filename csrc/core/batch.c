/* Validation of a batch against a model's config: the shape checks, the batch's rules for
 * check.h, and the words of each fault. Finding the fault (check.c, or the backends'
 * batch_check on the device) and wording it are separate so that a device batch is
 * reported in exactly the words of a host one. */

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

mk_check mk_batch_rules(const mk_batch *b, int64_t V, int64_t M, int with_targets) {
    return (mk_check){
        .tokens = b->tokens, .n_tokens = b->B * b->S * b->T, .V = V,
        .legal = b->legal, .counts = b->counts, .B = b->B, .L = b->L, .M = M, .min_count = 1,
        .target = with_targets ? b->target : NULL,
        .value = with_targets ? b->value : NULL,
        .policy_target = with_targets ? b->policy_target : NULL,
    };
}

mk_status mk_batch_fault_status(const char *op, const mk_batch *b, int64_t V, int64_t M,
                                const mk_fault *f) {
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
        return mk_fail(MK_ERR_VALUE, "%s: counts[%lld] = %lld is outside [1, L = %lld]", op, r,
                       (long long)f->value, (long long)b->L);
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
                       f->real);
    case MK_FAULT_SOFT_ENTRY:
        return mk_fail(MK_ERR_VALUE, "%s: policy_target[%lld, %lld] = %g must be finite and >= 0",
                       op, r, l, f->real);
    case MK_FAULT_SOFT_SUM:
        return mk_fail(MK_ERR_VALUE,
                       "%s: policy_target[%lld] sums to %.6g over its %d legal slots, not 1 "
                       "(tolerance %g)",
                       op, r, f->real, (int)n, MK_SOFT_TARGET_TOLERANCE);
    }
    return mk_fail(MK_ERR_RUNTIME, "%s: unknown batch fault kind %d", op, f->kind);
}

mk_status mk_batch_check(const char *op, const mk_batch *b, int64_t V, int64_t M, int64_t T,
                         int with_targets) {
    mk_status st = mk_batch_check_shape(op, b, T, with_targets);
    if (st != MK_OK) return st;
    mk_check rules = mk_batch_rules(b, V, M, with_targets);
    mk_fault fault;
    mk_find_fault(&rules, &fault);
    return mk_batch_fault_status(op, b, V, M, &fault);
}
