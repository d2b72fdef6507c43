/* The shared move embeddings' gather and scatter on the CPU (backend_ops.def's
 * move_shared_add, move_shared_backward). Both are per position: each position's logits and
 * each position's rows of dcls, dgrp have one owner, and the scatter adds a position's
 * moves in slot order, so the result is the same for any thread count. */
#include <string.h>

#include "backend_cpu.h"
#include "threads.h"

static inline int64_t moves_of(const int32_t *counts, int64_t b, int64_t L) {
    return counts ? counts[b] : L;
}

mk_status mk_move_shared_add_cpu(void *stream, const float *cls, const float *grp,
                                 const int32_t *legal, const int32_t *counts, int64_t B, int64_t L,
                                 int64_t C, int64_t G, float *logits) {
    (void)stream;
#pragma omp parallel for schedule(static) num_threads(mk_threads_for_items(B, B * L))
    for (int64_t b = 0; b < B; b++) {
        const int32_t *lb = legal + b * L;
        const float *cb = cls + b * C, *gb = grp + b * G;
        float *ob = logits + b * L;
        for (int64_t l = 0; l < moves_of(counts, b, L); l++) {
            const int64_t m = lb[l];
            ob[l] = (ob[l] + cb[m % C]) + gb[m / C];
        }
    }
    return MK_OK;
}

mk_status mk_move_shared_backward_cpu(void *stream, const float *dlogits, const int32_t *legal,
                                      const int32_t *counts, int64_t B, int64_t L, int64_t C,
                                      int64_t G, float *dcls, float *dgrp) {
    (void)stream;
#pragma omp parallel for schedule(static) num_threads(mk_threads_for_items(B, B * (L + C + G)))
    for (int64_t b = 0; b < B; b++) {
        const int32_t *lb = legal + b * L;
        const float *db = dlogits + b * L;
        float *cb = dcls + b * C, *gb = dgrp + b * G;
        memset(cb, 0, (size_t)C * sizeof(float));
        memset(gb, 0, (size_t)G * sizeof(float));
        for (int64_t l = 0; l < moves_of(counts, b, L); l++) {
            const int64_t m = lb[l];
            cb[m % C] += db[l];
            gb[m / C] += db[l];
        }
    }
    return MK_OK;
}
