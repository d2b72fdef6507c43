/* The AdamW update of one element and of a run of elements (fp32 or bf16 moments), shared
 * by every CPU update: adamw.c (flat ranges, the fused pair-table update) and pair_sparse.c
 * (the touched-rows-only pair-table update), so they all produce the same bits. */
#ifndef MANAKA_CPU_ADAMW_RUN_H
#define MANAKA_CPU_ADAMW_RUN_H
#include "core/adamw_consts.h"
#include "core/bf16.h"
#include "core/pair_gap.h"

/* ------------------------------------------------------------ the update */

/* One element: p *= decay; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2 (each stored as 0
 * below FLT_MIN: core/pair_gap.h); p -= step_size * m / (sqrt(v) / sqrt(bc2) + eps). */
static inline void adamw_one(const mk_adamw_consts *k, float g, float *p, float *m, float *v) {
    float mi = mk_flush_denormal(k->b1 * *m + k->c1 * g);
    float vi = mk_flush_denormal(k->b2 * *v + k->c2 * g * g);
    *m = mi;
    *v = vi;
    *p = *p * k->decay - k->step_size * mi / (sqrtf(vi) * k->inv_bc2_sqrt + k->eps);
}

/* adamw_one for i < n (single thread). */
static inline void adamw_run(const mk_adamw_consts *k, float *restrict p,
                             const float *restrict g, float *restrict m, float *restrict v,
                             int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) adamw_one(k, g[i], p + i, m + i, v + i);
}

/* adamw_one with bf16 moments, z the element's hash counter (core/hash.h: its noise is
 * mk_hash_mix(z), i.e. mk_rounding_noise of its index; the counters of a run step by
 * MK_HASH_STEP, since the multiplies are most of the bf16 update's arithmetic). */
static inline void adamw_one_bf16(const mk_adamw_consts *k, float g, float *p, uint16_t *m,
                                  uint16_t *v, uint64_t z) {
    float mi = mk_bf16_to_float(*m), vi = mk_bf16_to_float(*v);
    adamw_one(k, g, p, &mi, &vi);
    uint32_t noise = (uint32_t)mk_hash_mix(z);
    *m = mk_float_to_bf16_stochastic(mi, noise);
    *v = mk_float_to_bf16_stochastic(vi, noise >> 16);
}

/* The same with bf16 moments (backend.h, adamw_bf16): element i of the run is element
 * first + i of the tensor, whose rounding noise is mk_rounding_noise(seed, first + i). */
static inline void adamw_run_bf16(const mk_adamw_consts *k, float *restrict p,
                                  const float *restrict g, uint16_t *restrict m,
                                  uint16_t *restrict v, int64_t n, uint64_t seed,
                                  int64_t first) {
    const uint64_t step = MK_HASH_STEP;
    uint64_t z = seed + ((uint64_t)first + 1) * step;
#pragma omp simd linear(z : step)
    for (int64_t i = 0; i < n; i++) {
        adamw_one_bf16(k, g[i], p + i, m + i, v + i, z);
        z += step;
    }
}

/* adamw_run_bf16 for long runs (the dense update: whole groups of rows, flat chunks), the
 * same bits. The bf16 update is bound by its arithmetic (the hash, the roundings, the divide
 * and the square root), not by memory as the fp32 one is, so:
 * - where AVX-512 is there, 512-bit vectors (GCC's default of 256 leaves half of each
 *   vector unit unused); the width cannot change the bits, every operation being
 *   elementwise. Those loops take 32 elements at a time and would run a shorter run's
 *   elements one by one, so the tail (< 32) goes to adamw_run_bf16;
 * - blocks of LONG_BLOCK elements, each asking for the lines LONG_AHEAD elements ahead: the
 *   long loop body keeps too few of the next loads in flight for the hardware to stream
 *   p, m and v at their bandwidth on its own. */
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define MK_WIDE_VECTORS __attribute__((target("prefer-vector-width=512"), noinline))
#else
#define MK_WIDE_VECTORS __attribute__((noinline))
#endif
#define LONG_BLOCK 256
#define LONG_AHEAD 2048

/* n a multiple of 32 */
MK_WIDE_VECTORS static void adamw_run_bf16_wide(const mk_adamw_consts *k, float *restrict p,
                                                const float *restrict g, uint16_t *restrict m,
                                                uint16_t *restrict v, int64_t n, uint64_t seed,
                                                int64_t first) {
    const uint64_t step = MK_HASH_STEP;
    for (int64_t b = 0; b < n; b += LONG_BLOCK) {
        const int64_t len = n - b < LONG_BLOCK ? n - b : LONG_BLOCK;
        if (b + LONG_AHEAD + LONG_BLOCK <= n) {
            for (int64_t x = 0; x < LONG_BLOCK; x += 16) __builtin_prefetch(p + b + LONG_AHEAD + x, 1);
            for (int64_t x = 0; x < LONG_BLOCK; x += 32) {
                __builtin_prefetch(m + b + LONG_AHEAD + x, 1);
                __builtin_prefetch(v + b + LONG_AHEAD + x, 1);
            }
        }
        uint64_t z = seed + ((uint64_t)(first + b) + 1) * step;
        float *restrict pb = p + b;
        const float *restrict gb = g + b;
        uint16_t *restrict mb = m + b, *restrict vb = v + b;
#pragma omp simd linear(z : step)
        for (int64_t i = 0; i < len; i++) {
            adamw_one_bf16(k, gb[i], pb + i, mb + i, vb + i, z);
            z += step;
        }
    }
}

static inline void adamw_run_bf16_long(const mk_adamw_consts *k, float *restrict p,
                                       const float *restrict g, uint16_t *restrict m,
                                       uint16_t *restrict v, int64_t n, uint64_t seed,
                                       int64_t first) {
    const int64_t wide = n & ~(int64_t)31;
    if (wide) adamw_run_bf16_wide(k, p, g, m, v, wide, seed, first);
    if (wide < n) adamw_run_bf16(k, p + wide, g + wide, m + wide, v + wide, n - wide, seed, first + wide);
}

#endif
