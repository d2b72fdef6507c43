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

/* grad_table, one row at a time from its own entries: a stable radix sort by row lists each
 * row's entries (b, G[b, l]) in ascending (b, l), and the row is summed in registers, a
 * block of columns at a time, and stored once. Each element is 0 + G[b0, l0] h[b0, w] + ...
 * added in that order, one rounding per product and per sum (no contraction: -std=c11), so
 * the bits are those of adding every entry into a zeroed row in place, as a scan over
 * (b, l) does, without the row's read-modify-write per entry. The sort's state is a
 * histogram of at most 2^12 counts, not one per table row: a batch names a few thousand of
 * the recipe's 262,440 moves, and a [M] array would miss the cache on every touch. */
typedef float mk_f8 __attribute__((vector_size(32), aligned(4)));
typedef float mk_f4 __attribute__((vector_size(16), aligned(4)));

typedef struct {
    int32_t row, b; /* table row, position */
    float g;        /* G[b, l] */
} entry;

/* out[c, c + 8 nv) for nv <= 8 vectors of 8 columns, held in registers over the entries */
static inline __attribute__((always_inline)) void table_cols8(const float *hidden, int64_t W,
                                                              const entry *e, int64_t k0,
                                                              int64_t k1, int64_t c,
                                                              const int nv, float *out) {
    mk_f8 a[8];
    for (int i = 0; i < nv; i++) a[i] = (mk_f8){0};
    for (int64_t k = k0; k < k1; k++) {
        const float *h = hidden + (int64_t)e[k].b * W + c;
        const float gk = e[k].g;
        for (int i = 0; i < nv; i++) a[i] = a[i] + gk * *(const mk_f8 *)(h + 8 * i);
    }
    for (int i = 0; i < nv; i++) *(mk_f8 *)(out + c + 8 * i) = a[i];
}

static void table_row(const float *hidden, int64_t W, const entry *e, int64_t k0, int64_t k1,
                      float *out) {
    int64_t c = 0;
    for (; c + 64 <= W; c += 64) table_cols8(hidden, W, e, k0, k1, c, 8, out);
    if (c + 32 <= W) table_cols8(hidden, W, e, k0, k1, c, 4, out), c += 32;
    if (c + 16 <= W) table_cols8(hidden, W, e, k0, k1, c, 2, out), c += 16;
    if (c + 8 <= W) table_cols8(hidden, W, e, k0, k1, c, 1, out), c += 8;
    if (c + 4 <= W) {
        mk_f4 a = {0};
        for (int64_t k = k0; k < k1; k++)
            a = a + e[k].g * *(const mk_f4 *)(hidden + (int64_t)e[k].b * W + c);
        *(mk_f4 *)(out + c) = a;
        c += 4;
    }
    for (; c < W; c++) {
        float a = 0.0f;
        for (int64_t k = k0; k < k1; k++) a = a + e[k].g * hidden[(int64_t)e[k].b * W + c];
        out[c] = a;
    }
}

/* The radix sort's shape for rows [0, M): passes of `digit` bits (at most 12), covering M - 1 */
static void radix_shape(int64_t M, int *passes, int *digit) {
    int bits = 1;
    while (bits < 63 && ((int64_t)1 << bits) < M) bits++;
    *passes = (bits + 11) / 12;
    *digit = (bits + *passes - 1) / *passes;
}

size_t mk_gather_dot_work_bytes_cpu(int64_t B, int64_t L, int64_t M) {
    int passes, digit;
    radix_shape(M, &passes, &digit);
    int64_t slots, a, total; /* SIZE_MAX past 2^56 bytes: the arena then refuses (B, L) */
    if (mk_mul_too_big(B, L, &slots) ||
        mk_mul_too_big(slots, (int64_t)sizeof(entry) * (passes > 1 ? 2 : 1), &a) ||
        mk_add_too_big(a, ((int64_t)1 << digit) * (int64_t)sizeof(int64_t), &total))
        return SIZE_MAX;
    return (size_t)total;
}

/* `work`: the histogram (2^digit int64), then one or two [N] entry buffers (N <= B L). */
static void grad_table_cpu(const float *grad, const float *hidden, const int32_t *indices,
                           const int32_t *counts, int64_t B, int64_t L, int64_t W, int64_t M,
                           float *grad_table, const uint8_t *rows, void *work) {
    int passes, digit;
    radix_shape(M, &passes, &digit);
    const int64_t buckets = (int64_t)1 << digit, mask = buckets - 1;
    int64_t N = 0;
    for (int64_t b = 0; b < B; b++) N += row_count(counts, b, L);
    int64_t *start = work;
    entry *buf[2] = {(entry *)(start + buckets), (entry *)(start + buckets) + N};
    /* pass 0 reads the slots in (b, l) order; later passes the previous pass's output;
     * every pass is stable, so each row's entries stay in ascending (b, l) */
    for (int p = 0; p < passes; p++) {
        const int shift = p * digit;
        entry *out = buf[p & 1];
        const entry *in = buf[(p - 1) & 1];
        memset(start, 0, (size_t)buckets * sizeof(int64_t));
        if (p == 0) {
            for (int64_t b = 0; b < B; b++)
                for (int64_t l = 0, n = row_count(counts, b, L); l < n; l++)
                    start[(indices[b * L + l] >> shift) & mask]++;
        } else {
            for (int64_t k = 0; k < N; k++) start[(in[k].row >> shift) & mask]++;
        }
        for (int64_t d = 0, at = 0; d < buckets; d++) {
            int64_t c = start[d];
            start[d] = at;
            at += c;
        }
        if (p == 0) {
            for (int64_t b = 0; b < B; b++) {
                const int32_t *idx = indices + b * L;
                const float *gb = grad + b * L;
                for (int64_t l = 0, n = row_count(counts, b, L); l < n; l++)
                    out[start[(idx[l] >> shift) & mask]++] = (entry){idx[l], (int32_t)b, gb[l]};
            }
        } else {
            for (int64_t k = 0; k < N; k++) out[start[(in[k].row >> shift) & mask]++] = in[k];
        }
    }
    const entry *e = buf[(passes - 1) & 1];
#pragma omp parallel num_threads(mk_threads_for_items(M, B * L * W))
    {
        int64_t m0, m1, k0, k1;
        mk_owned_rows(M, &m0, &m1);
        if (!rows) { /* one memset (large ones stream past the cache), then the rows with entries */
            memset(grad_table + m0 * W, 0, (size_t)((m1 - m0) * W) * sizeof(float));
        } else { /* the named rows no entry lands in */
            int64_t lo = 0, hi = N; /* the first entry of a row >= m0 */
            while (lo < hi) {
                int64_t mid = lo + (hi - lo) / 2;
                if (e[mid].row < m0) lo = mid + 1; else hi = mid;
            }
            for (int64_t m = m0, k = lo; m < m1; m++) {
                while (k < N && e[k].row < m) k++;
                if (rows[m] && !(k < N && e[k].row == m))
                    memset(grad_table + m * W, 0, (size_t)W * sizeof(float));
            }
        }
#pragma omp barrier
        /* the entries split evenly over the team, each share moved to whole rows */
        mk_owned_rows(N, &k0, &k1);
        while (k0 > 0 && k0 < N && e[k0].row == e[k0 - 1].row) k0++;
        while (k1 > 0 && k1 < N && e[k1].row == e[k1 - 1].row) k1++;
        for (int64_t k = k0; k < k1;) {
            int64_t next = k + 1;
            while (next < k1 && e[next].row == e[k].row) next++;
            table_row(hidden, W, e, k, next, grad_table + (int64_t)e[k].row * W);
            k = next;
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
    if (B > INT32_MAX) /* the sort numbers positions in int32 (a step's batch is far smaller) */
        return mk_fail(MK_ERR_VALUE, "gather_dot_backward: grad_table on the CPU takes at most "
                       "2^31 - 1 positions, got %lld", (long long)B);
    /* the caller's scratch (the step's, scratch_bytes), else (the public ops) its own */
    const size_t need = mk_gather_dot_work_bytes_cpu(B, L, M);
    void *own = NULL;
    if (!work) {
        if (need == SIZE_MAX || !(work = own = malloc(need)))
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
