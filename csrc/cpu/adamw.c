/* AdamW on the CPU: one fused, vectorised pass over (p, g, m, v). It is memory-bound
 * (7 floats moved per parameter), which makes the 44 M-row pair table the largest fixed
 * cost of a step at the seed shapes (the trainer uses the fused pair_adamw.c for it). */
#include "adamw.h"
#include "backend_cpu.h"
#include "threads.h"

mk_status mk_adamw_cpu(void *stream, float *p, const float *g, float *m, float *v, int64_t n,
                       const mk_adamw_args *a, const float *stats) {
    (void)stream;
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return MK_OK; /* the step's loss was not finite */
    const mk_adamw_consts k = mk_adamw_prepare(a);
    /* Dynamic chunks, not one static range per thread: when another process takes a core,
     * the running threads absorb the work of a descheduled one instead of waiting for it.
     * The update is elementwise, so the result does not depend on who does which chunk. */
    const int64_t chunk = 1 << 16, chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(mk_get_num_threads()) \
    if (n >= MK_PARALLEL_MIN)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i0 = c * chunk, len = n - i0 < chunk ? n - i0 : chunk;
        mk_adamw_run(&k, p + i0, g + i0, m + i0, v + i0, len);
    }
    return MK_OK;
}
