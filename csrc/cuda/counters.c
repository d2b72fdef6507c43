/* The process-wide counts of kernel launches (and cuBLAS calls) and of device memory
 * allocations manaka makes: incremented by MK_CUDA_COUNT_LAUNCH / MK_CUDA_COUNT_ALLOC
 * (common.cuh) and mk_cublas_sgemm, read by the step benchmark and by the test that a
 * warmed-up training step allocates nothing. */
#include "runtime.h"

unsigned long long mk_cuda_launches = 0;
unsigned long long mk_cuda_allocations = 0;

unsigned long long mk_cuda_launch_count(void) {
    return __atomic_load_n(&mk_cuda_launches, __ATOMIC_RELAXED);
}

unsigned long long mk_cuda_alloc_count(void) {
    return __atomic_load_n(&mk_cuda_allocations, __ATOMIC_RELAXED);
}
