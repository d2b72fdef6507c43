/* mk_check_dataset and mk_find_offsets_fault (loader.h): a dataset in the on-disk layout,
 * held to the rules of core/check.h (the ones a batch is held to) and the format's own
 * (the offsets, each legal move listed once). */
#include <stdlib.h>

#include "loader.h"

static mk_status fault(mk_fault *f, int kind, int64_t index, int64_t slot, int64_t count,
                       int64_t value, double real) {
    *f = (mk_fault){kind, index, slot, count, value, real};
    return MK_OK; /* a fault is an answer, not a failure */
}

void mk_find_offsets_fault(const int64_t *off, int64_t N, int64_t E, mk_fault *f,
                           int64_t *max_count) {
    *max_count = 0;
    if (off[0] != 0) {
        fault(f, MK_FAULT_OFFSET_START, 0, 0, 0, off[0], 0.0);
        return;
    }
    if (off[N] != E) {
        fault(f, MK_FAULT_OFFSET_END, N, 0, 0, off[N], 0.0);
        return;
    }
    /* Compared before subtracting: a corrupt offset may be any int64, and off[i] >= 0 holds
     * only up to the first fault, so off[i + 1] - off[i] could overflow. */
    for (int64_t i = 0; i < N; i++) {
        if (off[i + 1] <= off[i]) {
            int64_t n;
            if (__builtin_sub_overflow(off[i + 1], off[i], &n)) n = INT64_MIN;
            fault(f, MK_FAULT_COUNT, i, 0, 0, n, 0.0);
            return;
        }
        const int64_t n = off[i + 1] - off[i]; /* 0 <= off[i] < off[i + 1]: no overflow */
        if (n > *max_count) *max_count = n;
    }
    fault(f, MK_FAULT_NONE, 0, 0, 0, 0, 0.0);
}

static int compare_int32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int64_t move_at(const mk_dataset_view *d, int64_t k) {
    return d->moves_itemsize == 2 ? ((const int16_t *)d->legal_moves)[k]
                                  : ((const int32_t *)d->legal_moves)[k];
}

/* The smallest move listed twice in position i's list, or -1. A list in ascending order
 * (shogi's) has none; any other is sorted in `buf`. */
static int64_t duplicate_in(const mk_dataset_view *d, int64_t i, int32_t *buf) {
    const int64_t a = d->legal_offsets[i], n = d->legal_offsets[i + 1] - a;
    int ascending = 1;
    for (int64_t l = 1; l < n && ascending; l++) ascending = move_at(d, a + l - 1) < move_at(d, a + l);
    if (ascending) return -1;
    for (int64_t l = 0; l < n; l++) buf[l] = (int32_t)move_at(d, a + l);
    qsort(buf, (size_t)n, sizeof(int32_t), compare_int32);
    for (int64_t l = 1; l < n; l++)
        if (buf[l] == buf[l - 1]) return buf[l];
    return -1;
}

mk_status mk_check_dataset(const mk_dataset_view *d, mk_fault *f, int64_t *max_count) {
    const int64_t N = d->num_positions, *off = d->legal_offsets;
    mk_find_offsets_fault(off, N, d->total_moves, f, max_count);
    if (f->kind != MK_FAULT_NONE) return MK_OK; /* every list read below lies within the moves */
    const int64_t n_tokens = N * 2 * d->tokens_per_side;
    for (int64_t x = 0; x < n_tokens; x++)
        if (mk_bad_token(d->tokens[x], d->num_tokens))
            return fault(f, MK_FAULT_TOKEN, x, 0, 0, d->tokens[x], 0.0);
    for (int64_t i = 0; i < N; i++)
        for (int64_t k = off[i]; k < off[i + 1]; k++)
            if (mk_bad_index(move_at(d, k), d->num_moves))
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
