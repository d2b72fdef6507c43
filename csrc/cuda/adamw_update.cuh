/* The AdamW update of one element on the GPU (fp32 or bf16 moments), shared by every CUDA
 * update: adamw.cu (flat ranges, the fused pair-table update) and pair_sparse.cu (the
 * touched-rows-only pair-table update), so they produce the same bits as each other and as
 * the CPU's cpu/adamw_run.h. */
#ifndef MANAKA_CUDA_ADAMW_UPDATE_CUH
#define MANAKA_CUDA_ADAMW_UPDATE_CUH

#include "core/adamw_consts.h"
#include "core/bf16.h"
#include "core/pair_gap.h"

/* p *= 1 - lr wd; m, v moving averages of g, g^2 (stored as 0 below FLT_MIN, as on the CPU:
 * core/pair_gap.h); p -= lr / bc1 m / (sqrt(v / bc2) + eps).
 * __fmul_rn/__fadd_rn keep nvcc from contracting into FMAs, so the bits match the CPU's
 * (which compiles cpu/adamw.c with contraction off). */
__device__ __forceinline__ void adamw_update(const mk_adamw_consts &k, float g, float *p,
                                             float *m, float *v) {
    float mi = mk_flush_denormal(__fadd_rn(__fmul_rn(k.b1, *m), __fmul_rn(k.c1, g)));
    float vi = mk_flush_denormal(__fadd_rn(__fmul_rn(k.b2, *v), __fmul_rn(__fmul_rn(k.c2, g), g)));
    *m = mi;
    *v = vi;
    float denom = __fadd_rn(__fmul_rn(sqrtf(vi), k.inv_bc2_sqrt), k.eps);
    *p = __fsub_rn(__fmul_rn(*p, k.decay), __fdiv_rn(__fmul_rn(k.step_size, mi), denom));
}

/* The same update with m, v stored as bf16 (backend.h, adamw_bf16): element `i` of the
 * tensor, rounded with mk_rounding_noise(seed, i) exactly as the CPU's bf16 run. */
__device__ __forceinline__ void adamw_update(const mk_adamw_consts &k, float g, float *p,
                                             uint16_t *m, uint16_t *v, uint64_t seed,
                                             int64_t i) {
    float mi = mk_bf16_to_float(*m), vi = mk_bf16_to_float(*v);
    adamw_update(k, g, p, &mi, &vi);
    const uint32_t noise = mk_rounding_noise(seed, (uint64_t)i);
    *m = mk_float_to_bf16_stochastic(mi, noise);
    *v = mk_float_to_bf16_stochastic(vi, noise >> 16);
}

/* fp32 moments take no rounding seed: one signature for the templates below. */
__device__ __forceinline__ void adamw_update(const mk_adamw_consts &k, float g, float *p,
                                             float *m, float *v, uint64_t seed, int64_t i) {
    (void)seed;
    (void)i;
    adamw_update(k, g, p, m, v);
}

#endif
