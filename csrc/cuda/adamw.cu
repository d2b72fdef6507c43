/* AdamW on the GPU: one memory-bound pass over (p, g, m, v), 28 bytes moved per parameter,
 * launched once per contiguous group (decayed weights, then biases), not once per tensor.
 * The update is skipped on the device when the step's loss was not finite, so the host
 * never has to read the loss before applying it. */
#include "backend_cuda.h"
#include "adamw.cuh"
#include "common.cuh"

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, int64_t n,
                             mk_adamw_consts k, const float *stats) {
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return;
    MK_GRID_STRIDE(i, n)
        mk_adamw_update(k, g[i], p + i, m + i, v + i);
}

mk_status mk_adamw_cuda(void *stream, float *p, const float *g, float *m, float *v, int64_t n,
                        const mk_adamw_args *args, const float *stats) {
    mk_status status = MK_OK;
    if (n <= 0) return MK_OK;
    adamw_kernel<<<mk_blocks_for(n, 256), 256, 0, MK_STREAM(stream)>>>(
        p, g, m, v, n, mk_adamw_prepare(args), stats);
    MK_CUDA_LAUNCHED("adamw_kernel");
done:
    return status;
}
