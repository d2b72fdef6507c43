#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
/* The training step over mk_backend.
 *
 * A non-finite loss must never reach the parameters. The loss is computed before AdamW and
 * lands in the device stats buffer, whose MK_STAT_FINITE flag every AdamW call checks
 * (adamw and pair_sums_backward_adamw return without touching anything when it is 0), so
 * the guard holds on any backend without the host reading anything.
 *
 * On a backend with host memory (the CPU) the trainer also reads the stats right after the
 * forward pass (free: they are already on the host) and fails the step with MK_ERR_FLOAT
 * naming it, before the backward pass: parameters, moments and step count are unchanged.
 *
 * A device backend must not synchronise every step just for this: the trainer files each
 * step's stats in a small device ring (MK_STATS_RING slots), the flag skips the update on
 * the device, and mk_trainer_read_stats raises when the stats of that step are read (the
 * Stats object knows its step). Parameters and moments are then exactly as before the bad
 * step; the host's step count has moved on by the skipped steps, which a checkpoint restore
 * (or trainer.load_state_dict) undoes. The "cpu_staged" test backend runs this device path
 * on the CPU. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adamw_consts.h"
#include "arena.h"
#include "bf16.h"
#include "pair_gap.h"
#include "trainer.h"

struct mk_trainer {
    mk_model *model;
    mk_trainer_config cfg;
    int64_t steps;
    float *ring; /* device backends: [MK_STATS_RING][MK_STAT_COUNT] stats of recent steps */
    /* The model's parameter groups (model.h: they tile its buffers, in placement order), and
     * where each group's fp32 moments start in m and v: group after group, skipping the
     * pair table's when its moments are bf16 (moments_at -1; they live in pair_m16 /
     * pair_v16, one allocation). m and v hold moment_floats floats each. */
    int num_groups;
    mk_param_group groups[MK_MAX_PARAM_GROUPS];
    int64_t moments_at[MK_MAX_PARAM_GROUPS];
    int64_t moment_floats;
    float *m, *v;
    const mk_tensor *pair; /* the one tensor of the MK_GROUP_PAIR_TABLE group */
    int pair_state;
    uint16_t *pair_m16, *pair_v16;
    /* pair_update "sparse" / "lazy" (pair_gap.h): each pair-table row's stamp (the step it is
     * caught up to, relative to `base`), and the gap entry of every stamp; rows are caught
     * up when a batch names them and all of them by mk_trainer_flush, which restarts the
     * window at base = steps. */
    int pair_update;
    int32_t *stamps;
    double *gaps;
    int64_t base;
    /* move_update "sparse" / "lazy": the move table (GatherDot's), its rows' stamps (in the
     * same window as the pair table's, sharing its gap entries), and the mask of the rows
     * the staged batch names, written by the catch-up and read by the update */
    int move_update;
    const mk_tensor *moves;
    int32_t *move_stamps;
    uint8_t *move_mask;
    /* the sparse update's own scratch (device memory, grown to the model's work_bytes): the
     * catch-up buckets the batch's tokens there and the step's update reuses that
     * (`bucketed`: set by a catch-up that succeeded, cleared when used); the model's own
     * scratch is overwritten by the backward in between */
    void *pair_work;
    size_t pair_work_bytes;
    int bucketed;
    int profile;
    int fuse_pair_table; /* 1: pair-table gradient and AdamW in one pass (same result) */
    mk_phase_times times;
    /* The step in two halves (mk_trainer_backward / mk_trainer_apply): the pair-table rows
     * the last backward's batch names (row_count of them, room for row_capacity, device
     * memory), and whether that backward (with a finite loss) awaits its apply. */
    int64_t *row_ids;
    float *row_grads;
    int64_t row_count, row_capacity;
    int pending;
};

/* lr, eps, weight_decay and min_lr are read as float32 by the step (adamw_consts.h, and the
 * (float) casts below): a double above FLT_MAX became infinity there, and an eps below
 * FLT_MIN 0 (or a subnormal, which a GPU flushes to 0), so the first step wrote inf or NaN
 * into every parameter. `x` has passed its finite and sign rule. */
static mk_status check_float32(const char *name, double x, double lowest) {
    if (x > FLT_MAX)
        return mk_fail(MK_ERR_VALUE, "Trainer: %s = %g is above the float32 range the step computes in "
                                     "(at most %g)", name, x, (double)FLT_MAX);
    if (x < lowest)
        return mk_fail(MK_ERR_VALUE, "Trainer: %s = %g is below the smallest normal float32 (%g), "
                                     "which the step computes in: it would be 0 there, or a "
                                     "subnormal that a GPU flushes to 0", name, x, lowest);
    return MK_OK;
}

mk_status mk_trainer_config_check(const mk_trainer_config *c) {
    if (!(c->lr >= 0.0 && isfinite(c->lr)))
        return mk_fail(MK_ERR_VALUE, "Trainer: lr must be finite and >= 0, got %g", c->lr);
    MK_TRY(check_float32("lr", c->lr, 0.0));
    if (!(c->beta1 >= 0.0 && c->beta1 < 1.0))
        return mk_fail(MK_ERR_VALUE, "Trainer: betas[0] must be in [0, 1), got %g", c->beta1);
    if (!(c->beta2 >= 0.0 && c->beta2 < 1.0))
        return mk_fail(MK_ERR_VALUE, "Trainer: betas[1] must be in [0, 1), got %g", c->beta2);
    if (!(c->eps > 0.0 && isfinite(c->eps)))
        return mk_fail(MK_ERR_VALUE, "Trainer: eps must be finite and > 0, got %g", c->eps);
    MK_TRY(check_float32("eps", c->eps, (double)FLT_MIN));
    if (!(c->weight_decay >= 0.0 && isfinite(c->weight_decay)))
        return mk_fail(MK_ERR_VALUE, "Trainer: weight_decay must be finite and >= 0, got %g",
                       c->weight_decay);
    MK_TRY(check_float32("weight_decay", c->weight_decay, 0.0));
    if (!(c->min_lr >= 0.0 && isfinite(c->min_lr)))
        return mk_fail(MK_ERR_VALUE, "Trainer: min_lr must be finite and >= 0, got %g", c->min_lr);
    MK_TRY(check_float32("min_lr", c->min_lr, 0.0));
    mk_status st = mk_check_value_weight("Trainer", c->value_weight);
    if (st != MK_OK) return st;
    if (c->warmup_steps < 0)
        return mk_fail(MK_ERR_VALUE, "Trainer: warmup_steps must be >= 0, got %lld",
                       (long long)c->warmup_steps);
    if (c->has_total_steps && c->total_steps < 0)
        return mk_fail(MK_ERR_VALUE, "Trainer: total_steps must be >= 0 (or None), got %lld",
                       (long long)c->total_steps);
    if (!mk_trainer_schedule_name(c->schedule))
        return mk_fail(MK_ERR_VALUE, "Trainer: unknown schedule %d", c->schedule);
    if (c->schedule == MK_SCHEDULE_COSINE && !c->has_total_steps)
        return mk_fail(MK_ERR_VALUE, "Trainer: schedule='cosine' requires total_steps (the step "
                                     "where lr reaches min_lr)");
    if (c->schedule == MK_SCHEDULE_COSINE && c->total_steps <= c->warmup_steps)
        return mk_fail(MK_ERR_VALUE,
                       "Trainer: total_steps = %lld must be greater than warmup_steps = %lld",
                       (long long)c->total_steps, (long long)c->warmup_steps);
    return MK_OK;
}

/* The names of an enum argument, by code (MK_SCHEDULE_*, MK_PAIR_STATE_*). */
static const char *const schedule_names[] = {"constant", "cosine"};
static const char *const pair_state_names[] = {"float32", "bf16"};

static mk_status code_of(const char *op, const char *arg, const char *const names[2],
                         const char *name, int *code) {
    for (int i = 0; i < 2; i++)
        if (strcmp(name, names[i]) == 0) return *code = i, MK_OK;
    return mk_fail(MK_ERR_VALUE, "%s: %s must be '%s' or '%s', got '%s'", op, arg, names[0],
                   names[1], name);
}
mk_status mk_trainer_schedule_code(const char *op, const char *name, int *schedule) {
    return code_of(op, "schedule", schedule_names, name, schedule);
}
mk_status mk_trainer_pair_state_code(const char *op, const char *name, int *pair_state) {
    return code_of(op, "pair_state_dtype", pair_state_names, name, pair_state);
}
static const char *const pair_update_names[] = {"dense", "sparse", "lazy"};
mk_status mk_trainer_pair_update_code(const char *op, const char *name, int *pair_update) {
    for (int i = 0; i < 3; i++)
        if (strcmp(name, pair_update_names[i]) == 0) return *pair_update = i, MK_OK;
    return mk_fail(MK_ERR_VALUE, "%s: pair_update must be 'dense', 'sparse' or 'lazy', got '%s'",
                   op, name);
}
mk_status mk_trainer_move_update_code(const char *op, const char *name, int *move_update) {
    for (int i = 0; i < 3; i++)
        if (strcmp(name, pair_update_names[i]) == 0) return *move_update = i, MK_OK;
    return mk_fail(MK_ERR_VALUE, "%s: move_update must be 'dense', 'sparse' or 'lazy', got '%s'",
                   op, name);
}
const char *mk_trainer_pair_update_name(int u) {
    return u >= 0 && u < 3 ? pair_update_names[u] : NULL;
}
const char *mk_trainer_schedule_name(int s) { return s == 0 || s == 1 ? schedule_names[s] : NULL; }
const char *mk_trainer_pair_state_name(int p) {
    return p == 0 || p == 1 ? pair_state_names[p] : NULL;
}

double mk_trainer_lr_at(const mk_trainer_config *c, int64_t s) {
    if (s < c->warmup_steps) return c->lr * (double)(s + 1) / (double)c->warmup_steps;
    if (c->schedule == MK_SCHEDULE_CONSTANT) return c->lr;
    double p = (double)(s - c->warmup_steps) / (double)(c->total_steps - c->warmup_steps);
    if (p > 1.0) p = 1.0;
    return c->min_lr + (c->lr - c->min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * p));
}

/* The sparse update multiplies the decay factors 1 - lr_t wd of a gap together; a factor
 * <= 0 (a decay that flips or zeroes every weight) has no meaning there. */
static mk_status check_sparse_config(int pair_update, int move_update,
                                     const mk_trainer_config *c) {
    const int pair = pair_update != MK_PAIR_UPDATE_DENSE;
    if (!pair && move_update == MK_PAIR_UPDATE_DENSE) return MK_OK;
    double top = c->lr > c->min_lr ? c->lr : c->min_lr;
    if (top * c->weight_decay >= 1.0)
        return mk_fail(MK_ERR_VALUE,
                       "Trainer: %s='%s' needs lr * weight_decay < 1 at every step, got "
                       "lr = %g (min_lr = %g) and weight_decay = %g",
                       pair ? "pair_update" : "move_update",
                       mk_trainer_pair_update_name(pair ? pair_update : move_update), c->lr,
                       c->min_lr, c->weight_decay);
    return MK_OK;
}
static int any_sparse(const mk_trainer *t) {
    return t->pair_update != MK_PAIR_UPDATE_DENSE || t->move_update != MK_PAIR_UPDATE_DENSE;
}

/* Where a tensor's moments start in the fp32 moment buffers m, v (floats): its place in its
 * group, from where the group's moments start. */
static int64_t moment_offset(const mk_trainer *t, const mk_tensor *tn) {
    return t->moments_at[tn->group] + (tn->offset - t->groups[tn->group].offset);
}

/* The groups, the fp32 moments' place for each, and the pair table. */
static mk_status plan_moments(mk_trainer *t) {
    mk_model *model = t->model;
    t->num_groups = mk_model_param_groups(model, t->groups, MK_MAX_PARAM_GROUPS);
    t->moment_floats = 0;
    for (int g = 0; g < t->num_groups; g++) {
        int bf16 = t->groups[g].kind == MK_GROUP_PAIR_TABLE && t->pair_state == MK_PAIR_STATE_BF16;
        t->moments_at[g] = bf16 ? -1 : t->moment_floats;
        if (!bf16) t->moment_floats += t->groups[g].size;
    }
    t->pair = NULL;
    for (int i = 0; i < mk_model_num_tensors(model); i++) {
        const mk_tensor *tn = mk_model_tensor(model, i);
        if (t->groups[tn->group].kind == MK_GROUP_PAIR_TABLE) t->pair = tn;
    }
    const int moves = mk_model_find(model, "move_table");
    t->moves = moves >= 0 ? mk_model_tensor(model, moves) : NULL;
    if (!t->moves) /* model.c always makes one, in a dense group */
        return mk_fail(MK_ERR_VALUE, "Trainer: the model reports no move table");
    if (!t->pair) /* model.c always makes one: a model without it is a bug there */
        return mk_fail(MK_ERR_VALUE, "Trainer: the model reports no pair-table parameter group");
    return MK_OK;
}

/* The bf16 pair-table moments: 2 numel uint16, zero (bf16 +0 is all zero bits, so a float
 * fill of numel floats clears both halves). */
static mk_status alloc_pair_bf16(mk_trainer *t, const mk_backend *be, void *stream) {
    int64_t n = t->pair->numel;
    void *buf = NULL;
    mk_status st = be->alloc(stream, (size_t)(2 * n) * sizeof(uint16_t), &buf);
    if (st == MK_OK) st = be->fill(stream, buf, 0.0f, n);
    if (st != MK_OK) {
        be->free(stream, buf);
        return st;
    }
    t->pair_m16 = buf;
    t->pair_v16 = t->pair_m16 + n;
    return MK_OK;
}

/* n stamps, all 0 (int32 0 has float 0's bits). */
static mk_status alloc_stamps(const mk_backend *be, void *stream, int64_t n, int32_t **out) {
    void *stamps = NULL;
    mk_status st = be->alloc(stream, (size_t)(n ? n : 1) * sizeof(int32_t), &stamps);
    if (st == MK_OK) st = be->fill(stream, stamps, 0.0f, n);
    if (st != MK_OK) be->free(stream, stamps);
    *out = st == MK_OK ? stamps : NULL;
    return st;
}

/* The stamps (all 0) of each sparse table, the move table's mask, and the gap window
 * (entry 0 reset) of a sparse trainer; freed by mk_trainer_destroy on failure. */
static mk_status alloc_sparse(mk_trainer *t, const mk_backend *be, void *stream) {
    void *gaps = NULL;
    MK_TRY(be->alloc(stream, (size_t)MK_GAP_WINDOW * MK_GAP_FIELDS * sizeof(double), &gaps));
    t->gaps = gaps;
    MK_TRY(be->pair_gap_advance(stream, t->gaps, 0, 1.0, 0.0, 1.0, 1.0, 1.0, NULL));
    t->base = 0;
    if (t->pair_update != MK_PAIR_UPDATE_DENSE)
        MK_TRY(alloc_stamps(be, stream, t->pair->shape[0], &t->stamps));
    if (t->move_update != MK_PAIR_UPDATE_DENSE) {
        const int64_t rows = t->moves->shape[0];
        MK_TRY(alloc_stamps(be, stream, rows, &t->move_stamps));
        void *mask = NULL;
        MK_TRY(be->alloc(stream, (size_t)(rows ? rows : 1), &mask));
        t->move_mask = mask;
    }
    return MK_OK;
}

mk_status mk_trainer_create(mk_model *model, const mk_trainer_config *cfg, int pair_state,
                            int pair_update, int move_update, mk_trainer **out) {
    *out = NULL;
    mk_status st = mk_trainer_config_check(cfg);
    if (st != MK_OK) return st;
    if (!mk_trainer_pair_state_name(pair_state))
        return mk_fail(MK_ERR_VALUE, "Trainer: unknown pair_state_dtype %d", pair_state);
    if (!mk_trainer_pair_update_name(pair_update))
        return mk_fail(MK_ERR_VALUE, "Trainer: unknown pair_update %d", pair_update);
    if (!mk_trainer_pair_update_name(move_update))
        return mk_fail(MK_ERR_VALUE, "Trainer: unknown move_update %d", move_update);
    if ((st = check_sparse_config(pair_update, move_update, cfg)) != MK_OK) return st;
    mk_trainer *t = calloc(1, sizeof *t);
    if (!t) return mk_fail(MK_ERR_NOMEM, "Trainer: out of memory");
    t->model = model;
    t->cfg = *cfg;
    t->pair_state = pair_state;
    t->pair_update = pair_update;
    t->move_update = move_update;
    const mk_backend *be = mk_model_backend(model);
    void *stream = mk_model_stream(model);
    if ((st = plan_moments(t)) != MK_OK ||
        (pair_state == MK_PAIR_STATE_BF16 && (st = alloc_pair_bf16(t, be, stream)) != MK_OK)) {
        free(t);
        return st;
    }
    if (any_sparse(t) && (st = alloc_sparse(t, be, stream)) != MK_OK) {
        mk_trainer_destroy(t);
        return st;
    }
    int64_t n = t->moment_floats;
    void *m = NULL, *v = NULL;
    if ((st = be->alloc(stream, (size_t)n * sizeof(float), &m)) != MK_OK ||
        (st = be->alloc(stream, (size_t)n * sizeof(float), &v)) != MK_OK ||
        (st = be->fill(stream, m, 0.0f, n)) != MK_OK || (st = be->fill(stream, v, 0.0f, n)) != MK_OK ||
        (!be->host_memory &&
         (st = be->alloc(stream, MK_STATS_RING * MK_STAT_COUNT * sizeof(float), (void **)&t->ring)) != MK_OK)) {
        be->free(stream, m);
        be->free(stream, v);
        mk_trainer_destroy(t);
        return st;
    }
    t->m = m;
    t->v = v;
    t->fuse_pair_table = 1;
    *out = t;
    return MK_OK;
}

void mk_trainer_destroy(mk_trainer *t) {
    if (!t) return;
    const mk_backend *be = mk_model_backend(t->model);
    be->free(mk_model_stream(t->model), t->m);
    be->free(mk_model_stream(t->model), t->v);
    be->free(mk_model_stream(t->model), t->ring);
    be->free(mk_model_stream(t->model), t->pair_m16);
    be->free(mk_model_stream(t->model), t->stamps);
    be->free(mk_model_stream(t->model), t->gaps);
    be->free(mk_model_stream(t->model), t->move_stamps);
    be->free(mk_model_stream(t->model), t->move_mask);
    be->free(mk_model_stream(t->model), t->pair_work);
    be->free(mk_model_stream(t->model), t->row_ids);
    be->free(mk_model_stream(t->model), t->row_grads);
    free(t);
}

const mk_trainer_config *mk_trainer_get_config(const mk_trainer *t) { return &t->cfg; }
mk_status mk_trainer_set_config(mk_trainer *t, const mk_trainer_config *cfg) {
    mk_status st = mk_trainer_config_check(cfg);
    if (st == MK_OK) st = check_sparse_config(t->pair_update, t->move_update, cfg);
    if (st == MK_OK) t->cfg = *cfg;
    return st;
}
/* The step count is read by Trainer.step_count's getter without the model (the Python
 * binding takes it for every write: steps, step_count and fused setters, load): atomic
 * accesses make that read well-defined while a step on another thread stores it. */
int64_t mk_trainer_step_count(const mk_trainer *t) { return __atomic_load_n(&t->steps, __ATOMIC_RELAXED); }
mk_status mk_trainer_check_step_count(const char *op, int64_t steps) {
    if (steps < 0)
        return mk_fail(MK_ERR_VALUE, "%s: step_count must be >= 0, got %lld", op,
                       (long long)steps);
    return MK_OK;
}
mk_status mk_trainer_set_step_count(mk_trainer *t, int64_t steps) {
    mk_status st = mk_trainer_check_step_count("Trainer", steps);
    if (st == MK_OK) st = mk_trainer_flush(t); /* every row caught up under the old count */
    if (st == MK_OK) {
        t->pending = 0; /* a backward before this state is not applied to it */
        __atomic_store_n(&t->steps, steps, __ATOMIC_RELAXED);
        t->base = steps; /* the flush left every stamp 0 and entry 0 reset */
    }
    return st;
}
int mk_trainer_pair_update(const mk_trainer *t) { return t->pair_update; }
int mk_trainer_move_update(const mk_trainer *t) { return t->move_update; }

/* The pair table's moments as the backend entries take them, and its parameters. */
static void pair_moments(mk_trainer *t, void **m, void **v) {
    if (t->pair_state == MK_PAIR_STATE_BF16) {
        *m = t->pair_m16;
        *v = t->pair_v16;
    } else {
        *m = t->m + moment_offset(t, t->pair);
        *v = t->v + moment_offset(t, t->pair);
    }
}
static int64_t pair_rows(const mk_trainer *t) { return t->pair->shape[0]; }

/* The move table's rows caught up: those the staged batch names (its labels' rows,
 * mk_model_table_rows), or every row (staged NULL). */
static mk_status catch_up_moves(mk_trainer *t, const mk_batch *staged) {
    const mk_backend *be = mk_model_backend(t->model);
    const int64_t o = t->moves->offset, mo = moment_offset(t, t->moves);
    const int32_t *rows = NULL;
    if (staged) MK_TRY(mk_model_table_rows(t->model, &rows));
    return be->move_rows_catch_up(
        mk_model_stream(t->model), rows, staged ? staged->counts : NULL,
        staged ? staged->B : 0, staged ? staged->L : 0, t->moves->shape[0], t->moves->shape[1],
        mk_model_params(t->model) + o, t->m + mo, t->v + mo, t->move_stamps, t->gaps,
        t->steps - t->base, t->move_update == MK_PAIR_UPDATE_SPARSE, (float)t->cfg.eps,
        t->move_mask);
}

mk_status mk_trainer_flush(mk_trainer *t) {
    if (!any_sparse(t)) return MK_OK;
    const mk_backend *be = mk_model_backend(t->model);
    void *stream = mk_model_stream(t->model);
    if (t->pair_update != MK_PAIR_UPDATE_DENSE) {
        void *m, *v;
        pair_moments(t, &m, &v);
        int64_t now = t->steps - t->base, P = mk_model_config(t->model)->pair_dim;
        MK_TRY(be->pair_catch_up(stream, NULL, 0, 0, P, mk_model_config(t->model)->num_tokens,
                                 mk_model_params(t->model) + t->pair->offset, m, v,
                                 t->pair_state == MK_PAIR_STATE_BF16, t->stamps, t->gaps, now,
                                 t->pair_update == MK_PAIR_UPDATE_SPARSE, (float)t->cfg.eps,
                                 mk_gap_seed(mk_bf16_step_seed(t->steps)), NULL, 0));
    }
    if (t->move_update != MK_PAIR_UPDATE_DENSE) MK_TRY(catch_up_moves(t, NULL));
    /* the window restarts here: every stamp 0, entry 0 the identity */
    if (t->stamps) MK_TRY(be->fill(stream, (float *)t->stamps, 0.0f, pair_rows(t)));
    if (t->move_stamps) MK_TRY(be->fill(stream, (float *)t->move_stamps, 0.0f, t->moves->shape[0]));
    MK_TRY(be->pair_gap_advance(stream, t->gaps, 0, 1.0, 0.0, 1.0, 1.0, 1.0, NULL));
    t->base = t->steps;
    return MK_OK;
}

/* Before the forward pass reads the sparse tables: the rows the batch names caught up to
 * the last step (and every row first, when the window is full). */
static mk_status catch_up_batch(void *ctx, const int32_t *tokens, int64_t rows,
                                const mk_batch *staged) {
    mk_trainer *t = ctx;
    t->bucketed = 0;
    if (t->steps - t->base >= MK_GAP_WINDOW - 1) MK_TRY(mk_trainer_flush(t));
    if (t->move_update != MK_PAIR_UPDATE_DENSE) MK_TRY(catch_up_moves(t, staged));
    if (t->pair_update == MK_PAIR_UPDATE_DENSE) return MK_OK;
    const mk_backend *be = mk_model_backend(t->model);
    void *stream = mk_model_stream(t->model);
    const size_t need = mk_model_work_bytes(t->model);
    if (need > t->pair_work_bytes) {
        be->free(stream, t->pair_work);
        t->pair_work = NULL;
        t->pair_work_bytes = 0;
        MK_TRY(be->alloc(stream, need, &t->pair_work));
        t->pair_work_bytes = need;
    }
    void *m, *v;
    pair_moments(t, &m, &v);
    MK_TRY(be->pair_catch_up(stream, tokens, rows,
                             mk_model_config(t->model)->tokens_per_side,
                             mk_model_config(t->model)->pair_dim,
                             mk_model_config(t->model)->num_tokens,
                             mk_model_params(t->model) + t->pair->offset, m, v,
                             t->pair_state == MK_PAIR_STATE_BF16, t->stamps, t->gaps,
                             t->steps - t->base, t->pair_update == MK_PAIR_UPDATE_SPARSE,
                             (float)t->cfg.eps, mk_gap_seed(mk_bf16_step_seed(t->steps)),
                             t->pair_work, t->pair_work_bytes));
    t->bucketed = 1;
    return MK_OK;
}
int mk_trainer_pair_state(const mk_trainer *t) { return t->pair_state; }
size_t mk_trainer_state_bytes(const mk_trainer *t) {
    int64_t pair = t->pair_state == MK_PAIR_STATE_BF16 ? t->pair->numel : 0;
    return (size_t)(2 * t->moment_floats) * sizeof(float) + (size_t)(2 * pair) * sizeof(uint16_t);
}
void mk_trainer_profile(mk_trainer *t, int enable) {
    t->profile = enable;
    t->times = (mk_phase_times){0};
}
mk_phase_times mk_trainer_times(const mk_trainer *t) { return t->times; }
void mk_trainer_set_fused(mk_trainer *t, int fused) { t->fuse_pair_table = fused != 0; }
int mk_trainer_fused(const mk_trainer *t) { return t->fuse_pair_table; }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds since *mark, after the stream has drained (profiling only); moves the mark. */
static double lap(mk_trainer *t, double *mark) {
    mk_model_backend(t->model)->synchronize(mk_model_stream(t->model));
    double when = now(), dt = when - *mark;
    *mark = when;
    return dt;
}


static mk_status not_finite(const mk_trainer *t, const float *stats) {
    return mk_fail(MK_ERR_FLOAT,
                   "Trainer.step: the loss is not finite (%g: policy %g, value %g) at step %lld; "
                   "the update was not applied",
                   (double)stats[MK_STAT_LOSS], (double)stats[MK_STAT_POLICY_LOSS],
                   (double)stats[MK_STAT_VALUE_LOSS], (long long)t->steps);
}

static mk_adamw_args adamw_args(const mk_trainer *t, float lr, int64_t step) {
    return (mk_adamw_args){
        .lr = lr,
        .beta1 = (float)t->cfg.beta1,
        .beta2 = (float)t->cfg.beta2,
        .eps = (float)t->cfg.eps,
        .bias_correction1 = (float)(1.0 - pow(t->cfg.beta1, (double)step)),
        .bias_correction2 = (float)(1.0 - pow(t->cfg.beta2, (double)step)),
    };
}

/* The pair-table rows given to mk_trainer_apply: ids [n], their gradient rows [n, P]. */
typedef struct {
    const int64_t *ids;
    const float *grads;
    int64_t n;
} given_rows;

/* The pair table's AdamW of step `step`: from the staged batch's gradient (given NULL:
 * mk_trainer_step), or from given rows (mk_trainer_apply); then the sparse update's gap
 * window takes the step. It goes first: its fused update is the one that needs scratch
 * memory, and failing before any tensor changed keeps a failed step from half-applying.
 * It is updated over its tensor only (its bf16 moments hold numel values, no padding). */
static mk_status update_pair_table(mk_trainer *t, mk_adamw_args *args, float *dstats,
                                   int64_t step, const given_rows *given) {
    mk_model *model = t->model;
    const mk_backend *be = mk_model_backend(model);
    void *stream = mk_model_stream(model);
    const int sparse = t->pair_update != MK_PAIR_UPDATE_DENSE;
    float *p = mk_model_params(model), *g = mk_model_grads(model);
    const int64_t po = t->pair->offset, pn = t->pair->numel;
    float *pm = NULL, *pv = NULL; /* with fp32 moments: the pair table's, in m and v */
    if (t->pair_state != MK_PAIR_STATE_BF16) {
        pm = t->m + moment_offset(t, t->pair);
        pv = t->v + moment_offset(t, t->pair);
    }
    args->weight_decay = t->groups[t->pair->group].decay ? (float)t->cfg.weight_decay : 0.0f;
    if (given && sparse) {
        MK_TRY(be->pair_rows_adamw(
            stream, given->ids, given->grads, given->n, mk_model_config(model)->pair_dim, p + po,
            pm ? (void *)pm : t->pair_m16, pm ? (void *)pv : t->pair_v16, pm == NULL, t->stamps,
            t->gaps, step - t->base, t->pair_update == MK_PAIR_UPDATE_SPARSE, (float)t->cfg.eps,
            mk_gap_seed(mk_bf16_step_seed(t->steps)), args, dstats, mk_bf16_step_seed(step)));
    } else if (given) { /* dense: the given rows in a zero gradient, then every row's AdamW */
        MK_TRY(be->fill(stream, g + po, 0.0f, pn));
        MK_TRY(be->pair_rows_scatter(stream, given->ids, given->grads, given->n,
                                     mk_model_config(model)->pair_dim, g + po));
        if (t->pair_state == MK_PAIR_STATE_BF16)
            MK_TRY(be->adamw_bf16(stream, p + po, g + po, t->pair_m16, t->pair_v16, pn, args,
                                  dstats, mk_bf16_step_seed(step)));
        else
            MK_TRY(be->adamw(stream, p + po, g + po, pm, pv, pn, args, dstats));
    } else if (sparse) {
        const int bucketed = t->bucketed; /* this step's catch-up's, used once */
        t->bucketed = 0;
        MK_TRY(mk_model_pair_table_adamw_sparse(
            model, pm ? (void *)pm : t->pair_m16, pm ? (void *)pv : t->pair_v16, pm == NULL,
            t->stamps, step - t->base, args, dstats, mk_bf16_step_seed(step), t->pair_work,
            t->pair_work_bytes, bucketed));
    }
    else if (t->pair_state == MK_PAIR_STATE_BF16)
        MK_TRY(t->fuse_pair_table
                   ? mk_model_pair_table_adamw_bf16(model, t->pair_m16, t->pair_v16, args, dstats,
                                                    mk_bf16_step_seed(step))
                   : be->adamw_bf16(stream, p + po, g + po, t->pair_m16, t->pair_v16, pn, args,
                                    dstats, mk_bf16_step_seed(step)));
    else if (t->fuse_pair_table)
        MK_TRY(mk_model_pair_table_adamw(model, pm, pv, args, dstats));
    else
        MK_TRY(be->adamw(stream, p + po, g + po, pm, pv, pn, args, dstats));
    return MK_OK;
}

/* A sparse move table: AdamW on the rows the staged batch names (the mask its catch-up
 * left), from the dense gradient the backward wrote. */
static mk_status update_moves(mk_trainer *t, mk_adamw_args *args, float *dstats, int64_t step) {
    if (t->move_update == MK_PAIR_UPDATE_DENSE) return MK_OK;
    const mk_backend *be = mk_model_backend(t->model);
    const int64_t o = t->moves->offset, mo = moment_offset(t, t->moves);
    args->weight_decay = t->groups[t->moves->group].decay ? (float)t->cfg.weight_decay : 0.0f;
    return be->move_rows_adamw(mk_model_stream(t->model), t->move_mask, t->moves->shape[0],
                               t->moves->shape[1], mk_model_params(t->model) + o,
                               mk_model_grads(t->model) + o, t->m + mo, t->v + mo, t->move_stamps,
                               step - t->base, args, dstats);
}

/* After a step's updates: every stamp's gap entry takes the step (the device skips it when
 * the step was skipped, too). Both sparse tables are decayed tensors (their groups decay),
 * so one window of entries serves both. */
static mk_status advance_gaps(mk_trainer *t, const mk_adamw_args *args, float *dstats,
                              int64_t step) {
    if (!any_sparse(t)) return MK_OK;
    mk_adamw_args decayed = *args;
    decayed.weight_decay = (float)t->cfg.weight_decay;
    const mk_adamw_consts k = mk_adamw_prepare(&decayed);
    return mk_model_backend(t->model)->pair_gap_advance(
        mk_model_stream(t->model), t->gaps, step - t->base, (double)k.decay, (double)k.step_size,
        (double)k.inv_bc2_sqrt, (double)k.b1, sqrt((double)k.b2), dstats);
}

/* Every other group, one launch each over its whole range (the model keeps the padding
 * between its tensors at 0, which AdamW leaves at 0); a sparse move table's range (with
 * its padding) is left out, split around. */
static mk_status update_dense(mk_trainer *t, mk_adamw_args *args, float *dstats) {
    const mk_backend *be = mk_model_backend(t->model);
    float *p = mk_model_params(t->model), *g = mk_model_grads(t->model);
    const int sparse_moves = t->move_update != MK_PAIR_UPDATE_DENSE;
    const int64_t skip0 = t->moves->offset, skip1 = skip0 + mk_arena_aligned(t->moves->numel);
    for (int k = 0; k < t->num_groups; k++) {
        const mk_param_group *pg = &t->groups[k];
        if (pg->kind != MK_GROUP_DENSE) continue;
        args->weight_decay = pg->decay ? (float)t->cfg.weight_decay : 0.0f;
        int64_t lo[2] = {pg->offset, 0}, hi[2] = {pg->offset + pg->size, 0};
        if (sparse_moves && t->moves->group == k) {
            lo[1] = skip1;
            hi[1] = hi[0];
            hi[0] = skip0;
        }
        for (int r = 0; r < 2; r++) {
            if (hi[r] <= lo[r]) continue;
            const int64_t mo = t->moments_at[k] + (lo[r] - pg->offset);
            MK_TRY(be->adamw(mk_model_stream(t->model), p + lo[r], g + lo[r], t->m + mo, t->v + mo,
                             hi[r] - lo[r], args, dstats));
        }
    }
    return MK_OK;
}

/* The step's stats (host memory: read back and checked; a device: filed in the ring),
 * then the step count. */
static mk_status finish_step(mk_trainer *t, int64_t step, float *dstats, float *stats) {
    const mk_backend *be = mk_model_backend(t->model);
    void *stream = mk_model_stream(t->model);
    if (be->host_memory) {
        MK_TRY(be->to_host(stream, stats, dstats, MK_STAT_COUNT * sizeof(float)));
        if (stats[MK_STAT_FINITE] == 0.0f) return not_finite(t, stats); /* AdamW skipped */
    } else { /* file the stats on the device: no synchronisation (see the top of this file) */
        MK_TRY(be->copy(stream, t->ring + (step % MK_STATS_RING) * MK_STAT_COUNT, dstats,
                        MK_STAT_COUNT * sizeof(float)));
    }
    __atomic_store_n(&t->steps, step, __ATOMIC_RELAXED); /* read concurrently: see above */
    return MK_OK;
}

static mk_status step_staged(mk_trainer *t, const mk_batch *batch, float *stats);

mk_status mk_trainer_step(mk_trainer *t, const mk_batch *batch, float *stats) {
    MK_TRY(mk_model_check_batch(t->model, "Trainer.step", batch, 1));
    t->pending = 0; /* this step replaces the staged batch a backward left */
    /* the batch's slot is free again once everything that reads it is queued, failed or not */
    mk_status st = step_staged(t, batch, stats), end = mk_model_end_batch(t->model);
    return st != MK_OK ? st : end;
}

/* The step after the check: forward, loss, backward, AdamW, stats. */
static mk_status step_staged(mk_trainer *t, const mk_batch *batch, float *stats) {
    mk_model *model = t->model;
    const mk_backend *be = mk_model_backend(model);
    void *stream = mk_model_stream(model);
    float *dstats = mk_model_stats(model);
    double mark = t->profile ? now() : 0.0, t_fwd = 0, t_bwd = 0, t_opt = 0, t_pair = 0;

    const int sparse = t->pair_update != MK_PAIR_UPDATE_DENSE;
    MK_TRY(mk_model_forward_loss_prepared(model, batch, (float)t->cfg.value_weight,
                                          any_sparse(t) ? catch_up_batch : NULL, t));
    float lr = (float)mk_trainer_lr_at(&t->cfg, t->steps);
    MK_TRY(be->fill(stream, dstats + MK_STAT_LR, lr, 1));
    if (be->host_memory) {
        MK_TRY(be->to_host(stream, stats, dstats, MK_STAT_COUNT * sizeof(float)));
        if (stats[MK_STAT_FINITE] == 0.0f) return not_finite(t, stats);
    }
    if (t->profile) t_fwd = lap(t, &mark);
    MK_TRY(mk_model_backward(model, !t->fuse_pair_table && !sparse, t->move_mask));
    if (t->profile) t_bwd = lap(t, &mark);

    int64_t step = t->steps + 1;
    mk_adamw_args args = adamw_args(t, lr, step);
    MK_TRY(update_pair_table(t, &args, dstats, step, NULL));
    if (t->profile) t_pair = lap(t, &mark);
    MK_TRY(update_moves(t, &args, dstats, step));
    MK_TRY(update_dense(t, &args, dstats));
    MK_TRY(advance_gaps(t, &args, dstats, step));
    if (t->profile) t_opt = t_pair + lap(t, &mark);
    MK_TRY(finish_step(t, step, dstats, stats));
    if (t->profile) {
        t->times.steps++;
        t->times.forward += t_fwd;
        t->times.backward += t_bwd;
        t->times.optimizer += t_opt;
        t->times.optimizer_pair_table += t_pair;
    }
    return MK_OK;
}

/* ------------------------------------------------------------ a step in two halves */

/* Room for at least n named rows (ids and gradient rows), a quarter more than asked so
 * that a slowly growing count does not reallocate every step; at most the table's rows. */
static mk_status grow_rows(mk_trainer *t, int64_t n) {
    const mk_backend *be = mk_model_backend(t->model);
    void *stream = mk_model_stream(t->model);
    int64_t cap = n + n / 4, P = mk_model_config(t->model)->pair_dim;
    if (cap > pair_rows(t)) cap = pair_rows(t);
    if (cap < n) cap = n;
    be->free(stream, t->row_ids);
    be->free(stream, t->row_grads);
    t->row_ids = NULL;
    t->row_grads = NULL;
    t->row_capacity = 0;
    void *ids = NULL, *grads = NULL;
    mk_status st = be->alloc(stream, (size_t)(cap ? cap : 1) * sizeof(int64_t), &ids);
    if (st == MK_OK) st = be->alloc(stream, (size_t)(cap * P > 0 ? cap * P : 1) * sizeof(float), &grads);
    if (st != MK_OK) {
        be->free(stream, ids);
        return st;
    }
    t->row_ids = ids;
    t->row_grads = grads;
    t->row_capacity = cap;
    return MK_OK;
}

static mk_status backward_staged(mk_trainer *t, const mk_batch *batch, float *stats,
                                 int64_t *rows) {
    mk_model *model = t->model;
    const mk_backend *be = mk_model_backend(model);
    void *stream = mk_model_stream(model);
    float *dstats = mk_model_stats(model);
    const int sparse = t->pair_update != MK_PAIR_UPDATE_DENSE;
    MK_TRY(mk_model_forward_loss_prepared(model, batch, (float)t->cfg.value_weight,
                                          sparse ? catch_up_batch : NULL, t));
    MK_TRY(be->fill(stream, dstats + MK_STAT_LR, (float)mk_trainer_lr_at(&t->cfg, t->steps), 1));
    MK_TRY(be->to_host(stream, stats, dstats, MK_STAT_COUNT * sizeof(float)));
    if (stats[MK_STAT_FINITE] == 0.0f) return MK_OK; /* no gradient: nothing to apply */
    MK_TRY(mk_model_backward(model, 0, NULL));
    int64_t n = 0;
    MK_TRY(mk_model_pair_grad_rows(model, t->row_ids, t->row_grads, t->row_capacity, &n));
    if (n > t->row_capacity) {
        MK_TRY(grow_rows(t, n));
        MK_TRY(mk_model_pair_grad_rows(model, t->row_ids, t->row_grads, t->row_capacity, &n));
    }
    t->row_count = *rows = n;
    t->pending = 1;
    /* a device: the buffers handed out (dense gradients, rows) are complete on return, for
     * a library reading them on another stream (torch's, in the exchange) */
    if (!be->host_memory) MK_TRY(be->synchronize(stream));
    return MK_OK;
}

mk_status mk_trainer_backward(mk_trainer *t, const mk_batch *batch, float *stats, int64_t *rows) {
    *rows = 0;
    if (t->move_update != MK_PAIR_UPDATE_DENSE)
        return mk_fail(MK_ERR_VALUE,
                       "Trainer: move_update='%s' cannot step in two halves (a data-parallel "
                       "run): another rank's batch names move-table rows this one's does not; "
                       "use move_update='dense' there",
                       mk_trainer_pair_update_name(t->move_update));
    MK_TRY(mk_model_check_batch(t->model, "Trainer.step", batch, 1));
    t->pending = 0;
    t->row_count = 0;
    mk_status st = backward_staged(t, batch, stats, rows), end = mk_model_end_batch(t->model);
    if (st != MK_OK || end != MK_OK) t->pending = 0;
    return st != MK_OK ? st : end;
}

void mk_trainer_dense_range(const mk_trainer *t, int64_t *offset, int64_t *size) {
    int64_t lo = -1, hi = 0;
    for (int k = 0; k < t->num_groups; k++) {
        const mk_param_group *pg = &t->groups[k];
        if (pg->kind != MK_GROUP_DENSE) continue;
        if (lo < 0 || pg->offset < lo) lo = pg->offset;
        if (pg->offset + pg->size > hi) hi = pg->offset + pg->size;
    }
    *offset = lo < 0 ? 0 : lo;
    *size = lo < 0 ? 0 : hi - lo;
}

void mk_trainer_pair_rows(const mk_trainer *t, const int64_t **ids, const float **grads) {
    *ids = t->row_ids;
    *grads = t->row_grads;
}

mk_status mk_trainer_apply(mk_trainer *t, const int64_t *ids, const float *grads, int64_t n,
                           float *stats) {
    static const char op[] = "Trainer.apply";
    mk_model *model = t->model;
    const mk_backend *be = mk_model_backend(model);
    void *stream = mk_model_stream(model);
    float *dstats = mk_model_stats(model);
    if (!t->pending)
        return mk_fail(MK_ERR_VALUE,
                       "%s: no backward to apply (each backward with a finite loss is applied "
                       "once; a step, or a loaded state, since then cancels it)",
                       op);
    if (n < 0 || n > pair_rows(t))
        return mk_fail(MK_ERR_VALUE, "%s: %lld pair-table rows given, the table has %lld", op,
                       (long long)n, (long long)pair_rows(t));
    if (be->host_memory)
        for (int64_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= pair_rows(t) || (i > 0 && ids[i] <= ids[i - 1]))
                return mk_fail(MK_ERR_VALUE,
                               "%s: pair-table row ids must be strictly ascending in [0, %lld); "
                               "ids[%lld] = %lld%s",
                               op, (long long)pair_rows(t), (long long)i, (long long)ids[i],
                               i > 0 && ids[i] <= ids[i - 1] ? " follows a larger or equal one" : "");
    float lr = (float)mk_trainer_lr_at(&t->cfg, t->steps);
    stats[MK_STAT_LR] = lr;
    if (!(stats[MK_STAT_FINITE] != 0.0f && isfinite(stats[MK_STAT_LOSS])))
        return stats[MK_STAT_FINITE] = 0.0f, not_finite(t, stats);
    MK_TRY(be->to_device(stream, dstats, stats, MK_STAT_COUNT * sizeof(float)));
    t->pending = 0;
    const int64_t step = t->steps + 1;
    mk_adamw_args args = adamw_args(t, lr, step);
    const given_rows given = {ids, grads, n};
    MK_TRY(update_pair_table(t, &args, dstats, step, &given));
    MK_TRY(update_dense(t, &args, dstats));
    MK_TRY(advance_gaps(t, &args, dstats, step));
    return finish_step(t, step, dstats, stats);
}

mk_status mk_trainer_read_stats(mk_trainer *t, int64_t step, float *stats) {
    const mk_backend *be = mk_model_backend(t->model);
    if (!t->ring)
        return mk_fail(MK_ERR_VALUE, "Trainer: this backend returns stats with each step");
    if (step < 1 || step > t->steps || step <= t->steps - MK_STATS_RING)
        return mk_fail(MK_ERR_VALUE,
                       "Trainer: the stats of step %lld are not kept (steps %lld to %lld are: "
                       "read a step's stats within %d steps of it)",
                       (long long)step, (long long)(t->steps > MK_STATS_RING ? t->steps - MK_STATS_RING + 1 : 1),
                       (long long)t->steps, MK_STATS_RING);
    MK_TRY(be->to_host(mk_model_stream(t->model), stats,
                       t->ring + (step % MK_STATS_RING) * MK_STAT_COUNT,
                       MK_STAT_COUNT * sizeof(float)));
    if (stats[MK_STAT_FINITE] == 0.0f)
        return mk_fail(MK_ERR_FLOAT,
                       "Trainer.step: the loss was not finite (%g: policy %g, value %g) at step %lld; "
                       "its update was skipped on the device",
                       (double)stats[MK_STAT_LOSS], (double)stats[MK_STAT_POLICY_LOSS],
                       (double)stats[MK_STAT_VALUE_LOSS], (long long)(step - 1));
    return MK_OK;
}

/* A bf16 moment goes through a host staging buffer: it is converted on the host, where
 * state_dict / load_state_dict run anyway, instead of adding a conversion to every backend. */
static mk_status pair_moment_copy(mk_trainer *t, int kind, float *read, const float *write) {
    const mk_backend *be = mk_model_backend(t->model);
    void *stream = mk_model_stream(t->model);
    int64_t n = t->pair->numel;
    uint16_t *dev = kind ? t->pair_v16 : t->pair_m16;
    uint16_t *host = malloc((size_t)(n ? n : 1) * sizeof(uint16_t));
    if (!host) return mk_fail(MK_ERR_NOMEM, "Trainer: out of memory for the pair table's moments");
    mk_status st;
    if (read) {
        st = be->to_host(stream, host, dev, (size_t)n * sizeof(uint16_t));
        for (int64_t i = 0; st == MK_OK && i < n; i++) read[i] = mk_bf16_to_float(host[i]);
    } else {
        for (int64_t i = 0; i < n; i++) host[i] = mk_float_to_bf16_nearest(write[i]);
        /* to_device may return before the copy is done on a GPU: finish it before freeing */
        st = be->to_device(stream, dev, host, (size_t)n * sizeof(uint16_t));
        if (st == MK_OK) st = be->synchronize(stream);
    }
    free(host);
    return st;
}

mk_status mk_trainer_read_moment(mk_trainer *t, int kind, int tensor, float *host) {
    const mk_tensor *tn = mk_model_tensor(t->model, tensor);
    if (tn == t->pair || tn == t->moves) MK_TRY(mk_trainer_flush(t)); /* the caught-up state */
    if (t->pair_state == MK_PAIR_STATE_BF16 && tn == t->pair)
        return pair_moment_copy(t, kind, host, NULL);
    const mk_backend *be = mk_model_backend(t->model);
    return be->to_host(mk_model_stream(t->model), host, (kind ? t->v : t->m) + moment_offset(t, tn),
                       (size_t)tn->numel * sizeof(float));
}

mk_status mk_trainer_write_moment(mk_trainer *t, int kind, int tensor, const float *host) {
    const mk_tensor *tn = mk_model_tensor(t->model, tensor);
    if (tn == t->pair || tn == t->moves) MK_TRY(mk_trainer_flush(t)); /* no gap left to apply */
    if (t->pair_state == MK_PAIR_STATE_BF16 && tn == t->pair)
        return pair_moment_copy(t, kind, NULL, host);
    const mk_backend *be = mk_model_backend(t->model);
    return be->to_device(mk_model_stream(t->model), (kind ? t->v : t->m) + moment_offset(t, tn),
                         host, (size_t)tn->numel * sizeof(float));
}
