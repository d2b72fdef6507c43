/* CPU stand-in for the parts of the CUDA runtime that csrc/cuda's kernels and launchers
 * use, for the emulated test build (see README.md here). "Device" memory is host memory,
 * every call is synchronous, and kernels run through mk_emu::launch (emu.h). */
#ifndef MK_EMU_CUDA_RUNTIME_H
#define MK_EMU_CUDA_RUNTIME_H
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorCudartUnloading = 4,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidResourceHandle = 400,
} cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaEventDisableTiming 0x02
enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3
};
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};
struct cudaDeviceProp {
    char name[256];
};
typedef struct CUmemPool_st *cudaMemPool_t;
enum cudaMemAllocationType { cudaMemAllocationTypePinned = 1 };
enum cudaMemLocationType { cudaMemLocationTypeDevice = 1 };
struct cudaMemLocation {
    enum cudaMemLocationType type;
    int id;
};
struct cudaMemPoolProps {
    enum cudaMemAllocationType allocType;
    struct cudaMemLocation location;
};
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
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
    return e == cudaSuccess ? "cudaSuccess" : e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation"
         : e == cudaErrorInvalidResourceHandle ? "cudaErrorInvalidResourceHandle" : "cudaErrorInvalidValue";
}
static inline const char *cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }
cudaError_t cudaGetLastError(void);

/* "Device" memory is host memory from these allocators, tracked so that copies in the
 * wrong direction, frees of foreign pointers and pointer queries behave as on a GPU. */
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t);
cudaError_t cudaFreeAsync(void *p, cudaStream_t);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind kind, cudaStream_t);
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind kind);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *p);
/* Copies from pinned memory may be deferred (mk_emu_defer_pinned, emu.cpp): they land at
 * the next synchronisation or device work, as on a GPU they may land any time before. */
void mk_emu_land_copies(void);
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { mk_emu_land_copies(); return cudaSuccess; }
static inline cudaError_t cudaDeviceSynchronize(void) { mk_emu_land_copies(); return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *count);
static inline cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = (size_t)1 << 34, *total_bytes = (size_t)1 << 35; /* a nominal 32 GiB card */
    return cudaSuccess;
}
/* Pools: MK_EMU_POOLS=0 makes creation fail, to run the default-pool fallback. */
cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *props);
static inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, enum cudaMemPoolAttr, void *) { return cudaSuccess; }
static inline cudaError_t cudaMallocFromPoolAsync(void **p, size_t bytes, cudaMemPool_t, cudaStream_t s) {
    return cudaMallocAsync(p, bytes, s);
}
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
static inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = 0; return cudaSuccess; }
static inline cudaError_t cudaDriverGetVersion(int *v) { *v = 0; return cudaSuccess; }
/* Streams: every call is synchronous here, so a stream is only a distinct handle. */
#define cudaStreamNonBlocking 0x01
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = (cudaStream_t)0x20;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
/* Events belong to the device current when they were made, and a GPU refuses to record
 * one on another device's stream (streams here are on the current device): the one rule
 * of theirs that a synchronous emulator can still break. mk_emu_set_device (emu.cpp)
 * switches the current device. */
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t);
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e);
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { mk_emu_land_copies(); return cudaSuccess; }
/* Pinned host memory is plain host memory here (not tracked as device memory). */
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
#endif
