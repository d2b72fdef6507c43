/* One position's GatherDot and its grad_hidden on the CPU, shared by gather_dot.c and
 * the fused policy head (policy_head.c): one loop for each, so the split and the fused
 * training steps compute the same bits. */
#ifndef MANAKA_CPU_GATHER_DOT_ROWS_H
#define MANAKA_CPU_GATHER_DOT_ROWS_H
#include <stdint.h>
#include <string.h>

/* out[l] = h . table[idx[l]] for l < n (h, table rows of width W). Eight moves at a time,
 * then four, then one: one dot's vectorised sum is a chain of dependent adds
 * (latency-bound), eight independent chains keep the adders busy and load h once for
 * eight rows. Each dot is still the same simd reduction over w, so the bits are those of
 * one move at a time (tools/cpu_bits.py, tests/conformance/test_policy_head.py). */
static inline void mk_gather_dot_row(const float *h, const float *table, const int32_t *idx,
                                     int64_t n, int64_t W, float *out) {
    int64_t l = 0;
    for (; l + 8 <= n; l += 8) {
        const float *r0 = table + (int64_t)idx[l] * W, *r1 = table + (int64_t)idx[l + 1] * W;
        const float *r2 = table + (int64_t)idx[l + 2] * W, *r3 = table + (int64_t)idx[l + 3] * W;
        const float *r4 = table + (int64_t)idx[l + 4] * W, *r5 = table + (int64_t)idx[l + 5] * W;
        const float *r6 = table + (int64_t)idx[l + 6] * W, *r7 = table + (int64_t)idx[l + 7] * W;
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, a4 = 0.0f, a5 = 0.0f, a6 = 0.0f, a7 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3, a4, a5, a6, a7)
        for (int64_t w = 0; w < W; w++) {
            a0 += h[w] * r0[w];
            a1 += h[w] * r1[w];
            a2 += h[w] * r2[w];
            a3 += h[w] * r3[w];
            a4 += h[w] * r4[w];
            a5 += h[w] * r5[w];
            a6 += h[w] * r6[w];
            a7 += h[w] * r7[w];
        }
        out[l] = a0, out[l + 1] = a1, out[l + 2] = a2, out[l + 3] = a3;
        out[l + 4] = a4, out[l + 5] = a5, out[l + 6] = a6, out[l + 7] = a7;
    }
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

/* gh[w] = sum_{l < n} g[l] table[idx[l], w], summed in ascending l (overwrites gh). Eight
 * moves per pass over gh, then four, then one: fewer loads and stores of gh, the same
 * additions in the same order. */
static inline void mk_gather_dot_grad_hidden_row(const float *g, const float *table,
                                                 const int32_t *idx, int64_t n, int64_t W,
                                                 float *gh) {
    memset(gh, 0, (size_t)W * sizeof(float));
    int64_t l = 0;
    for (; l + 8 <= n; l += 8) { /* eight moves per pass over gh, added in ascending l */
        const float *r0 = table + (int64_t)idx[l] * W, *r1 = table + (int64_t)idx[l + 1] * W;
        const float *r2 = table + (int64_t)idx[l + 2] * W, *r3 = table + (int64_t)idx[l + 3] * W;
        const float *r4 = table + (int64_t)idx[l + 4] * W, *r5 = table + (int64_t)idx[l + 5] * W;
        const float *r6 = table + (int64_t)idx[l + 6] * W, *r7 = table + (int64_t)idx[l + 7] * W;
        const float g0 = g[l], g1 = g[l + 1], g2 = g[l + 2], g3 = g[l + 3];
        const float g4 = g[l + 4], g5 = g[l + 5], g6 = g[l + 6], g7 = g[l + 7];
#pragma omp simd
        for (int64_t w = 0; w < W; w++) {
            float acc = gh[w] + g0 * r0[w];
            acc = acc + g1 * r1[w];
            acc = acc + g2 * r2[w];
            acc = acc + g3 * r3[w];
            acc = acc + g4 * r4[w];
            acc = acc + g5 * r5[w];
            acc = acc + g6 * r6[w];
            gh[w] = acc + g7 * r7[w];
        }
    }
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
