/* GatherDot on the CPU: logits over each position's legal moves without ever forming
 * the [B, L, W] gather. Forward and grad_hidden are parallel over positions; grad_table
 * is parallel over table rows (see threads.h for why that is deterministic). */
#include <string.h>

#include "backend_cpu.h"
#include "gather_dot_rows.h"
#include "threads.h"

static inline int64_t row_count(const int32_t *counts, int64_t b, int64_t L) {
    return counts ? counts[b] : L;
}

mk_status mk_gather_dot_cpu(void *stream, const float *hidden, const float *table,
                            const int32_t *indices, const int32_t *counts, int64_t B, int64_t L,
                            int64_t W, float *logits) {
#pragma omp parallel for schedule(static) num_threads(mk_threads_for_items(B, B * L * W))
    for (int64_t b = 0; b < B; b++) {
        float *out = logits + b * L;
        int64_t n = row_count(counts, b, L);
        mk_gather_dot_row(hidden + b * W, table, indices + b * L, n, W, out);
        for (int64_t l = n; l < L; l++) out[l] = 0.0f;
    }
    return MK_OK;
}

mk_status mk_gather_dot_backward_cpu(void *stream, const float *grad, const float *hidden,
                                     const float *table, const int32_t *indices,
                                     const int32_t *counts, int64_t B, int64_t L, int64_t W,
                                     int64_t M, float *grad_hidden, float *grad_table,
                                     const uint8_t *rows, void *work,
                                     size_t work_bytes) { /* no scratch: none needed */
    if (grad_hidden) {
#pragma omp parallel for schedule(static) num_threads(mk_threads_for_items(B, B * L * W))
        for (int64_t b = 0; b < B; b++)
            mk_gather_dot_grad_hidden_row(grad + b * L, table, indices + b * L,
                                          row_count(counts, b, L), W, grad_hidden + b * W);
    }
    if (grad_table) {
#pragma omp parallel num_threads(mk_threads_for_items(M, B * L * W))
        {
            int64_t m0, m1;
            mk_owned_rows(M, &m0, &m1);
            if (!rows)
                memset(grad_table + m0 * W, 0, (size_t)((m1 - m0) * W) * sizeof(float));
            else /* only the rows the mask names: the entries land in no other */
                for (int64_t m = m0; m < m1; m++)
                    if (rows[m]) memset(grad_table + m * W, 0, (size_t)W * sizeof(float));
            for (int64_t b = 0; b < B; b++) {
                const float *h = hidden + b * W;
                const float *g = grad + b * L;
                const int32_t *idx = indices + b * L;
                int64_t n = row_count(counts, b, L);
                for (int64_t l = 0; l < n; l++) {
                    int64_t m = idx[l];
                    if (m < m0 || m >= m1) continue;
                    float *gt = grad_table + m * W;
                    float gl = g[l];
#pragma omp simd
                    for (int64_t w = 0; w < W; w++) gt[w] += gl * h[w];
                }
            }
        }
    }
    return MK_OK;
}
