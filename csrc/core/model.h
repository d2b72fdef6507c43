/* The policy/value network of docs/design.md §1, written once over mk_backend (backend.h).
 *
 *   f_s    = concat(PowerSums(embedding, tokens)[:, s].reshape(B, K D), PairSums(pair_table, tokens)[:, s])
 *   x_0    = concat(f_0, f_1)                                   [B, 2 (K D + P)]
 *   x_i+1  = relu(x_i @ trunk.i.weight^T + trunk.i.bias)        for each hidden width
 *   q      = x_n @ policy.weight^T + policy.bias                [B, W]
 *   logits = GatherDot(q, move_table, legal, counts)            [B, L]
 *   value  = sigmoid(x_n @ value.weight^T + value.bias)         [B]
 *   loss   = mean_b CE(logits[b, :counts[b]], target or soft target)
 *            + value_weight * mean_b BCE(value[b], z[b])
 *
 * x_0 is never formed: the first layer (or the heads, with no hidden layer) multiplies the
 * PowerSums and PairSums outputs in place, as four column blocks of its weight.
 *
 * Memory: parameters and gradients are each ONE backend allocation, carved into named
 * tensors by an offset table (64-byte aligned); activations live in one arena sized for the
 * largest (B, L) seen so far, grown only when a larger batch arrives.
 */
#ifndef MANAKA_MODEL_H
#define MANAKA_MODEL_H

#include <stdint.h>

#include "backend.h"
#include "batch.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MK_MAX_HIDDEN 16
#define MK_NAME_MAX 32

typedef struct {
    int64_t num_tokens;      /* V */
    int64_t num_moves;       /* M */
    int64_t tokens_per_side; /* T */
    int64_t embed_dim;       /* D */
    int64_t orders;          /* K */
    int64_t pair_dim;        /* P */
    int64_t head_width;      /* W */
    int num_hidden;          /* 0 .. MK_MAX_HIDDEN */
    int64_t hidden[MK_MAX_HIDDEN];
    /* C: the move classes of move_pair_table [V, C] (a move m is class m % C), whose
     * entries for the side to move's tokens are added to each legal move's logit
     * (MovePairSums, docs/design.md §1); 0: no such table. */
    int64_t move_pairs;
    /* The move-pair table's relative part (core/move_pair_board.h): a board of W x H
     * squares and K kinds of board token, so that tokens v < K W H are (kind, square) and
     * move classes (kind, square), and move_pair_relative [K (2W - 1) (2H - 1), C / (W H)]
     * is read at the token's square relative to the move's. All 0: no such part. */
    int64_t board_width, board_height, board_kinds;
    /* D: MoveHidden's units (core/backend_ops.def move_hidden), a hidden layer per legal move
     * over the relative part's keys, which it needs; 0: no such layer. */
    int64_t move_hidden;
    /* 1: the shared move embeddings (core/backend_ops.def move_shared_add): besides its row of
     * the move table, a move m's logit reads q against move_shared_class[m % C] (shared by
     * every move of its class) and move_shared_group[m / C] (shared by every move of its
     * group); needs the move-pair classes C, with num_moves a multiple of C. 0: none. */
    int64_t move_shared;
    /* 1: MoveHidden's readout gated by the position: a move's units are read with
     * move_hidden_out + q move_hidden_gate (q the policy head's vector, the gate [W, D])
     * instead of move_hidden_out alone; needs move_hidden. 0: none. */
    int64_t move_hidden_gate;
    /* F >= 1: a label l is a move m = l % (M / F) of kind k = l / (M / F) (shogi: the piece
     * that moves). The move table then holds M / F rows, read at m, and the logit adds
     * q . move_kind_table[(l % C) + C k], a row per (move class, kind) (C = move_pairs,
     * which must divide M / F; 1 when move_pairs is 0: a row per kind). The other terms
     * read l itself: a class is l % C either way (M / F a multiple of C), and the shared
     * rows' groups are l / C. 0: labels are moves. */
    int64_t move_kinds;
    /* Hv >= 1: the value head has a hidden layer, z = value.weight . relu(value_hidden.weight
     * x_n + value_hidden.bias) + value.bias (value.weight [1, Hv]); 0: z is linear in x_n. */
    int64_t value_hidden;
    /* 1: the value head's hidden layer (value_hidden >= 1) reads the power sums of both
     * perspectives (x_0 without its pair sums, [B, 2 K D]) instead of the trunk's output:
     * the value does not see the pair table, which memorises positions' evaluations on
     * small data sets (docs/shogi.md, "The default recipe"). 0: it reads x_n. */
    int64_t value_power_sums;
} mk_config;

/* The configuration is checked here only; the bindings convert types and add nothing
 * but what C cannot hold (a value outside int64). Messages name the field as
 * manaka.ModelConfig does. Two levels, both here:
 *
 * mk_config_check_dim: the rule of every width (num_tokens ... head_width, each
 * hidden[i]): >= 1. MK_OK, or MK_ERR_VALUE "ModelConfig: <name> must be >= 1, got <v>".
 * It is what a config means, so ModelConfig runs it when it is made
 * (_core.check_model_config).
 *
 * mk_config_check: every width by mk_config_check_dim, then the sizes this
 * implementation supports (at most MK_MAX_HIDDEN layers, num_tokens <= 2^20,
 * tokens_per_side <= 1024, each width and the first layer's 2 (K D + P) features
 * <= 2^31 - 1). MK_OK, or MK_ERR_VALUE naming the bad field. mk_model_create runs it,
 * and then refuses a config whose tensors pass 2^56 values (their layout). */
mk_status mk_config_check_dim(const char *name, int64_t value);
/* The rule of a count that may be 0 (move_pairs, board_*, move_hidden, move_shared, move_hidden_gate,
 * move_kinds, value_hidden, value_power_sums): >= 0, else MK_ERR_VALUE
 * "ModelConfig: <name> must be >= 0, got <v>". */
mk_status mk_config_check_count(const char *name, int64_t value);
mk_status mk_config_check(const mk_config *cfg);

/* One named tensor inside the parameter (and gradient, and moment) buffers. */
typedef struct {
    char name[MK_NAME_MAX];
    int ndim;
    int64_t shape[2];
    int64_t offset; /* in floats from the start of the buffer */
    int64_t numel;
    int decay; /* 1: AdamW applies weight decay (names not ending in "bias") */
    int group; /* the parameter group holding it (mk_model_param_groups) */
} mk_tensor;

/* How the optimizer updates a parameter group. */
typedef enum {
    /* the pair table alone: its gradient can be fused into AdamW (the backend's
     * pair_sums_backward_adamw, mk_model_pair_table_adamw) and its moments may be bf16 */
    MK_GROUP_PAIR_TABLE = 0,
    /* tensors updated together by one adamw call over the group's whole range (alignment
     * padding included: it stays 0 in parameters, gradients and moments) */
    MK_GROUP_DENSE = 1,
} mk_group_kind;

#define MK_MAX_PARAM_GROUPS 3

/* A contiguous range of the parameter (and gradient, and moment) buffers that the optimizer
 * treats as one: [offset, offset + size) in floats, its tensors and their padding. The
 * groups tile the buffers exactly, in the order the model places them (the pair table, then
 * every other decayed tensor, then the biases), so the trainer needs no knowledge of the
 * placement: it asks for the groups and walks them. */
typedef struct {
    const char *name; /* "pair_table", "decayed", "biases" */
    int kind;         /* mk_group_kind */
    int decay;        /* 1: weight decay applies to every tensor of the group */
    int64_t offset, size;
} mk_param_group;

typedef struct mk_model mk_model;

/* A model on `backend` (checked complete) with parameters initialised from `seed`:
 * uniform(-a, a) with a = sqrt(3) * std, std chosen so every layer's output starts O(1):
 *   embedding   std 1/sqrt(T)                 (sum over T tokens of order 1 has std ~1)
 *   pair_table  std 1/sqrt(T (T - 1) / 2)     (same for the sum over pairs)
 *   trunk.i.weight  std sqrt(2 / in)          (He, for ReLU)
 *   policy.weight, value.weight  std 1/sqrt(in);  move_table  std 1/sqrt(W)
 *   every bias 0.
 * Random numbers are mk_uniform01(seed ^ tensor, index): identical on every backend. */
mk_status mk_model_create(const mk_config *cfg, const mk_backend *backend, void *stream,
                          uint64_t seed, mk_model **out);
void mk_model_destroy(mk_model *model);
/* The activation arena's bytes for a batch capacity of (B, L), and the backend's scratch
 * within it: what a step on such a batch allocates. MK_ERR_NOMEM naming B and L when a
 * size would pass 2^58 bytes (checked arithmetic: B and L come from the caller), or the
 * backend's scratch_bytes error. */
mk_status mk_model_arena_bytes_for(const mk_model *model, int64_t B, int64_t L, size_t *bytes,
                                   size_t *work);

const mk_backend *mk_model_backend(const mk_model *model);
const mk_config *mk_model_config(const mk_model *model);
void *mk_model_stream(const mk_model *model);
/* The move table rows [B, L] of the batch staged for the step in flight: its labels, or with
 * move kinds their split (move_kind_split, run here into the step's arena; the forward pass
 * computes the same again). What the sparse move update marks and catches up. */
mk_status mk_model_table_rows(mk_model *m, const int32_t **rows);
int mk_model_num_tensors(const mk_model *model);
const mk_tensor *mk_model_tensor(const mk_model *model, int i);
/* Index of the tensor called `name`, or -1. */
int mk_model_find(const mk_model *model, const char *name);
/* Floats in each of the parameter / gradient / moment buffers (tensors plus alignment). */
int64_t mk_model_buffer_size(const mk_model *model);
/* Copies the first `max` parameter groups (mk_param_group), in placement order, into
 * `groups` and returns how many there are (at most MK_MAX_PARAM_GROUPS). */
int mk_model_param_groups(const mk_model *model, mk_param_group *groups, int max);
/* Device pointers to the parameter and gradient buffers. */
float *mk_model_params(mk_model *model);
float *mk_model_grads(mk_model *model);
/* Device pointer to the stats buffer (MK_STAT_COUNT floats) the last loss wrote. */
float *mk_model_stats(mk_model *model);
/* Bytes of activation arena currently allocated. */
size_t mk_model_arena_bytes(const mk_model *model);

/* Which policy head the training step (forward_loss, backward) runs: fused = 1 (the
 * default) calls the backend's policy_head, whose logits never reach device memory and
 * which also returns dq, so backward asks gather_dot_backward for grad_table only;
 * fused = 0 runs gather_dot, softmax_xent, and gather_dot_backward for both gradients.
 * The two give the same numbers (to float rounding); forward always uses gather_dot. */
void mk_model_set_fused_policy_head(mk_model *model, int fused);
int mk_model_fused_policy_head(const mk_model *model);

/* logits [B, L] and value [B] for a batch (targets not needed), into host buffers. */
mk_status mk_model_forward(mk_model *model, const mk_batch *batch, float *logits, float *value);

/* mk_batch_check for this model: a host batch on the host; a batch on the device
 * (batch->on_device, device backends) by the backend's batch_check, on the copy stream,
 * with the same messages. MK_ERR_VALUE before anything changed. A batch its producer
 * already checked within this model's vocabularies (mk_batch_prechecked: the loader's) gets
 * the shape checks only. */
mk_status mk_model_check_batch(mk_model *model, const char *op, const mk_batch *batch,
                               int with_targets);
/* How many batches mk_model_check_batch scanned in full (value checks run) so far. */
int64_t mk_model_batch_scans(const mk_model *model);

/* The parts of a training step, for the trainer. The batch must have been checked with
 * mk_model_check_batch. forward_loss runs the network and the loss and writes the stats
 * buffer; backward then overwrites every gradient, the pair table's only if `pair_table`
 * (the trainer instead fuses it with AdamW: mk_model_pair_table_adamw, after backward).
 * After forward_loss (even a failed one), mk_model_end_batch must follow the last work
 * that reads the batch: it marks the end of the batch's slot use (staging.h). */
mk_status mk_model_forward_loss(mk_model *model, const mk_batch *batch, float value_weight);
/* The same, calling prepare(ctx, tokens [rows, T] as the backend reads them, rows, the
 * staged batch) once the batch is staged and before the network reads any parameter: the
 * sparse pair-table and move-table updates catch the rows the batch names up there
 * (trainer.c). */
typedef mk_status (*mk_batch_prepare_fn)(void *ctx, const int32_t *tokens, int64_t rows,
                                         const mk_batch *staged);
mk_status mk_model_forward_loss_prepared(mk_model *model, const mk_batch *batch,
                                         float value_weight, mk_batch_prepare_fn prepare,
                                         void *ctx);
/* Every gradient of the staged batch (the pair table's unless `pair_table` is 0: the fused
 * update computes it); move_rows not NULL: only those rows of the move table's gradient are
 * written (backend gather_dot_backward), the mask of a sparse move update. */
mk_status mk_model_backward(mk_model *model, int pair_table, const uint8_t *move_rows);
mk_status mk_model_end_batch(mk_model *model);

/* Device backends (else -1 / MK_OK / NULL): the batch slot the next step takes; a host
 * wait for the last step that read a slot (so the arrays of a device batch it read can be
 * released); the copy stream, before which a device batch's producers order their writes. */
int mk_model_next_slot(const mk_model *model);
mk_status mk_model_wait_slot(mk_model *model, int slot);
void *mk_model_copy_stream(const mk_model *model);
/* AdamW on the pair table straight from the last backward (backend
 * pair_sums_backward_adamw); exp_avg / exp_avg_sq hold the pair table's moments only,
 * [num_pairs * P] each (where its group's moments start). */
mk_status mk_model_pair_table_adamw(mk_model *model, float *exp_avg, float *exp_avg_sq,
                                    const mk_adamw_args *args, const float *stats);

/* The same with bf16 moments (backend pair_sums_backward_adamw_bf16): exp_avg / exp_avg_sq
 * hold the pair table's moments only, [num_pairs * P] each; `seed` rounds them. */
mk_status mk_model_pair_table_adamw_bf16(mk_model *model, uint16_t *exp_avg, uint16_t *exp_avg_sq,
                                         const mk_adamw_args *args, const float *stats,
                                         uint64_t seed);

/* The sparse pair-table update of the staged batch (backend pair_sums_backward_adamw_sparse):
 * exp_avg / exp_avg_sq are the pair table's moments (float, or uint16_t when `bf16`),
 * stamps its rows' stamps; the rows the batch names get AdamW and the stamp `now`. work
 * [work_bytes] is the caller's scratch (at least mk_model_work_bytes), `bucketed` as the
 * backend entry's: work holds pair_catch_up's bucketing of the staged batch's tokens. */
mk_status mk_model_pair_table_adamw_sparse(mk_model *model, void *exp_avg, void *exp_avg_sq,
                                           int bf16, int32_t *stamps, int64_t now,
                                           const mk_adamw_args *args, const float *stats,
                                           uint64_t seed, void *work, size_t work_bytes,
                                           int bucketed);
/* The scratch the model's primitives are given for the staged batch's shapes (the
 * backend's scratch_bytes, at the capacity reserved): enough for pair_catch_up and
 * pair_sums_backward_adamw_sparse on the staged batch. */
size_t mk_model_work_bytes(const mk_model *model);

/* The pair-table rows the staged batch names and their gradient rows, from the last
 * backward (backend pair_grad_rows): *count (host) rows; ids [capacity] and rows
 * [capacity, P] (device memory) are written only when *count <= capacity. */
mk_status mk_model_pair_grad_rows(mk_model *model, int64_t *ids, float *rows, int64_t capacity,
                                  int64_t *count);

/* The rule of value_weight, the loss's weight of the value term (Trainer's hyperparameter,
 * Model.loss_and_grad's argument): finite and >= 0. MK_OK, or MK_ERR_VALUE
 * "<op>: value_weight must be finite and >= 0, got <v>". */
mk_status mk_check_value_weight(const char *op, double value_weight);

/* Checks value_weight and the batch, then forward_loss and backward; `stats` (host,
 * MK_STAT_COUNT floats) receives the stats buffer. */
mk_status mk_model_loss_and_grad(mk_model *model, const mk_batch *batch, float value_weight,
                                 float *stats);

#ifdef __cplusplus
}
#endif
#endif
