/* The move kinds' label split on the CPU (backend_ops.def move_kind_split): each slot is
 * its own, so any thread count gives the same arrays. */
#include "backend_cpu.h"
#include "threads.h"

mk_status mk_move_kind_split_cpu(void *stream, const int32_t *legal, const int32_t *counts,
                                 int64_t B, int64_t L, int64_t R, int64_t C, int32_t *moves,
                                 int32_t *kind_rows) {
    (void)stream;
#pragma omp parallel for schedule(static) num_threads(mk_threads_for_items(B, B * L))
    for (int64_t b = 0; b < B; b++) {
        const int64_t n = counts ? counts[b] : L;
        for (int64_t l = 0; l < L; l++) {
            const int64_t x = l < n ? legal[b * L + l] : 0;
            moves[b * L + l] = (int32_t)(x % R);
            kind_rows[b * L + l] = (int32_t)(x % C + C * (x / R));
        }
    }
    return MK_OK;
}
