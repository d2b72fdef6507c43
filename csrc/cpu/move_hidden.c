/* MoveHidden on the CPU (core/backend_ops.def): D units per legal move, each the move
 * class's row plus the relative entries (core/move_pair_board.h) of the side to move's board
 * tokens, then a ReLU and a dot with `out` (one row, or a row per position: the gated
 * readout) added to the move's logit.
 *
 * The forward is parallel over positions, a move at a time. The backward gives each thread a contiguous
 * range of token kinds (rows of grad_relative: a kind's entries are contiguous) and of
 * classes (rows of grad_class), and every thread walks all positions in order, so each
 * row sums its terms in (b, t, l) (relative) or (b, l) (class) order whatever the thread
 * count: the same bits for 1 to N threads. grad_out is one sequential pass. */
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "core/move_pair_board.h"
#include "threads.h"

static inline int64_t row_count(const int32_t *counts, int64_t b, int64_t L) {
    return counts ? counts[b] : L;
}

/* The moves [l0, l0 + n) of one position: their classes and their classes' relative parts. */
static inline void move_parts(const int32_t *moves, int64_t n, int64_t C, int64_t W, int64_t H,
                              int64_t *cls, int64_t *col) {
    for (int64_t l = 0; l < n; l++) {
        cls[l] = moves[l] % C;
        col[l] = mk_relative_class(cls[l], C, W, H);
    }
}

/* One move's units: u = class_row + the rows at base[j] + col over the position's n board
 * tokens in increasing t, then out . ReLU(u) (d ascending). The rows are random lines of
 * the table, so the next token's is prefetched; D a constant where it is 16 or 8 (the
 * units then stay in registers). */
static inline __attribute__((always_inline)) float move_units(const float *relative,
                                                              const float *class_row,
                                                              const float *out,
                                                              const int64_t *base, int64_t n,
                                                              int64_t col, int64_t D,
                                                              float *restrict u) {
    for (int64_t d = 0; d < D; d++) u[d] = class_row[d];
    for (int64_t j = 0; j < n; j++) {
        if (j + 4 < n) __builtin_prefetch(relative + (base[j + 4] + col) * D);
        const float *row = relative + (base[j] + col) * D;
#pragma omp simd
        for (int64_t d = 0; d < D; d++) u[d] += row[d];
    }
    float acc = 0.0f;
    for (int64_t d = 0; d < D; d++) acc += out[d] * (u[d] > 0.0f ? u[d] : 0.0f);
    return acc;
}

mk_status mk_move_hidden_cpu(void *stream, const float *relative, const float *class_rows,
                             const float *out, int64_t out_stride, const int32_t *tokens,
                             int64_t token_stride, const int32_t *legal, const int32_t *counts,
                             int64_t B, int64_t T, int64_t L, int64_t C, int64_t W, int64_t H,
                             int64_t K, int64_t D, float *pre, float *logits) {
    (void)stream;
    int failed = 0;
#pragma omp parallel num_threads(mk_threads_for_items(B, B * L * T * D)) reduction(| : failed)
    {
        /* a position's board tokens' row bases, in increasing t */
        int64_t *base = malloc((size_t)(T > 0 ? T : 1) * sizeof(int64_t));
        if (!base) failed = 1;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < B; b++) {
            if (!base) continue;
            const int32_t *tok = tokens + b * token_stride;
            int64_t nb = 0;
            for (int64_t t = 0; t < T; t++) {
                const int64_t r = mk_relative_token(tok[t], C, W, H, K);
                if (r >= 0) base[nb++] = r; /* not an empty slot or a piece in hand */
            }
            const int64_t n = row_count(counts, b, L);
            const float *o = out + b * out_stride;
            for (int64_t l = 0; l < n; l++) {
                const int64_t c = legal[b * L + l] % C, col = mk_relative_class(c, C, W, H);
                float *u = pre + (b * L + l) * D;
                float add;
                if (D == 16) add = move_units(relative, class_rows + c * 16, o, base, nb, col, 16, u);
                else if (D == 8) add = move_units(relative, class_rows + c * 8, o, base, nb, col, 8, u);
                else add = move_units(relative, class_rows + c * D, o, base, nb, col, D, u);
                logits[b * L + l] += add;
            }
        }
        free(base);
    }
    return failed ? mk_fail(MK_ERR_NOMEM, "move_hidden: out of memory for %lld token slots",
                            (long long)T)
                  : MK_OK;
}

/* g[l, :] = G[l] out[:] where the unit is on, else 0, for a position's n moves. */
static void unit_grads(const float *G, const float *pre, const float *out, int64_t n, int64_t D,
                       float *g) {
    for (int64_t l = 0; l < n; l++)
        for (int64_t d = 0; d < D; d++)
            g[l * D + d] = pre[l * D + d] > 0.0f ? G[l] * out[d] : 0.0f;
}

mk_status mk_move_hidden_backward_cpu(void *stream, const float *grad, const float *pre,
                                      const float *out, int64_t out_stride, const int32_t *tokens,
                                      int64_t token_stride, const int32_t *legal,
                                      const int32_t *counts, int64_t B, int64_t T, int64_t L,
                                      int64_t C, int64_t W, int64_t H, int64_t K, int64_t D,
                                      float *grad_relative, float *grad_class, float *grad_out,
                                      void *work, size_t work_bytes) { /* scratch: malloc'd per thread */
    (void)stream, (void)work, (void)work_bytes;
    const int64_t S = W * H, per_kind = (2 * W - 1) * (2 * H - 1) * (C / S);
    /* out_stride 0: one row summed over b, then l, ascending; D: a row per position, over l */
    memset(grad_out, 0, (size_t)(out_stride ? B * D : D) * sizeof(float));
    for (int64_t b = 0; b < B; b++) {
        float *go = grad_out + (out_stride ? b * D : 0);
        for (int64_t l = 0; l < row_count(counts, b, L); l++) {
            const float G = grad[b * L + l], *u = pre + (b * L + l) * D;
            for (int64_t d = 0; d < D; d++) go[d] += G * (u[d] > 0.0f ? u[d] : 0.0f);
        }
    }
    int failed = 0;
#pragma omp parallel num_threads(mk_threads_for_items(K, B * L * T * D)) reduction(| : failed)
    {
        int64_t k0, k1, c0, c1;
        mk_owned_rows(K, &k0, &k1);
        mk_owned_rows(C, &c0, &c1);
        memset(grad_relative + k0 * per_kind * D, 0, (size_t)((k1 - k0) * per_kind * D) * sizeof(float));
        memset(grad_class + c0 * D, 0, (size_t)((c1 - c0) * D) * sizeof(float));
        /* one position's unit gradients [L, D], classes and relative parts [L] */
        float *g = malloc((size_t)(L * D > 0 ? L * D : 1) * sizeof(float));
        int64_t *cls = malloc((size_t)(L > 0 ? L : 1) * sizeof(int64_t));
        int64_t *col = malloc((size_t)(L > 0 ? L : 1) * sizeof(int64_t));
        if (!g || !cls || !col) failed = 1;
        for (int64_t b = 0; b < B && !failed; b++) {
            const int32_t *tok = tokens + b * token_stride;
            const int64_t n = row_count(counts, b, L);
            move_parts(legal + b * L, n, C, W, H, cls, col);
            int have = 0; /* g of this position, computed at its first owned row */
            for (int64_t l = 0; l < n; l++) {
                if (cls[l] < c0 || cls[l] >= c1) continue;
                if (!have) unit_grads(grad + b * L, pre + b * L * D, out + b * out_stride, n, D, g), have = 1;
                float *row = grad_class + cls[l] * D;
                for (int64_t d = 0; d < D; d++) row[d] += g[l * D + d];
            }
            for (int64_t t = 0; t < T; t++) {
                const int64_t v = tok[t];
                if (v < k0 * S || v >= k1 * S) continue; /* not ours, empty (-1), or in hand */
                if (!have) unit_grads(grad + b * L, pre + b * L * D, out + b * out_stride, n, D, g), have = 1;
                const int64_t base = mk_relative_token(v, C, W, H, K);
                for (int64_t l = 0; l < n; l++) {
                    if (l + 8 < n) __builtin_prefetch(grad_relative + (base + col[l + 8]) * D, 1);
                    float *row = grad_relative + (base + col[l]) * D;
                    const float *gl = g + l * D;
#pragma omp simd
                    for (int64_t d = 0; d < D; d++) row[d] += gl[d];
                }
            }
        }
        free(g);
        free(cls);
        free(col);
    }
    return failed ? mk_fail(MK_ERR_NOMEM,
                            "move_hidden_backward: out of memory for a position's %lld x %lld "
                            "unit gradients", (long long)L, (long long)D)
                  : MK_OK;
}
