/* Device memory for the CUDA backend: allocation, copies and fills, all stream-ordered.
 * The model allocates its parameter, gradient, moment and activation buffers once (an
 * arena), so cudaMalloc's cost and synchronisation are paid at construction only. */
#include "backend_cuda.h"
#include "common.cuh"

mk_status mk_alloc_cuda(void *stream, size_t bytes, void **out) {
    (void)stream;
    *out = NULL;
    MK_CUDA_COUNT_ALLOC();
    cudaError_t err = cudaMalloc(out, bytes ? bytes : 64); /* cudaMalloc aligns to 256 bytes */
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* not sticky: clear it so later calls do not see it */
        *out = NULL;
        return mk_fail(MK_ERR_NOMEM, "cuda backend: cannot allocate %zu bytes of device memory",
                       bytes);
    }
    if (err != cudaSuccess) return mk_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
    return MK_OK;
}

void mk_free_cuda(void *stream, void *ptr) {
    (void)stream;
    if (ptr) cudaFree(ptr); /* an error here has no caller to report to; the next call sees it */
}

static mk_status copy(void *stream, void *dst, const void *src, size_t bytes,
                      cudaMemcpyKind kind) {
    if (!bytes) return MK_OK;
    MK_CUDA_RETURN_IF(cudaMemcpyAsync(dst, src, bytes, kind, MK_STREAM(stream)));
    return MK_OK;
}

/* Through pinned staging memory (staging_ring.cu), so the copy never waits for the stream. */
mk_status mk_to_device_cuda(void *stream, void *dst, const void *src, size_t bytes) {
    return bytes ? mk_cuda_stage_to_device(dst, src, bytes, stream) : MK_OK;
}

/* The caller reads `dst` right after, so this one waits for the copy to land. */
mk_status mk_to_host_cuda(void *stream, void *dst, const void *src, size_t bytes) {
    mk_status status = copy(stream, dst, src, bytes, cudaMemcpyDeviceToHost);
    if (status != MK_OK) return status;
    MK_CUDA_RETURN_IF(cudaStreamSynchronize(MK_STREAM(stream)));
    return MK_OK;
}

mk_status mk_copy_cuda(void *stream, void *dst, const void *src, size_t bytes) {
    return copy(stream, dst, src, bytes, cudaMemcpyDeviceToDevice);
}

__global__ void fill_kernel(float *dst, float value, int64_t n) {
    MK_GRID_STRIDE(i, n)
        dst[i] = value;
}

__global__ void fill_uniform_kernel(float *dst, int64_t n, float bound, uint64_t seed) {
    MK_GRID_STRIDE(i, n)
        dst[i] = bound * (2.0f * mk_uniform01(seed, (uint64_t)i) - 1.0f);
}

mk_status mk_fill_cuda(void *stream, float *dst, float value, int64_t n) {
    mk_status status = MK_OK;
    if (n <= 0) return MK_OK;
    fill_kernel<<<mk_blocks_for(n, 256), 256, 0, MK_STREAM(stream)>>>(dst, value, n);
    MK_CUDA_LAUNCHED("fill_kernel");
done:
    return status;
}

mk_status mk_fill_uniform_cuda(void *stream, float *dst, int64_t n, float bound, uint64_t seed) {
    mk_status status = MK_OK;
    if (n <= 0) return MK_OK;
    fill_uniform_kernel<<<mk_blocks_for(n, 256), 256, 0, MK_STREAM(stream)>>>(dst, n, bound,
                                                                                 seed);
    MK_CUDA_LAUNCHED("fill_uniform_kernel");
done:
    return status;
}

mk_status mk_synchronize_cuda(void *stream) {
    MK_CUDA_RETURN_IF(cudaStreamSynchronize(MK_STREAM(stream)));
    return MK_OK;
}
