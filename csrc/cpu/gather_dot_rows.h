/* One position's GatherDot and its grad_hidden on the CPU, shared by gather_dot.c and
 * the fused policy head (policy_head.c): one loop for each, so the split and the fused
 * training steps compute the same bits. */
#ifndef MANAKA_CPU_GATHER_DOT_ROWS_H
#define MANAKA_CPU_GATHER_DOT_ROWS_H
#include <stdint.h>
#include <string.h>

/* out[l] = h . table[idx[l]] for l < n (h, table rows of width W). Four moves at a time:
 * one dot's vectorised sum is a chain of dependent adds (latency-bound), four independent
 * chains keep the adder busy. Each dot is still the same simd reduction over w, so the
 * bits are those of one move at a time (tools/cpu_bits.py,
 * tests/conformance/test_policy_head.py). */
static inline void mk_gather_dot_row(const float *h, const float *table, const int32_t *idx,
                                     int64_t n, int64_t W, float *out) {
    int64_t l = 0;
    for (; l + 4 <= n; l += 4) {
        const float *r0 = table + (int64_t)idx[l] * W, *r1 = table + (int64_t)idx[l + 1] * W;
        const float *r2 = table + (int64_t)idx[l + 2] * W, *r3 = table + (int64_t)idx[l + 3] * W;
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
        for (int64_t w = 0; w < W; w++) {
            a0 += h[w] * r0[w];
            a1 += h[w] * r1[w];
            a2 += h[w] * r2[w];
            a3 += h[w] * r3[w];
        }
        out[l] = a0, out[l + 1] = a1, out[l + 2] = a2, out[l + 3] = a3;
    }
    for (; l < n; l++) {
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
    int64_t l = 0;
    for (; l + 4 <= n; l += 4) { /* four moves per pass over gh, added in ascending l */
        const float *r0 = table + (int64_t)idx[l] * W, *r1 = table + (int64_t)idx[l + 1] * W;
        const float *r2 = table + (int64_t)idx[l + 2] * W, *r3 = table + (int64_t)idx[l + 3] * W;
        const float g0 = g[l], g1 = g[l + 1], g2 = g[l + 2], g3 = g[l + 3];
#pragma omp simd
        for (int64_t w = 0; w < W; w++) {
            float acc = gh[w] + g0 * r0[w];
            acc = acc + g1 * r1[w];
            acc = acc + g2 * r2[w];
            gh[w] = acc + g3 * r3[w];
        }
    }
    for (; l < n; l++) {
        const float *row = table + (int64_t)idx[l] * W;
        float gl = g[l];
#pragma omp simd
        for (int64_t w = 0; w < W; w++) gh[w] += gl * row[w];
    }
}
#endif
