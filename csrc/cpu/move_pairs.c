/* MovePairSums on the CPU (core/backend_ops.def): a per-move scalar summed over the side to
 * move's tokens, table [V, C] read at (token, move % C). The forward is parallel over
 * positions; the backward gives each thread a contiguous range of tokens (table rows,
 * threads.h), so every table entry sums its contributions in (b, t, l) order: the same
 * bits for any thread count. A position's move classes are computed once (an integer
 * division each) and reused for each of its tokens, in chunks of CHUNK moves. The relative
 * part (core/move_pair_board.h) has the same forward with an index split into a token's part
 * and a class's part; its backward reads the dense grad_table once, a thread owning a range
 * of token kinds (and so of table entries). */
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "core/move_pair_board.h"
#include "threads.h"

enum { CHUNK = 256 };

static inline int64_t row_count(const int32_t *counts, int64_t b, int64_t L) {
    return counts ? counts[b] : L;
}

static inline void classes(const int32_t *moves, int64_t n, int64_t C, int32_t *cls) {
    for (int64_t l = 0; l < n; l++) cls[l] = (int32_t)(moves[l] % C);
}

/* The relative part's board (NULL: the table itself, read at (token, class)). */
typedef struct {
    int64_t W, H, K;
} board;

/* Where token v's entries start (-1: it adds nothing), and move m's offset from there. */
static inline int64_t row_base(int64_t v, int64_t C, const board *g) {
    if (g) return mk_relative_token(v, C, g->W, g->H, g->K);
    return v < 0 ? -1 : v * C;
}
static inline int32_t column(int32_t m, int64_t C, const board *g) {
    const int64_t c = m % C;
    return (int32_t)(g ? mk_relative_class(c, C, g->W, g->H) : c);
}

/* The forward of both: logits[b, l] += table[row_base(token) + column(move)] over the
 * position's tokens, ascending t. A constant `g` at each call, so each is specialised. */
static inline __attribute__((always_inline)) void add_pairs(const float *table, const int32_t *tokens,
                                                            int64_t token_stride, const int32_t *legal,
                                                            const int32_t *counts, int64_t B, int64_t T,
                                                            int64_t L, int64_t C, const board *g,
                                                            float *logits) {
#pragma omp parallel for schedule(static) num_threads(mk_threads_for_items(B, B * L * T))
    for (int64_t b = 0; b < B; b++) {
        const int32_t *tok = tokens + b * token_stride;
        int64_t n = row_count(counts, b, L);
        int32_t col[CHUNK];
        for (int64_t l0 = 0; l0 < n; l0 += CHUNK) {
            int64_t k = n - l0 < CHUNK ? n - l0 : CHUNK;
            float *out = logits + b * L + l0;
            for (int64_t l = 0; l < k; l++) col[l] = column(legal[b * L + l0 + l], C, g);
            for (int64_t t = 0; t < T; t++) {
                int64_t base = row_base(tok[t], C, g);
                if (base < 0) continue; /* an empty slot (and, relative, a piece in hand) */
                const float *row = table + base;
                for (int64_t l = 0; l < k; l++) out[l] += row[col[l]];
            }
        }
    }
}

mk_status mk_move_pair_sums_cpu(void *stream, const float *table, const int32_t *tokens,
                                int64_t token_stride, const int32_t *legal,
                                const int32_t *counts, int64_t B, int64_t T, int64_t L, int64_t C,
                                float *logits) {
    (void)stream;
    add_pairs(table, tokens, token_stride, legal, counts, B, T, L, C, NULL, logits);
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

mk_status mk_move_pair_relative_sums_cpu(void *stream, const float *relative, const int32_t *tokens,
                                         int64_t token_stride, const int32_t *legal,
                                         const int32_t *counts, int64_t B, int64_t T, int64_t L,
                                         int64_t C, int64_t W, int64_t H, int64_t K,
                                         float *logits) {
    (void)stream;
    const board g = {W, H, K};
    add_pairs(relative, tokens, token_stride, legal, counts, B, T, L, C, &g, logits);
    return MK_OK;
}

mk_status mk_move_pair_relative_backward_cpu(void *stream, const float *grad_table, int64_t V,
                                             int64_t C, int64_t W, int64_t H, int64_t K,
                                             float *grad_relative) {
    (void)stream;
    const int64_t S = W * H, per_kind = (2 * W - 1) * (2 * H - 1) * (C / S);
    const int64_t board = K * S < V ? K * S : V;
    int32_t *part = malloc((size_t)(C > 0 ? C : 1) * sizeof(int32_t)); /* each class's part */
    if (!part)
        return mk_fail(MK_ERR_NOMEM, "move_pair_relative_backward: out of memory for %lld classes",
                       (long long)C);
    for (int64_t c = 0; c < C; c++) part[c] = (int32_t)mk_relative_class(c, C, W, H);
#pragma omp parallel num_threads(mk_threads_for_items(K, board * C))
    {
        int64_t k0, k1;
        mk_owned_rows(K, &k0, &k1);
        memset(grad_relative + k0 * per_kind, 0, (size_t)((k1 - k0) * per_kind) * sizeof(float));
        /* v ascending: each entry gets its terms in increasing v (one per token) */
        for (int64_t v = k0 * S; v < k1 * S && v < board; v++) {
            float *row = grad_relative + mk_relative_token(v, C, W, H, K);
            const float *g = grad_table + v * C;
            for (int64_t c = 0; c < C; c++) row[part[c]] += g[c];
        }
    }
    free(part);
    return MK_OK;
}
