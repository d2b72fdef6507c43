/* The AdamW update of one parameter on the GPU, shared by adamw.cu and the fused
 * PairSums-backward + AdamW kernel (pair_sums.cu), so both produce the same bits; and its
 * bf16-moment twin (adamw_bf16.cu, pair_sums.cu). */
#ifndef MANAKA_CUDA_ADAMW_CUH
#define MANAKA_CUDA_ADAMW_CUH

#include "core/adamw_consts.h"
#include "core/bf16.h"

/* p *= 1 - lr wd; m, v moving averages of g, g^2; p -= lr / bc1 m / (sqrt(v / bc2) + eps).
 * __fmul_rn/__fadd_rn keep nvcc from contracting into FMAs, so the bits match the CPU's
 * (which compiles adamw.h with contraction off). */
__device__ __forceinline__ void mk_adamw_update(const mk_adamw_consts &k, float g,
                                                float *p, float *m, float *v) {
    float mi = __fadd_rn(__fmul_rn(k.b1, *m), __fmul_rn(k.c1, g));
    float vi = __fadd_rn(__fmul_rn(k.b2, *v), __fmul_rn(__fmul_rn(k.c2, g), g));
    *m = mi;
    *v = vi;
    float denom = __fadd_rn(__fmul_rn(sqrtf(vi), k.inv_bc2_sqrt), k.eps);
    *p = __fsub_rn(__fmul_rn(*p, k.decay), __fdiv_rn(__fmul_rn(k.step_size, mi), denom));
}

/* The same update with m, v stored as bf16 (backend.h, adamw_bf16): element `i` of the
 * tensor, rounded with mk_rounding_noise(seed, i) exactly as the CPU's mk_adamw_run_bf16. */
__device__ __forceinline__ void mk_adamw_update_bf16(const mk_adamw_consts &k, float g, float *p,
                                                     uint16_t *m, uint16_t *v, uint64_t seed,
                                                     int64_t i) {
    float mi = mk_bf16_to_float(*m), vi = mk_bf16_to_float(*v);
    mk_adamw_update(k, g, p, &mi, &vi);
    const uint32_t noise = mk_rounding_noise(seed, (uint64_t)i);
    *m = mk_float_to_bf16_stochastic(mi, noise);
    *v = mk_float_to_bf16_stochastic(vi, noise >> 16);
}

#endif
