/* mk_find_fault and mk_check_dataset: the host implementations of check.h's rules
 * (csrc/cuda/check.cu is the device one). One pass per rule, in the documented order; the
 * first fault wins. */
#include <math.h>
#include <stdlib.h>

#include "check.h"

static void found(mk_fault *f, int kind, int64_t index, int64_t slot, int64_t count,
                  int64_t value, double real) {
    *f = (mk_fault){kind, index, slot, count, value, real};
}

/* Whether any of x[0..n) lies outside [lo, hi): one unsigned compare per entry, OR-ed
 * without an early exit, so that the compiler vectorises it. Valid input (every call but a
 * refused one) is scanned by this alone; the scalar loops below then find the first fault.
 * The loader's producers check every batch they pack, and the early-exit loops cost a
 * shogi producer 5% of its time. */
static int any_outside(const int32_t *x, int64_t n, int64_t lo, int64_t hi) {
    if (hi > (int64_t)INT32_MAX + 1) hi = (int64_t)INT32_MAX + 1; /* no int32 reaches it */
    if (hi <= lo) return n > 0;
    const uint32_t base = (uint32_t)lo, span = (uint32_t)(hi - lo); /* hi - lo <= 2^31 + 1 */
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= (uint32_t)x[i] - base >= span;
    return bad != 0;
}

void mk_find_fault(const mk_check *c, mk_fault *f) {
    found(f, MK_FAULT_NONE, 0, 0, 0, 0, 0.0);
    const int32_t *tok = c->tokens;
    if (tok && any_outside(tok, c->n_tokens, -1, c->V))
        for (int64_t i = 0; i < c->n_tokens; i++)
            if (mk_bad_token(tok[i], c->V)) return found(f, MK_FAULT_TOKEN, i, 0, 0, tok[i], 0.0);
    if (!c->legal) return;
    const int64_t B = c->B, L = c->L;
    const int32_t *cnt = c->counts;
    for (int64_t r = 0; cnt && r < B; r++)
        if (cnt[r] < c->min_count || cnt[r] > L)
            return found(f, MK_FAULT_COUNT, r, 0, 0, cnt[r], 0.0);
    for (int64_t r = 0; r < B; r++) {
        const int64_t n = cnt ? cnt[r] : L;
        const int32_t *row = c->legal + r * L;
        if (!any_outside(row, n, 0, c->M)) continue;
        for (int64_t l = 0; l < n; l++)
            if (mk_bad_index(row[l], c->M)) return found(f, MK_FAULT_LEGAL, r, l, n, row[l], 0.0);
    }
    if (c->target)
        for (int64_t r = 0; r < B; r++)
            if (mk_bad_index(c->target[r], cnt[r]))
                return found(f, MK_FAULT_TARGET, r, 0, cnt[r], c->target[r], 0.0);
    if (c->value)
        for (int64_t r = 0; r < B; r++)
            if (mk_bad_value(c->value[r])) /* also rejects NaN */
                return found(f, MK_FAULT_VALUE, r, 0, 0, 0, c->value[r]);
    for (int64_t r = 0; c->policy_target && r < B; r++) {
        const float *pi = c->policy_target + r * L;
        double sum = 0.0;
        for (int64_t l = 0; l < cnt[r]; l++) {
            if (mk_bad_soft_entry(pi[l]))
                return found(f, MK_FAULT_SOFT_ENTRY, r, l, cnt[r], 0, pi[l]);
            sum += pi[l];
        }
        if (mk_bad_soft_sum(sum))
            return found(f, MK_FAULT_SOFT_SUM, r, 0, cnt[r], 0, sum);
    }
}

/* found(), for mk_check_dataset's returns: a fault is an answer, not a failure. */
static mk_status fault(mk_fault *f, int kind, int64_t index, int64_t slot, int64_t count,
                       int64_t value, double real) {
    found(f, kind, index, slot, count, value, real);
    return MK_OK;
}

static int compare_int32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int64_t move_at(const mk_dataset *d, int64_t k) {
    return d->moves_int16 ? ((const int16_t *)d->moves)[k] : ((const int32_t *)d->moves)[k];
}

/* The smallest move listed twice in position i's list, or -1. A list in ascending order
 * (shogi's) has none; any other is sorted in `buf`. */
static int64_t duplicate_in(const mk_dataset *d, int64_t i, int32_t *buf) {
    const int64_t a = d->offsets[i], n = d->offsets[i + 1] - a;
    int ascending = 1;
    for (int64_t l = 1; l < n && ascending; l++) ascending = move_at(d, a + l - 1) < move_at(d, a + l);
    if (ascending) return -1;
    for (int64_t l = 0; l < n; l++) buf[l] = (int32_t)move_at(d, a + l);
    qsort(buf, (size_t)n, sizeof(int32_t), compare_int32);
    for (int64_t l = 1; l < n; l++)
        if (buf[l] == buf[l - 1]) return buf[l];
    return -1;
}

mk_status mk_check_dataset(const mk_dataset *d, mk_fault *f, int64_t *max_count) {
    const int64_t N = d->N, *off = d->offsets;
    found(f, MK_FAULT_NONE, 0, 0, 0, 0, 0.0);
    *max_count = 0;
    if (off[0] != 0) return fault(f, MK_FAULT_OFFSET_START, 0, 0, 0, off[0], 0.0);
    if (off[N] != d->E) return fault(f, MK_FAULT_OFFSET_END, N, 0, 0, off[N], 0.0);
    for (int64_t i = 0; i < N; i++) { /* so every list read below lies within the moves */
        const int64_t n = off[i + 1] - off[i];
        if (n < 1) return fault(f, MK_FAULT_COUNT, i, 0, 0, n, 0.0);
        if (n > *max_count) *max_count = n;
    }
    const int64_t n_tokens = N * 2 * d->T;
    for (int64_t x = 0; x < n_tokens; x++)
        if (mk_bad_token(d->tokens[x], d->V))
            return fault(f, MK_FAULT_TOKEN, x, 0, 0, d->tokens[x], 0.0);
    for (int64_t i = 0; i < N; i++)
        for (int64_t k = off[i]; k < off[i + 1]; k++)
            if (mk_bad_index(move_at(d, k), d->M))
                return fault(f, MK_FAULT_LEGAL, i, k - off[i], off[i + 1] - off[i], move_at(d, k),
                             0.0);
    int32_t *buf = malloc((size_t)*max_count * sizeof(int32_t));
    if (!buf) return mk_fail(MK_ERR_NOMEM, "check_dataset: out of memory for %lld moves",
                             (long long)*max_count);
    int64_t dup = -1, i = 0;
    for (; i < N && dup < 0; i++) dup = duplicate_in(d, i, buf);
    free(buf);
    if (dup >= 0) return fault(f, MK_FAULT_DUPLICATE, i - 1, 0, 0, dup, 0.0);
    for (i = 0; i < N; i++)
        if (mk_bad_index(d->target[i], off[i + 1] - off[i]))
            return fault(f, MK_FAULT_TARGET, i, 0, off[i + 1] - off[i], d->target[i], 0.0);
    for (i = 0; i < N; i++)
        if (mk_bad_value(d->value[i])) return fault(f, MK_FAULT_VALUE, i, 0, 0, 0, d->value[i]);
    for (i = 0; d->policy_target && i < N; i++) {
        const float *pi = d->policy_target + off[i];
        const int64_t n = off[i + 1] - off[i];
        double sum = 0.0;
        for (int64_t l = 0; l < n; l++) {
            if (mk_bad_soft_entry(pi[l])) return fault(f, MK_FAULT_SOFT_ENTRY, i, l, n, 0, pi[l]);
            sum += pi[l];
        }
        if (mk_bad_soft_sum(sum)) return fault(f, MK_FAULT_SOFT_SUM, i, 0, n, 0, sum);
    }
    return MK_OK;
}
