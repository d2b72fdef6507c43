/* GatherDot on the CPU: logits over each position's legal moves without ever forming
 * the [B, L, W] gather. Forward and grad_hidden are parallel over positions; grad_table
 * is parallel over table rows, each summing its own entries in one fixed order (see
 * threads.h for why that is deterministic). */
#include <stdlib.h>
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

/* grad_table, one row at a time from its own entries: a counting sort lists each row's
 * entries (b, G[b, l]) in ascending (b, l), and the row is summed in registers, a block of
 * columns at a time, and stored once. Each element is 0 + G[b0, l0] h[b0, w] + ... added in
 * that order, one rounding per product and per sum (no contraction: -std=c11), so the bits
 * are those of adding every entry into a zeroed row in place, as the scan over (b, l)
 * did, without the row's read-modify-write per entry. */
typedef float mk_f8 __attribute__((vector_size(32), aligned(4)));
typedef float mk_f4 __attribute__((vector_size(16), aligned(4)));

/* out[c, c + 8 nv) for nv <= 8 vectors of 8 columns, held in registers over the entries */
static inline __attribute__((always_inline)) void table_cols8(const float *hidden, int64_t W,
                                                              const int64_t *pos, const float *g,
                                                              int64_t k0, int64_t k1, int64_t c,
                                                              const int nv, float *out) {
    mk_f8 a[8];
    for (int i = 0; i < nv; i++) a[i] = (mk_f8){0};
    for (int64_t k = k0; k < k1; k++) {
        const float *h = hidden + pos[k] * W + c;
        const float gk = g[k];
        for (int i = 0; i < nv; i++) a[i] = a[i] + gk * *(const mk_f8 *)(h + 8 * i);
    }
    for (int i = 0; i < nv; i++) *(mk_f8 *)(out + c + 8 * i) = a[i];
}

static void table_row(const float *hidden, int64_t W, const int64_t *pos, const float *g,
                      int64_t k0, int64_t k1, float *out) {
    int64_t c = 0;
    for (; c + 64 <= W; c += 64) table_cols8(hidden, W, pos, g, k0, k1, c, 8, out);
    if (c + 32 <= W) table_cols8(hidden, W, pos, g, k0, k1, c, 4, out), c += 32;
    if (c + 16 <= W) table_cols8(hidden, W, pos, g, k0, k1, c, 2, out), c += 16;
    if (c + 8 <= W) table_cols8(hidden, W, pos, g, k0, k1, c, 1, out), c += 8;
    if (c + 4 <= W) {
        mk_f4 a = {0};
        for (int64_t k = k0; k < k1; k++) a = a + g[k] * *(const mk_f4 *)(hidden + pos[k] * W + c);
        *(mk_f4 *)(out + c) = a;
        c += 4;
    }
    for (; c < W; c++) {
        float a = 0.0f;
        for (int64_t k = k0; k < k1; k++) a = a + g[k] * hidden[pos[k] * W + c];
        out[c] = a;
    }
}

static mk_status grad_table_cpu(const float *grad, const float *hidden, const int32_t *indices,
                                const int32_t *counts, int64_t B, int64_t L, int64_t W, int64_t M,
                                float *grad_table, const uint8_t *rows) {
    int64_t N = 0;
    for (int64_t b = 0; b < B; b++) N += row_count(counts, b, L);
    /* first[m] .. first[m + 1]: row m's entries (first has M + 2 slots for the sort) */
    int64_t *first = calloc((size_t)M + 2, sizeof(int64_t));
    int64_t *pos = malloc((size_t)(N ? N : 1) * sizeof(int64_t));
    float *g = malloc((size_t)(N ? N : 1) * sizeof(float));
    if (!first || !pos || !g) {
        free(first), free(pos), free(g);
        return mk_fail(MK_ERR_NOMEM, "gather_dot_backward: out of memory for its scratch");
    }
    for (int64_t b = 0; b < B; b++) {
        const int32_t *idx = indices + b * L;
        for (int64_t l = 0, n = row_count(counts, b, L); l < n; l++) first[idx[l] + 2]++;
    }
    for (int64_t m = 2; m < M + 2; m++) first[m] += first[m - 1];
    for (int64_t b = 0; b < B; b++) { /* ascending (b, l) within each row */
        const int32_t *idx = indices + b * L;
        const float *gb = grad + b * L;
        for (int64_t l = 0, n = row_count(counts, b, L); l < n; l++) {
            int64_t k = first[idx[l] + 1]++;
            pos[k] = b, g[k] = gb[l];
        }
    }
#pragma omp parallel num_threads(mk_threads_for_items(M, B * L * W))
    {
        int64_t m0, m1, zeros;
        mk_owned_rows(M, &m0, &m1);
        zeros = m0; /* rows [zeros, m) have no entry and are still to be zeroed (rows NULL) */
        for (int64_t m = m0; m < m1; m++) {
            float *out = grad_table + m * W;
            if (first[m] == first[m + 1]) {
                if (rows && rows[m]) memset(out, 0, (size_t)W * sizeof(float));
                continue;
            }
            if (!rows && zeros < m) memset(grad_table + zeros * W, 0, (size_t)((m - zeros) * W) * sizeof(float));
            zeros = m + 1;
            table_row(hidden, W, pos, g, first[m], first[m + 1], out);
        }
        if (!rows && zeros < m1)
            memset(grad_table + zeros * W, 0, (size_t)((m1 - zeros) * W) * sizeof(float));
    }
    free(first), free(pos), free(g);
    return MK_OK;
}

mk_status mk_gather_dot_backward_cpu(void *stream, const float *grad, const float *hidden,
                                     const float *table, const int32_t *indices,
                                     const int32_t *counts, int64_t B, int64_t L, int64_t W,
                                     int64_t M, float *grad_hidden, float *grad_table,
                                     const uint8_t *rows, void *work,
                                     size_t work_bytes) { /* grad_table allocates its own */
    if (grad_hidden) {
#pragma omp parallel for schedule(static) num_threads(mk_threads_for_items(B, B * L * W))
        for (int64_t b = 0; b < B; b++)
            mk_gather_dot_grad_hidden_row(grad + b * L, table, indices + b * L,
                                          row_count(counts, b, L), W, grad_hidden + b * W);
    }
    return grad_table ? grad_table_cpu(grad, hidden, indices, counts, B, L, W, M, grad_table, rows)
                      : MK_OK;
}
