/* The pair table's gradient group by group (pair_groups.h), for the fused AdamW updates.
 *
 * The pair table's rows are grouped by their larger token h: rows h (h + 1) / 2 + lo,
 * lo <= h, are contiguous. Threads take groups one by one; for each h a thread accumulates
 * the group's gradient in a small buffer (at most V rows, cache-resident) and hands it to
 * the caller's update. Finding the contributions of one h is cheap because every row's
 * tokens are sorted once and every (row, slot) is bucketed by its token: the pairs whose
 * larger token is h are (slot j holding h, any earlier sorted slot i).
 *
 * Same bits as pair_sums_backward: a gradient row receives, in both, the contributions of
 * rows r in increasing order (within one r they are all the same vector g[r]), starting
 * from zero. */
#include <stdlib.h>
#include <string.h>

#include "pair_groups.h"
#include "threads.h"

void mk_pair_bucket_cpu(const int32_t *tokens, int64_t rows, int64_t T, int64_t V, int32_t *work) {
    int32_t *sorted = work;             /* [rows, T]: present tokens, ascending */
    int32_t *count = sorted + rows * T; /* [rows] */
    int32_t *start = count + rows;      /* [V + 1]: bucket h is slots[start[h] : start[h + 1]] */
    int32_t *slots = start + V + 1;     /* [rows * T]: r * T + j, increasing r within a bucket */

#pragma omp parallel for schedule(static) num_threads(mk_threads_for(rows * T))
    for (int64_t r = 0; r < rows; r++) { /* insertion sort: T is small */
        int32_t *s = sorted + r * T;
        int32_t n = 0;
        for (int64_t t = 0; t < T; t++) {
            int32_t tok = tokens[r * T + t];
            if (tok < 0) continue;
            int32_t i = n++;
            for (; i > 0 && s[i - 1] > tok; i--) s[i] = s[i - 1];
            s[i] = tok;
        }
        count[r] = n;
    }
    /* counting sort of every (r, j) by token, stable in r (serial: ~rows * T steps) */
    memset(start, 0, (size_t)(V + 1) * sizeof(int32_t));
    for (int64_t r = 0; r < rows; r++)
        for (int32_t j = 0; j < count[r]; j++) start[sorted[r * T + j] + 1]++;
    for (int64_t h = 0; h < V; h++) start[h + 1] += start[h];
    for (int64_t r = 0; r < rows; r++)
        for (int32_t j = 0; j < count[r]; j++) slots[start[sorted[r * T + j]]++] = (int32_t)(r * T + j);
    memmove(start + 1, start, (size_t)V * sizeof(int32_t)); /* the fill moved each start to the next */
    start[0] = 0;
}

mk_status mk_pair_grad_groups_cpu(const float *grad, const int32_t *tokens, int64_t rows,
                                  int64_t T, int64_t P, int64_t V, int32_t *work,
                                  int touched_only, mk_pair_group_fn fn, void *ctx) {
    mk_pair_bucket_cpu(tokens, rows, T, V, work);
    return mk_pair_grad_groups_bucketed_cpu(grad, rows, T, P, V, work, touched_only, fn, ctx);
}

mk_status mk_pair_grad_groups_bucketed_cpu(const float *grad, int64_t rows, int64_t T, int64_t P,
                                           int64_t V, const int32_t *work, int touched_only,
                                           mk_pair_group_fn fn, void *ctx) {
    const int32_t *sorted = work, *start = work + rows * T + rows, *slots = start + V + 1;

    int failed = 0; /* shared: no thread updates anything unless every buffer was allocated */
#pragma omp parallel num_threads(mk_get_num_threads())
    {
        /* <= V rows a group; touched-only, it is all 0 between groups (each group zeroes
         * the rows it summed after its call), so a row's sum starts at 0 without a test */
        float *acc = !grad ? NULL
                     : touched_only ? calloc((size_t)(V * P), sizeof(float))
                                    : malloc((size_t)(V * P) * sizeof(float));
        /* touched-only mode: which rows of the group some pair names, as a list and a bit
         * mask (a group's rows are a few percent named on real data: the mask is scanned
         * 64 rows at a time) */
        int32_t *list = touched_only ? malloc((size_t)V * sizeof(int32_t)) : NULL;
        uint64_t *seen = touched_only ? calloc((size_t)(V + 63) / 64, sizeof(uint64_t)) : NULL;
        if ((grad && !acc) || (touched_only && (!list || !seen))) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp barrier
        int skip;
#pragma omp atomic read
        skip = failed;
        /* Groups are handed out one at a time, largest first: the work per group varies
         * (rows grow with h, pairs with the batch), and a thread descheduled by another
         * process leaves its share to the others. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t k_ = 0; k_ < V; k_++) {
            if (skip) continue;
            int64_t h = V - 1 - k_, n = (h + 1) * P;
            int32_t touched = 0;
            if (touched_only && start[h] == start[h + 1]) continue;
            if (!touched_only) memset(acc, 0, (size_t)n * sizeof(float));
            for (int32_t e = start[h]; e < start[h + 1]; e++) {
                int64_t r = slots[e] / T, j = slots[e] % T;
                const int32_t *s = sorted + r * T;
                if (!grad) { /* the rows only */
                    for (int64_t i = 0; i < j; i++) seen[s[i] >> 6] |= (uint64_t)1 << (s[i] & 63);
                    continue;
                }
                const float *g = grad + r * P;
                for (int64_t i = 0; i < j; i++) {
                    float *a = acc + (int64_t)s[i] * P;
                    if (touched_only) seen[s[i] >> 6] |= (uint64_t)1 << (s[i] & 63);
#pragma omp simd
                    for (int64_t c = 0; c < P; c++) a[c] += g[c];
                }
            }
            if (touched_only) /* the rows in table order (and the mask cleared), a word at a time */
                for (int64_t w = 0; w <= h >> 6; w++) {
                    for (uint64_t bits = seen[w]; bits; bits &= bits - 1)
                        list[touched++] = (int32_t)(w * 64 + __builtin_ctzll(bits));
                    seen[w] = 0;
                }
            if (touched_only && touched == 0) continue; /* h only ever first in its rows */
            fn(ctx, h, grad ? acc : NULL, touched_only ? list : NULL, touched);
            if (touched_only && grad) /* the rows summed back to 0 for the next group */
                for (int32_t x = 0; x < touched; x++) {
                    float *a = acc + (int64_t)list[x] * P;
#pragma omp simd
                    for (int64_t c = 0; c < P; c++) a[c] = 0.0f;
                }
        }
        free(acc);
        free(list);
        free(seen);
    }
    return failed ? mk_fail(MK_ERR_NOMEM, "pair_sums_backward_adamw: out of memory") : MK_OK;
}
