/* Device discovery, memory and stream ordering for the binding; see runtime.h. */
#include <stdio.h>

#include "backend_cuda.h"
#include "runtime.h"
#include "workspace.cuh"

extern "C" mk_status mk_cuda_device_count(int *count) {
    *count = 0;
    MK_CUDA_RETURN_IF(cudaGetDeviceCount(count));
    if (*count == 0) return mk_fail(MK_ERR_RUNTIME, "no CUDA device found");
    return MK_OK;
}

extern "C" mk_status mk_cuda_current_device(int *device) {
    MK_CUDA_RETURN_IF(cudaGetDevice(device));
    return MK_OK;
}

extern "C" mk_status mk_cuda_device_name(int device, char *name, size_t size) {
    cudaDeviceProp prop;
    MK_CUDA_RETURN_IF(cudaGetDeviceProperties(&prop, device));
    snprintf(name, size, "%s", prop.name);
    return MK_OK;
}

extern "C" void mk_cuda_versions(int *runtime, int *driver) {
    *runtime = 0;
    *driver = 0;
    if (cudaRuntimeGetVersion(runtime) != cudaSuccess) *runtime = 0;
    if (cudaDriverGetVersion(driver) != cudaSuccess) *driver = 0;
}

extern "C" mk_status mk_cuda_malloc(void **ptr, size_t bytes) {
    *ptr = NULL;
    return bytes ? mk_alloc_cuda(NULL, bytes, ptr) : MK_OK;
}

extern "C" mk_status mk_cuda_free(void *ptr) {
    if (!ptr) return MK_OK;
    cudaError_t err = cudaFree(ptr);
    /* At process exit the runtime may already be gone; the driver reclaims everything. */
    if (err == cudaErrorCudartUnloading) return MK_OK;
    MK_CUDA_RETURN_IF(err);
    return MK_OK;
}

extern "C" mk_status mk_cuda_malloc_async(void **ptr, size_t bytes, void *stream) {
    return mk_work_alloc(ptr, bytes, MK_STREAM(stream));
}

extern "C" mk_status mk_cuda_free_async(void *ptr, void *stream) {
    return mk_work_free(ptr, MK_OK, MK_STREAM(stream));
}

extern "C" mk_status mk_cuda_copy_to_device(void *dst, const void *src, size_t bytes) {
    if (bytes) MK_CUDA_RETURN_IF(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return MK_OK;
}

extern "C" mk_status mk_cuda_copy_to_host(void *dst, const void *src, size_t bytes) {
    if (bytes) MK_CUDA_RETURN_IF(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    return MK_OK;
}

extern "C" mk_status mk_cuda_copy_device(void *dst, const void *src, size_t bytes,
                                         void *stream) {
    return mk_copy_cuda(stream, dst, src, bytes);
}

extern "C" mk_status mk_cuda_synchronize(void) {
    MK_CUDA_RETURN_IF(cudaDeviceSynchronize());
    return MK_OK;
}

static bool is_legacy(void *stream) { return stream == NULL || stream == (void *)cudaStreamLegacy; }

extern "C" mk_status mk_cuda_stream_wait(void *producer, void *consumer) {
    mk_status status = MK_OK;
    cudaEvent_t event = NULL;
    if (producer == consumer || (is_legacy(producer) && is_legacy(consumer))) return MK_OK;
    MK_CUDA_TRY(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    MK_CUDA_TRY(cudaEventRecord(event, MK_STREAM(producer)));
    MK_CUDA_TRY(cudaStreamWaitEvent(MK_STREAM(consumer), event, 0));
done:
    if (event) {
        cudaError_t err = cudaEventDestroy(event); /* released once the wait completes */
        if (err != cudaSuccess && status == MK_OK)
            status = mk_cuda_error(err, "cudaEventDestroy", __FILE__, __LINE__);
    }
    return status;
}

extern "C" mk_status mk_cuda_pointer_info(const void *ptr, int *kind, int *device) {
    cudaPointerAttributes attr;
    *kind = MK_MEM_HOST;
    *device = -1;
    MK_CUDA_RETURN_IF(cudaPointerGetAttributes(&attr, ptr));
    if (attr.type == cudaMemoryTypeDevice) *kind = MK_MEM_DEVICE;
    else if (attr.type == cudaMemoryTypeManaged) *kind = MK_MEM_MANAGED;
    *device = attr.device;
    return MK_OK;
}

extern "C" mk_status mk_cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
    MK_CUDA_RETURN_IF(cudaMemGetInfo(free_bytes, total_bytes));
    return MK_OK;
}
