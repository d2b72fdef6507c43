/* AdamW on the CPU, every variant of it in one file: the update of one element (and of a
 * run, with fp32 or bf16 moments), the backend table's adamw and adamw_bf16 over a flat
 * range, and the pair table's fused PairSums backward + AdamW (pair_sums_backward_adamw
 * and its bf16 twin). All of them run the same inline code, so fused and unfused, fp32 and
 * bf16 paths produce the same bits for the same inputs; the constants come from
 * core/adamw_consts.h, which the CUDA backend (cuda/adamw.cu) shares.
 *
 * The update is memory-bound (7 floats moved per parameter with fp32 moments, 4 + 4 + 2 + 2
 * bytes in and 4 + 2 + 2 out with bf16), which makes the 44 M-row pair table the largest
 * fixed cost of a step at the seed shapes: the trainer updates it with the fused pass, which
 * never stores its gradient. Floating-point contraction is off under -std=c11, so vector and
 * scalar iterations round identically. */
#include "backend_cpu.h"
#include "adamw_run.h"
#include "pair_groups.h"
#include "threads.h"

/* ------------------------------------------------------------ adamw, adamw_bf16 */

/* Dynamic chunks, not one static range per thread: when another process takes a core, the
 * running threads absorb the work of a descheduled one instead of waiting for it. The
 * update is elementwise (and the bf16 noise is indexed by element, not by who runs it), so
 * the result does not depend on who does which chunk. */
#define CHUNK ((int64_t)1 << 16)

mk_status mk_adamw_cpu(void *stream, float *p, const float *g, float *m, float *v, int64_t n,
                       const mk_adamw_args *a, const float *stats) {
    (void)stream;
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return MK_OK; /* the step's loss was not finite */
    const mk_adamw_consts k = mk_adamw_prepare(a);
    const int64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(mk_threads_for(n))
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i0 = c * CHUNK, len = n - i0 < CHUNK ? n - i0 : CHUNK;
        adamw_run(&k, p + i0, g + i0, m + i0, v + i0, len);
    }
    return MK_OK;
}

/* pair_state_dtype="bf16": the unfused pair-table update; the rounding is bf16.h's. */
mk_status mk_adamw_bf16_cpu(void *stream, float *p, const float *g, uint16_t *m, uint16_t *v,
                            int64_t n, const mk_adamw_args *a, const float *stats,
                            uint64_t seed) {
    (void)stream;
    if (stats && stats[MK_STAT_FINITE] == 0.0f) return MK_OK; /* the step's loss was not finite */
    const mk_adamw_consts k = mk_adamw_prepare(a);
    const int64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(mk_threads_for(n))
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i0 = c * CHUNK, len = n - i0 < CHUNK ? n - i0 : CHUNK;
        adamw_run_bf16_long(&k, p + i0, g + i0, m + i0, v + i0, len, seed, i0);
    }
    return MK_OK;
}

/* ------------------------------------------------------------ the fused pair-table update */

/* PairSums backward fused with AdamW on the pair table (backend.h explains the contract),
 * with fp32 or bf16 moments: the gradient arrives group by group (pair_groups.c) and each
 * group is updated at once by adamw_run / adamw_run_bf16_long, as the unfused entries above. */
typedef struct {
    mk_adamw_consts k;
    int64_t P;
    float *p;
    void *m, *v; /* float or uint16_t (bf16) */
    uint64_t seed;
} pair_update;

static void update_f32(void *ctx, int64_t h, const float *acc, const int32_t *touched,
                       int32_t n_touched) {
    (void)touched, (void)n_touched;
    const pair_update *u = ctx;
    int64_t o = mk_num_pairs(h) * u->P;
    adamw_run(&u->k, u->p + o, acc, (float *)u->m + o, (float *)u->v + o, (h + 1) * u->P);
}

static void update_bf16(void *ctx, int64_t h, const float *acc, const int32_t *touched,
                        int32_t n_touched) {
    (void)touched, (void)n_touched;
    const pair_update *u = ctx;
    int64_t o = mk_num_pairs(h) * u->P;
    adamw_run_bf16_long(&u->k, u->p + o, acc, (uint16_t *)u->m + o, (uint16_t *)u->v + o,
                   (h + 1) * u->P, u->seed, o);
}

/* The table's scratch_bytes: the fused pair-table updates and GatherDot's grad_table use
 * `work` on the CPU, one after the other. */
mk_status mk_scratch_bytes_cpu(const mk_step_shapes *shapes, size_t *bytes) {
    *bytes = 0;
    MK_TRY(mk_pair_groups_check("Model", shapes->rows, shapes->T));
    size_t pair = (size_t)mk_pair_adamw_work_ints(shapes->rows, shapes->T, shapes->V) * sizeof(int32_t);
    size_t moves = mk_gather_dot_work_bytes_cpu(shapes->B, shapes->L, shapes->M);
    *bytes = pair > moves ? pair : moves;
    return MK_OK;
}

/* The caller's scratch is checked before anything changes: too small is its bug, reported. */
mk_status mk_pair_check_work_cpu(const char *op, int64_t rows, int64_t T, int64_t V, void *work,
                            size_t work_bytes) {
    MK_TRY(mk_pair_groups_check(op, rows, T));
    size_t need = (size_t)mk_pair_adamw_work_ints(rows, T, V) * sizeof(int32_t);
    if (!work || work_bytes < need)
        return mk_fail(MK_ERR_VALUE, "%s: the scratch given holds %zu bytes; %zu are needed", op,
                       work ? work_bytes : (size_t)0, need);
    return MK_OK;
}

mk_status mk_pair_sums_backward_adamw_cpu(void *stream, const float *grad, const int32_t *tokens,
                                          int64_t rows, int64_t T, int64_t P, int64_t V,
                                          float *p, float *m, float *v,
                                          const mk_adamw_args *args, const float *stats,
                                          void *work, size_t work_bytes) {
    (void)stream;
    mk_status st = mk_pair_check_work_cpu("pair_sums_backward_adamw", rows, T, V, work, work_bytes);
    if (st != MK_OK || (stats && stats[MK_STAT_FINITE] == 0.0f)) return st;
    pair_update u = {mk_adamw_prepare(args), P, p, m, v, 0};
    return mk_pair_grad_groups_cpu(grad, tokens, rows, T, P, V, work, 0, update_f32, &u);
}

mk_status mk_pair_sums_backward_adamw_bf16_cpu(void *stream, const float *grad,
                                               const int32_t *tokens, int64_t rows, int64_t T,
                                               int64_t P, int64_t V, float *p, uint16_t *m,
                                               uint16_t *v, const mk_adamw_args *args,
                                               const float *stats, uint64_t seed,
                                               void *work, size_t work_bytes) {
    (void)stream;
    mk_status st = mk_pair_check_work_cpu("pair_sums_backward_adamw_bf16", rows, T, V, work, work_bytes);
    if (st != MK_OK || (stats && stats[MK_STAT_FINITE] == 0.0f)) return st;
    pair_update u = {mk_adamw_prepare(args), P, p, m, v, seed};
    return mk_pair_grad_groups_cpu(grad, tokens, rows, T, P, V, work, 0, update_bf16, &u);
}
