/* CPU stand-in for the parts of the CUDA runtime that csrc/cuda's kernels and launchers
 * use, for the emulated test build (see README.md here). "Device" memory is host memory,
 * every call is synchronous, and kernels run through mk_emu::launch (emu.h). */
#ifndef MK_EMU_CUDA_RUNTIME_H
#define MK_EMU_CUDA_RUNTIME_H
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

typedef enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorInvalidValue = 1 } cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef enum {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3
} cudaMemcpyKind;

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) float4 {
    float x, y, z, w;
};

static inline const char *cudaGetErrorName(cudaError_t e) {
    return e == cudaSuccess ? "cudaSuccess" : e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation" : "cudaErrorInvalidValue";
}
static inline const char *cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }
cudaError_t cudaGetLastError(void);

static inline cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t) {
    *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (*p) memset(*p, 0xA5, bytes); /* garbage, like fresh device memory */
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFreeAsync(void *p, cudaStream_t) {
    free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) {
    memset(p, v, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) {
    memcpy(d, s, n);
    return cudaSuccess;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
#endif
