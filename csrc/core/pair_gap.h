/* Catching a pair-table row up over the steps it was not touched (pair_update "sparse" and
 * "lazy"): the arithmetic shared by the CPU (cpu/pair_sparse.c) and CUDA (cuda/pair_sparse.cu),
 * so both backends produce the same bits. Plain C that also compiles as CUDA.
 *
 * A row with no gradient at steps s+1 .. u would, under the dense AdamW (trainer.h), have
 *   m_u = b1^k m_s,  v_u = b2^k v_s                                  (k = u - s)
 *   p_u = p_s prod_w d_w - sum_w [prod_{x > w} d_x] a_w m_w / (c'_w sqrt(v_s) + eps)
 * with d_w = 1 - lr_w wd, a_w = lr_w / bc1_w and c'_w = b2^{(w - s) / 2} / sqrt(bc2_w).
 * The trainer keeps, for every step s a row may carry as its stamp, one "gap" entry of five
 * doubles that it advances after every step (mk_gap_advance), so that at any time the entry
 * of s holds, over the steps applied since s:
 *   DECAY  = prod d_w                    (the weight decay of the gap: exact)
 *   M1     = prod b1, R2 = prod sqrt(b2) (the moments' decay: exact)
 *   DRIFT  = sum_w [prod_{x > w} d_x] a_w b1^{w - s}          =: sum_w q_w
 *   DRIFT_C = sum_w q_w / c'_w
 * Everything the schedule, the bias corrections and the weight decay do across the gap is
 * in these sums, step by step. The one approximation ("sparse" only) is where eps sits: the
 * drift sum_w q_w m_s / (c'_w sqrt(v_s) + eps) becomes DRIFT m_s / (c~ sqrt(v_s) + eps)
 * with c~ = DRIFT / DRIFT_C, the q-weighted harmonic mean of c'_w. It is exact when eps
 * is negligible beside c' sqrt(v) (then the drift is DRIFT_C m_s / sqrt(v_s)) and when
 * sqrt(v) is negligible beside eps (DRIFT m_s / eps), and in between its relative error is
 * at most (kappa - 1)^2 / (4 kappa), kappa = max c'_w / min c'_w over the steps that carry
 * the weight (docs/design.md derives it; tests/api/test_trainer_sparse.py checks it against
 * the dense update). "lazy" leaves the drift out (p_u = p_s DECAY).
 *
 * Moments that land below FLT_MIN are stored as 0 (mk_flush_denormal), as in the dense
 * update. */
#ifndef MANAKA_PAIR_GAP_H
#define MANAKA_PAIR_GAP_H

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "hash.h"

/* The fields of a gap entry (doubles), and how many steps of stamps one window of entries
 * covers: a trainer catches every row up (and restarts its window) before a stamp would
 * reach MK_GAP_WINDOW - 1. */
enum { MK_GAP_DECAY, MK_GAP_DRIFT, MK_GAP_DRIFT_C, MK_GAP_M1, MK_GAP_R2, MK_GAP_FIELDS };
#define MK_GAP_WINDOW 8192

/* Arithmetic that nvcc must not contract into FMAs (the CPU compiles with contraction off),
 * so that both backends round every operation the same way (the intrinsics exist in device
 * code only: the host pass of nvcc and the CPU use plain operators). */
#ifdef __CUDA_ARCH__
#define MK_DMUL(a, b) __dmul_rn((a), (b))
#define MK_DADD(a, b) __dadd_rn((a), (b))
#define MK_DDIV(a, b) __ddiv_rn((a), (b))
#define MK_FMUL(a, b) __fmul_rn((a), (b))
#define MK_FADD(a, b) __fadd_rn((a), (b))
#define MK_FSUB(a, b) __fsub_rn((a), (b))
#define MK_FDIV(a, b) __fdiv_rn((a), (b))
#else
#define MK_DMUL(a, b) ((a) * (b))
#define MK_DADD(a, b) ((a) + (b))
#define MK_DDIV(a, b) ((a) / (b))
#define MK_FMUL(a, b) ((a) * (b))
#define MK_FADD(a, b) ((a) + (b))
#define MK_FSUB(a, b) ((a) - (b))
#define MK_FDIV(a, b) ((a) / (b))
#endif

/* Moments below FLT_MIN are stored as 0: a row that stops getting gradients would otherwise
 * decay into denormals, whose arithmetic costs 10-20x on CPUs, and stall there. */
MK_HOST_DEVICE static inline float mk_flush_denormal(float x) {
    return (x < FLT_MIN && x > -FLT_MIN) ? 0.0f : x;
}

/* The entry of a step with no gap yet. */
MK_HOST_DEVICE static inline void mk_gap_reset(double *e) {
    e[MK_GAP_DECAY] = 1.0;
    e[MK_GAP_DRIFT] = 0.0;
    e[MK_GAP_DRIFT_C] = 0.0;
    e[MK_GAP_M1] = 1.0;
    e[MK_GAP_R2] = 1.0;
}

/* One applied step's constants, as the dense update uses them (core/adamw_consts.h, widened
 * from float): decay = 1 - lr wd, step_size = lr / bc1, inv_bc2_sqrt = 1 / sqrt(bc2). */
typedef struct {
    double decay, step_size, inv_bc2_sqrt, beta1, sqrt_beta2;
} mk_gap_step;

/* Advances one entry by a step. */
MK_HOST_DEVICE static inline void mk_gap_advance(double *e, const mk_gap_step *s) {
    double m1 = MK_DMUL(e[MK_GAP_M1], s->beta1), r2 = MK_DMUL(e[MK_GAP_R2], s->sqrt_beta2);
    double q = MK_DMUL(s->step_size, m1), c = MK_DMUL(r2, s->inv_bc2_sqrt);
    e[MK_GAP_M1] = m1;
    e[MK_GAP_R2] = r2;
    e[MK_GAP_DECAY] = MK_DMUL(e[MK_GAP_DECAY], s->decay);
    e[MK_GAP_DRIFT] = MK_DADD(MK_DMUL(e[MK_GAP_DRIFT], s->decay), q);
    /* q / c is infinite when c is 0 (betas[1] = 0): c~ is then 0, and the drift m / eps */
    e[MK_GAP_DRIFT_C] = MK_DMUL(e[MK_GAP_DRIFT_C], s->decay);
    if (q != 0.0) e[MK_GAP_DRIFT_C] = MK_DADD(e[MK_GAP_DRIFT_C], MK_DDIV(q, c));
}

/* A row's catch-up constants, from its stamp's entry (float, as the update runs). */
typedef struct {
    float decay, m_scale, v_scale, drift, drift_c;
} mk_gap_row;

MK_HOST_DEVICE static inline mk_gap_row mk_gap_row_of(const double *e, int with_drift) {
    mk_gap_row r;
    r.decay = (float)e[MK_GAP_DECAY];
    r.m_scale = (float)e[MK_GAP_M1];
    r.v_scale = (float)MK_DMUL(e[MK_GAP_R2], e[MK_GAP_R2]);
    r.drift = with_drift ? (float)e[MK_GAP_DRIFT] : 0.0f;
    r.drift_c = (with_drift && e[MK_GAP_DRIFT] > 0.0 && e[MK_GAP_DRIFT_C] > 0.0)
                    ? (float)MK_DDIV(e[MK_GAP_DRIFT], e[MK_GAP_DRIFT_C])
                    : 0.0f;
    return r;
}

/* One element caught up: p = p DECAY - DRIFT m / (c~ sqrt(v) + eps) (no drift term when
 * DRIFT is 0, as in "lazy"), then m, v decayed and flushed. */
MK_HOST_DEVICE static inline void mk_gap_apply(const mk_gap_row *r, float eps, float *p, float *m,
                                               float *v) {
    float mi = *m, vi = *v, pi = MK_FMUL(*p, r->decay);
    if (r->drift != 0.0f)
        pi = MK_FSUB(pi, MK_FDIV(MK_FMUL(r->drift, mi), MK_FADD(MK_FMUL(sqrtf(vi), r->drift_c), eps)));
    *p = pi;
    *m = mk_flush_denormal(MK_FMUL(mi, r->m_scale));
    *v = mk_flush_denormal(MK_FMUL(vi, r->v_scale));
}

/* The bf16 rounding seed of a catch-up to relative step `now` (a different stream from the
 * step's own update, mk_bf16_step_seed). */
MK_HOST_DEVICE static inline uint64_t mk_gap_seed(uint64_t step_seed) {
    return mk_hash64(step_seed, 0x636174636855ull /* "catchU" */);
}

#endif
