/* PairSums on the CPU: sums of pair-table rows over every unordered pair of a row's
 * tokens. The pair table is large (44 M floats at the seed shapes) and mostly cold, so
 * the forward pass is bound by gathering one P-float row per pair. */
#include <string.h>

#include "../manaka.h"
#include "threads.h"

mk_status mk_pair_sums_cpu(const float *pair_table, const int32_t *tokens, int64_t rows,
                           int64_t T, int64_t P, float *out) {
#pragma omp parallel for schedule(static) num_threads(mk_get_num_threads())
    for (int64_t r = 0; r < rows; r++) {
        const int32_t *tok = tokens + r * T;
        float *o = out + r * P;
        memset(o, 0, (size_t)P * sizeof(float));
        for (int64_t j = 1; j < T; j++) {
            if (tok[j] < 0) continue;
            for (int64_t i = 0; i < j; i++) {
                if (tok[i] < 0) continue;
                const float *row = pair_table + mk_pair_index(tok[i], tok[j]) * P;
#pragma omp simd
                for (int64_t p = 0; p < P; p++) o[p] += row[p];
            }
        }
    }
    return MK_OK;
}

mk_status mk_pair_sums_backward_cpu(const float *grad, const int32_t *tokens, int64_t rows,
                                    int64_t T, int64_t P, int64_t num_pairs,
                                    float *grad_pair_table) {
#pragma omp parallel num_threads(mk_get_num_threads())
    {
        int64_t q0, q1;
        mk_owned_rows(num_pairs, &q0, &q1);
        memset(grad_pair_table + q0 * P, 0, (size_t)((q1 - q0) * P) * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            const int32_t *tok = tokens + r * T;
            const float *g = grad + r * P;
            for (int64_t j = 1; j < T; j++) {
                if (tok[j] < 0) continue;
                for (int64_t i = 0; i < j; i++) {
                    if (tok[i] < 0) continue;
                    int64_t q = mk_pair_index(tok[i], tok[j]);
                    if (q < q0 || q >= q1) continue;
                    float *gq = grad_pair_table + q * P;
#pragma omp simd
                    for (int64_t p = 0; p < P; p++) gq[p] += g[p];
                }
            }
        }
    }
    return MK_OK;
}
