/* AdamW on the CPU: one fused, vectorised pass over (p, g, m, v). It is memory-bound
 * (7 floats moved per parameter), which makes the 44 M-row pair table the largest fixed
 * cost of a step at the seed shapes (the trainer uses the fused pair_adamw.c for it);
 * each thread streams one contiguous range. */
#include "adamw.h"
#include "backend_cpu.h"
#include "threads.h"

mk_status mk_adamw_cpu(void *stream, float *p, const float *g, float *m, float *v, int64_t n,
                       const mk_adamw_args *a, const float *stats) {
    (void)stream;
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return MK_OK; /* the step's loss was not finite */
    const mk_adamw_consts k = mk_adamw_prepare(a);
#pragma omp parallel num_threads(mk_get_num_threads()) if (n >= MK_PARALLEL_MIN)
    {
        int64_t i0, i1;
        mk_owned_rows(n, &i0, &i1);
        mk_adamw_run(&k, p + i0, g + i0, m + i0, v + i0, i1 - i0);
    }
    return MK_OK;
}
