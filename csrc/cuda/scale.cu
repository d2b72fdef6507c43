/* scale on the GPU (backend_ops.def). */
#include "backend_cuda.h"
#include "common.cuh"

__global__ void scale_kernel(const float *x, float a, int64_t n, float *out) {
    MK_GRID_STRIDE(i, n) out[i] = a * x[i];
}

mk_status mk_scale_cuda(void *stream, const float *x, float a, int64_t n, float *out) {
    mk_status status = MK_OK;
    if (n <= 0) return MK_OK;
    scale_kernel<<<mk_blocks_for(n, 256), 256, 0, MK_STREAM(stream)>>>(x, a, n, out);
    MK_CUDA_LAUNCHED("scale_kernel");
done:
    return status;
}
