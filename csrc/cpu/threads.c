/* The OpenMP thread count: the one setting shared by every CPU op. */
#include "core/manaka.h"
#include "threads.h"
#include "backend_cpu.h"
#include <pthread.h>

static int num_threads = 0; /* 0: OpenMP's default */

/* A child of fork() has only the thread that forked. libgomp still records the parent's
 * team, and the child's first region of more than one thread waited for those threads
 * forever; so a forked child runs every op on one thread. */
static volatile int forked_child = 0;
static void mark_forked_child(void) { forked_child = 1; }
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void watch_fork(void) { pthread_atfork(NULL, NULL, mark_forked_child); }

/* GEMMs run on this same OpenMP team (OpenBLAS's own pool is pinned to one thread), so
 * this one count governs every CPU op and GEMM. */
mk_status mk_set_num_threads(int64_t n) {
    pthread_once(&atfork_once, watch_fork); /* the module's init sets the default count */
    if (n < 0)
        return mk_fail(MK_ERR_VALUE, "set_num_threads: n must be >= 0 (0 = default), got %lld",
                       (long long)n);
    if (n > MK_MAX_THREADS)
        return mk_fail(MK_ERR_VALUE,
                       "set_num_threads: n must be at most %d (more threads than any machine's "
                       "cores, which the system may not be able to start), got %lld",
                       MK_MAX_THREADS, (long long)n);
    if (forked_child && n > 1)
        return mk_fail(MK_ERR_VALUE,
                       "set_num_threads: this process is a fork() of one that had loaded manaka, "
                       "where OpenMP cannot start threads: it runs on 1 thread (multiprocessing's "
                       "'spawn' or 'forkserver' start method gives a process that can use more), "
                       "got %lld",
                       (long long)n);
    num_threads = (int)n;
    mk_gemm_pin_blas_threads();
    return MK_OK;
}

int mk_get_num_threads(void) {
#ifdef _OPENMP
    if (forked_child) return 1;
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
