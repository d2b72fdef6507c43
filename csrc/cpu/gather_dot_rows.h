/* One position's GatherDot and its grad_hidden on the CPU, shared by gather_dot.c and
 * the fused policy head (policy_head.c): one loop for each, so the split and the fused
 * training steps compute the same bits. */
#ifndef MANAKA_CPU_GATHER_DOT_ROWS_H
#define MANAKA_CPU_GATHER_DOT_ROWS_H
#include <stdint.h>
#include <string.h>

/* out[l] = h . table[idx[l]] for l < n (h, table rows of width W). */
static inline void mk_gather_dot_row(const float *h, const float *table, const int32_t *idx,
                                     int64_t n, int64_t W, float *out) {
    for (int64_t l = 0; l < n; l++) {
        const float *row = table + (int64_t)idx[l] * W;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t w = 0; w < W; w++) acc += h[w] * row[w];
        out[l] = acc;
    }
}

/* gh[w] = sum_{l < n} g[l] table[idx[l], w], summed in ascending l (overwrites gh). */
static inline void mk_gather_dot_grad_hidden_row(const float *g, const float *table,
                                                 const int32_t *idx, int64_t n, int64_t W,
                                                 float *gh) {
    memset(gh, 0, (size_t)W * sizeof(float));
    for (int64_t l = 0; l < n; l++) {
        const float *row = table + (int64_t)idx[l] * W;
        float gl = g[l];
#pragma omp simd
        for (int64_t w = 0; w < W; w++) gh[w] += gl * row[w];
    }
}
#endif
