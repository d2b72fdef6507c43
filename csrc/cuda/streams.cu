/* Streams and events of the CUDA backend (the batch copy stream and its ordering with the
 * model's stream, staging.c). The copy stream is non-blocking: the model runs on the
 * legacy default stream, with which an ordinary stream would serialise, so a copy could
 * never overlap a step. Events are created without timing, the cheap kind for ordering. */
#include "backend_cuda.h"
#include "common.cuh"

mk_status mk_stream_create_cuda(void **out) {
    cudaStream_t s = NULL;
    *out = NULL;
    MK_CUDA_RETURN_IF(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *out = s;
    return MK_OK;
}

void mk_stream_destroy_cuda(void *stream) {
    if (stream) cudaStreamDestroy(MK_STREAM(stream)); /* its queued work still completes */
}

mk_status mk_event_create_cuda(void **out) {
    cudaEvent_t e = NULL;
    *out = NULL;
    MK_CUDA_RETURN_IF(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *out = e;
    return MK_OK;
}

void mk_event_destroy_cuda(void *event) {
    if (event) cudaEventDestroy((cudaEvent_t)event);
}

mk_status mk_event_record_cuda(void *stream, void *event) {
    MK_CUDA_RETURN_IF(cudaEventRecord((cudaEvent_t)event, MK_STREAM(stream)));
    return MK_OK;
}

mk_status mk_stream_wait_event_cuda(void *stream, void *event) {
    MK_CUDA_RETURN_IF(cudaStreamWaitEvent(MK_STREAM(stream), (cudaEvent_t)event, 0));
    return MK_OK;
}

mk_status mk_event_synchronize_cuda(void *event) {
    MK_CUDA_RETURN_IF(cudaEventSynchronize((cudaEvent_t)event));
    return MK_OK;
}

/* The current device, for cublas_dynamic.c's handle table (plain C, which does not include the runtime's
 * C++ headers); 0 if it cannot be read. */
extern "C" int mk_cublas_current_device(void) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) device = 0;
    return device;
}
