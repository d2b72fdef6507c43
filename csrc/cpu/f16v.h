/* Sixteen floats as one GCC/clang vector (vector_size(64)): + and * on it are lane-wise
 * IEEE single-precision operations, the same bits as the scalar ones lane by lane. The
 * compiler maps one to an AVX-512 register, two AVX registers or four SSE/NEON ones,
 * whichever the target has, so code written over it is portable and needs no dispatch.
 * Write a product and a sum as separate statements where the bits matter: clang contracts
 * a * b + c within one expression into a fused multiply-add by default.
 *
 * Loads and stores are macros, not functions: a 64-byte vector passed to or returned from
 * a function draws ABI notes from GCC and clang on targets without AVX-512, even inlined. */
#ifndef MANAKA_CPU_F16V_H
#define MANAKA_CPU_F16V_H
#include <stdint.h>
#include <string.h>

typedef float mk_f16v __attribute__((vector_size(64)));
/* The same, at any float's address (an unaligned load or store). */
typedef float mk_f16v_any __attribute__((vector_size(64), aligned(4), may_alias));

/* The 16 floats at p; *p = v. */
#define MK_F16V_LOAD(p) ((mk_f16v)(*(const mk_f16v_any *)(p)))
#define MK_F16V_STORE(p, v) (*(mk_f16v_any *)(p) = (v))

/* The first n (< 16) floats at p, the other lanes zero; the first n lanes of v to p. */
#define MK_F16V_LOAD_PART(p, n)                                                                \
    __extension__({                                                                            \
        mk_f16v v_ = {0};                                                                      \
        memcpy(&v_, (p), (size_t)(n) * sizeof(float));                                         \
        v_;                                                                                    \
    })
#define MK_F16V_STORE_PART(p, v, n)                                                            \
    do {                                                                                       \
        const mk_f16v v_ = (v);                                                                \
        memcpy((p), &v_, (size_t)(n) * sizeof(float));                                         \
    } while (0)
#endif
