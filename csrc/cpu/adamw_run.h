/* The AdamW update of one element and of a run of elements (fp32 or bf16 moments), shared
 * by every CPU update: adamw.c (flat ranges, the fused pair-table update) and pair_sparse.c
 * (the touched-rows-only pair-table update), so they all produce the same bits. */
#ifndef MANAKA_CPU_ADAMW_RUN_H
#define MANAKA_CPU_ADAMW_RUN_H
#include "core/adamw_consts.h"
#include "core/bf16.h"
#include "core/pair_gap.h"

/* ------------------------------------------------------------ the update */

/* One element: p *= decay; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2 (each stored as 0
 * below FLT_MIN: core/pair_gap.h); p -= step_size * m / (sqrt(v) / sqrt(bc2) + eps). */
static inline void adamw_one(const mk_adamw_consts *k, float g, float *p, float *m, float *v) {
    float mi = mk_flush_denormal(k->b1 * *m + k->c1 * g);
    float vi = mk_flush_denormal(k->b2 * *v + k->c2 * g * g);
    *m = mi;
    *v = vi;
    *p = *p * k->decay - k->step_size * mi / (sqrtf(vi) * k->inv_bc2_sqrt + k->eps);
}

/* adamw_one for i < n (single thread). */
static inline void adamw_run(const mk_adamw_consts *k, float *restrict p,
                             const float *restrict g, float *restrict m, float *restrict v,
                             int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) adamw_one(k, g[i], p + i, m + i, v + i);
}

/* The same with bf16 moments (backend.h, adamw_bf16): element i of the run is element
 * first + i of the tensor, whose rounding noise is mk_rounding_noise(seed, first + i). */
static inline void adamw_run_bf16(const mk_adamw_consts *k, float *restrict p,
                                  const float *restrict g, uint16_t *restrict m,
                                  uint16_t *restrict v, int64_t n, uint64_t seed,
                                  int64_t first) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float mi = mk_bf16_to_float(m[i]), vi = mk_bf16_to_float(v[i]);
        adamw_one(k, g[i], p + i, &mi, &vi);
        uint32_t noise = mk_rounding_noise(seed, (uint64_t)(first + i));
        m[i] = mk_float_to_bf16_stochastic(mi, noise);
        v[i] = mk_float_to_bf16_stochastic(vi, noise >> 16);
    }
}

#endif
