/* The shared move embeddings' gather and scatter on the GPU (backend_ops.def's
 * move_shared_add, move_shared_backward): the CPU's cpu/move_shared.c, the same bits.
 * The gather is a thread per legal slot. The scatter is a block per position: its threads
 * clear the position's rows of dcls and dgrp, then one thread adds the position's moves in
 * slot order (the def's order; a position has at most a few hundred moves, and no float
 * atomics are needed). */
#include "backend_cuda.h"
#include "common.cuh"

static __global__ void move_shared_add_kernel(const float *__restrict__ cls,
                                              const float *__restrict__ grp,
                                              const int32_t *__restrict__ legal,
                                              const int32_t *__restrict__ counts, int64_t B,
                                              int64_t L, int64_t C, int64_t G, float *logits) {
    MK_GRID_STRIDE(x, B * L) {
        const int64_t b = x / L, l = x % L;
        if (l >= (counts ? counts[b] : L)) continue;
        const int64_t m = legal[x];
        logits[x] = __fadd_rn(__fadd_rn(logits[x], cls[b * C + m % C]), grp[b * G + m / C]);
    }
}

static __global__ void move_shared_backward_kernel(const float *__restrict__ dlogits,
                                                   const int32_t *__restrict__ legal,
                                                   const int32_t *__restrict__ counts, int64_t B,
                                                   int64_t L, int64_t C, int64_t G, float *dcls,
                                                   float *dgrp) {
    for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
        float *cb = dcls + b * C, *gb = dgrp + b * G;
        for (int64_t i = threadIdx.x; i < C; i += blockDim.x) cb[i] = 0.0f;
        for (int64_t i = threadIdx.x; i < G; i += blockDim.x) gb[i] = 0.0f;
        __syncthreads();
        if (threadIdx.x == 0) {
            const int64_t n = counts ? counts[b] : L;
            for (int64_t l = 0; l < n; l++) {
                const int64_t m = legal[b * L + l];
                const float d = dlogits[b * L + l];
                cb[m % C] = __fadd_rn(cb[m % C], d);
                gb[m / C] = __fadd_rn(gb[m / C], d);
            }
        }
        __syncthreads();
    }
}

extern "C" mk_status mk_move_shared_add_cuda(void *stream, const float *cls, const float *grp,
                                             const int32_t *legal, const int32_t *counts,
                                             int64_t B, int64_t L, int64_t C, int64_t G,
                                             float *logits) {
    mk_status status = MK_OK;
    if (B * L == 0) return MK_OK;
    move_shared_add_kernel<<<mk_blocks_for(B * L, 256), 256, 0, MK_STREAM(stream)>>>(
        cls, grp, legal, counts, B, L, C, G, logits);
    MK_CUDA_LAUNCHED("move_shared_add_kernel");
done:
    return status;
}

extern "C" mk_status mk_move_shared_backward_cuda(void *stream, const float *dlogits,
                                                  const int32_t *legal, const int32_t *counts,
                                                  int64_t B, int64_t L, int64_t C, int64_t G,
                                                  float *dcls, float *dgrp) {
    mk_status status = MK_OK;
    if (B == 0) return MK_OK;
    move_shared_backward_kernel<<<(unsigned)(B < 65535 ? B : 65535), 256, 0, MK_STREAM(stream)>>>(
        dlogits, legal, counts, B, L, C, G, dcls, dgrp);
    MK_CUDA_LAUNCHED("move_shared_backward_kernel");
done:
    return status;
}
