/* Sixteen floats as one GCC/clang vector (vector_size(64)): + and * on it are lane-wise
 * IEEE single-precision operations, the same bits as the scalar ones lane by lane. The
 * compiler maps one to an AVX-512 register, two AVX registers or four SSE/NEON ones,
 * whichever the target has, so code written over it is portable and needs no dispatch.
 * Write a product and a sum as separate statements where the bits matter: clang contracts
 * a * b + c within one expression into a fused multiply-add by default. */
#ifndef MANAKA_CPU_F16V_H
#define MANAKA_CPU_F16V_H
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
/* GCC notes that a 64-byte vector argument passes differently with and without AVX-512;
 * these are static inline helpers, never an ABI boundary. */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

typedef float mk_f16v __attribute__((vector_size(64)));

#define MK_F16V_INLINE static inline __attribute__((always_inline))

/* Unaligned loads and stores (memcpy compiles to one vector move). */
MK_F16V_INLINE mk_f16v mk_f16v_load(const float *p) {
    mk_f16v v;
    memcpy(&v, p, sizeof v);
    return v;
}
MK_F16V_INLINE void mk_f16v_store(float *p, mk_f16v v) { memcpy(p, &v, sizeof v); }

/* The first n (< 16) lanes from p, the others zero; and the first n lanes back. */
MK_F16V_INLINE mk_f16v mk_f16v_load_part(const float *p, int64_t n) {
    mk_f16v v = {0};
    memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
}
MK_F16V_INLINE void mk_f16v_store_part(float *p, mk_f16v v, int64_t n) {
    memcpy(p, &v, (size_t)n * sizeof(float));
}
#endif
