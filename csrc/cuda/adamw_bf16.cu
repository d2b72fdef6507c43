/* AdamW on the GPU with bf16 moments (pair_state_dtype="bf16"; backend.h, adamw_bf16): the
 * unfused pair-table update, 20 bytes moved per parameter against fp32's 28. Skipped on
 * the device when the step's loss was not finite. */
#include "backend_cuda.h"
#include "adamw.cuh"
#include "common.cuh"

__global__ void adamw_bf16_kernel(float *p, const float *g, uint16_t *m, uint16_t *v, int64_t n,
                                  mk_adamw_consts k, const float *stats, uint64_t seed) {
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return;
    MK_GRID_STRIDE(i, n)
        mk_adamw_update_bf16(k, g[i], p + i, m + i, v + i, seed, i);
}

mk_status mk_adamw_bf16_cuda(void *stream, float *p, const float *g, uint16_t *m, uint16_t *v,
                             int64_t n, const mk_adamw_args *args, const float *stats,
                             uint64_t seed) {
    mk_status status = MK_OK;
    if (n <= 0) return MK_OK;
    adamw_bf16_kernel<<<mk_blocks_for(n, 256), 256, 0, MK_STREAM(stream)>>>(
        p, g, m, v, n, mk_adamw_prepare(args), stats, seed);
    MK_CUDA_LAUNCHED("adamw_bf16_kernel");
done:
    return status;
}
