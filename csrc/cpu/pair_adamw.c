/* PairSums backward fused with AdamW on the pair table (backend.h explains the contract),
 * with fp32 or bf16 moments: the gradient arrives group by group (pair_groups.c) and each
 * group is updated at once by the same inline code as the unfused adamw / adamw_bf16
 * (adamw.h), so fused and unfused give the same bits. */
#include "adamw.h"
#include "backend_cpu.h"
#include "pair_groups.h"

typedef struct {
    mk_adamw_consts k;
    int64_t P;
    float *p;
    void *m, *v; /* float or uint16_t (bf16) */
    uint64_t seed;
} pair_update;

static void update_f32(void *ctx, int64_t h, const float *acc) {
    const pair_update *u = ctx;
    int64_t o = mk_num_pairs(h) * u->P;
    mk_adamw_run(&u->k, u->p + o, acc, (float *)u->m + o, (float *)u->v + o, (h + 1) * u->P);
}

static void update_bf16(void *ctx, int64_t h, const float *acc) {
    const pair_update *u = ctx;
    int64_t o = mk_num_pairs(h) * u->P;
    mk_adamw_run_bf16(&u->k, u->p + o, acc, (uint16_t *)u->m + o, (uint16_t *)u->v + o,
                      (h + 1) * u->P, u->seed, o);
}

mk_status mk_scratch_bytes_cpu(const mk_step_shapes *shapes, size_t *bytes) {
    *bytes = 0;
    MK_TRY(mk_pair_groups_check("Model", shapes->rows, shapes->T));
    *bytes = (size_t)mk_pair_adamw_work_ints(shapes->rows, shapes->T, shapes->V) * sizeof(int32_t);
    return MK_OK;
}

/* The caller's scratch is checked before anything changes: too small is its bug, reported. */
static mk_status check_work(const char *op, int64_t rows, int64_t T, int64_t V, void *work,
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
    mk_status st = check_work("pair_sums_backward_adamw", rows, T, V, work, work_bytes);
    if (st != MK_OK || (stats && stats[MK_STAT_FINITE] == 0.0f)) return st;
    pair_update u = {mk_adamw_prepare(args), P, p, m, v, 0};
    return mk_pair_grad_groups_cpu(grad, tokens, rows, T, P, V, work, update_f32, &u);
}

mk_status mk_pair_sums_backward_adamw_bf16_cpu(void *stream, const float *grad,
                                               const int32_t *tokens, int64_t rows, int64_t T,
                                               int64_t P, int64_t V, float *p, uint16_t *m,
                                               uint16_t *v, const mk_adamw_args *args,
                                               const float *stats, uint64_t seed,
                                               void *work, size_t work_bytes) {
    (void)stream;
    mk_status st = check_work("pair_sums_backward_adamw_bf16", rows, T, V, work, work_bytes);
    if (st != MK_OK || (stats && stats[MK_STAT_FINITE] == 0.0f)) return st;
    pair_update u = {mk_adamw_prepare(args), P, p, m, v, seed};
    return mk_pair_grad_groups_cpu(grad, tokens, rows, T, P, V, work, update_bf16, &u);
}
