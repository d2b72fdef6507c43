/* The per-step constants of an AdamW update, derived once on the host from mk_adamw_args.
 * Shared by the CPU (cpu/adamw.c) and CUDA (cuda/adamw.cu) updates, each backend's one AdamW
 * file, so both start from the same floats; plain C that also compiles as C++. */
#ifndef MANAKA_ADAMW_CONSTS_H
#define MANAKA_ADAMW_CONSTS_H
#include <math.h>

#include "backend.h"

typedef struct {
    float decay, b1, b2, c1, c2, step_size, inv_bc2_sqrt, eps;
} mk_adamw_consts;

static inline mk_adamw_consts mk_adamw_prepare(const mk_adamw_args *a) {
    mk_adamw_consts k;
    k.decay = 1.0f - a->lr * a->weight_decay;
    k.b1 = a->beta1;
    k.b2 = a->beta2;
    k.c1 = 1.0f - a->beta1;
    k.c2 = 1.0f - a->beta2;
    k.step_size = a->lr / a->bias_correction1;
    k.inv_bc2_sqrt = 1.0f / sqrtf(a->bias_correction2);
    k.eps = a->eps;
    return k;
}
#endif
