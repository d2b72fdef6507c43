/* AdamW on the CPU with bf16 moments (pair_state_dtype="bf16"; backend.h, adamw_bf16): the
 * unfused pair-table update. Moves 4 + 4 + 2 + 2 bytes in and 4 + 2 + 2 out per parameter
 * against fp32's 28; the math is adamw.h's, the rounding bf16.h's. */
#include "adamw.h"
#include "backend_cpu.h"
#include "threads.h"

mk_status mk_adamw_bf16_cpu(void *stream, float *p, const float *g, uint16_t *m, uint16_t *v,
                            int64_t n, const mk_adamw_args *a, const float *stats,
                            uint64_t seed) {
    (void)stream;
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return MK_OK; /* the step's loss was not finite */
    const mk_adamw_consts k = mk_adamw_prepare(a);
    /* Dynamic chunks as in adamw.c; the noise is indexed by element, not by who runs it. */
    const int64_t chunk = 1 << 16, chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(mk_get_num_threads()) \
    if (n >= MK_PARALLEL_MIN)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i0 = c * chunk, len = n - i0 < chunk ? n - i0 : chunk;
        mk_adamw_run_bf16(&k, p + i0, g + i0, m + i0, v + i0, len, seed, i0);
    }
    return MK_OK;
}
