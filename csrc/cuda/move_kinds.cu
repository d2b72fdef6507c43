/* The move kinds' label split on the GPU (backend_ops.def move_kind_split): a thread per
 * slot, the CPU's cpu/move_kinds.c exactly (integer arithmetic). */
#include "backend_cuda.h"
#include "common.cuh"

static __global__ void move_kind_split_kernel(const int32_t *__restrict__ legal,
                                              const int32_t *__restrict__ counts, int64_t B,
                                              int64_t L, int64_t R, int64_t C, int32_t *moves,
                                              int32_t *kind_rows) {
    MK_GRID_STRIDE(i, B * L) {
        const int64_t b = i / L, l = i % L;
        const int64_t x = l < (counts ? counts[b] : L) ? legal[i] : 0;
        moves[i] = (int32_t)(x % R);
        kind_rows[i] = (int32_t)(x % C + C * (x / R));
    }
}

extern "C" mk_status mk_move_kind_split_cuda(void *stream, const int32_t *legal,
                                             const int32_t *counts, int64_t B, int64_t L,
                                             int64_t R, int64_t C, int32_t *moves,
                                             int32_t *kind_rows) {
    mk_status status = MK_OK;
    if (B * L == 0) return MK_OK;
    move_kind_split_kernel<<<mk_blocks_for(B * L, 256), 256, 0, MK_STREAM(stream)>>>(
        legal, counts, B, L, R, C, moves, kind_rows);
    MK_CUDA_LAUNCHED("move_kind_split_kernel");
done:
    return status;
}
