/* The sparse pair-table update on the CPU (pair_update "sparse" / "lazy"; backend.h's
 * pair_catch_up, pair_sums_backward_adamw_sparse, pair_gap_advance; the math is in
 * core/pair_gap.h, shared with CUDA).
 *
 * A batch names ~4-10 % of the pair table's rows on real data; the dense update streams all
 * 44 M parameters and both moments (~1 GB) every step. Here a step reads and writes only
 * the named rows: once to catch them up over their gap (before the forward pass reads
 * them), once to apply the step's AdamW. The batch's tokens are bucketed once, by the
 * catch-up, into the caller's scratch, and the update reuses that bucketing.
 *
 * Both passes visit the named rows group by group (pair_groups.c: rows sharing their larger
 * token are contiguous), ascending within a group and with the next rows prefetched: the
 * rows are scattered, so each pass is bound by memory latency, not bandwidth.
 *
 * Determinism: every row has one owner (its group's thread) and its result is a pure
 * function of its values, its gap entry and (for the update) its gradient sum, which is
 * bitwise the dense path's. */
#include <stdlib.h>
#include <string.h>

#include "core/manaka.h"

#include "adamw_run.h"
#include "backend_cpu.h"
#include "pair_groups.h"
#include "threads.h"

/* ------------------------------------------------------------ catching rows up */

typedef struct {
    int64_t P;
    float *p;
    void *m, *v;
    int bf16, drift;
    float eps;
    uint64_t seed;
    const double *gaps;
    int32_t *stamps;
    int32_t now;
} catch_up;

/* Row q (stamp s) over its gap. */
static void catch_up_row(const catch_up *c, int64_t q, int32_t s) {
    const mk_gap_row r = mk_gap_row_of(c->gaps + (int64_t)s * MK_GAP_FIELDS, c->drift);
    const int64_t o = q * c->P;
    float *p = c->p + o;
    if (!c->bf16) {
        float *restrict m = (float *)c->m + o, *restrict v = (float *)c->v + o;
        float *restrict pp = p;
#pragma omp simd
        for (int64_t i = 0; i < c->P; i++) mk_gap_apply(&r, c->eps, pp + i, m + i, v + i);
        return;
    }
    uint16_t *restrict m = (uint16_t *)c->m + o, *restrict v = (uint16_t *)c->v + o;
    float *restrict pp = p;
    /* element o + i's noise is mk_rounding_noise(seed, o + i): its hash counter runs as a
     * vector induction, as in adamw_run_bf16 */
    const uint64_t step = MK_HASH_STEP;
    uint64_t z = c->seed + ((uint64_t)o + 1) * step;
#pragma omp simd linear(z : step)
    for (int64_t i = 0; i < c->P; i++) {
        float mi = mk_bf16_to_float(m[i]), vi = mk_bf16_to_float(v[i]);
        mk_gap_apply(&r, c->eps, pp + i, &mi, &vi);
        uint32_t noise = (uint32_t)mk_hash_mix(z);
        m[i] = mk_float_to_bf16_stochastic(mi, noise);
        v[i] = mk_float_to_bf16_stochastic(vi, noise >> 16);
        z += step;
    }
}

#define ROW_CHUNK ((int64_t)1 << 14)

/* How far ahead the row loops prefetch: rows are 64 bytes apart at best, scattered at
 * worst (a batch names a few percent of a group's rows), so the lines of the rows AHEAD
 * further on are asked for while this one is computed, and their stamps (which decide
 * whether a row needs the catch-up) STAMP_AHEAD further on: without that, every row
 * waited for its stamp's line before anything else. */
#define AHEAD 8
#define STAMP_AHEAD 16
static inline void prefetch_row(const catch_up *c, int64_t q) {
    int64_t o = q * c->P;
    size_t w = c->bf16 ? 2 : 4;
    __builtin_prefetch(c->p + o, 1);
    __builtin_prefetch((char *)c->m + o * w, 1);
    __builtin_prefetch((char *)c->v + o * w, 1);
}

static void catch_up_group(void *ctx, int64_t h, const float *acc, const int32_t *touched,
                           int32_t n_touched) {
    (void)acc;
    const catch_up *c = ctx;
    const int64_t first = mk_num_pairs(h);
    for (int32_t x = 0; x < n_touched; x++) {
        const int64_t q = first + touched[x];
        if (x + STAMP_AHEAD < n_touched) __builtin_prefetch(c->stamps + first + touched[x + STAMP_AHEAD], 1);
        if (x + AHEAD < n_touched) { /* only a row that will be caught up: on real data most
                                      * rows a batch names were named by the step before */
            const int64_t qa = first + touched[x + AHEAD];
            if (c->stamps[qa] != c->now) prefetch_row(c, qa);
        }
        if (c->stamps[q] != c->now) {
            catch_up_row(c, q, c->stamps[q]);
            c->stamps[q] = c->now;
        }
    }
}

mk_status mk_pair_catch_up_cpu(void *stream, const int32_t *tokens, int64_t rows, int64_t T,
                               int64_t P, int64_t V, float *p, void *m, void *v, int bf16,
                               int32_t *stamps, const double *gaps, int64_t now, int drift,
                               float eps, uint64_t seed, void *work, size_t work_bytes) {
    (void)stream;
    const int32_t stamp = (int32_t)now;
    const catch_up c = {P, p, m, v, bf16, drift, eps, seed, gaps, stamps, stamp};
    if (!tokens) { /* every row: a flush */
        const int64_t n = mk_num_pairs(V), chunks = (n + ROW_CHUNK - 1) / ROW_CHUNK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(mk_threads_for(n))
        for (int64_t k = 0; k < chunks; k++)
            for (int64_t q = k * ROW_CHUNK; q < n && q < (k + 1) * ROW_CHUNK; q++)
                if (stamps[q] != stamp) {
                    catch_up_row(&c, q, stamps[q]);
                    stamps[q] = stamp;
                }
        return MK_OK;
    }
    /* The rows the batch names, group by group in table order (pair_groups.c): each row has
     * one owner and the rows are visited ascending, not in the batch's random order. */
    MK_TRY(mk_pair_check_work_cpu("pair_catch_up", rows, T, V, work, work_bytes));
    return mk_pair_grad_groups_cpu(NULL, tokens, rows, T, P, V, work, 1, catch_up_group,
                                   (void *)&c);
}

/* ------------------------------------------------------------ the touched rows' AdamW */

typedef struct {
    mk_adamw_consts k;
    int64_t P;
    float *p;
    void *m, *v;
    int bf16;
    int32_t *stamps;
    int32_t now;
    uint64_t seed;
} sparse_update;

static void update_touched(void *ctx, int64_t h, const float *acc, const int32_t *touched,
                           int32_t n_touched) {
    const sparse_update *u = ctx;
    const int64_t first = mk_num_pairs(h);
    const size_t w = u->bf16 ? 2 : 4;
    for (int32_t x = 0; x < n_touched; x++) {
        const int64_t q = first + touched[x], o = q * u->P;
        const float *g = acc + (int64_t)touched[x] * u->P;
        if (x + STAMP_AHEAD < n_touched) __builtin_prefetch(u->stamps + first + touched[x + STAMP_AHEAD], 1);
        if (x + AHEAD < n_touched) {
            const int64_t oa = (first + touched[x + AHEAD]) * u->P;
            __builtin_prefetch(u->p + oa, 1);
            __builtin_prefetch((char *)u->m + oa * w, 1);
            __builtin_prefetch((char *)u->v + oa * w, 1);
        }
        if (u->bf16)
            adamw_run_bf16(&u->k, u->p + o, g, (uint16_t *)u->m + o, (uint16_t *)u->v + o, u->P,
                           u->seed, o);
        else
            adamw_run(&u->k, u->p + o, g, (float *)u->m + o, (float *)u->v + o, u->P);
        u->stamps[q] = u->now;
    }
}

mk_status mk_pair_sums_backward_adamw_sparse_cpu(void *stream, const float *grad,
                                                 const int32_t *tokens, int64_t rows, int64_t T,
                                                 int64_t P, int64_t V, float *p, void *m,
                                                 void *v, int bf16, int32_t *stamps,
                                                 int64_t now, const mk_adamw_args *args,
                                                 const float *stats, uint64_t seed, void *work,
                                                 size_t work_bytes, int bucketed) {
    (void)stream;
    mk_status st = mk_pair_check_work_cpu("pair_sums_backward_adamw_sparse", rows, T, V, work,
                                          work_bytes);
    if (st != MK_OK || (stats && stats[MK_STAT_FINITE] == 0.0f)) return st;
    sparse_update u = {mk_adamw_prepare(args), P, p, m, v, bf16 != 0, stamps, (int32_t)now, seed};
    if (bucketed) /* the catch-up's bucketing of these tokens, still in work */
        return mk_pair_grad_groups_bucketed_cpu(grad, rows, T, P, V, work, 1, update_touched, &u);
    return mk_pair_grad_groups_cpu(grad, tokens, rows, T, P, V, work, 1, update_touched, &u);
}

/* ------------------------------------------------------------ the gap window */

mk_status mk_pair_gap_advance_cpu(void *stream, double *gaps, int64_t n, double decay,
                                  double step_size, double inv_bc2_sqrt, double beta1,
                                  double sqrt_beta2, const float *stats) {
    (void)stream;
    const mk_gap_step s = {decay, step_size, inv_bc2_sqrt, beta1, sqrt_beta2};
    if (!(stats && stats[MK_STAT_FINITE] == 0.0f))
        for (int64_t i = 0; i < n; i++) mk_gap_advance(gaps + i * MK_GAP_FIELDS, &s);
    mk_gap_reset(gaps + n * MK_GAP_FIELDS);
    return MK_OK;
}

/* ------------------------------------------------------------ rows for a data-parallel exchange */

/* pair_grad_rows runs the groups twice: once to count each group's named rows (the
 * groups run on any thread, in any order), once to copy them where the counts' prefix sum
 * puts them: ascending, whatever the thread count. */
static void count_group(void *ctx, int64_t h, const float *acc, const int32_t *touched,
                        int32_t n_touched) {
    (void)acc, (void)touched;
    ((int64_t *)ctx)[h] = n_touched;
}

typedef struct {
    const int64_t *at; /* [V] where group h's rows start in ids / out */
    int64_t P;
    int64_t *ids;
    float *out;
} row_copy;

static void copy_group(void *ctx, int64_t h, const float *acc, const int32_t *touched,
                       int32_t n_touched) {
    const row_copy *c = ctx;
    const int64_t first = mk_num_pairs(h), at = c->at[h];
    for (int32_t x = 0; x < n_touched; x++) {
        c->ids[at + x] = first + touched[x];
        memcpy(c->out + (at + x) * c->P, acc + (int64_t)touched[x] * c->P,
               (size_t)c->P * sizeof(float));
    }
}

mk_status mk_pair_grad_rows_cpu(void *stream, const float *grad, const int32_t *tokens,
                                int64_t rows, int64_t T, int64_t P, int64_t V, int64_t *ids,
                                float *out, int64_t capacity, int64_t *count, void *work,
                                size_t work_bytes) {
    (void)stream;
    *count = 0;
    MK_TRY(mk_pair_check_work_cpu("pair_grad_rows", rows, T, V, work, work_bytes));
    if (V == 0) return MK_OK;
    int64_t *at = calloc((size_t)V, sizeof(int64_t));
    if (!at) return mk_fail(MK_ERR_NOMEM, "pair_grad_rows: out of memory for its scratch");
    mk_status st = mk_pair_grad_groups_cpu(NULL, tokens, rows, T, P, V, work, 1, count_group, at);
    int64_t total = 0;
    for (int64_t h = 0; st == MK_OK && h < V; h++) {
        const int64_t n = at[h];
        at[h] = total;
        total += n;
    }
    if (st == MK_OK) *count = total;
    if (st == MK_OK && total <= capacity && total > 0) {
        row_copy c = {at, P, ids, out};
        st = mk_pair_grad_groups_bucketed_cpu(grad, rows, T, P, V, work, 1, copy_group, &c);
    }
    free(at);
    return st;
}

mk_status mk_pair_rows_scatter_cpu(void *stream, const int64_t *ids, const float *src, int64_t n,
                                   int64_t P, float *dst) {
    (void)stream;
#pragma omp parallel for schedule(static) num_threads(mk_get_num_threads()) \
    if (n * P >= MK_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + ids[i] * P, src + i * P, (size_t)P * sizeof(float));
    return MK_OK;
}

mk_status mk_pair_rows_adamw_cpu(void *stream, const int64_t *ids, const float *grad, int64_t n,
                                 int64_t P, float *p, void *m, void *v, int bf16,
                                 int32_t *stamps, const double *gaps, int64_t now, int drift,
                                 float eps, uint64_t catch_up_seed, const mk_adamw_args *args,
                                 const float *stats, uint64_t seed) {
    (void)stream;
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return MK_OK;
    const mk_adamw_consts k = mk_adamw_prepare(args);
    const catch_up c = {P, p, m, v, bf16 != 0, drift, eps, catch_up_seed, gaps, stamps,
                        (int32_t)(now - 1)};
    /* each row is its own: the result does not depend on the thread that runs it */
#pragma omp parallel for schedule(static) num_threads(mk_get_num_threads()) \
    if (n * P >= MK_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        const int64_t q = ids[i], o = q * P;
        if (stamps && stamps[q] != c.now) catch_up_row(&c, q, stamps[q]);
        if (bf16)
            adamw_run_bf16(&k, p + o, grad + i * P, (uint16_t *)m + o, (uint16_t *)v + o, P, seed,
                           o);
        else
            adamw_run(&k, p + o, grad + i * P, (float *)m + o, (float *)v + o, P);
        if (stamps) stamps[q] = (int32_t)now;
    }
    return MK_OK;
}
