/* The process-wide count of kernel launches (and cuBLAS calls) manaka makes: incremented
 * by MK_CUDA_LAUNCHED (common.cuh) and mk_cublas_sgemm, read by the step benchmark. */
#include "runtime.h"

unsigned long long mk_cuda_launches = 0;

unsigned long long mk_cuda_launch_count(void) {
    return __atomic_load_n(&mk_cuda_launches, __ATOMIC_RELAXED);
}
