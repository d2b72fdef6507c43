/* The one counter-based hash of the core: splitmix64's finaliser of (seed, i). Stateless, so
 * any backend computes element i's random bits in any order, in parallel, and every backend
 * gets the same bits. Both parameter initialisation (mk_uniform01, backend.h) and the
 * stochastic rounding of bf16 moments (mk_rounding_noise, bf16.h) draw from it; the NumPy
 * twin in tests/api/test_trainer_bf16.py pins it. Plain C that also compiles as CUDA. */
#ifndef MANAKA_HASH_H
#define MANAKA_HASH_H

#include <stdint.h>

#ifdef __CUDACC__
#define MK_HOST_DEVICE __host__ __device__
#else
#define MK_HOST_DEVICE
#endif

/* The counter of element i is seed + (i + 1) * MK_HASH_STEP: a loop over consecutive i can
 * step it by addition (a vector induction) and call mk_hash_mix, with the same bits as
 * mk_hash64 and no 64-bit multiply per element for the counter. */
#define MK_HASH_STEP 0x9E3779B97F4A7C15ull

MK_HOST_DEVICE static inline uint64_t mk_hash_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

MK_HOST_DEVICE static inline uint64_t mk_hash64(uint64_t seed, uint64_t i) {
    return mk_hash_mix(seed + (i + 1) * MK_HASH_STEP);
}

#endif
