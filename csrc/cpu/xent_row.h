/* One position's masked softmax cross-entropy (backend.h, softmax_xent) on the CPU,
 * shared by loss.c and the fused policy head (policy_head.c): one formula, so the split
 * and the fused training steps compute the same bits. */
#ifndef MANAKA_CPU_XENT_ROW_H
#define MANAKA_CPU_XENT_ROW_H
#include <math.h>
#include <stdint.h>

/* Logits x[0, n) (n >= 1), hard `target` (pi == NULL) or soft targets pi[0, n):
 * *loss, *correct, and d[0, L) when d is not NULL. d may alias x: every read of x comes
 * before the first write of d at the same index (the policy head computes its logits
 * into the gradient row and overwrites them there, so they never need a buffer of
 * their own). */
static inline void mk_xent_row(const float *x, int64_t n, int64_t L, int32_t target,
                               const float *pi, float grad_scale, float *d, float *loss_out,
                               float *correct_out) {
    int64_t best = 0;
    float top = x[0];
    for (int64_t l = 1; l < n; l++)
        if (x[l] > top) top = x[l], best = l; /* first maximum wins ties */
    double sum = 0.0;
    for (int64_t l = 0; l < n; l++) sum += exp((double)(x[l] - top));
    double lse = (double)top + log(sum);
    double loss;
    if (pi) {
        loss = 0.0;
        for (int64_t l = 0; l < n; l++) loss += (double)pi[l] * (lse - (double)x[l]);
    } else {
        loss = lse - (double)x[target];
    }
    *loss_out = (float)loss;
    *correct_out = best == target ? 1.0f : 0.0f;
    if (d) {
        float flse = (float)lse;
        for (int64_t l = 0; l < n; l++) d[l] = grad_scale * expf(x[l] - flse);
        if (pi) {
            for (int64_t l = 0; l < n; l++) d[l] -= grad_scale * pi[l];
        } else {
            d[target] -= grad_scale;
        }
        for (int64_t l = n; l < L; l++) d[l] = 0.0f;
    }
}
#endif
