/* PowerSums on the CPU: one sweep over a row's tokens accumulates every order k at once,
 * so the [rows, T, D] gather per order is never formed. */
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "threads.h"

mk_status mk_power_sums_cpu(void *stream, const float *emb, const int32_t *tokens, int64_t rows,
                            int64_t T, int64_t D, int64_t K, float *out) {
    int failed = 0;
#pragma omp parallel num_threads(mk_threads_for_items(rows, rows * T * K * D)) reduction(| : failed)
    {
        float *power = malloc((size_t)D * sizeof(float)); /* emb[v] ** (k + 1), per thread */
        if (!power) failed = 1;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            float *o = out + r * K * D;
            memset(o, 0, (size_t)(K * D) * sizeof(float));
            if (!power) continue;
            for (int64_t t = 0; t < T; t++) {
                int32_t v = tokens[r * T + t];
                if (v < 0) continue;
                const float *e = emb + (int64_t)v * D;
                memcpy(power, e, (size_t)D * sizeof(float));
                for (int64_t k = 0; k < K; k++) {
                    float *ok = o + k * D;
#pragma omp simd
                    for (int64_t d = 0; d < D; d++) {
                        ok[d] += power[d];
                        power[d] *= e[d];
                    }
                }
            }
        }
        free(power);
    }
    return failed ? mk_fail(MK_ERR_NOMEM, "power_sums: out of memory for a %lld-float buffer",
                            (long long)D)
                  : MK_OK;
}

mk_status mk_power_sums_backward_cpu(void *stream, const float *grad, const float *emb,
                                     const int32_t *tokens, int64_t rows, int64_t T, int64_t D,
                                     int64_t K, int64_t V, float *grad_emb, void *work,
                                     size_t work_bytes) { /* no scratch: sums in a stack block */
#pragma omp parallel num_threads(mk_threads_for_items(V, rows * T * K * D))
    {
        int64_t v0, v1;
        mk_owned_rows(V, &v0, &v1);
        memset(grad_emb + v0 * D, 0, (size_t)((v1 - v0) * D) * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            const float *g = grad + r * K * D;
            for (int64_t t = 0; t < T; t++) {
                int64_t v = tokens[r * T + t];
                if (v < v0 || v >= v1) continue; /* also skips the -1 sentinel */
                const float *e = emb + v * D;
                float *ge = grad_emb + v * D;
                /* sum_k (k + 1) g_k e^k by Horner's rule, vectorised over d. The k loop
                 * is outside the d loop (over a stack block of d) because gcc does not
                 * vectorise a simd loop that contains a loop: the inner-k form ran scalar. */
                for (int64_t d0 = 0; d0 < D; d0 += 64) {
                    int64_t n = D - d0 < 64 ? D - d0 : 64;
                    float acc[64];
                    const float *top = g + (K - 1) * D + d0;
#pragma omp simd
                    for (int64_t d = 0; d < n; d++) acc[d] = (float)K * top[d];
                    for (int64_t k = K - 2; k >= 0; k--) {
                        const float *gk = g + k * D + d0, c = (float)(k + 1);
#pragma omp simd
                        for (int64_t d = 0; d < n; d++) acc[d] = acc[d] * e[d0 + d] + c * gk[d];
                    }
#pragma omp simd
                    for (int64_t d = 0; d < n; d++) ge[d0 + d] += acc[d];
                }
            }
        }
    }
    return MK_OK;
}
