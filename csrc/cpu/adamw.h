/* The AdamW update of a run of parameters, shared by adamw.c and the fused pair-table path
 * (pair_adamw.c) so both produce the same bits. Floating-point contraction is off under
 * -std=c11, so vector and scalar iterations round identically. */
#ifndef MANAKA_CPU_ADAMW_H
#define MANAKA_CPU_ADAMW_H
#include "../adamw_consts.h"

/* p *= decay; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 * p -= step_size * m / (sqrt(v) / sqrt(bc2) + eps), for i < n (single thread). */
static inline void mk_adamw_run(const mk_adamw_consts *k, float *restrict p,
                                const float *restrict g, float *restrict m, float *restrict v,
                                int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = k->b1 * m[i] + k->c1 * gi;
        float vi = k->b2 * v[i] + k->c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * k->decay - k->step_size * mi / (sqrtf(vi) * k->inv_bc2_sqrt + k->eps);
    }
}
#endif
