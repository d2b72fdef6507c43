/* The training step: forward, loss, backward, AdamW, over mk_backend (backend.h).
 *
 * AdamW follows PyTorch (torch.optim.AdamW): with t the 1-based step number,
 *   p *= 1 - lr_t wd          (wd = 0 for tensors whose name ends in "bias")
 *   m  = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
 *   p -= lr_t / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * Learning rate of the step with 0-based index s (mk_trainer_lr_at):
 *   s < warmup:       lr (s + 1) / warmup                         (linear warm-up from 0)
 *   constant:         lr
 *   cosine:           min_lr + (lr - min_lr) (1 + cos(pi p)) / 2,
 *                     p = min(1, (s - warmup) / (total - warmup))
 * The moments m and v are one allocation each, with the parameters' offset table. With
 * pair_state MK_PAIR_STATE_BF16 the pair table's m and v are instead bf16 (bf16.h), in one
 * uint16 allocation of their own, and the fp32 buffers skip the pair table's span (its
 * 2 x 176 MB at the seed shapes become 2 x 88 MB): its AdamW runs on the backend's *_bf16
 * entries, rounding stochastically with seed mk_bf16_step_seed(t).
 * Phases: backward (every gradient but the pair table's), then AdamW: the pair table's
 * fused with its gradient (pair_sums_backward_adamw) so its 176 MB gradient is never
 * written or read, then every other tensor in two launches (decayed weights, biases).
 */
#ifndef MANAKA_TRAINER_H
#define MANAKA_TRAINER_H

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MK_SCHEDULE_CONSTANT = 0, MK_SCHEDULE_COSINE = 1 };
/* Storage of the pair table's AdamW moments (fixed for a trainer's life). */
enum { MK_PAIR_STATE_F32 = 0, MK_PAIR_STATE_BF16 = 1 };
/* Which pair-table rows a step updates (mk_trainer_create explains). */
enum { MK_PAIR_UPDATE_DENSE = 0, MK_PAIR_UPDATE_SPARSE = 1, MK_PAIR_UPDATE_LAZY = 2 };

typedef struct {
    double lr, beta1, beta2, eps, weight_decay, min_lr, value_weight;
    int64_t warmup_steps;
    int schedule;        /* MK_SCHEDULE_* */
    int has_total_steps; /* 0: none (Python's None) */
    int64_t total_steps; /* required (> warmup_steps) by the cosine schedule */
} mk_trainer_config;

/* Phase timings (seconds, accumulated) measured when profiling is on. Profiling
 * synchronises the stream between phases, so it is off by default. */
typedef struct {
    int64_t steps;
    double forward;   /* network and loss */
    double backward;  /* every gradient but the pair table's when fused */
    double optimizer; /* AdamW over every tensor, pair table included */
    double optimizer_pair_table; /* with fusion: the pair table's gradient and AdamW */
} mk_phase_times;

typedef struct mk_trainer mk_trainer;

/* The hyperparameters are checked here only; the binding converts types (and names the
 * enums below through these functions), manaka.Trainer converts Python values (betas to
 * a pair, floats). Messages name the argument as manaka.Trainer does.
 * MK_OK, or MK_ERR_VALUE naming the bad hyperparameter: lr, min_lr, weight_decay and
 * value_weight finite and >= 0, betas in [0, 1), eps finite and > 0, warmup_steps and
 * total_steps (when given) >= 0, a known schedule; "cosine" needs total_steps >
 * warmup_steps. */
mk_status mk_trainer_config_check(const mk_trainer_config *cfg);
/* The codes of the names "constant" / "cosine" (MK_SCHEDULE_*) and "float32" / "bf16"
 * (MK_PAIR_STATE_*): MK_OK, or MK_ERR_VALUE "<op>: schedule must be 'constant' or
 * 'cosine', got '<name>'" (pair_state_dtype likewise). */
mk_status mk_trainer_schedule_code(const char *op, const char *name, int *schedule);
mk_status mk_trainer_pair_state_code(const char *op, const char *name, int *pair_state);
/* The names of valid codes (as above). */
const char *mk_trainer_schedule_name(int schedule);
const char *mk_trainer_pair_state_name(int pair_state);
double mk_trainer_lr_at(const mk_trainer_config *cfg, int64_t step);

/* The trainer borrows `model`, which must outlive it. Moments start at zero; `pair_state`
 * is MK_PAIR_STATE_*, `pair_update` MK_PAIR_UPDATE_* (pair_gap.h) (MK_ERR_VALUE otherwise;
 * "sparse" and "lazy" also need max(lr, min_lr) * weight_decay < 1, here and in
 * mk_trainer_set_config).
 *
 * pair_update: "dense" updates every pair-table row every step. "sparse" and "lazy" update
 * only the rows a pair of the batch names: before the forward pass those rows are caught
 * up over the steps they were not named (moments decayed by b1^k, b2^k, the weight decay
 * of every skipped step; "sparse" also the drift the decaying moments would have moved the
 * parameter by, in closed form: pair_gap.h), then their AdamW runs after the backward pass.
 * mk_trainer_flush catches every row up; reading or writing the pair table's moments
 * flushes first, as does setting the step count (so a read sees, and a write replaces,
 * the caught-up state). A flush changes later results by rounding only. */
mk_status mk_trainer_create(mk_model *model, const mk_trainer_config *cfg, int pair_state,
                            int pair_update, int move_update, mk_trainer **out);
mk_status mk_trainer_pair_update_code(const char *op, const char *name, int *pair_update);
const char *mk_trainer_pair_update_name(int pair_update);
int mk_trainer_pair_update(const mk_trainer *trainer);
/* move_update (MK_PAIR_UPDATE_* codes and names, under the name "move_update"): the same
 * choice for GatherDot's move table, whose rows a batch names by its legal moves' labels
 * (~10 % of them in a batch of 512 engine positions with shogi's richest move encoding).
 * Its fp32 moments, stamps and the gap window are shared with the pair table's sparse
 * update when both are on. The step in two halves (mk_trainer_backward, a data-parallel
 * run) refuses a sparse move table: another rank's batch names rows this one's does not. */
mk_status mk_trainer_move_update_code(const char *op, const char *name, int *move_update);
int mk_trainer_move_update(const mk_trainer *trainer);
/* Catches every row of the sparse tables up to the current step (a no-op when both
 * updates are "dense"). */
mk_status mk_trainer_flush(mk_trainer *trainer);
void mk_trainer_destroy(mk_trainer *trainer);
const mk_trainer_config *mk_trainer_get_config(const mk_trainer *trainer);
mk_status mk_trainer_set_config(mk_trainer *trainer, const mk_trainer_config *cfg);
int64_t mk_trainer_step_count(const mk_trainer *trainer);
/* MK_OK, or MK_ERR_VALUE "<op>: step_count must be >= 0, got <steps>" (nothing set). */
mk_status mk_trainer_check_step_count(const char *op, int64_t steps);
mk_status mk_trainer_set_step_count(mk_trainer *trainer, int64_t steps);
int mk_trainer_pair_state(const mk_trainer *trainer); /* MK_PAIR_STATE_* */
/* Bytes of device memory the AdamW moments take (both kinds). */
size_t mk_trainer_state_bytes(const mk_trainer *trainer);
/* Copies the first (kind 0) or second (kind 1) moment of tensor `tensor` to / from host
 * float32 [numel], whatever its storage: bf16 moments are widened exactly on reading and
 * rounded to nearest on writing (so a bf16 state round-trips bit for bit). */
mk_status mk_trainer_read_moment(mk_trainer *trainer, int kind, int tensor, float *host);
mk_status mk_trainer_write_moment(mk_trainer *trainer, int kind, int tensor, const float *host);
void mk_trainer_profile(mk_trainer *trainer, int enable); /* also resets the times */
/* Whether the pair table's gradient is fused with its AdamW update (default 1; 0 runs
 * pair_sums_backward then adamw, for testing that both agree; "sparse" and "lazy" always
 * run their fused update). With fusion the model's
 * gradient buffer does not hold the pair table's gradient after a step. */
void mk_trainer_set_fused(mk_trainer *trainer, int fused);
int mk_trainer_fused(const mk_trainer *trainer);
mk_phase_times mk_trainer_times(const mk_trainer *trainer);

/* Steps whose stats a device backend keeps for a later read (mk_trainer_read_stats). */
#define MK_STATS_RING 256

/* One step on `batch`: check it (MK_ERR_VALUE, nothing changed), forward, loss, backward,
 * then AdamW and step_count + 1.
 * On a backend with host memory, `stats` (host, MK_STAT_COUNT floats) receives loss,
 * policy_loss, value_loss, accuracy and lr at once, and a non-finite loss is MK_ERR_FLOAT
 * naming the step, with parameters, moments and step count unchanged.
 * On a device backend nothing is read back (no host synchronisation): `stats` is not
 * written, the step's stats are filed on the device, and mk_trainer_read_stats fetches
 * them when asked. A non-finite loss then skips the update on the device (parameters and
 * moments unchanged) and is reported when that step's stats are read. */
mk_status mk_trainer_step(mk_trainer *trainer, const mk_batch *batch, float *stats);

/* A step in two halves, for data-parallel training (manaka/distributed.py): each process
 * runs mk_trainer_backward on its own batch, the processes exchange the gradients (the
 * dense range of the model's gradient buffer summed, the named pair-table rows gathered
 * and summed in rank order) and the loss, and each runs mk_trainer_apply with the same
 * exchanged values, so every process makes the same update.
 *
 * mk_trainer_backward: checks the batch (MK_ERR_VALUE, nothing changed), runs forward
 * ("sparse" / "lazy": the rows the batch names caught up first), loss and, when the loss
 * is finite, backward: the dense gradients in the model's gradient buffer
 * (mk_trainer_dense_range), the pair table's as the rows the batch names
 * (mk_trainer_pair_rows, *rows of them; 0 when the loss is not finite). `stats` (host)
 * receives the step's stats on every backend (a device backend synchronises, and its
 * buffers are complete on return: another stream may read them). Nothing is
 * updated and the step count does not move; a non-finite loss is not an error here (the
 * caller exchanges the loss first and no process applies). */
mk_status mk_trainer_backward(mk_trainer *trainer, const mk_batch *batch, float *stats,
                              int64_t *rows);
/* The dense gradients' range of mk_model_grads: [*offset, *offset + *size) floats, every
 * parameter group but the pair table's (padding between tensors included, kept at 0). */
void mk_trainer_dense_range(const mk_trainer *trainer, int64_t *offset, int64_t *size);
/* The last backward's pair-table rows (device memory, valid until the next backward):
 * ids [rows] ascending, grads [rows, P]. */
void mk_trainer_pair_rows(const mk_trainer *trainer, const int64_t **ids, const float **grads);
/* The update of the last backward (MK_ERR_VALUE if there is none, or it was applied), from
 * the dense range of the model's gradient buffer as the caller left it and the pair-table
 * rows ids [n] (strictly ascending, < the table's rows; checked on a backend with host
 * memory) with gradient rows grads [n, P] (device memory): AdamW exactly as
 * mk_trainer_step's ("dense": every row, the given rows' gradient and 0 elsewhere;
 * "sparse" / "lazy": the given rows only, each caught up first), then step_count + 1.
 * `stats` (host) are the stats to record for the step (the processes' mean): a non-finite
 * loss there is MK_ERR_FLOAT with nothing changed. The lr field is the trainer's own. */
mk_status mk_trainer_apply(mk_trainer *trainer, const int64_t *ids, const float *grads, int64_t n,
                           float *stats);

/* The stats of step `step` (1-based, as step_count after it) into `stats` (host): waits for
 * the device. MK_ERR_VALUE if the step is not among the last MK_STATS_RING steps;
 * MK_ERR_FLOAT if its loss was not finite (its update was skipped). Device backends only. */
mk_status mk_trainer_read_stats(mk_trainer *trainer, int64_t step, float *stats);

#ifdef __cplusplus
}
#endif
#endif
