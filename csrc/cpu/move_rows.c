/* The sparse move-table update on the CPU (move_update "sparse" / "lazy"; backend_ops.def's
 * move_rows_catch_up and move_rows_adamw; the catch-up arithmetic is core/pair_gap.h's,
 * shared with CUDA and with the pair table's sparse update).
 *
 * A batch of 512 engine positions names ~10 % of the move table's rows (the labels of its
 * legal moves); the dense update streams all of it and both moments every step. Here the
 * batch's labels are marked in a byte mask (one pass over its legal moves), and the two
 * passes, the catch-up before the forward pass and the AdamW after the backward, visit the
 * marked rows only, in table order.
 *
 * Determinism: every row has one owner (the thread of its chunk) and its result is a pure
 * function of its values, its gap entry and its gradient row, which is bitwise the dense
 * update's element update. */
#include <string.h>

#include "core/manaka.h"

#include "adamw_run.h"
#include "backend_cpu.h"
#include "threads.h"

/* Rows per parallel chunk: the marked rows are scattered, so chunks are handed out
 * dynamically. */
#define ROW_CHUNK 4096
static inline int64_t chunk_end(int64_t k, int64_t rows) {
    return (k + 1) * ROW_CHUNK < rows ? (k + 1) * ROW_CHUNK : rows;
}

static void mark_rows(const int32_t *legal, const int32_t *counts, int64_t B, int64_t L,
                      int64_t rows, uint8_t *mask) {
    memset(mask, 0, (size_t)rows);
    for (int64_t b = 0; b < B; b++) {
        const int32_t *lb = legal + b * L;
        const int64_t n = counts ? counts[b] : L;
        for (int64_t l = 0; l < n; l++) mask[lb[l]] = 1;
    }
}

mk_status mk_move_rows_catch_up_cpu(void *stream, const int32_t *legal, const int32_t *counts,
                                    int64_t B, int64_t L, int64_t rows, int64_t P, float *p,
                                    float *m, float *v, int32_t *stamps, const double *gaps,
                                    int64_t now, int drift, float eps, uint8_t *mask) {
    (void)stream;
    if (legal) mark_rows(legal, counts, B, L, rows, mask);
    const uint8_t *named = legal ? mask : NULL;
    const int32_t stamp = (int32_t)now;
    const int64_t chunks = (rows + ROW_CHUNK - 1) / ROW_CHUNK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(mk_threads_for_items(chunks, rows * P / 8))
    for (int64_t k = 0; k < chunks; k++) {
        for (int64_t q = k * ROW_CHUNK; q < chunk_end(k, rows); q++) {
            if ((named && !named[q]) || stamps[q] == stamp) continue;
            const mk_gap_row r = mk_gap_row_of(gaps + (int64_t)stamps[q] * MK_GAP_FIELDS, drift);
            float *restrict pq = p + q * P, *restrict mq = m + q * P, *restrict vq = v + q * P;
#pragma omp simd
            for (int64_t i = 0; i < P; i++) mk_gap_apply(&r, eps, pq + i, mq + i, vq + i);
            stamps[q] = stamp;
        }
    }
    return MK_OK;
}

mk_status mk_move_rows_adamw_cpu(void *stream, const uint8_t *mask, int64_t rows, int64_t P,
                                 float *p, const float *grad, float *m, float *v,
                                 int32_t *stamps, int64_t now, const mk_adamw_args *args,
                                 const float *stats) {
    (void)stream;
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return MK_OK;
    const mk_adamw_consts k = mk_adamw_prepare(args);
    const int32_t stamp = (int32_t)now;
    const int64_t chunks = (rows + ROW_CHUNK - 1) / ROW_CHUNK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(mk_threads_for_items(chunks, rows * P / 8))
    for (int64_t c = 0; c < chunks; c++) {
        for (int64_t q = c * ROW_CHUNK; q < chunk_end(c, rows); q++) {
            if (!mask[q]) continue;
            const int64_t o = q * P;
            adamw_run(&k, p + o, grad + o, m + o, v + o, P);
            stamps[q] = stamp;
        }
    }
    return MK_OK;
}
