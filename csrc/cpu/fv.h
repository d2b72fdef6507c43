/* MK_FV_LANES floats as one GCC/clang vector, MK_FV_LANES the target's register width: 16
 * with AVX-512, else 8 (one AVX register; two SSE or NEON ones). Lane-wise + and * are the
 * scalar IEEE operations lane by lane, as with f16v.h's 16 floats, so the two give the same
 * bits; the notes there on fused multiply-adds and on macros hold here too.
 *
 * Why both: a vector wider than the target's registers is legal C but its cost depends on
 * the loop. On AVX2, GCC 12 kept PowerSums' forward accumulators (an array of 16-float
 * vectors) on the stack and moved them in 16-byte pieces: 14x the op's floor. Over this
 * width it keeps them in registers. The backward, whose hot loop only reads such an array,
 * measured faster over 16-float vectors on the same machine and stays on them. */
#ifndef MANAKA_CPU_FV_H
#define MANAKA_CPU_FV_H
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#define MK_FV_LANES 16
#else
#define MK_FV_LANES 8
#endif

typedef float mk_fv __attribute__((vector_size(MK_FV_LANES * sizeof(float))));
/* The same, at any float's address (an unaligned load or store). */
typedef float mk_fv_any
    __attribute__((vector_size(MK_FV_LANES * sizeof(float)), aligned(4), may_alias));

/* The MK_FV_LANES floats at p; *p = v. */
#define MK_FV_LOAD(p) ((mk_fv)(*(const mk_fv_any *)(p)))
#define MK_FV_STORE(p, v) (*(mk_fv_any *)(p) = (v))

/* The first n (< MK_FV_LANES) floats at p, the other lanes zero; the first n lanes of v to p. */
#define MK_FV_LOAD_PART(p, n)                                                                  \
    __extension__({                                                                            \
        mk_fv v_ = {0};                                                                        \
        memcpy(&v_, (p), (size_t)(n) * sizeof(float));                                         \
        v_;                                                                                    \
    })
#define MK_FV_STORE_PART(p, v, n)                                                              \
    do {                                                                                       \
        const mk_fv v_ = (v);                                                                  \
        memcpy((p), &v_, (size_t)(n) * sizeof(float));                                         \
    } while (0)
#endif
