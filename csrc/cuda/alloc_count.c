/* The process-wide count of device memory allocations manaka makes: incremented by
 * MK_CUDA_COUNT_ALLOC (common.cuh) in mk_alloc_cuda, mk_cuda_malloc and the workspace
 * pool, read by the test that a warmed-up training step allocates nothing. */
#include "runtime.h"

unsigned long long mk_cuda_allocations = 0;

unsigned long long mk_cuda_alloc_count(void) {
    return __atomic_load_n(&mk_cuda_allocations, __ATOMIC_RELAXED);
}
