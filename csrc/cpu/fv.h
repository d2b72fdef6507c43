/* Float vectors as GCC/clang vector types: + and * on them are lane-wise IEEE
 * single-precision operations, the same bits as the scalar ones lane by lane, so code
 * written over them gives the same bits whatever the width and needs no dispatch. Write a
 * product and a sum as separate statements where the bits matter: clang contracts a * b + c
 * within one expression into a fused multiply-add by default.
 *
 * Two widths:
 * - mk_f16v, 16 floats (vector_size(64)): one AVX-512 register, or two AVX / four SSE-NEON
 *   ones, which the compiler splits it into;
 * - mk_fv, MK_FV_LANES floats: the target's register width, 16 with AVX-512, else 8.
 * A vector wider than the target's registers is legal C but its cost depends on the loop.
 * On AVX2, GCC 12 kept PowerSums' forward accumulators (an array of mk_f16v) on the stack
 * and moved them in 16-byte pieces: 14x the op's floor; over mk_fv it keeps them in
 * registers. The backward, whose hot loop only reads such an array, measured faster over
 * mk_f16v on the same machine and stays on it.
 *
 * Loads and stores are macros, not functions: a vector wider than the ABI's passed to or
 * returned from a function draws ABI notes from GCC and clang on targets without AVX-512,
 * even inlined. Each type T has T_any, the same at any float's address (unaligned). */
#ifndef MANAKA_CPU_FV_H
#define MANAKA_CPU_FV_H
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#define MK_FV_LANES 16
#else
#define MK_FV_LANES 8
#endif

typedef float mk_f16v __attribute__((vector_size(64)));
typedef float mk_f16v_any __attribute__((vector_size(64), aligned(4), may_alias));
typedef float mk_fv __attribute__((vector_size(MK_FV_LANES * sizeof(float))));
typedef float mk_fv_any
    __attribute__((vector_size(MK_FV_LANES * sizeof(float)), aligned(4), may_alias));

/* The lanes of a T at p; *p = v; the first n lanes at p, the others zero; the first n
 * lanes of v to p. */
#define MK_VEC_LOAD(T, p) ((T)(*(const T##_any *)(p)))
#define MK_VEC_STORE(T, p, v) (*(T##_any *)(p) = (v))
#define MK_VEC_LOAD_PART(T, p, n)                                                              \
    __extension__({                                                                            \
        T v_ = {0};                                                                            \
        memcpy(&v_, (p), (size_t)(n) * sizeof(float));                                         \
        v_;                                                                                    \
    })
#define MK_VEC_STORE_PART(T, p, v, n)                                                          \
    do {                                                                                       \
        const T v_ = (v);                                                                      \
        memcpy((p), &v_, (size_t)(n) * sizeof(float));                                         \
    } while (0)

#define MK_F16V_LOAD(p) MK_VEC_LOAD(mk_f16v, p)
#define MK_F16V_STORE(p, v) MK_VEC_STORE(mk_f16v, p, v)
#define MK_F16V_LOAD_PART(p, n) MK_VEC_LOAD_PART(mk_f16v, p, n)
#define MK_F16V_STORE_PART(p, v, n) MK_VEC_STORE_PART(mk_f16v, p, v, n)
#define MK_FV_LOAD(p) MK_VEC_LOAD(mk_fv, p)
#define MK_FV_STORE(p, v) MK_VEC_STORE(mk_fv, p, v)
#define MK_FV_LOAD_PART(p, n) MK_VEC_LOAD_PART(mk_fv, p, n)
#define MK_FV_STORE_PART(p, v, n) MK_VEC_STORE_PART(mk_fv, p, v, n)
#endif
