/* bfloat16 storage for optimizer moments (pair_state_dtype="bf16"), host and device.
 *
 * Why stochastic rounding: with beta2 = 0.999 an update changes v by 0.1 %, below half a
 * bf16 ulp (0.39 %), so round-to-nearest would freeze v. Adding 16 random bits below the
 * kept mantissa before truncating rounds up with probability equal to the discarded
 * fraction: unbiased in expectation. The bits come from a counter hash of (seed, index),
 * so a run is reproducible and identical on every backend. */
#ifndef MANAKA_BF16_H
#define MANAKA_BF16_H

#include <stdint.h>
#include <string.h>

#include "hash.h"

MK_HOST_DEVICE static inline float mk_bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Rounds `f` to bf16, stochastically with the low 16 bits of `noise`. NaN stays NaN (made
 * quiet); values that would round past the largest finite bf16 become infinity, as in IEEE.
 * Infinity needs no case of its own: its mantissa is 0, so the noise's 16 bits cannot carry
 * out of it. One select instead of a branch, so the loops over it vectorise. */
MK_HOST_DEVICE static inline uint16_t mk_float_to_bf16_stochastic(float f, uint32_t noise) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    uint32_t rounded = (bits + (noise & 0xffffu)) >> 16, quiet_nan = (bits >> 16) | 0x40u;
    return (uint16_t)((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

/* Rounds `f` to the nearest bf16 (ties to even): for loading fp32 moments into bf16
 * storage (Trainer.load_state_dict), where one deterministic rounding is the closest. A
 * value already representable in bf16 comes back unchanged, so a bf16 state round-trips
 * through float32 bit for bit. */
MK_HOST_DEVICE static inline uint16_t mk_float_to_bf16_nearest(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7f800000u) == 0x7f800000u)
        return (uint16_t)((bits >> 16) | ((bits & 0x007fffffu) ? 0x0040u : 0u));
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* 32 random bits for element i of step `seed`: the low half rounds exp_avg, the high half
 * exp_avg_sq, so one hash serves both moments with independent bits. */
MK_HOST_DEVICE static inline uint32_t mk_rounding_noise(uint64_t seed, uint64_t i) {
    return (uint32_t)mk_hash64(seed, i);
}

/* The rounding seed of the AdamW step with 1-based number `step`: a different stream of
 * noise every step (the same noise each step would round the same elements up every time:
 * biased), and a pure function of the step count, so a resumed run (step_count restored)
 * and every backend draw the same bits. */
MK_HOST_DEVICE static inline uint64_t mk_bf16_step_seed(int64_t step) {
    return mk_hash64(0x6d6b2d6266313621ull /* "mk-bf16!" */, (uint64_t)step);
}

#endif
