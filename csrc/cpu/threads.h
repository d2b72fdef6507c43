/* The thread count every CPU op runs with, and the row range a thread owns.
 * Scatters into a table (the backward passes) give each thread a contiguous range of
 * table rows and let it scan every contribution in order, so the sum for a row is
 * always accumulated in the same order: bitwise deterministic for any thread count,
 * with no atomics and no per-thread copies of the table. */
#ifndef MANAKA_CPU_THREADS_H
#define MANAKA_CPU_THREADS_H
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

int mk_get_num_threads(void);

static inline int mk_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
static inline int mk_team_size(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}
/* Loops with fewer elementary operations than this run on one thread: waking the team
 * costs microseconds, and on a busy machine a parallel region waits for its slowest
 * (descheduled) thread. Used as `if (work >= MK_PARALLEL_MIN)` on a parallel pragma. */
#define MK_PARALLEL_MIN 65536

/* [*begin, *end) is this thread's share of n rows. */
static inline void mk_owned_rows(int64_t n, int64_t *begin, int64_t *end) {
    int64_t t = mk_thread_id(), nt = mk_team_size();
    *begin = n * t / nt;
    *end = n * (t + 1) / nt;
}
#endif
