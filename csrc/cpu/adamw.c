/* AdamW on the CPU: one fused, vectorised pass over (p, g, m, v). It is memory-bound
 * (7 floats moved per parameter), which makes the 44 M-row pair table the largest fixed
 * cost of a step at the seed shapes; the split across threads is static so each thread
 * streams one contiguous range. */
#include <math.h>

#include "backend_cpu.h"
#include "threads.h"

mk_status mk_adamw_cpu(void *stream, float *p, const float *g, float *m, float *v, int64_t n,
                       const mk_adamw_args *a, const float *stats) {
    (void)stream;
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return MK_OK; /* the step's loss was not finite */
    const float decay = 1.0f - a->lr * a->weight_decay;
    const float b1 = a->beta1, b2 = a->beta2, c1 = 1.0f - a->beta1, c2 = 1.0f - a->beta2;
    const float step_size = a->lr / a->bias_correction1;
    const float inv_bc2_sqrt = 1.0f / sqrtf(a->bias_correction2);
    const float eps = a->eps;
#pragma omp parallel for simd schedule(static) num_threads(mk_get_num_threads()) \
    if (n >= MK_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_bc2_sqrt + eps);
    }
    return MK_OK;
}
