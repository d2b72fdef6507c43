/* MovePairSums on the CPU (core/backend_ops.def): a per-move scalar summed over the side to
 * move's tokens, table [V, C] read at (token, move % C). The forward is parallel over
 * positions; the backward gives each thread a contiguous range of tokens (table rows,
 * threads.h), so every table entry sums its contributions in (b, t, l) order: the same
 * bits for any thread count. A position's move classes are computed once (an integer
 * division each) and reused for each of its tokens, in chunks of CHUNK moves. */
#include <string.h>

#include "backend_cpu.h"
#include "threads.h"

enum { CHUNK = 256 };

static inline int64_t row_count(const int32_t *counts, int64_t b, int64_t L) {
    return counts ? counts[b] : L;
}

static inline void classes(const int32_t *moves, int64_t n, int64_t C, int32_t *cls) {
    for (int64_t l = 0; l < n; l++) cls[l] = (int32_t)(moves[l] % C);
}

mk_status mk_move_pair_sums_cpu(void *stream, const float *table, const int32_t *tokens,
                                int64_t token_stride, const int32_t *legal,
                                const int32_t *counts, int64_t B, int64_t T, int64_t L, int64_t C,
                                float *logits) {
    (void)stream;
#pragma omp parallel for schedule(static) num_threads(mk_threads_for_items(B, B * L * T))
    for (int64_t b = 0; b < B; b++) {
        const int32_t *tok = tokens + b * token_stride;
        int64_t n = row_count(counts, b, L);
        int32_t cls[CHUNK];
        for (int64_t l0 = 0; l0 < n; l0 += CHUNK) {
            int64_t k = n - l0 < CHUNK ? n - l0 : CHUNK;
            float *out = logits + b * L + l0;
            classes(legal + b * L + l0, k, C, cls);
            for (int64_t t = 0; t < T; t++) {
                if (tok[t] < 0) continue;
                const float *row = table + (int64_t)tok[t] * C;
                for (int64_t l = 0; l < k; l++) out[l] += row[cls[l]];
            }
        }
    }
    return MK_OK;
}

mk_status mk_move_pair_sums_backward_cpu(void *stream, const float *grad, const int32_t *tokens,
                                         int64_t token_stride, const int32_t *legal,
                                         const int32_t *counts, int64_t B, int64_t T, int64_t L,
                                         int64_t V, int64_t C, float *grad_table, void *work,
                                         size_t work_bytes) { /* no scratch: none needed */
    (void)stream, (void)work, (void)work_bytes;
#pragma omp parallel num_threads(mk_threads_for_items(V, V * C + B * L * T))
    {
        int64_t v0, v1;
        mk_owned_rows(V, &v0, &v1);
        memset(grad_table + v0 * C, 0, (size_t)((v1 - v0) * C) * sizeof(float));
        int32_t cls[CHUNK];
        for (int64_t b = 0; b < B; b++) {
            const int32_t *tok = tokens + b * token_stride;
            int64_t n = row_count(counts, b, L);
            for (int64_t l0 = 0; l0 < n; l0 += CHUNK) {
                int64_t k = n - l0 < CHUNK ? n - l0 : CHUNK;
                const float *g = grad + b * L + l0;
                int have = 0; /* classes of this chunk, computed at its first owned token */
                for (int64_t t = 0; t < T; t++) {
                    int64_t v = tok[t];
                    if (v < v0 || v >= v1) continue; /* also every empty slot (-1) */
                    if (!have) classes(legal + b * L + l0, k, C, cls), have = 1;
                    float *row = grad_table + v * C;
                    for (int64_t l = 0; l < k; l++) row[cls[l]] += g[l];
                }
            }
        }
    }
    return MK_OK;
}
