/* mk_find_fault: the host implementation of check.h's rules (csrc/cuda/check.cu is the
 * device one). One pass per rule, in the documented order; the first fault wins. And
 * mk_narrow_to_int32, the host twin of check.cu's narrowing. */
#include <math.h>
#include <string.h>

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

/* Element i of src as int64 (a uint64's bit pattern), read once. */
static int64_t element(const void *src, int itemsize, int is_signed, int64_t i) {
    switch (is_signed ? itemsize : -itemsize) {
    case 1: return ((const volatile int8_t *)src)[i];
    case 2: return ((const volatile int16_t *)src)[i];
    case 4: return ((const volatile int32_t *)src)[i];
    case 8: return ((const volatile int64_t *)src)[i];
    case -1: return ((const volatile uint8_t *)src)[i];
    case -2: return ((const volatile uint16_t *)src)[i];
    case -4: return ((const volatile uint32_t *)src)[i];
    default: return (int64_t)((const volatile uint64_t *)src)[i];
    }
}

void mk_narrow_to_int32(const void *src, int itemsize, int is_signed, int64_t n, int32_t *dst,
                        mk_fault *fault) {
    memset(fault, 0, sizeof *fault);
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = element(src, itemsize, is_signed, i);
        /* unsigned: a uint64 above INT64_MAX reads as negative and is refused by sign */
        if (is_signed ? v < INT32_MIN || v > INT32_MAX : (uint64_t)v > (uint64_t)INT32_MAX) {
            *fault = (mk_fault){.kind = MK_FAULT_NARROW, .index = i, .value = v};
            return;
        }
        dst[i] = (int32_t)v;
    }
}
