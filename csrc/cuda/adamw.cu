/* AdamW on the GPU: one memory-bound pass over (p, g, m, v), 28 bytes moved per parameter,
 * launched once per contiguous group (decayed weights, then biases), not once per tensor.
 * The update is skipped on the device when the step's loss was not finite, so the host
 * never has to read the loss before applying it. */
#include "backend_cuda.h"
#include "common.cuh"

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, int64_t n,
                             mk_adamw_args a, const float *stats) {
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return;
    const float decay = 1.0f - a.lr * a.weight_decay;
    const float step_size = a.lr / a.bias_correction1;
    const float inv_bc2_sqrt = 1.0f / sqrtf(a.bias_correction2);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = a.beta1 * m[i] + (1.0f - a.beta1) * gi;
        float vi = a.beta2 * v[i] + (1.0f - a.beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_bc2_sqrt + a.eps);
    }
}

mk_status mk_adamw_cuda(void *stream, float *p, const float *g, float *m, float *v, int64_t n,
                        const mk_adamw_args *args, const float *stats) {
    mk_status status = MK_OK;
    if (n <= 0) return MK_OK;
    adamw_kernel<<<mk_blocks_for(n, 256), 256, 0, MK_STREAM(stream)>>>(p, g, m, v, n, *args,
                                                                      stats);
    MK_CUDA_LAUNCHED("adamw_kernel");
done:
    return status;
}
