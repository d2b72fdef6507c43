/* PairSums backward fused with AdamW on the pair table (backend.h explains the contract).
 *
 * The pair table's rows are grouped by their larger token h: rows h (h + 1) / 2 + lo,
 * lo <= h, are contiguous. Threads take groups one by one; for each h a thread accumulates
 * the group's gradient in a small buffer (at most V rows, cache-resident), then runs AdamW
 * over the group. Finding the contributions of one h is cheap because
 * every row's tokens are sorted once and every (row, slot) is bucketed by its token:
 * the pairs whose larger token is h are (slot j holding h, any earlier sorted slot i).
 *
 * Same bits as the unfused path: a gradient row receives, in both, the contributions of
 * rows r in increasing order (within one r they are all the same vector g[r]), starting
 * from zero; and the AdamW update is the same inline code (adamw.h). */
#include <stdlib.h>
#include <string.h>

#include "adamw.h"
#include "backend_cpu.h"
#include "threads.h"

mk_status mk_pair_sums_backward_adamw_cpu(void *stream, const float *grad, const int32_t *tokens,
                                          int64_t rows, int64_t T, int64_t P, int64_t V,
                                          float *p, float *m, float *v,
                                          const mk_adamw_args *args, const float *stats,
                                          int32_t *work) {
    (void)stream;
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return MK_OK;
    int32_t *sorted = work;             /* [rows, T]: present tokens, ascending */
    int32_t *count = sorted + rows * T; /* [rows] */
    int32_t *start = count + rows;      /* [V + 1]: bucket h is slots[start[h] : start[h + 1]] */
    int32_t *slots = start + V + 1;     /* [rows * T]: r * T + j, increasing r within a bucket */

#pragma omp parallel for schedule(static) num_threads(mk_get_num_threads()) \
    if (rows * T >= MK_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) { /* insertion sort: T is small */
        int32_t *s = sorted + r * T;
        int32_t n = 0;
        for (int64_t t = 0; t < T; t++) {
            int32_t tok = tokens[r * T + t], i = n++;
            if (tok < 0) {
                n--;
                continue;
            }
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

    const mk_adamw_consts k = mk_adamw_prepare(args);
    int failed = 0; /* shared: no thread updates anything unless every buffer was allocated */
#pragma omp parallel num_threads(mk_get_num_threads())
    {
        float *acc = malloc((size_t)(V * P) * sizeof(float)); /* a group has <= V rows */
        if (!acc) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp barrier
        int skip;
#pragma omp atomic read
        skip = failed;
        /* Groups are handed out one at a time, largest first: the work per group varies
         * (rows grow with h, pairs with the batch), and a thread descheduled by another
         * process leaves its share to the others. Each group's result does not depend on
         * which thread computes it. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t k_ = 0; k_ < V; k_++) {
            if (skip) continue;
            int64_t h = V - 1 - k_, q0 = mk_num_pairs(h), n = (h + 1) * P;
            memset(acc, 0, (size_t)n * sizeof(float));
            for (int32_t e = start[h]; e < start[h + 1]; e++) {
                int64_t r = slots[e] / T, j = slots[e] % T;
                const int32_t *s = sorted + r * T;
                const float *g = grad + r * P;
                for (int64_t i = 0; i < j; i++) {
                    float *a = acc + (int64_t)s[i] * P;
#pragma omp simd
                    for (int64_t c = 0; c < P; c++) a[c] += g[c];
                }
            }
            mk_adamw_run(&k, p + q0 * P, acc, m + q0 * P, v + q0 * P, n);
        }
        free(acc);
    }
    return failed ? mk_fail(MK_ERR_NOMEM, "pair_sums_backward_adamw: out of memory") : MK_OK;
}
