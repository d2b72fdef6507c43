/* GatherDot on the CPU: logits over each position's legal moves without ever forming
 * the [B, L, W] gather. Forward and grad_hidden are parallel over positions; grad_table
 * is parallel over table rows, each summing its own entries in one fixed order (see
 * threads.h for why that is deterministic). */
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "core/checked.h"
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

size_t mk_gather_dot_work_bytes_cpu(int64_t B, int64_t L, int64_t M) {
    int64_t slots, a, b, total; /* SIZE_MAX past 2^56 bytes: the arena then refuses (B, L) */
    if (mk_mul_too_big(B, L, &slots) || mk_mul_too_big(slots, 8 + 4, &a) ||
        mk_mul_too_big(M, 8 + 4, &b) || mk_add_too_big(a, b, &total))
        return SIZE_MAX;
    return (size_t)total;
}

/* `work` holds end[M] (int64), then pos[N] (int64), g[N] (float) and rows_used[M] (int32),
 * N = the legal slots (<= B L). The sort costs O(M) only in one memset of end: rows with
 * entries are listed as first met, and only they are visited (a batch names a few thousand
 * of the recipe's 262,440 moves). Rows are computed in any order, each by one thread. */
static void grad_table_cpu(const float *grad, const float *hidden, const int32_t *indices,
                           const int32_t *counts, int64_t B, int64_t L, int64_t W, int64_t M,
                           float *grad_table, const uint8_t *rows, void *work) {
    int64_t N = 0;
    for (int64_t b = 0; b < B; b++) N += row_count(counts, b, L);
    int64_t *end = work, *pos = end + M;
    float *g = (float *)(pos + N);
    int32_t *used = (int32_t *)(g + N);
    int64_t n_used = 0;
    memset(end, 0, (size_t)M * sizeof(int64_t));
    for (int64_t b = 0; b < B; b++) { /* each row's count; the rows in the order first met */
        const int32_t *idx = indices + b * L;
        for (int64_t l = 0, n = row_count(counts, b, L); l < n; l++)
            if (end[idx[l]]++ == 0) used[n_used++] = idx[l];
    }
    for (int64_t u = 0, at = 0; u < n_used; u++) { /* row used[u]'s entries: [at, at + count) */
        int64_t c = end[used[u]];
        end[used[u]] = at;
        at += c;
    }
    for (int64_t b = 0; b < B; b++) { /* ascending (b, l) within each row; end[m] ends row m */
        const int32_t *idx = indices + b * L;
        const float *gb = grad + b * L;
        for (int64_t l = 0, n = row_count(counts, b, L); l < n; l++) {
            int64_t k = end[idx[l]]++;
            pos[k] = b, g[k] = gb[l];
        }
    }
#pragma omp parallel num_threads(mk_threads_for_items(M, B * L * W))
    {
        int64_t m0, m1, u0, u1;
        mk_owned_rows(M, &m0, &m1);
        if (!rows) /* one memset (large ones stream past the cache), then the rows with entries */
            memset(grad_table + m0 * W, 0, (size_t)((m1 - m0) * W) * sizeof(float));
        else /* the named rows no entry lands in (end stays 0 only there) */
            for (int64_t m = m0; m < m1; m++)
                if (rows[m] && end[m] == 0) memset(grad_table + m * W, 0, (size_t)W * sizeof(float));
#pragma omp barrier
        mk_owned_rows(n_used, &u0, &u1);
        for (int64_t u = u0; u < u1; u++) {
            int64_t m = used[u], first = u ? end[used[u - 1]] : 0;
            table_row(hidden, W, pos, g, first, end[m], grad_table + m * W);
        }
    }
}

mk_status mk_gather_dot_backward_cpu(void *stream, const float *grad, const float *hidden,
                                     const float *table, const int32_t *indices,
                                     const int32_t *counts, int64_t B, int64_t L, int64_t W,
                                     int64_t M, float *grad_hidden, float *grad_table,
                                     const uint8_t *rows, void *work,
                                     size_t work_bytes) {
    if (grad_hidden) {
#pragma omp parallel for schedule(static) num_threads(mk_threads_for_items(B, B * L * W))
        for (int64_t b = 0; b < B; b++)
            mk_gather_dot_grad_hidden_row(grad + b * L, table, indices + b * L,
                                          row_count(counts, b, L), W, grad_hidden + b * W);
    }
    if (!grad_table) return MK_OK;
    /* the caller's scratch (the step's, scratch_bytes), else (the public ops) its own */
    const size_t need = mk_gather_dot_work_bytes_cpu(B, L, M);
    void *own = NULL;
    if (!work) {
        if (!(work = own = malloc(need)))
            return mk_fail(MK_ERR_NOMEM, "gather_dot_backward: out of memory for %zu bytes of "
                           "scratch", need);
    } else if (work_bytes < need) {
        return mk_fail(MK_ERR_VALUE, "gather_dot_backward: the scratch given holds %zu bytes; "
                       "%zu are needed", work_bytes, need);
    }
    grad_table_cpu(grad, hidden, indices, counts, B, L, W, M, grad_table, rows, work);
    free(own);
    return MK_OK;
}
