/* One position's GatherDot and its grad_hidden on the CPU, shared by gather_dot.c and
 * the fused policy head (policy_head.c): one loop for each, so the split and the fused
 * training steps compute the same bits. */
#ifndef MANAKA_CPU_GATHER_DOT_ROWS_H
#define MANAKA_CPU_GATHER_DOT_ROWS_H
#include <stdint.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

/* One dot h . row of width W is summed in this order, written out rather than left to the
 * compiler's vectoriser (it is the order GCC's `omp simd` reduction gave the earlier loop
 * with 256-bit vectors, so the bits are unchanged there; a build for another instruction set
 * now gets the same bits): lane j sums the products at w = j, j + 8, ... below
 * W8 = W - W mod 8 in ascending w; the last W mod 8 products are added to lane 0 in
 * ascending w; then the lanes are added, in order 0..7, to 0. Products and sums are each
 * rounded to float (no contraction: -std=c11, and one operation per statement). */
typedef float mk_dot_v8 __attribute__((vector_size(32), aligned(4)));

/* the order above, from the lanes of one dot */
static inline float mk_dot_finish(const mk_dot_v8 *a, const float *h, const float *row,
                                  int64_t W8, int64_t W) {
    float lane0 = (*a)[0];
    for (int64_t w = W8; w < W; w++) {
        float p = h[w] * row[w];
        lane0 = lane0 + p;
    }
    float s = 0.0f;
    s = s + lane0;
    for (int j = 1; j < 8; j++) s = s + (*a)[j];
    return s;
}

/* mk_dot_finish for eight dots at once, the same operations in the same order: the eight
 * lane vectors transposed (vector j holds lane j of every dot), then the tail and the sum
 * of the lanes run on all eight dots together instead of lane by lane in each. */
static inline void mk_dot_finish8(mk_dot_v8 a[8], const float *h, const float *const r[8],
                                  int64_t W8, int64_t W, float *out) {
#if defined(__AVX__)
    __m256 t0 = _mm256_unpacklo_ps((__m256)a[0], (__m256)a[1]);
    __m256 t1 = _mm256_unpackhi_ps((__m256)a[0], (__m256)a[1]);
    __m256 t2 = _mm256_unpacklo_ps((__m256)a[2], (__m256)a[3]);
    __m256 t3 = _mm256_unpackhi_ps((__m256)a[2], (__m256)a[3]);
    __m256 t4 = _mm256_unpacklo_ps((__m256)a[4], (__m256)a[5]);
    __m256 t5 = _mm256_unpackhi_ps((__m256)a[4], (__m256)a[5]);
    __m256 t6 = _mm256_unpacklo_ps((__m256)a[6], (__m256)a[7]);
    __m256 t7 = _mm256_unpackhi_ps((__m256)a[6], (__m256)a[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    __m256 lane[8] = {_mm256_permute2f128_ps(s0, s4, 0x20), _mm256_permute2f128_ps(s1, s5, 0x20),
                      _mm256_permute2f128_ps(s2, s6, 0x20), _mm256_permute2f128_ps(s3, s7, 0x20),
                      _mm256_permute2f128_ps(s0, s4, 0x31), _mm256_permute2f128_ps(s1, s5, 0x31),
                      _mm256_permute2f128_ps(s2, s6, 0x31), _mm256_permute2f128_ps(s3, s7, 0x31)};
    for (int64_t w = W8; w < W; w++) {
        const __m256 col = _mm256_set_ps(r[7][w], r[6][w], r[5][w], r[4][w], r[3][w], r[2][w],
                                         r[1][w], r[0][w]);
        const __m256 p = _mm256_mul_ps(_mm256_set1_ps(h[w]), col);
        lane[0] = _mm256_add_ps(lane[0], p);
    }
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < 8; j++) sum = _mm256_add_ps(sum, lane[j]);
    _mm256_storeu_ps(out, sum);
#else
    for (int i = 0; i < 8; i++) out[i] = mk_dot_finish(&a[i], h, r[i], W8, W);
#endif
}

/* out[l] = h . table[idx[l]] for l < n (h, table rows of width W), eight moves at a time
 * (eight independent chains of adds keep the adders busy; h is loaded once for eight
 * rows; the tails and lane sums run on the eight together), then one at a time; every dot
 * in the order of mk_dot_finish (tools/cpu_bits.py, tests/conformance/test_policy_head.py). */
static inline void mk_gather_dot_row(const float *h, const float *table, const int32_t *idx,
                                     int64_t n, int64_t W, float *out) {
    const int64_t W8 = W - W % 8;
    int64_t l = 0;
    for (; l + 8 <= n; l += 8) {
        const float *r[8];
        for (int i = 0; i < 8; i++) r[i] = table + (int64_t)idx[l + i] * W;
        mk_dot_v8 a[8];
        for (int i = 0; i < 8; i++) a[i] = (mk_dot_v8){0};
        for (int64_t w = 0; w < W8; w += 8) {
            const mk_dot_v8 hv = *(const mk_dot_v8 *)(h + w);
            for (int i = 0; i < 8; i++) {
                const mk_dot_v8 p = hv * *(const mk_dot_v8 *)(r[i] + w);
                a[i] = a[i] + p;
            }
        }
        mk_dot_finish8(a, h, r, W8, W, out + l);
    }
    for (; l < n; l++) {
        const float *row = table + (int64_t)idx[l] * W;
        mk_dot_v8 a = {0};
        for (int64_t w = 0; w < W8; w += 8) {
            const mk_dot_v8 p = *(const mk_dot_v8 *)(h + w) * *(const mk_dot_v8 *)(row + w);
            a = a + p;
        }
        out[l] = mk_dot_finish(&a, h, row, W8, W);
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
