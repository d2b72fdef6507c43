/* PowerSums on the CPU: one sweep over a row's tokens accumulates every order k at once,
 * so the [rows, T, D] gather per order is never formed. Both directions work in vectors
 * of 16 columns (fv.h's mk_f16v; the forward sums in the target's width, mk_fv); every
 * output is the same chain of float operations, in the same order, as the plain per-token
 * loop of docs/design.md, so the bits are those of that loop whatever the vector width the
 * target has, and whichever path below runs.
 *
 * The columns go in slabs of up to MK_POWER_NV vectors (64 columns); one row's sums (or,
 * backward, its scaled gradient) for one slab stay in registers over the row's tokens.
 * Splitting the columns changes no sum's order: each column's sums are independent.
 *
 * A large batch (many token occurrences per table row) runs slab by slab over every row,
 * on a packed copy of the table's slab: [V, 64] floats, contiguous, 600 KB at the seed's
 * V = 2344, which stays in L2. Gathering whole rows of the [V, D] table instead (2.4 MB,
 * and 4.8 MB with the backward's gradient table) misses L2 on nearly every token, and an
 * unpacked slab does no better: its rows, D floats apart, fall into a quarter of L2's
 * sets at D = 256. That path also lists each row's tokens once, without the empty slots
 * (and backward, without the tokens another thread owns), so that the slab loops have no
 * unpredictable branch. A small batch (a position at a time) gathers straight from the
 * table, row by row, since packing costs O(V D) per call. */
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "fv.h"
#include "threads.h"

#define MK_INLINE static inline __attribute__((always_inline))

/* Vectors per slab: at K = 4 one row's 4 x 4 sums fill 16 of AVX-512's 32 registers. */
#define MK_POWER_NV 4
/* The forward's accumulators are in vectors of the target's width (fv.h), in passes of
 * MK_POWER_FV vectors over a slab's tokens, so that K x MK_POWER_FV sums stay in registers
 * with room for a token's powers: 4 x 4 of AVX-512's 32 (the whole slab in one pass), 4 x 2
 * of AVX2's 16 (four passes; the slab's rows stay in L1 between them). */
#define FL MK_FV_LANES
#if MK_FV_LANES == 16
#define MK_POWER_FV 4
#else
#define MK_POWER_FV 2
#endif

/* Packing pays when every table row is used at least this often on average ... */
#define MK_POWER_PACK_USES 8
/* ... and one packed slab of the table (V x 64 floats) is at most this large, so that it
 * (and the backward's packed gradient slab) can stay in L2. */
#define MK_POWER_PACK_BYTES ((int64_t)1 << 20)

/* Tokens ahead whose packed rows are prefetched into L1: they come from L2 (600 KB a slab
 * at the seed's shapes; the backward also writes its gradient slab's), and one token's
 * work hides little of that latency. */
#define MK_POWER_TOKENS_AHEAD 4
/* Rows ahead whose slab of out the forward prefetches for writing (its stores otherwise
 * wait on their read-for-ownership misses), and whose slab of G the backward prefetches:
 * a line per token, since a burst of K x 4 prefetches stalls on the fill buffers. A slab
 * of a row is K pieces of 256 bytes, D floats apart, a pattern the hardware prefetchers
 * do not follow. */
#define MK_POWER_ROWS_AHEAD 2

/* K x MK_POWER_NV 16-float vectors for more than 4 orders (K is not bounded: not on the stack);
 * the forward uses them as K x MK_POWER_FV vectors of fv.h, no more floats. */
static mk_f16v *alloc_spill(int64_t K) {
    return aligned_alloc(sizeof(mk_f16v), (size_t)K * MK_POWER_NV * sizeof(mk_f16v));
}

static int use_packed(int64_t rows, int64_t T, int64_t V) {
    return rows * T >= MK_POWER_PACK_USES * V &&
           V * 16 * MK_POWER_NV * (int64_t)sizeof(float) <= MK_POWER_PACK_BYTES;
}

/* The slab at column d of D columns: nv vectors, the last holding `last` <= 16. */
typedef struct {
    int64_t d, nv, last, width;
} mk_slab;

static mk_slab slab_at(int64_t d, int64_t D) {
    mk_slab s = {.d = d, .nv = D - d >= 16 * MK_POWER_NV ? MK_POWER_NV : 1};
    s.width = D - d >= 16 * s.nv ? 16 * s.nv : D - d;
    s.last = s.width - 16 * (s.nv - 1);
    return s;
}

/* Runs body(nv, last) with nv and last constants for the two common slab shapes (a full
 * slab, one full vector), so that their loops unroll; `last` is variable for D mod 16. */
#define MK_SLAB_DISPATCH(s, body)                                                              \
    do {                                                                                       \
        if ((s).nv == MK_POWER_NV) {                                                           \
            body(MK_POWER_NV, 16);                                                             \
        } else if ((s).last == 16) {                                                           \
            body(1, 16);                                                                       \
        } else {                                                                               \
            body(1, (s).last);                                                                 \
        }                                                                                      \
    } while (0)

/* Vector j of a slab of nv vectors at p, whose last vector holds `last` <= 16 columns
 * (both names in scope at the use). */
#define MK_SLAB_LOAD(p, j)                                                                     \
    (last < 16 && (j) == nv - 1 ? MK_F16V_LOAD_PART((p) + 16 * (j), last)                      \
                                : MK_F16V_LOAD((p) + 16 * (j)))
#define MK_SLAB_STORE(p, j, v)                                                                 \
    do {                                                                                       \
        if (last < 16 && (j) == nv - 1) MK_F16V_STORE_PART((p) + 16 * (j), (v), last);         \
        else MK_F16V_STORE((p) + 16 * (j), (v));                                               \
    } while (0)

/* Rows this many ahead are prefetched while packing: the table's slab is read a piece of
 * 64 floats per row, D floats apart, which the hardware prefetchers do not follow. */
#define MK_POWER_PACK_AHEAD 8

/* dst[v * 16 nv + c] = src[v * D + c] for the slab's columns, n rows. */
MK_INLINE void pack_slab(const float *src, int64_t D, int64_t n, int64_t nv, int64_t last,
                         float *dst) {
    for (int64_t v = 0; v < n; v++) {
        if (v + MK_POWER_PACK_AHEAD < n)
            for (int64_t j = 0; j < nv; j++)
                __builtin_prefetch(src + (v + MK_POWER_PACK_AHEAD) * D + 16 * j);
        for (int64_t j = 0; j < nv; j++)
            MK_SLAB_STORE(dst + v * 16 * nv, j, MK_SLAB_LOAD(src + v * D, j));
    }
}
/* The other way, zeroing src behind it (ready for the next slab's sums). */
MK_INLINE void unpack_slab(float *src, int64_t D, int64_t n, int64_t nv, int64_t last, float *dst) {
    for (int64_t v = 0; v < n; v++) {
        if (v + MK_POWER_PACK_AHEAD < n)
            for (int64_t j = 0; j < nv; j++)
                __builtin_prefetch(dst + (v + MK_POWER_PACK_AHEAD) * D + 16 * j, 1);
        for (int64_t j = 0; j < nv; j++) {
            MK_SLAB_STORE(dst + v * D, j, MK_SLAB_LOAD(src + v * 16 * nv, j));
            MK_F16V_STORE(src + v * 16 * nv + 16 * j, (mk_f16v){0});
        }
    }
}

/* The tokens of rows [r0, r1) that lie in [v0, v1), less v0, in order:
 * ids[begin[r - r0] .. begin[r - r0 + 1]) for row r. Branch-free: every id is written,
 * and the count moves on past those in range only. */
static void list_tokens(const int32_t *tokens, int64_t r0, int64_t r1, int64_t T, int64_t v0,
                        int64_t v1, int32_t *ids, int64_t *begin) {
    int64_t n = 0;
    for (int64_t r = r0; r < r1; r++) {
        begin[r - r0] = n;
        for (int64_t t = 0; t < T; t++) {
            const int64_t v = tokens[r * T + t];
            ids[n] = (int32_t)(v - v0); /* n <= this token's index: inside ids */
            n += (v >= v0) & (v < v1);
        }
    }
    begin[r1 - r0] = n;
}

/* ------------------------------------------------------------------------------ forward */

/* o[k * D + c] = sum over the n tokens ids[i] (in order, from +0) of e[ids[i]][c] ^ (k + 1)
 * for nf vectors of FL columns from column c0 (the last holding lastf <= FL), with
 * e[v] = table + v * stride; ids < 0 are skipped when `skip`. Each power is the chain e,
 * e * e, (e * e) * e, ... of the plain loop. `listed` tokens at ids are valid rows (the next
 * rows' too): those ahead are prefetched, and so is o_ahead (unless NULL), a later row's
 * slab of out, a line per token. */
MK_INLINE void power_pass(const float *table, int64_t stride, const int32_t *ids, int64_t n,
                          int64_t listed, int skip, int64_t D, int64_t K, int64_t c0, int64_t nf,
                          int64_t lastf, mk_fv *spill, float *o, float *o_ahead) {
    /* K of 1 to 4 (a constant): a local array, which the compiler keeps in registers (a
     * caller's array it would store back on every token); more orders: `spill` */
    mk_fv local[4 * MK_POWER_FV] = {{0}}; /* (zeroed below too; GCC cannot tell K <= 4 here) */
    mk_fv *const acc = K <= 4 ? local : spill;
    for (int64_t i = 0; i < K * nf; i++) acc[i] = (mk_fv){0};
    for (int64_t i = 0; i < n; i++) {
        if (i + MK_POWER_TOKENS_AHEAD < listed) /* the packed path: rows from L2 into L1 */
            for (int64_t j = 0; j < nf; j++) {
                const int64_t u = ids[i + MK_POWER_TOKENS_AHEAD];
                __builtin_prefetch(table + u * stride + c0 + FL * j);
            }
        if (o_ahead && i < K * nf) /* line i of a later row's slab of out, to be written */
            __builtin_prefetch(o_ahead + i / nf * D + c0 + FL * (i % nf), 1);
        if (skip && ids[i] < 0) continue;
        const float *e = table + (int64_t)ids[i] * stride + c0;
        for (int64_t j = 0; j < nf; j++) {
            const mk_fv x = lastf < FL && j == nf - 1 ? MK_FV_LOAD_PART(e + FL * j, lastf)
                                                      : MK_FV_LOAD(e + FL * j);
            mk_fv p = x;
            for (int64_t k = 0; k < K; k++) {
                acc[k * nf + j] += p;
                if (k + 1 < K) p *= x;
            }
        }
    }
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < nf; j++) {
            float *at = o + k * D + c0 + FL * j;
            if (lastf < FL && j == nf - 1) MK_FV_STORE_PART(at, acc[k * nf + j], lastf);
            else MK_FV_STORE(at, acc[k * nf + j]);
        }
}

/* power_pass over one slab of `width` columns (nv, last: slab_at's), pass by pass. */
MK_INLINE void power_slab_row(const float *table, int64_t stride, const int32_t *ids, int64_t n,
                              int64_t listed, int skip, int64_t D, int64_t K, int64_t nv,
                              int64_t last, mk_f16v *spill, float *o, float *o_ahead) {
    const int64_t width = 16 * (nv - 1) + last;
    for (int64_t c0 = 0; c0 < width; c0 += FL * MK_POWER_FV) {
        const int64_t cw = width - c0 < FL * MK_POWER_FV ? width - c0 : FL * MK_POWER_FV;
        if (cw == FL * MK_POWER_FV) /* a full pass: constants, so that its loops unroll */
            power_pass(table, stride, ids, n, listed, skip, D, K, c0, MK_POWER_FV, FL,
                       (mk_fv *)spill, o, o_ahead);
        else
            power_pass(table, stride, ids, n, listed, skip, D, K, c0, (cw + FL - 1) / FL,
                       cw - FL * ((cw + FL - 1) / FL - 1), (mk_fv *)spill, o, o_ahead);
    }
}

/* Rows [r0, r1), row by row, gathering from emb. */
MK_INLINE void power_rows(const float *emb, const int32_t *tokens, int64_t r0, int64_t r1,
                          int64_t T, int64_t D, int64_t K, mk_f16v *spill, float *out) {
    for (int64_t r = r0; r < r1; r++)
        for (int64_t d = 0; d < D;) {
            const mk_slab s = slab_at(d, D);
#define MK_BODY(nv, last)                                                                      \
    power_slab_row(emb + d, D, tokens + r * T, T, 0, 1, D, K, nv, last, spill, out + r * K * D + d, \
                   NULL)
            MK_SLAB_DISPATCH(s, MK_BODY);
#undef MK_BODY
            d += s.width;
        }
}

/* Rows [r0, r1), slab by slab over the rows, from a packed slab (V x 64 floats) and the
 * rows' listed tokens (ids, begin). */
MK_INLINE void power_rows_packed(const float *emb, const int32_t *ids, const int64_t *begin,
                                 int64_t r0, int64_t r1, int64_t V, int64_t D, int64_t K,
                                 float *packed, mk_f16v *spill, float *out) {
    for (int64_t d = 0; d < D;) {
        const mk_slab s = slab_at(d, D);
#define MK_BODY(nv, last)                                                                      \
    pack_slab(emb + d, D, V, nv, last, packed);                                                \
    for (int64_t r = r0; r < r1; r++) {                                                        \
        power_slab_row(packed, 16 * (nv), ids + begin[r - r0], begin[r - r0 + 1] - begin[r - r0], \
                       begin[r1 - r0] - begin[r - r0], 0, D, K, nv, last, spill,               \
                       out + r * K * D + d,                                                    \
                       r + MK_POWER_ROWS_AHEAD < r1 ? out + (r + MK_POWER_ROWS_AHEAD) * K * D + d : NULL); \
    }
        MK_SLAB_DISPATCH(s, MK_BODY);
#undef MK_BODY
        d += s.width;
    }
}

mk_status mk_power_sums_cpu(void *stream, const float *emb, const int32_t *tokens, int64_t rows,
                            int64_t T, int64_t D, int64_t K, float *out) {
    if (K < 1 || rows < 1 || D < 1) return MK_OK; /* out is empty */
    /* V is not an argument: the table's rows are those the tokens name */
    int64_t V = 0;
    for (int64_t i = 0; i < rows * T; i++) V = tokens[i] >= V ? tokens[i] + 1 : V;
    const int packed = use_packed(rows, T, V);
    int failed = 0;
#pragma omp parallel num_threads(mk_threads_for_items(rows, rows * T * K * D)) reduction(| : failed)
    {
        int64_t r0, r1;
        mk_owned_rows(rows, &r0, &r1);
        /* the sums of more than 4 orders (K is not bounded); the packed path's slab and lists */
        mk_f16v *spill = K > 4 ? alloc_spill(K) : NULL;
        float *pk = packed ? malloc((size_t)(V * 16 * MK_POWER_NV) * sizeof(float)) : NULL;
        int32_t *ids = packed ? malloc((size_t)((r1 - r0) * T) * sizeof(int32_t) + 1) : NULL;
        int64_t *begin = packed ? malloc((size_t)(r1 - r0 + 1) * sizeof(int64_t)) : NULL;
        if ((K > 4 && !spill) || (packed && (!pk || !ids || !begin))) {
            failed = 1;
        } else if (packed) {
            list_tokens(tokens, r0, r1, T, 0, V, ids, begin);
            switch (K) { /* K of 1 to 4, a constant: the order loops unroll */
            case 1: power_rows_packed(emb, ids, begin, r0, r1, V, D, 1, pk, spill, out); break;
            case 2: power_rows_packed(emb, ids, begin, r0, r1, V, D, 2, pk, spill, out); break;
            case 3: power_rows_packed(emb, ids, begin, r0, r1, V, D, 3, pk, spill, out); break;
            case 4: power_rows_packed(emb, ids, begin, r0, r1, V, D, 4, pk, spill, out); break;
            default: power_rows_packed(emb, ids, begin, r0, r1, V, D, K, pk, spill, out); break;
            }
        } else {
            switch (K) {
            case 1: power_rows(emb, tokens, r0, r1, T, D, 1, spill, out); break;
            case 2: power_rows(emb, tokens, r0, r1, T, D, 2, spill, out); break;
            case 3: power_rows(emb, tokens, r0, r1, T, D, 3, spill, out); break;
            case 4: power_rows(emb, tokens, r0, r1, T, D, 4, spill, out); break;
            default: power_rows(emb, tokens, r0, r1, T, D, K, spill, out); break;
            }
        }
        free(spill);
        free(pk);
        free(ids);
        free(begin);
    }
    return failed ? mk_fail(MK_ERR_NOMEM, "power_sums: out of memory for its scratch (V = %lld)",
                            (long long)V)
                  : MK_OK;
}

/* ----------------------------------------------------------------------------- backward */

/* G[k * nv + j] = (k + 1) g[k * D + 16 j ..]: one slab of a row of G, scaled as the Horner
 * step wants it, formed once per row instead of once per token (the same float products,
 * so the same bits). */
MK_INLINE void scale_grad(const float *g, int64_t D, int64_t K, int64_t nv, int64_t last,
                          mk_f16v *G) {
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < nv; j++)
            G[k * nv + j] = (float)(k + 1) * MK_SLAB_LOAD(g + k * D, j);
}

/* ge[c] += sum_k (k + 1) g_k[c] e[c]^k by Horner's rule from the top order, for one slab:
 * acc = K g_{K-1}; acc = acc * e + (k + 1) g_k for k = K-2 .. 0 (a product, then a sum:
 * two statements, never fused); then ge += acc. The nv chains are independent: interleaved,
 * they hide each other's latency. G: the scaled slab of the token's row of G. */
MK_INLINE void add_grad_slab(const mk_f16v *G, const float *e, int64_t K, int64_t nv, int64_t last,
                             float *ge) {
    mk_f16v x[MK_POWER_NV], acc[MK_POWER_NV];
    for (int64_t j = 0; j < nv; j++) {
        x[j] = MK_SLAB_LOAD(e, j);
        acc[j] = G[(K - 1) * nv + j];
    }
    for (int64_t k = K - 2; k >= 0; k--)
        for (int64_t j = 0; j < nv; j++) {
            const mk_f16v t = acc[j] * x[j];
            acc[j] = t + G[k * nv + j];
        }
    for (int64_t j = 0; j < nv; j++) {
        const mk_f16v sum = MK_SLAB_LOAD(ge, j) + acc[j];
        MK_SLAB_STORE(ge, j, sum);
    }
}

/* Row by row, every token in [v0, v1) adds its gradient over all columns, straight into
 * grad_emb (zeroed here). gs: K x D floats (the scaled row; more than one slab). */
MK_INLINE void grad_rows(const float *grad, const float *emb, const int32_t *tokens, int64_t rows,
                         int64_t T, int64_t D, int64_t K, int64_t v0, int64_t v1, mk_f16v *spill,
                         float *grad_emb) {
    memset(grad_emb + v0 * D, 0, (size_t)((v1 - v0) * D) * sizeof(float));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t < T; t++) {
            const int64_t v = tokens[r * T + t];
            if (v < v0 || v >= v1) continue; /* also skips the -1 sentinel */
            for (int64_t d = 0; d < D;) {
                const mk_slab s = slab_at(d, D);
#define MK_BODY(nv, last)                                                                      \
    do {                                                                                       \
        mk_f16v local[4 * MK_POWER_NV];                                                        \
        mk_f16v *const G = K <= 4 ? local : spill;                                             \
        scale_grad(grad + r * K * D + d, D, K, nv, last, G);                                   \
        add_grad_slab(G, emb + v * D + d, K, nv, last, grad_emb + v * D + d);                  \
    } while (0)
                MK_SLAB_DISPATCH(s, MK_BODY);
#undef MK_BODY
                d += s.width;
            }
        }
}

/* Rows [v0, v1) of grad_emb, slab by slab: pe, the slab of emb's rows packed; pg, the slab
 * of grad_emb's, summed from zero, then copied into place. ids, begin: the tokens listed
 * (list_tokens over all rows, [v0, v1)). */
MK_INLINE void grad_rows_packed(const float *grad, const float *emb, const int32_t *ids,
                                const int64_t *begin, int64_t rows, int64_t D, int64_t K,
                                int64_t v0, int64_t v1, float *pe, float *pg, mk_f16v *spill,
                                float *grad_emb) {
    const int64_t n = v1 - v0;
    for (int64_t d = 0; d < D;) {
        const mk_slab s = slab_at(d, D);
#define MK_BODY(nv, last)                                                                      \
    pack_slab(emb + v0 * D + d, D, n, nv, last, pe);                                           \
    for (int64_t r = 0; r < rows; r++) {                                                       \
        if (begin[r] == begin[r + 1]) continue;                                                \
        mk_f16v local[4 * MK_POWER_NV];                                                        \
        mk_f16v *const G = K <= 4 ? local : spill;                                             \
        scale_grad(grad + r * K * D + d, D, K, nv, last, G);                                   \
        for (int64_t i = begin[r]; i < begin[r + 1]; i++) {                                    \
            if (i + MK_POWER_TOKENS_AHEAD < begin[rows]) {                                     \
                const int64_t u = ids[i + MK_POWER_TOKENS_AHEAD] * 16 * (nv);                  \
                for (int64_t j = 0; j < (nv); j++) {                                           \
                    __builtin_prefetch(pe + u + 16 * j);                                       \
                    __builtin_prefetch(pg + u + 16 * j, 1);                                    \
                }                                                                              \
            }                                                                                  \
            const int64_t q = i - begin[r]; /* line q of row r + 2's slab of G */              \
            if (q < K * (nv) && r + MK_POWER_ROWS_AHEAD < rows)                                \
                __builtin_prefetch(grad + (r + MK_POWER_ROWS_AHEAD) * K * D + d + q / (nv) * D \
                                   + 16 * (q % (nv)));                                         \
            add_grad_slab(G, pe + ids[i] * 16 * (nv), K, nv, last, pg + ids[i] * 16 * (nv));   \
        }                                                                                      \
    }                                                                                          \
    unpack_slab(pg, D, n, nv, last, grad_emb + v0 * D + d)
        MK_SLAB_DISPATCH(s, MK_BODY);
#undef MK_BODY
        d += s.width;
    }
}

mk_status mk_power_sums_backward_cpu(void *stream, const float *grad, const float *emb,
                                     const int32_t *tokens, int64_t rows, int64_t T, int64_t D,
                                     int64_t K, int64_t V, float *grad_emb, void *work,
                                     size_t work_bytes) { /* no scratch from the caller */
    if (K < 1 || D < 1) { /* no orders: no gradient */
        memset(grad_emb, 0, (size_t)(V * D) * sizeof(float));
        return MK_OK;
    }
    const int packed = use_packed(rows, T, V);
    int failed = 0;
#pragma omp parallel num_threads(mk_threads_for_items(V, rows * T * K * D)) reduction(| : failed)
    {
        int64_t v0, v1;
        mk_owned_rows(V, &v0, &v1);
        /* a scaled row of G for more than 4 orders; the packed path's slabs and lists */
        mk_f16v *spill = K > 4 ? alloc_spill(K) : NULL;
        const size_t pack_floats = (size_t)(2 * (v1 - v0) * 16 * MK_POWER_NV);
        float *pack = packed ? malloc(pack_floats * sizeof(float) + 1) : NULL;
        int32_t *ids = packed ? malloc((size_t)(rows * T) * sizeof(int32_t) + 1) : NULL;
        int64_t *begin = packed ? malloc((size_t)(rows + 1) * sizeof(int64_t)) : NULL;
        if ((K > 4 && !spill) || (packed && (!pack || !ids || !begin))) {
            memset(grad_emb + v0 * D, 0, (size_t)((v1 - v0) * D) * sizeof(float));
            failed = 1;
        } else if (packed) {
            float *pe = pack, *pg = pack + (v1 - v0) * 16 * MK_POWER_NV;
            memset(pg, 0, (size_t)((v1 - v0) * 16 * MK_POWER_NV) * sizeof(float)); /* then unpack_slab */
            list_tokens(tokens, 0, rows, T, v0, v1, ids, begin);
            switch (K) { /* K of 1 to 4, a constant: the order loops unroll */
            case 1: grad_rows_packed(grad, emb, ids, begin, rows, D, 1, v0, v1, pe, pg, spill, grad_emb); break;
            case 2: grad_rows_packed(grad, emb, ids, begin, rows, D, 2, v0, v1, pe, pg, spill, grad_emb); break;
            case 3: grad_rows_packed(grad, emb, ids, begin, rows, D, 3, v0, v1, pe, pg, spill, grad_emb); break;
            case 4: grad_rows_packed(grad, emb, ids, begin, rows, D, 4, v0, v1, pe, pg, spill, grad_emb); break;
            default: grad_rows_packed(grad, emb, ids, begin, rows, D, K, v0, v1, pe, pg, spill, grad_emb); break;
            }
        } else {
            switch (K) {
            case 1: grad_rows(grad, emb, tokens, rows, T, D, 1, v0, v1, spill, grad_emb); break;
            case 2: grad_rows(grad, emb, tokens, rows, T, D, 2, v0, v1, spill, grad_emb); break;
            case 3: grad_rows(grad, emb, tokens, rows, T, D, 3, v0, v1, spill, grad_emb); break;
            case 4: grad_rows(grad, emb, tokens, rows, T, D, 4, v0, v1, spill, grad_emb); break;
            default: grad_rows(grad, emb, tokens, rows, T, D, K, v0, v1, spill, grad_emb); break;
            }
        }
        free(spill);
        free(pack);
        free(ids);
        free(begin);
    }
    return failed ? mk_fail(MK_ERR_NOMEM, "power_sums_backward: out of memory for its scratch (V = %lld)",
                            (long long)V)
                  : MK_OK;
}
