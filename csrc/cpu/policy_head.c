/* The fused policy head on the CPU (backend.h, policy_head): per position, the logits,
 * the cross-entropy and dq in one pass while the position's rows are hot in cache.
 * Parallel over positions; each position is computed by the same row functions as the
 * split path (gather_dot_rows.h, xent_row.h), so both steps give the same bits.
 *
 * The logits are computed into the position's dlogits row and overwritten there by the
 * gradient: an L-float scratch row that stays in L1, never a [B, L] logits buffer. */
#include "backend_cpu.h"
#include "gather_dot_rows.h"
#include "threads.h"
#include "xent_row.h"

mk_status mk_policy_head_cpu(void *stream, const float *q, const float *table,
                             const int32_t *legal, const int32_t *counts, const int32_t *target,
                             const float *soft, int64_t B, int64_t L, int64_t W,
                             float grad_scale, float *dlogits, float *dq, float *row_loss,
                             float *row_correct) {
    (void)stream;
#pragma omp parallel for schedule(static) num_threads(mk_threads_for_items(B, B * L * W))
    for (int64_t b = 0; b < B; b++) {
        const int32_t *idx = legal + b * L;
        const int64_t n = counts[b];
        float *d = dlogits + b * L;
        mk_gather_dot_row(q + b * W, table, idx, n, W, d);
        mk_xent_row(d, n, L, target[b], soft ? soft + b * L : NULL, grad_scale, d, row_loss + b,
                    row_correct + b);
        mk_gather_dot_grad_hidden_row(d, table, idx, n, W, dq + b * W);
    }
    return MK_OK;
}
