/* The OpenMP thread count: the one setting shared by every CPU op. */
#include "core/manaka.h"
#include "threads.h"
#include "backend_cpu.h"

static int num_threads = 0; /* 0: OpenMP's default */

/* GEMMs run on this same OpenMP team (OpenBLAS's own pool is pinned to one thread), so
 * this one count governs every CPU op and GEMM. */
void mk_set_num_threads(int n) {
    num_threads = n > 0 ? n : 0;
    mk_gemm_pin_blas_threads();
}

int mk_get_num_threads(void) {
#ifdef _OPENMP
    return num_threads > 0 ? num_threads : omp_get_max_threads();
#else
    return 1;
#endif
}

int mk_threads_for(int64_t work) { return work >= MK_PARALLEL_MIN ? mk_get_num_threads() : 1; }

int mk_threads_for_items(int64_t items, int64_t work) {
    if (items <= 1 || work < MK_PARALLEL_MIN) return 1;
    int n = mk_get_num_threads();
    return items < n ? (int)items : n;
}
