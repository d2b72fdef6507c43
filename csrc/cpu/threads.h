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
 * costs microseconds (more with passive waiting, manaka/_omp_wait.py), and on a busy
 * machine a parallel region waits for its slowest (descheduled) thread. */
#define MK_PARALLEL_MIN 65536

/* The team for a loop of `work` elementary operations: 1 below MK_PARALLEL_MIN, else
 * mk_get_num_threads(). Used as num_threads(mk_threads_for(work)) on a parallel pragma.
 * Only the team size changes, never what a row computes: callers split work so each
 * output is computed the same way by any team (same bits for any thread count). */
int mk_threads_for(int64_t work);
/* The same for `work` split over `items` independent items (rows, positions, table rows
 * owned by threads): never more threads than items, so a batch of one position runs on
 * the calling thread. */
int mk_threads_for_items(int64_t items, int64_t work);

/* [*begin, *end) is this thread's share of n rows. */
static inline void mk_owned_rows(int64_t n, int64_t *begin, int64_t *end) {
    int64_t t = mk_thread_id(), nt = mk_team_size();
    *begin = n * t / nt;
    *end = n * (t + 1) / nt;
}
#endif
