/* The relative part of MovePairSums on the GPU (math: core/backend_ops.def; the index:
 * core/move_pair_board.h). Contract as move_pairs.cu: tokens i32 in [-1, V), legal [B, L]
 * with counts [B] or NULL (= L); padded slots are never read or written.
 *
 * Forward: one block per position, a thread per legal slot adds the entries of its board
 * tokens onto logits[b, l] in ascending t (the CPU's order).
 * Backward: a thread per entry r of the relative table sums the pairs (v, c) that map to
 * it, tokens v in increasing order (the CPU's order): for r's token kind and offset, a
 * token square (x, y) pairs with the class square (x - dx, y - dy) when that is on the
 * board. No atomics; every entry is written, 0 where no pair maps. */
#include "backend_cuda.h"
#include "common.cuh"
#include "core/move_pair_board.h"

#define MPR_MAX_THREADS 256

static __global__ void relative_forward_kernel(const float *__restrict__ relative,
                                               const int32_t *__restrict__ tokens,
                                               int64_t token_stride,
                                               const int32_t *__restrict__ legal,
                                               const int32_t *__restrict__ counts, int64_t B,
                                               int64_t T, int64_t L, int64_t C, int64_t W,
                                               int64_t H, int64_t K, float *__restrict__ logits) {
    for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
        const int32_t *tok = tokens + b * token_stride;
        const int64_t n = counts ? counts[b] : L;
        for (int64_t l = threadIdx.x; l < n; l += blockDim.x) {
            const int64_t part = mk_relative_class(legal[b * L + l] % C, C, W, H);
            float acc = logits[b * L + l];
            for (int64_t t = 0; t < T; t++) {
                const int64_t base = mk_relative_token(tok[t], C, W, H, K);
                if (base >= 0) acc += __ldg(relative + base + part);
            }
            logits[b * L + l] = acc;
        }
    }
}

static __global__ void relative_backward_kernel(const float *__restrict__ grad_table, int64_t V,
                                                int64_t C, int64_t W, int64_t H, int64_t K,
                                                float *__restrict__ grad_relative) {
    const int64_t S = W * H, DK = C / S, DX = 2 * W - 1, DY = 2 * H - 1;
    MK_GRID_STRIDE(r, K * DX * DY * DK) {
        const int64_t kc = r % DK, dy = r / DK % DY - (H - 1), dx = r / (DK * DY) % DX - (W - 1);
        const int64_t k = r / (DK * DY * DX);
        float acc = 0.0f;
        for (int64_t x = 0; x < W; x++) {
            if (x - dx < 0 || x - dx >= W) continue;
            for (int64_t y = 0; y < H; y++) {
                if (y - dy < 0 || y - dy >= H) continue;
                const int64_t v = k * S + x * H + y;
                if (v >= V) continue;
                acc += grad_table[v * C + kc * S + (x - dx) * H + (y - dy)];
            }
        }
        grad_relative[r] = acc;
    }
}

extern "C" mk_status mk_move_pair_relative_sums_cuda(void *stream, const float *relative,
                                                     const int32_t *tokens, int64_t token_stride,
                                                     const int32_t *legal, const int32_t *counts,
                                                     int64_t B, int64_t T, int64_t L, int64_t C,
                                                     int64_t W, int64_t H, int64_t K,
                                                     float *logits) {
    mk_status status = MK_OK;
    if (B == 0 || L == 0 || T == 0 || K == 0) return MK_OK;
    relative_forward_kernel<<<(unsigned)(B < 65535LL * 16 ? B : 65535LL * 16),
                              mk_column_threads(L, 32, MPR_MAX_THREADS), 0, MK_STREAM(stream)>>>(
            relative, tokens, token_stride, legal, counts, B, T, L, C, W, H, K, logits);
    MK_CUDA_LAUNCHED("relative_forward_kernel");
done:
    return status;
}

extern "C" mk_status mk_move_pair_relative_backward_cuda(void *stream, const float *grad_table,
                                                         int64_t V, int64_t C, int64_t W,
                                                         int64_t H, int64_t K,
                                                         float *grad_relative) {
    mk_status status = MK_OK;
    const int64_t n = K * (2 * W - 1) * (2 * H - 1) * (W * H > 0 ? C / (W * H) : 0);
    if (n == 0) return MK_OK;
    relative_backward_kernel<<<mk_blocks_for(n, 256), 256, 0, MK_STREAM(stream)>>>(
            grad_table, V, C, W, H, K, grad_relative);
    MK_CUDA_LAUNCHED("relative_backward_kernel");
done:
    return status;
}
