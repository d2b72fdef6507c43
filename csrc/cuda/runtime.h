/* The CUDA runtime services the binding needs (device discovery, memory, copies, stream
 * ordering) and the index checks every op runs before its kernels, as plain C functions
 * returning mk_status: the binding never includes a CUDA header and the core never
 * aborts. `stream` arguments are cudaStream_t values; NULL (and 1, cudaStreamLegacy) is
 * the legacy default stream, 2 the per-thread default stream, as in the CUDA Array
 * Interface and DLPack conventions. */
#ifndef MANAKA_CUDA_RUNTIME_H
#define MANAKA_CUDA_RUNTIME_H

#include "core/check.h"
#include "core/manaka.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of devices; fails (with the CUDA error, e.g. no driver) when there are none. */
mk_status mk_cuda_device_count(int *count);
mk_status mk_cuda_current_device(int *device);
mk_status mk_cuda_device_name(int device, char *name, size_t size);
/* Runtime version linked in (e.g. 13000) and the driver's (0 when there is no driver). */
void mk_cuda_versions(int *runtime, int *driver);

/* cudaMalloc / cudaFree on the current device; 0 bytes gives NULL. cudaFree waits for
 * the device, so memory is never released under a kernel still using it. */
mk_status mk_cuda_malloc(void **ptr, size_t bytes);
mk_status mk_cuda_free(void *ptr);
/* Stream-ordered allocation for temporaries that only `stream`'s work uses. */
mk_status mk_cuda_malloc_async(void **ptr, size_t bytes, void *stream);
mk_status mk_cuda_free_async(void *ptr, void *stream);
/* Synchronous copies, ordered after the work already queued on the legacy stream. */
mk_status mk_cuda_copy_to_device(void *dst, const void *src, size_t bytes);
mk_status mk_cuda_copy_to_host(void *dst, const void *src, size_t bytes);
mk_status mk_cuda_copy_device(void *dst, const void *src, size_t bytes, void *stream);
mk_status mk_cuda_synchronize(void);
/* Kernel launches (and cuBLAS calls) manaka has made so far in this process. */
unsigned long long mk_cuda_launch_count(void);
/* Device memory allocations (cudaMalloc and workspace pool) manaka has made so far. */
unsigned long long mk_cuda_alloc_count(void);
/* Free and total device memory of the current device, in bytes. */
mk_status mk_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);

/* Makes `consumer` wait for the work queued so far on `producer` (an event, no host
 * wait); nothing to do when both are the legacy default stream. */
mk_status mk_cuda_stream_wait(void *producer, void *consumer);

enum { MK_MEM_HOST = 0, MK_MEM_DEVICE = 1, MK_MEM_MANAGED = 2 };
/* What `ptr` points to (MK_MEM_*) and, for device or managed memory, its device. */
mk_status mk_cuda_pointer_info(const void *ptr, int *kind, int *device);

/* core/check.h's mk_find_fault for arrays on the device (csrc/cuda/check.cu): the same
 * first fault, found by kernels on `stream`; waits for the answer (one small copy, more
 * only when something is wrong). `work`: device scratch of MK_BATCH_CHECK_WORK_BYTES for
 * the answer, or NULL to take it from the ops' workspace pool. */
mk_status mk_find_fault_cuda(const mk_check *check, mk_fault *fault, void *work,
                             size_t work_bytes, void *stream);

/* dst[i] = src[i] for an integer array of `itemsize` bytes (1, 2, 8, or 4 unsigned), so
 * an op can take int8/16/64 and uint8/16/32/64 indices like the CPU path; reports the first
 * element outside the int32 range as an MK_FAULT_NARROW (index: flat position, value: the
 * element) instead of wrapping it. Waits for the answer. */
mk_status mk_narrow_to_int32_cuda(const void *src, int itemsize, int is_signed, int64_t n,
                                  int32_t *dst, mk_fault *fault, void *stream);

#ifdef __cplusplus
}
#endif
#endif
