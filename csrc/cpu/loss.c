/* The two losses and their reduction into the stats buffer, on the CPU. Rows are
 * independent (parallel over b); the reduction is serial in double so the stats do not
 * depend on the thread count. */
#include <math.h>

#include "backend_cpu.h"
#include "threads.h"
#include "xent_row.h"

mk_status mk_softmax_xent_cpu(void *stream, const float *logits, const int32_t *counts,
                              const int32_t *target, const float *soft, int64_t B, int64_t L,
                              float grad_scale, float *dlogits, float *row_loss,
                              float *row_correct) {
    (void)stream;
#pragma omp parallel for schedule(static) num_threads(mk_threads_for(B * L))
    for (int64_t b = 0; b < B; b++)
        mk_xent_row(logits + b * L, counts[b], L, target[b], soft ? soft + b * L : NULL,
                    grad_scale, dlogits ? dlogits + b * L : NULL, row_loss + b, row_correct + b);
    return MK_OK;
}

mk_status mk_value_bce_cpu(void *stream, const float *z, const float *t, int64_t B,
                           float grad_scale, float *dz, float *row_loss) {
    (void)stream;
    for (int64_t b = 0; b < B; b++) {
        float x = z[b];
        row_loss[b] = fmaxf(x, 0.0f) - t[b] * x + log1pf(expf(-fabsf(x)));
        if (dz) dz[b] = grad_scale * (1.0f / (1.0f + expf(-x)) - t[b]);
    }
    return MK_OK;
}

mk_status mk_loss_stats_cpu(void *stream, const float *row_policy, const float *row_value,
                            const float *row_correct, int64_t B, float value_weight,
                            float *stats) {
    (void)stream;
    double policy = 0.0, value = 0.0, correct = 0.0;
    for (int64_t b = 0; b < B; b++) {
        policy += row_policy[b];
        value += row_value[b];
        correct += row_correct[b];
    }
    policy /= (double)B;
    value /= (double)B;
    double loss = policy + (double)value_weight * value;
    stats[MK_STAT_LOSS] = (float)loss;
    stats[MK_STAT_POLICY_LOSS] = (float)policy;
    stats[MK_STAT_VALUE_LOSS] = (float)value;
    stats[MK_STAT_ACCURACY] = (float)(correct / (double)B);
    stats[MK_STAT_FINITE] = isfinite((float)loss) ? 1.0f : 0.0f;
    return MK_OK;
}
