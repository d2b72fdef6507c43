/* The network's forward, loss and backward passes, over mk_backend only: this file never
 * dereferences parameter, gradient or activation memory (it may live on a GPU). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "staging.h"
#include "arena.h"
#include "checked.h"
#include "model.h"

#define S 2 /* perspectives */

/* Indices of the fixed tensors in the table; trunk.i.{weight,bias} are 2 + 2 i, 3 + 2 i. */
enum { T_EMBEDDING = 0, T_PAIR_TABLE = 1 };

/* A view of one layer's input as column blocks: x[:, col_offset + c] = ptr[b * ld + c],
 * c < cols. x_0 is four blocks (PowerSums and PairSums of each perspective); every other
 * x_i is one. `grad` is where d loss / d block goes, with the same ld. */
typedef struct {
    const float *ptr;
    float *grad;
    int64_t ld, cols, col_offset;
} block;
#define MK_MAX_BLOCKS 4
typedef struct {
    int n;
    int64_t width; /* sum of cols: the in-features of the layer that reads it */
    block blk[MK_MAX_BLOCKS];
} input;

/* Activations of one step, carved from the arena for the current (B, L). */
typedef struct {
    float *ps, *dps;     /* [B, S, K, D] */
    float *pair, *dpair; /* [B, S, P] */
    float *y[MK_MAX_HIDDEN], *dy[MK_MAX_HIDDEN];
    float *q, *dq;           /* [B, W] */
    float *z, *dz, *v;       /* [B] */
    float *logits, *dlogits; /* [B, L] */
    float *hidden_pre;       /* [B, L, move_hidden]: MoveHidden's units before the ReLU */
    float *cls, *dcls;       /* [B, C]: q against move_shared_class, and its gradient */
    float *grp, *dgrp;       /* [B, M / C]: q against move_shared_group, and its gradient */
    float *gate, *dgate;     /* [B, D]: MoveHidden's readout per position, and its gradient */
    int32_t *moves, *kind_rows; /* [B, L]: with move kinds, each label's move table row and
                                   kind table row (move_kind_split) */
    float *kind_logits;      /* [B, L]: q against each move's kind table row */
    float *dq_kind;          /* [B, W]: the kind table's part of dq */
    float *vh, *dvh;         /* [B, Hv]: the value head's hidden layer, and its gradient */
    float *row_policy, *row_value, *row_correct;
    void *work;         /* the primitives' scratch (backend.h: scratch_bytes) */
    size_t work_bytes;
} acts;

struct mk_model {
    mk_config cfg;
    const mk_backend *be;
    void *stream;
    int num_tensors;
    /* embedding, pair table, the trunk's layers, then at most 15 head tensors: policy (2),
     * move table, value (2), move-pair table, its relative part, MoveHidden (3), the shared
     * move embeddings (2), MoveHidden's gate, the move kind table, the value head's hidden
     * layer (2) */
    mk_tensor tensors[2 + 2 * MK_MAX_HIDDEN + 15];
    mk_param_group groups[MK_MAX_PARAM_GROUPS];
    int num_groups;
    int64_t buffer_size;
    const mk_tensor *too_big; /* set by layout: a tensor or the buffer is above MK_MAX_ELEMENTS */
    float *params, *grads, *stats;
    /* arena */
    void *arena;
    size_t arena_bytes;
    int64_t cap_B, cap_L;
    /* device backends: the batch slots and copy stream (staging.h); NULL on the host */
    mk_staging *staging;
    size_t cap_work; /* the backend's scratch_bytes for (cap_B, cap_L), carved every step */
    /* the step in flight */
    mk_batch batch; /* device pointers (the host ones when the backend has host memory) */
    int fused_head; /* training step: backend policy_head (1) or gather_dot + softmax_xent (0) */
    int64_t batch_scans; /* batches whose every index this model checked (mk_model_check_batch) */
    acts a;
};

mk_status mk_config_check_dim(const char *name, int64_t value) {
    if (value < 1)
        return mk_fail(MK_ERR_VALUE, "ModelConfig: %s must be >= 1, got %lld", name,
                       (long long)value);
    return MK_OK;
}

mk_status mk_config_check_count(const char *name, int64_t value) {
    if (value < 0)
        return mk_fail(MK_ERR_VALUE, "ModelConfig: %s must be >= 0, got %lld", name,
                       (long long)value);
    return MK_OK;
}

/* The relative part's board (after each field is a count <= 2^31 - 1): all three fields 0,
 * or all >= 1 with a move-pair table whose classes are (kind, square) of that board, board
 * tokens that are tokens, and a table whose entries an int32 indexes. */
static mk_status check_board(const mk_config *c) {
    const int64_t W = c->board_width, H = c->board_height, K = c->board_kinds;
    if (!W && !H && !K) return MK_OK;
    if (!W || !H || !K)
        return mk_fail(MK_ERR_VALUE,
                       "ModelConfig: board_width, board_height and board_kinds must be all 0 (no "
                       "relative move pairs) or all >= 1, got %lld, %lld, %lld",
                       (long long)W, (long long)H, (long long)K);
    const int64_t sq = W * H; /* each below 2^31: no overflow */
    if (c->move_pairs < 1 || c->move_pairs % sq)
        return mk_fail(MK_ERR_VALUE,
                       "ModelConfig: relative move pairs need move_pairs, a multiple of "
                       "board_width * board_height = %lld, got move_pairs = %lld",
                       (long long)sq, (long long)c->move_pairs);
    if (K > c->num_tokens / sq)
        return mk_fail(MK_ERR_VALUE,
                       "ModelConfig: board_kinds * board_width * board_height = %lld * %lld board "
                       "tokens, more than num_tokens = %lld",
                       (long long)K, (long long)sq, (long long)c->num_tokens);
    /* K (2W - 1) (2H - 1) C / (W H) entries, each factor below 2^32 */
    int64_t n;
    if (mk_mul_too_big(K * (2 * W - 1), (2 * H - 1) * (c->move_pairs / sq), &n) || n > INT32_MAX)
        return mk_fail(MK_ERR_VALUE,
                       "ModelConfig: the relative move-pair table (board_kinds (2 board_width - 1) "
                       "(2 board_height - 1) move_pairs / (board_width board_height) entries) is "
                       "above 2^31 - 1");
    return MK_OK;
}

/* MoveHidden (after the board is checked): D units over the relative part's keys, so a
 * board, and a table of [entries, D] an int32 still indexes element by element. */
static mk_status check_move_hidden(const mk_config *c) {
    const int64_t D = c->move_hidden;
    if (!D) return MK_OK;
    if (!c->board_kinds)
        return mk_fail(MK_ERR_VALUE,
                       "ModelConfig: move_hidden = %lld needs the relative move pairs "
                       "(board_width, board_height, board_kinds >= 1)", (long long)D);
    const int64_t W = c->board_width, H = c->board_height;
    const int64_t entries = c->board_kinds * (2 * W - 1) * (2 * H - 1) * (c->move_pairs / (W * H));
    int64_t n; /* entries < 2^31 (check_board), D < 2^31 */
    if (mk_mul_too_big(entries, D, &n) || n > INT32_MAX ||
        mk_mul_too_big(c->move_pairs, D, &n) || n > INT32_MAX)
        return mk_fail(MK_ERR_VALUE,
                       "ModelConfig: move_hidden = %lld makes MoveHidden's tables (%lld relative "
                       "entries and move_pairs = %lld classes, times move_hidden) above 2^31 - 1 "
                       "values", (long long)D, (long long)entries, (long long)c->move_pairs);
    return MK_OK;
}

/* The shared move embeddings: on or off, over the move-pair classes, every class with the
 * same number of groups. */
static mk_status check_move_shared(const mk_config *c) {
    if (!c->move_shared) return MK_OK;
    if (c->move_shared != 1)
        return mk_fail(MK_ERR_VALUE, "ModelConfig: move_shared must be 0 or 1, got %lld",
                       (long long)c->move_shared);
    if (!c->move_pairs || c->num_moves % c->move_pairs)
        return mk_fail(MK_ERR_VALUE,
                       "ModelConfig: move_shared = 1 needs move_pairs = C >= 1 classes with "
                       "num_moves a multiple of C (a move m is of class m %% C and group m / C), "
                       "got move_pairs = %lld and num_moves = %lld",
                       (long long)c->move_pairs, (long long)c->num_moves);
    return MK_OK;
}

/* MoveHidden's gated readout: on or off, over MoveHidden's units. */
static mk_status check_move_hidden_gate(const mk_config *c) {
    if (!c->move_hidden_gate) return MK_OK;
    if (c->move_hidden_gate != 1)
        return mk_fail(MK_ERR_VALUE, "ModelConfig: move_hidden_gate must be 0 or 1, got %lld",
                       (long long)c->move_hidden_gate);
    if (!c->move_hidden)
        return mk_fail(MK_ERR_VALUE, "ModelConfig: move_hidden_gate = 1 needs MoveHidden's units "
                       "(move_hidden >= 1)");
    return MK_OK;
}

/* The classes of the move kind table: the move-pair classes, or 1 without them (a row per
 * kind). */
static int64_t kind_classes(const mk_config *c) { return c->move_pairs ? c->move_pairs : 1; }

/* value_power_sums: 0 or 1, and only with the hidden layer it feeds. */
static mk_status check_value_power_sums(const mk_config *c) {
    if (c->value_power_sums > 1)
        return mk_fail(MK_ERR_VALUE, "ModelConfig: value_power_sums must be 0 or 1, got %lld",
                       (long long)c->value_power_sums);
    if (c->value_power_sums && !c->value_hidden)
        return mk_fail(MK_ERR_VALUE, "ModelConfig: value_power_sums = 1 needs value_hidden >= 1 "
                                     "(the hidden layer that reads the power sums)");
    return MK_OK;
}

/* The move kinds: F kinds of every move of the move table, M / F rows, whose classes the
 * kind table [C F, W] is keyed by (so C divides M / F, and C F is an int32 row count). */
static mk_status check_move_kinds(const mk_config *c) {
    const int64_t F = c->move_kinds, C = kind_classes(c);
    if (!F) return MK_OK;
    if (c->num_moves % F || (c->num_moves / F) % C)
        return mk_fail(MK_ERR_VALUE,
                       "ModelConfig: move_kinds = F needs num_moves = M a multiple of F, and M / F "
                       "a multiple of the move-pair classes C = move_pairs (a label l is move "
                       "l %% (M / F) of kind l / (M / F)), got move_kinds = %lld, num_moves = "
                       "%lld, move_pairs = %lld",
                       (long long)F, (long long)c->num_moves, (long long)c->move_pairs);
    return MK_OK; /* C F <= M: an int32 */
}

mk_status mk_config_check(const mk_config *c) {
    mk_status st;
    if ((st = mk_config_check_count("move_pairs", c->move_pairs)) != MK_OK) return st;
    if ((st = mk_config_check_count("board_width", c->board_width)) != MK_OK) return st;
    if ((st = mk_config_check_count("board_height", c->board_height)) != MK_OK) return st;
    if ((st = mk_config_check_count("board_kinds", c->board_kinds)) != MK_OK) return st;
    if ((st = mk_config_check_count("move_hidden", c->move_hidden)) != MK_OK) return st;
    if ((st = mk_config_check_count("move_shared", c->move_shared)) != MK_OK) return st;
    if ((st = mk_config_check_count("move_hidden_gate", c->move_hidden_gate)) != MK_OK) return st;
    if ((st = mk_config_check_count("move_kinds", c->move_kinds)) != MK_OK) return st;
    if ((st = mk_config_check_count("value_hidden", c->value_hidden)) != MK_OK) return st;
    if ((st = mk_config_check_count("value_power_sums", c->value_power_sums)) != MK_OK) return st;
    const char *names[] = {"num_tokens", "num_moves", "tokens_per_side", "embed_dim",
                           "orders",     "pair_dim",  "head_width"};
    const int64_t values[] = {c->num_tokens, c->num_moves, c->tokens_per_side, c->embed_dim,
                              c->orders,     c->pair_dim,  c->head_width};
    for (int i = 0; i < 7; i++)
        if ((st = mk_config_check_dim(names[i], values[i])) != MK_OK) return st;
    if (c->num_hidden < 0 || c->num_hidden > MK_MAX_HIDDEN)
        return mk_fail(MK_ERR_VALUE, "ModelConfig: hidden has %d layers; at most %d are supported",
                       c->num_hidden, MK_MAX_HIDDEN);
    for (int i = 0; i < c->num_hidden; i++) {
        char name[32];
        snprintf(name, sizeof name, "hidden[%d]", i);
        if ((st = mk_config_check_dim(name, c->hidden[i])) != MK_OK) return st;
    }
    if (c->num_tokens > (1 << 20)) /* the pair table alone would hold 5e11 rows */
        return mk_fail(MK_ERR_VALUE, "ModelConfig: num_tokens = %lld is above the supported 2^20",
                       (long long)c->num_tokens);
    if (c->tokens_per_side > 1024)
        return mk_fail(MK_ERR_VALUE, "ModelConfig: tokens_per_side must be <= 1024, got %lld",
                       (long long)c->tokens_per_side);
    /* Every width is a GEMM dimension or leading dimension (32-bit in OpenBLAS's and
     * cuBLAS's interfaces) and every id an int32: bound them, then the products below,
     * before any size is computed from them (unbounded, embed_dim = 2^62 with
     * orders = 2 wrapped numel, and forward overran the heap). */
#define AT_MOST_INT32(field)                                                                \
    if (c->field > INT32_MAX)                                                               \
        return mk_fail(MK_ERR_VALUE, "ModelConfig: " #field " = %lld is above 2^31 - 1",    \
                       (long long)c->field);
    AT_MOST_INT32(num_moves) AT_MOST_INT32(embed_dim) AT_MOST_INT32(orders)
    AT_MOST_INT32(pair_dim) AT_MOST_INT32(head_width) AT_MOST_INT32(move_pairs)
    AT_MOST_INT32(board_width) AT_MOST_INT32(board_height) AT_MOST_INT32(board_kinds)
    AT_MOST_INT32(move_hidden) AT_MOST_INT32(value_hidden)
#undef AT_MOST_INT32
    if ((st = check_board(c)) != MK_OK) return st;
    if ((st = check_move_hidden(c)) != MK_OK) return st;
    if ((st = check_move_shared(c)) != MK_OK) return st;
    if ((st = check_move_hidden_gate(c)) != MK_OK) return st;
    if ((st = check_move_kinds(c)) != MK_OK) return st;
    if ((st = check_value_power_sums(c)) != MK_OK) return st;
    for (int i = 0; i < c->num_hidden; i++)
        if (c->hidden[i] > INT32_MAX)
            return mk_fail(MK_ERR_VALUE, "ModelConfig: hidden[%d] = %lld is above 2^31 - 1", i,
                           (long long)c->hidden[i]);
    int64_t KD; /* the first layer's in-features are S (K D + P): a GEMM dimension */
    if (mk_mul_too_big(c->orders, c->embed_dim, &KD) || KD + c->pair_dim > INT32_MAX / S)
        return mk_fail(MK_ERR_VALUE,
                       "ModelConfig: 2 * (orders * embed_dim + pair_dim) features (orders = %lld, "
                       "embed_dim = %lld, pair_dim = %lld) is above 2^31 - 1",
                       (long long)c->orders, (long long)c->embed_dim, (long long)c->pair_dim);
    return MK_OK;
}

/* The move table's rows: M, or M / F with move kinds. */
static int64_t table_moves(const mk_config *c) {
    return c->move_kinds ? c->num_moves / c->move_kinds : c->num_moves;
}

/* Adds a tensor; a numel above MK_MAX_ELEMENTS (checked.h) makes it the model's
 * `too_big`, reported by mk_model_create before anything is allocated. */
static void add_tensor(mk_model *m, const char *name, int64_t rows, int64_t cols, int ndim) {
    mk_tensor *t = &m->tensors[m->num_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = rows;
    t->shape[1] = ndim == 2 ? cols : 0;
    t->numel = rows;
    if (ndim == 2 && mk_mul_too_big(rows, cols, &t->numel) && !m->too_big) m->too_big = t;
    size_t len = strlen(name);
    t->decay = !(len >= 4 && strcmp(name + len - 4, "bias") == 0);
}

/* The parameter groups, in the order place_tensors lays them out. */
enum { G_PAIR_TABLE, G_DECAYED, G_BIASES, G_COUNT };
static const struct {
    const char *name;
    int kind, decay;
} group_info[G_COUNT] = {
    [G_PAIR_TABLE] = {"pair_table", MK_GROUP_PAIR_TABLE, 1},
    [G_DECAYED] = {"decayed", MK_GROUP_DENSE, 1},
    [G_BIASES] = {"biases", MK_GROUP_DENSE, 0},
};

static int group_of(int i, const mk_tensor *t) {
    return i == T_PAIR_TABLE ? G_PAIR_TABLE : t->decay ? G_DECAYED : G_BIASES;
}

/* Places the tensors in the buffers group by group: the pair table, then every other
 * decayed tensor, then the biases. Each group is then one contiguous range, updated by one
 * launch instead of one per tensor, and recorded in m->groups for the trainer
 * (mk_model_param_groups), which is how it learns the placement. The offsets are checked
 * sums: a buffer above MK_MAX_ELEMENTS sets `too_big` (the tensor that crossed the limit). */
static void place_tensors(mk_model *m) {
    for (int g = 0; g < G_COUNT; g++) {
        mk_param_group *pg = &m->groups[m->num_groups++];
        pg->name = group_info[g].name;
        pg->kind = group_info[g].kind;
        pg->decay = group_info[g].decay;
        pg->offset = m->buffer_size;
        for (int i = 0; i < m->num_tensors; i++) {
            mk_tensor *t = &m->tensors[i];
            if (group_of(i, t) != g) continue;
            t->group = g;
            t->offset = m->buffer_size;
            if (m->too_big ||
                mk_add_too_big(m->buffer_size, mk_arena_aligned(t->numel), &m->buffer_size)) {
                if (!m->too_big) m->too_big = t;
                return;
            }
        }
        pg->size = m->buffer_size - pg->offset;
    }
}

int mk_model_param_groups(const mk_model *m, mk_param_group *groups, int max) {
    for (int g = 0; g < m->num_groups && g < max; g++) groups[g] = m->groups[g];
    return m->num_groups;
}

static int64_t features(const mk_config *c) { return S * (c->orders * c->embed_dim + c->pair_dim); }
static int64_t last_width(const mk_config *c) {
    return c->num_hidden ? c->hidden[c->num_hidden - 1] : features(c);
}

static void layout(mk_model *m) {
    const mk_config *c = &m->cfg;
    char name[MK_NAME_MAX];
    add_tensor(m, "embedding", c->num_tokens, c->embed_dim, 2);
    add_tensor(m, "pair_table", mk_num_pairs(c->num_tokens), c->pair_dim, 2);
    int64_t in = features(c);
    for (int i = 0; i < c->num_hidden; i++) {
        snprintf(name, sizeof name, "trunk.%d.weight", i);
        add_tensor(m, name, c->hidden[i], in, 2);
        snprintf(name, sizeof name, "trunk.%d.bias", i);
        add_tensor(m, name, c->hidden[i], 0, 1);
        in = c->hidden[i];
    }
    add_tensor(m, "policy.weight", c->head_width, in, 2);
    add_tensor(m, "policy.bias", c->head_width, 0, 1);
    add_tensor(m, "move_table", table_moves(c), c->head_width, 2);
    add_tensor(m, "value.weight", 1, c->value_hidden ? c->value_hidden : in, 2);
    add_tensor(m, "value.bias", 1, 0, 1);
    if (c->move_pairs) add_tensor(m, "move_pair_table", c->num_tokens, c->move_pairs, 2);
    if (c->board_kinds)
        add_tensor(m, "move_pair_relative",
                   c->board_kinds * (2 * c->board_width - 1) * (2 * c->board_height - 1),
                   c->move_pairs / (c->board_width * c->board_height), 2);
    if (c->move_hidden) {
        add_tensor(m, "move_hidden_relative",
                   c->board_kinds * (2 * c->board_width - 1) * (2 * c->board_height - 1) *
                       (c->move_pairs / (c->board_width * c->board_height)),
                   c->move_hidden, 2);
        add_tensor(m, "move_hidden_class", c->move_pairs, c->move_hidden, 2);
        add_tensor(m, "move_hidden_out", 1, c->move_hidden, 2);
    }
    if (c->move_shared) {
        add_tensor(m, "move_shared_class", c->move_pairs, c->head_width, 2);
        add_tensor(m, "move_shared_group", c->num_moves / c->move_pairs, c->head_width, 2);
    }
    if (c->move_hidden_gate) add_tensor(m, "move_hidden_gate", c->head_width, c->move_hidden, 2);
    if (c->move_kinds)
        add_tensor(m, "move_kind_table", kind_classes(c) * c->move_kinds, c->head_width, 2);
    if (c->value_hidden) {
        add_tensor(m, "value_hidden.weight", c->value_hidden,
                   c->value_power_sums ? S * c->orders * c->embed_dim : in, 2);
        add_tensor(m, "value_hidden.bias", c->value_hidden, 0, 1);
    }
    place_tensors(m);
}

static float *P(mk_model *m, int i) { return m->params + m->tensors[i].offset; }
static float *G(mk_model *m, int i) { return m->grads + m->tensors[i].offset; }
static int trunk_w(int i) { return 2 + 2 * i; }
static int trunk_b(int i) { return 3 + 2 * i; }
static int head(const mk_model *m, int k) { return 2 + 2 * m->cfg.num_hidden + k; }
enum { H_POLICY_W = 0, H_POLICY_B, H_MOVES, H_VALUE_W, H_VALUE_B, H_MOVE_PAIRS, H_MOVE_PAIR_REL,
       H_MOVE_HIDDEN_REL, H_MOVE_HIDDEN_CLASS, H_MOVE_HIDDEN_OUT };
/* The shared move embeddings' two tensors follow the head tensors the config has. */
static int shared_head(const mk_model *m, int k) {
    const mk_config *c = &m->cfg;
    return head(m, H_MOVE_PAIRS) + (c->move_pairs ? 1 : 0) + (c->board_kinds ? 1 : 0) +
           (c->move_hidden ? 3 : 0) + k;
}
enum { S_CLASS = 0, S_GROUP };
/* MoveHidden's gate follows them, then the move kind table. */
static int gate_head(const mk_model *m) { return shared_head(m, 0) + (m->cfg.move_shared ? 2 : 0); }
static int kind_head(const mk_model *m) { return gate_head(m) + (m->cfg.move_hidden_gate ? 1 : 0); }
/* The value head's hidden layer (weight, then bias) comes last. */
static int value_hidden_head(const mk_model *m) { return kind_head(m) + (m->cfg.move_kinds ? 1 : 0); }
/* The staged batch's move table rows: its labels, or with move kinds their split. */
static const int32_t *table_rows(const mk_model *m) {
    return m->cfg.move_kinds ? m->a.moves : m->batch.legal;
}
/* The training step fuses GatherDot into the softmax (policy_head) only when nothing else
 * adds to the logits and the labels are the move table's rows: MovePairSums (and every
 * term that needs its classes) and the move kinds need the logits in memory between the
 * two, and the move kinds' labels are not rows. */
static int fused_head(const mk_model *m) {
    return m->fused_head && !m->cfg.move_pairs && !m->cfg.move_kinds;
}

static float init_std(const mk_model *m, int i) {
    const mk_config *c = &m->cfg;
    const mk_tensor *t = &m->tensors[i];
    if (!t->decay) return 0.0f; /* biases start at 0 */
    double T = (double)c->tokens_per_side;
    if (i == T_EMBEDDING) return (float)(1.0 / sqrt(T));
    if (i == T_PAIR_TABLE) return (float)(1.0 / sqrt(T > 1 ? T * (T - 1) / 2 : 1));
    if (i == head(m, H_MOVES)) return (float)(1.0 / sqrt((double)c->head_width));
    /* the policy starts as without the table; each index names its tensor only when the
     * config has it (else it is a later tensor's, such as value_hidden.weight's) */
    if ((c->move_pairs && i == head(m, H_MOVE_PAIRS)) || (c->board_kinds && i == head(m, H_MOVE_PAIR_REL)))
        return 0.0f;
    /* MoveHidden starts with units of ~0.1 (30-odd tokens' entries summed) and a zero
     * output, so the policy starts as without it and every unit's input already varies */
    if (c->move_hidden && (i == head(m, H_MOVE_HIDDEN_REL) || i == head(m, H_MOVE_HIDDEN_CLASS)))
        return 0.02f;
    if (c->move_hidden && i == head(m, H_MOVE_HIDDEN_OUT)) return 0.0f;
    /* the shared rows start at 0: a new model's policy is the one without them */
    if (c->move_shared && (i == shared_head(m, S_CLASS) || i == shared_head(m, S_GROUP)))
        return 0.0f;
    if (c->move_hidden_gate && i == gate_head(m)) return 0.0f; /* the readout starts as out alone */
    if (c->move_kinds && i == kind_head(m)) return 0.0f; /* the policy starts as without kinds */
    if (c->value_hidden && i == value_hidden_head(m)) /* He, for the ReLU */
        return (float)sqrt(2.0 / (double)t->shape[1]);
    double in = (double)t->shape[1];
    if (i < head(m, 0)) return (float)sqrt(2.0 / in); /* trunk: He */
    return (float)(1.0 / sqrt(in));
}

static mk_status init_params(mk_model *m, uint64_t seed) {
    mk_status st = m->be->fill(m->stream, m->params, 0.0f, m->buffer_size); /* padding too */
    for (int i = 0; i < m->num_tensors && st == MK_OK; i++) {
        float std = init_std(m, i);
        if (std == 0.0f) continue;
        uint64_t tensor_seed = seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(i + 1));
        st = m->be->fill_uniform(m->stream, P(m, i), m->tensors[i].numel, sqrtf(3.0f) * std,
                                 tensor_seed);
    }
    return st;
}

mk_status mk_model_create(const mk_config *cfg, const mk_backend *backend, void *stream,
                          uint64_t seed, mk_model **out) {
    *out = NULL;
    mk_status st = mk_config_check(cfg);
    if (st != MK_OK) return st;
    if ((st = mk_backend_check(backend)) != MK_OK) return st;
    mk_model *m = calloc(1, sizeof *m);
    if (!m) return mk_fail(MK_ERR_NOMEM, "Model: out of memory");
    m->cfg = *cfg;
    m->be = backend;
    m->stream = stream;
    m->fused_head = 1;
    layout(m);
    if (m->too_big) { /* e.g. num_tokens = 2^20 with pair_dim = 2^31 - 1 */
        mk_status big = mk_fail(MK_ERR_VALUE,
                                "ModelConfig: too many parameters: %s [%lld, %lld] takes the "
                                "model past 2^56 values",
                                m->too_big->name, (long long)m->too_big->shape[0],
                                (long long)m->too_big->shape[1]);
        free(m);
        return big;
    }
    size_t bytes = (size_t)m->buffer_size * sizeof(float);
    void *p = NULL, *g = NULL, *s = NULL;
    if ((st = backend->alloc(stream, bytes, &p)) != MK_OK ||
        (st = backend->alloc(stream, bytes, &g)) != MK_OK ||
        (st = backend->alloc(stream, MK_STAT_COUNT * sizeof(float), &s)) != MK_OK) {
        backend->free(stream, p);
        backend->free(stream, g);
        free(m);
        return st;
    }
    m->params = p;
    m->grads = g;
    m->stats = s;
    if ((!backend->host_memory &&
         (st = mk_staging_create(backend, stream, cfg->tokens_per_side, &m->staging)) != MK_OK) ||
        (st = init_params(m, seed)) != MK_OK ||
        (st = backend->fill(stream, m->grads, 0.0f, m->buffer_size)) != MK_OK ||
        (st = backend->fill(stream, m->stats, 0.0f, MK_STAT_COUNT)) != MK_OK) {
        mk_model_destroy(m);
        return st;
    }
    *out = m;
    return MK_OK;
}

void mk_model_destroy(mk_model *m) {
    if (!m) return;
    mk_staging_destroy(m->staging); /* first: waits for the steps and copies in flight */
    m->be->free(m->stream, m->params);
    m->be->free(m->stream, m->grads);
    m->be->free(m->stream, m->stats);
    m->be->free(m->stream, m->arena);
    free(m);
}

const mk_config *mk_model_config(const mk_model *m) { return &m->cfg; }
const mk_backend *mk_model_backend(const mk_model *m) { return m->be; }
void *mk_model_stream(const mk_model *m) { return m->stream; }
int mk_model_num_tensors(const mk_model *m) { return m->num_tensors; }
const mk_tensor *mk_model_tensor(const mk_model *m, int i) {
    return i >= 0 && i < m->num_tensors ? &m->tensors[i] : NULL;
}
int mk_model_find(const mk_model *m, const char *name) {
    for (int i = 0; i < m->num_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return i;
    return -1;
}
int64_t mk_model_buffer_size(const mk_model *m) { return m->buffer_size; }
float *mk_model_params(mk_model *m) { return m->params; }
float *mk_model_grads(mk_model *m) { return m->grads; }
float *mk_model_stats(mk_model *m) { return m->stats; }
size_t mk_model_arena_bytes(const mk_model *m) { return m->arena_bytes; }
void mk_model_set_fused_policy_head(mk_model *m, int fused) { m->fused_head = fused != 0; }
int mk_model_fused_policy_head(const mk_model *m) { return m->fused_head; }

/* ---------------------------------------------------------------- arena */

/* Carves the activations for (B, L), and `work_bytes` of scratch, out of `base` (NULL:
 * only measures) and returns the bytes needed, or SIZE_MAX when they would be above
 * 4 * MK_MAX_ELEMENTS (checked.h): B and L come from the caller's batch, so every product
 * and the running total are checked. One layout function for sizing and carving keeps
 * the two in step. */
static size_t carve(mk_model *m, char *base, int64_t B, int64_t L, size_t work_bytes, acts *a) {
    const mk_config *c = &m->cfg;
    int64_t used = 0, n; /* in 4-byte elements */
    int too_big = work_bytes > (size_t)MK_MAX_ELEMENTS;
    int64_t KD = c->orders * c->embed_dim; /* bounded by mk_config_check */
    MK_ARENA_TAKE(a->ps, float, B, S * KD);
    MK_ARENA_TAKE(a->dps, float, B, S * KD);
    MK_ARENA_TAKE(a->pair, float, B, S * c->pair_dim);
    MK_ARENA_TAKE(a->dpair, float, B, S * c->pair_dim);
    for (int i = 0; i < c->num_hidden; i++) {
        MK_ARENA_TAKE(a->y[i], float, B, c->hidden[i]);
        MK_ARENA_TAKE(a->dy[i], float, B, c->hidden[i]);
    }
    MK_ARENA_TAKE(a->q, float, B, c->head_width);
    MK_ARENA_TAKE(a->dq, float, B, c->head_width);
    MK_ARENA_TAKE(a->z, float, B, 1);
    MK_ARENA_TAKE(a->dz, float, B, 1);
    MK_ARENA_TAKE(a->v, float, B, 1);
    MK_ARENA_TAKE(a->logits, float, B, L);
    MK_ARENA_TAKE(a->dlogits, float, B, L);
    int64_t LD = 0; /* L D, checked like every product the arena takes */
    too_big = too_big || mk_mul_too_big(L, c->move_hidden, &LD);
    MK_ARENA_TAKE(a->hidden_pre, float, B, LD);
    const int64_t C = c->move_shared ? c->move_pairs : 0, groups = C ? c->num_moves / C : 0;
    MK_ARENA_TAKE(a->cls, float, B, C);
    MK_ARENA_TAKE(a->dcls, float, B, C);
    MK_ARENA_TAKE(a->grp, float, B, groups);
    MK_ARENA_TAKE(a->dgrp, float, B, groups);
    MK_ARENA_TAKE(a->gate, float, B, c->move_hidden_gate ? c->move_hidden : 0);
    MK_ARENA_TAKE(a->dgate, float, B, c->move_hidden_gate ? c->move_hidden : 0);
    MK_ARENA_TAKE(a->moves, int32_t, B, c->move_kinds ? L : 0);
    MK_ARENA_TAKE(a->kind_rows, int32_t, B, c->move_kinds ? L : 0);
    MK_ARENA_TAKE(a->kind_logits, float, B, c->move_kinds ? L : 0);
    MK_ARENA_TAKE(a->dq_kind, float, B, c->move_kinds ? c->head_width : 0);
    MK_ARENA_TAKE(a->vh, float, B, c->value_hidden);
    MK_ARENA_TAKE(a->dvh, float, B, c->value_hidden);
    MK_ARENA_TAKE(a->row_policy, float, B, 1);
    MK_ARENA_TAKE(a->row_value, float, B, 1);
    MK_ARENA_TAKE(a->row_correct, float, B, 1);
    a->work_bytes = work_bytes;
    MK_ARENA_TAKE(a->work, char, too_big ? 0 : (int64_t)((work_bytes + 3) / 4), 1);
    return too_big ? SIZE_MAX : (size_t)used * 4;
}

/* The arena's size for a capacity of (B, L) and the backend's scratch for it, or an error:
 * MK_ERR_NOMEM naming B and L when a size would be above 2^58 bytes (checked.h), or the
 * backend's scratch_bytes error (e.g. the CPU's int32 token-slot limit). */
mk_status mk_model_arena_bytes_for(const mk_model *m, int64_t B, int64_t L, size_t *bytes,
                                   size_t *work) {
    const mk_config *c = &m->cfg;
    *bytes = *work = 0;
    if (B < 1 || L < 1)
        return mk_fail(MK_ERR_VALUE, "Model: B and L must be >= 1, got %lld and %lld",
                       (long long)B, (long long)L);
    if (B > MK_MAX_ELEMENTS || L > MK_MAX_ELEMENTS) /* keeps B * S exact */
        return mk_fail(MK_ERR_NOMEM, "Model: a batch of B = %lld positions with L = %lld "
                       "legal slots is too large", (long long)B, (long long)L);
    mk_step_shapes shapes = {.B = B, .L = L, .M = c->num_moves, .rows = B * S,
                             .T = c->tokens_per_side, .V = c->num_tokens,
                             .C = c->move_pairs, .D = c->move_hidden};
    MK_TRY(m->be->scratch_bytes(&shapes, work));
    acts sizing; /* measuring leaves m->a, the step's views, as they are */
    *bytes = carve((mk_model *)m, NULL, B, L, *work, &sizing);
    if (*bytes == SIZE_MAX)
        return mk_fail(MK_ERR_NOMEM,
                       "Model: the activations of a batch of B = %lld positions with L = %lld "
                       "legal slots would take more than 2^58 bytes",
                       (long long)B, (long long)L);
    return MK_OK;
}

/* Makes the arena large enough for (B, L): the one allocation of a model's steps, made
 * again only for a larger batch. Capacity follows the largest B and the largest L seen
 * separately, so batches that alternate shapes stop reallocating after the first. The
 * scratch is sized for the capacity too (scratch_bytes never shrinks with larger shapes,
 * backend.h), so it serves every batch within it, and a training loop, whose L changes
 * from batch to batch, queries the backend (CUB, on the GPU) only when the arena grows. */
static mk_status reserve(mk_model *m, int64_t B, int64_t L) {
    if (B > m->cap_B || L > m->cap_L) {
        int64_t cap_B = B > m->cap_B ? B : m->cap_B, cap_L = L > m->cap_L ? L : m->cap_L;
        size_t bytes, work;
        MK_TRY(mk_model_arena_bytes_for(m, cap_B, cap_L, &bytes, &work));
        void *arena = NULL;
        MK_TRY(m->be->alloc(m->stream, bytes, &arena));
        m->be->free(m->stream, m->arena);
        m->arena = arena;
        m->arena_bytes = bytes;
        m->cap_B = cap_B;
        m->cap_L = cap_L;
        m->cap_work = work;
    }
    carve(m, m->arena, B, L, m->cap_work, &m->a);
    return MK_OK;
}

/* Points m->batch at the batch as the backend reads it: itself on host memory, else its
 * slot copy or (a device batch) itself, ordered before the step (staging.h). Every
 * call is paired with mk_model_end_batch once the step's readers are queued. */
static mk_status stage(mk_model *m, const mk_batch *batch) {
    m->batch = *batch;
    if (m->be->host_memory) return MK_OK;
    return mk_staging_begin(m->staging, batch, &m->batch);
}

mk_status mk_model_end_batch(mk_model *m) {
    return m->staging ? mk_staging_end(m->staging) : MK_OK;
}

mk_status mk_model_check_batch(mk_model *m, const char *op, const mk_batch *batch,
                               int with_targets) {
    const mk_config *c = &m->cfg;
    if (mk_batch_prechecked(batch, c->num_tokens, c->num_moves)) /* its producer scanned it */
        return mk_batch_check_shape(op, batch, c->tokens_per_side, with_targets);
    m->batch_scans++;
    if (!m->staging) /* host memory: any batch is read in place */
        return mk_batch_check(op, batch, c->num_tokens, c->num_moves, c->tokens_per_side,
                              with_targets);
    return mk_staging_check(m->staging, op, batch, c->num_tokens, c->num_moves, with_targets);
}

int64_t mk_model_batch_scans(const mk_model *m) { return m->batch_scans; }

int mk_model_next_slot(const mk_model *m) {
    return m->staging ? mk_staging_next_slot(m->staging) : -1;
}
mk_status mk_model_wait_slot(mk_model *m, int slot) {
    return m->staging ? mk_staging_wait_slot(m->staging, slot) : MK_OK;
}
void *mk_model_copy_stream(const mk_model *m) {
    return m->staging ? mk_staging_stream(m->staging) : NULL;
}

/* ---------------------------------------------------------------- layers */


static input features_input(mk_model *m) {
    const mk_config *c = &m->cfg;
    int64_t KD = c->orders * c->embed_dim, Pd = c->pair_dim;
    input x = {.n = 4, .width = features(c)};
    for (int s = 0; s < S; s++) {
        x.blk[2 * s] = (block){m->a.ps + s * KD, m->a.dps + s * KD, S * KD, KD, s * (KD + Pd)};
        x.blk[2 * s + 1] =
            (block){m->a.pair + s * Pd, m->a.dpair + s * Pd, S * Pd, Pd, s * (KD + Pd) + KD};
    }
    return x;
}

static input layer_input(mk_model *m, int n) {
    if (n == 0) return features_input(m);
    int64_t H = m->cfg.hidden[n - 1];
    return (input){.n = 1, .width = H, .blk = {{m->a.y[n - 1], m->a.dy[n - 1], H, H, 0}}};
}

/* What the value head's hidden layer reads: x_n, or with value_power_sums the power sums
 * of both perspectives, [B, S K D] (a->ps holds them contiguously). */
static input value_hidden_input(mk_model *m, int n) {
    const mk_config *c = &m->cfg;
    if (!c->value_power_sums) return layer_input(m, n);
    int64_t W = S * c->orders * c->embed_dim;
    return (input){.n = 1, .width = W, .blk = {{m->a.ps, m->a.dps, W, W, 0}}};
}

/* The value head's hidden layer as a layer input. */
static input value_input(mk_model *m) {
    int64_t H = m->cfg.value_hidden;
    return (input){.n = 1, .width = H, .blk = {{m->a.vh, m->a.dvh, H, H, 0}}};
}

/* out[B, N] = x @ weight^T, weight [N, x.width]. */
static mk_status linear(mk_model *m, const input *x, const float *weight, int64_t B, int64_t N,
                        float *out) {
    for (int k = 0; k < x->n; k++) {
        const block *b = &x->blk[k];
        MK_TRY(m->be->gemm(m->stream, 0, 1, B, N, b->cols, 1.0f, b->ptr, b->ld,
                           weight + b->col_offset, x->width, k ? 1.0f : 0.0f, out, N));
    }
    return MK_OK;
}

/* dweight[N, x.width] = dout^T @ x (overwritten); then, when `dx_beta` >= 0,
 * dx = dout @ weight + dx_beta * dx, block by block. The GEMMs are independent (each
 * writes its own block of dweight or its own dx block), so they go as one gemm_batch:
 * the threads share all of them, with the bits of separate calls. */
static mk_status linear_backward(mk_model *m, const input *x, const float *weight,
                                 const float *dout, int64_t B, int64_t N, float *dweight,
                                 float dx_beta) {
    mk_gemm_call calls[2 * MK_MAX_BLOCKS];
    int n = 0;
    for (int k = 0; k < x->n; k++) {
        const block *b = &x->blk[k];
        calls[n++] = (mk_gemm_call){.trans_a = 1, .M = N, .N = b->cols, .K = B, .alpha = 1.0f,
                                    .A = dout, .lda = N, .B = b->ptr, .ldb = b->ld,
                                    .C = dweight + b->col_offset, .ldc = x->width};
        if (dx_beta >= 0.0f)
            calls[n++] = (mk_gemm_call){.M = B, .N = b->cols, .K = N, .alpha = 1.0f, .A = dout,
                                        .lda = N, .B = weight + b->col_offset, .ldb = x->width,
                                        .beta = dx_beta, .C = b->grad, .ldc = b->ld};
    }
    return m->be->gemm_batch(m->stream, calls, n);
}

/* ---------------------------------------------------------------- passes */

/* Everything up to q [B, W], logits [B, L] (only if `logits`: the fused policy head of the
 * training step computes them itself) and the value logit z [B]. */
static mk_status forward_net(mk_model *m, int logits) {
    const mk_config *c = &m->cfg;
    const mk_backend *be = m->be;
    const mk_batch *bt = &m->batch;
    acts *a = &m->a;
    int64_t B = bt->B, L = bt->L, T = c->tokens_per_side;
    MK_TRY(be->power_sums(m->stream, P(m, T_EMBEDDING), bt->tokens, B * S, T, c->embed_dim,
                          c->orders, a->ps));
    MK_TRY(be->pair_sums(m->stream, P(m, T_PAIR_TABLE), bt->tokens, B * S, T, c->pair_dim,
                         a->pair));
    for (int i = 0; i < c->num_hidden; i++) {
        input x = layer_input(m, i);
        MK_TRY(linear(m, &x, P(m, trunk_w(i)), B, c->hidden[i], a->y[i]));
        MK_TRY(be->bias_act(m->stream, a->y[i], P(m, trunk_b(i)), B, c->hidden[i], 1));
    }
    input x = layer_input(m, c->num_hidden);
    MK_TRY(linear(m, &x, P(m, head(m, H_POLICY_W)), B, c->head_width, a->q));
    MK_TRY(be->bias_act(m->stream, a->q, P(m, head(m, H_POLICY_B)), B, c->head_width, 0));
    if (c->move_kinds) /* labels to the move table's rows and the kind table's */
        MK_TRY(be->move_kind_split(m->stream, bt->legal, bt->counts, B, L, table_moves(c),
                                   kind_classes(c), a->moves, a->kind_rows));
    if (logits)
        MK_TRY(be->gather_dot(m->stream, a->q, P(m, head(m, H_MOVES)), table_rows(m), bt->counts,
                              B, L, c->head_width, a->logits));
    if (logits && c->move_kinds) { /* + q . kind_table[kind row]: a rows = 1 bias add */
        MK_TRY(be->gather_dot(m->stream, a->q, P(m, kind_head(m)), a->kind_rows, bt->counts, B, L,
                              c->head_width, a->kind_logits));
        MK_TRY(be->bias_act(m->stream, a->logits, a->kind_logits, 1, B * L, 0));
    }
    if (logits && c->move_pairs) /* perspective 0, the side to move: a stride of S T */
        MK_TRY(be->move_pair_sums(m->stream, P(m, head(m, H_MOVE_PAIRS)), bt->tokens, S * T,
                                  bt->legal, bt->counts, B, T, L, c->move_pairs, a->logits));
    if (logits && c->board_kinds)
        MK_TRY(be->move_pair_relative_sums(m->stream, P(m, head(m, H_MOVE_PAIR_REL)), bt->tokens,
                                           S * T, bt->legal, bt->counts, B, T, L, c->move_pairs,
                                           c->board_width, c->board_height, c->board_kinds,
                                           a->logits));
    if (logits && c->move_hidden_gate) { /* gate = q G + out, a readout per position */
        const int64_t D = c->move_hidden, W = c->head_width;
        MK_TRY(be->gemm(m->stream, 0, 0, B, D, W, 1.0f, a->q, W, P(m, gate_head(m)), D, 0.0f,
                        a->gate, D));
        MK_TRY(be->bias_act(m->stream, a->gate, P(m, head(m, H_MOVE_HIDDEN_OUT)), B, D, 0));
    }
    if (logits && c->move_hidden)
        MK_TRY(be->move_hidden(m->stream, P(m, head(m, H_MOVE_HIDDEN_REL)),
                               P(m, head(m, H_MOVE_HIDDEN_CLASS)),
                               c->move_hidden_gate ? a->gate : P(m, head(m, H_MOVE_HIDDEN_OUT)),
                               c->move_hidden_gate ? c->move_hidden : 0,
                               bt->tokens, S * T, bt->legal, bt->counts, B, T, L, c->move_pairs,
                               c->board_width, c->board_height, c->board_kinds, c->move_hidden,
                               a->hidden_pre, a->logits));
    if (logits && c->move_shared) { /* cls = q Sc^T, grp = q Sg^T, then each move's two entries */
        const int64_t C = c->move_pairs, groups = c->num_moves / C, W = c->head_width;
        MK_TRY(be->gemm(m->stream, 0, 1, B, C, W, 1.0f, a->q, W, P(m, shared_head(m, S_CLASS)), W,
                        0.0f, a->cls, C));
        MK_TRY(be->gemm(m->stream, 0, 1, B, groups, W, 1.0f, a->q, W,
                        P(m, shared_head(m, S_GROUP)), W, 0.0f, a->grp, groups));
        MK_TRY(be->move_shared_add(m->stream, a->cls, a->grp, bt->legal, bt->counts, B, L, C,
                                   groups, a->logits));
    }
    if (c->value_hidden) { /* vh = relu(value_hidden x_n + b); z = value.weight . vh */
        input xv = value_hidden_input(m, c->num_hidden);
        MK_TRY(linear(m, &xv, P(m, value_hidden_head(m)), B, c->value_hidden, a->vh));
        MK_TRY(be->bias_act(m->stream, a->vh, P(m, value_hidden_head(m) + 1), B, c->value_hidden, 1));
        input v = value_input(m);
        MK_TRY(linear(m, &v, P(m, head(m, H_VALUE_W)), B, 1, a->z));
    } else {
        MK_TRY(linear(m, &x, P(m, head(m, H_VALUE_W)), B, 1, a->z));
    }
    MK_TRY(be->bias_act(m->stream, a->z, P(m, head(m, H_VALUE_B)), B, 1, 0));
    return MK_OK;
}

mk_status mk_model_table_rows(mk_model *m, const int32_t **rows) {
    const mk_config *c = &m->cfg;
    const mk_batch *bt = &m->batch;
    *rows = table_rows(m);
    if (!c->move_kinds) return MK_OK;
    return m->be->move_kind_split(m->stream, bt->legal, bt->counts, bt->B, bt->L, table_moves(c),
                                  kind_classes(c), m->a.moves, m->a.kind_rows);
}

static mk_status forward_staged(mk_model *m, const mk_batch *batch) {
    MK_TRY(stage(m, batch));
    return forward_net(m, 1);
}

mk_status mk_model_forward(mk_model *m, const mk_batch *batch, float *logits, float *value) {
    MK_TRY(mk_model_check_batch(m, "Model.forward", batch, 0));
    MK_TRY(reserve(m, batch->B, batch->L));
    mk_status st = forward_staged(m, batch), end = mk_model_end_batch(m);
    MK_TRY(st);
    MK_TRY(end);
    MK_TRY(m->be->sigmoid(m->stream, m->a.z, batch->B, m->a.v));
    MK_TRY(m->be->to_host(m->stream, logits, m->a.logits, (size_t)(batch->B * batch->L) * 4));
    MK_TRY(m->be->to_host(m->stream, value, m->a.v, (size_t)batch->B * 4));
    return MK_OK;
}

mk_status mk_model_forward_loss(mk_model *m, const mk_batch *batch, float value_weight) {
    return mk_model_forward_loss_prepared(m, batch, value_weight, NULL, NULL);
}

mk_status mk_model_forward_loss_prepared(mk_model *m, const mk_batch *batch, float value_weight,
                                         mk_batch_prepare_fn prepare, void *ctx) {
    const mk_backend *be = m->be;
    acts *a = &m->a;
    int64_t B = batch->B;
    MK_TRY(reserve(m, B, batch->L));
    MK_TRY(stage(m, batch));
    if (prepare) MK_TRY(prepare(ctx, m->batch.tokens, B * S, &m->batch));
    MK_TRY(forward_net(m, !fused_head(m)));
    const mk_batch *bt = &m->batch;
    float inv_B = 1.0f / (float)B;
    if (fused_head(m)) /* dq is ready here: backward then only scatters into move_table */
        MK_TRY(be->policy_head(m->stream, a->q, P(m, head(m, H_MOVES)), bt->legal, bt->counts,
                               bt->target, bt->policy_target, B, bt->L, m->cfg.head_width, inv_B,
                               a->dlogits, a->dq, a->row_policy, a->row_correct));
    else
        MK_TRY(be->softmax_xent(m->stream, a->logits, bt->counts, bt->target, bt->policy_target, B,
                                bt->L, inv_B, a->dlogits, a->row_policy, a->row_correct));
    MK_TRY(be->value_bce(m->stream, a->z, bt->value, B, value_weight * inv_B, a->dz, a->row_value));
    MK_TRY(be->loss_stats(m->stream, a->row_policy, a->row_value, a->row_correct, B, value_weight,
                          m->stats));
    return MK_OK;
}

/* No gradient is zeroed before this pass, on any backend: each primitive overwrites its
 * output (GEMMs with beta 0, the bias sums, and the bucketed scatters, which give every
 * table row an owner and write a row with no entries as 0), so a step has no fill pass
 * over the gradients to fold into a kernel. The scratch `a->work` is shared: these
 * primitives and the fused pair-table update run one after another on the stream. */
mk_status mk_model_backward(mk_model *m, int pair_table, const uint8_t *move_rows) {
    const mk_config *c = &m->cfg;
    const mk_backend *be = m->be;
    const mk_batch *bt = &m->batch;
    acts *a = &m->a;
    int64_t B = bt->B, T = c->tokens_per_side, W = c->head_width;
    int n = c->num_hidden;
    MK_TRY(be->gather_dot_backward(m->stream, a->dlogits, a->q, P(m, head(m, H_MOVES)),
                                   table_rows(m), bt->counts, B, bt->L, W, table_moves(c),
                                   fused_head(m) ? NULL : a->dq, G(m, head(m, H_MOVES)), move_rows,
                                   a->work, a->work_bytes));
    if (c->move_pairs)
        MK_TRY(be->move_pair_sums_backward(m->stream, a->dlogits, bt->tokens, S * T, bt->legal,
                                           bt->counts, B, T, bt->L, c->num_tokens, c->move_pairs,
                                           G(m, head(m, H_MOVE_PAIRS)), a->work, a->work_bytes));
    if (c->board_kinds) /* from the table's gradient: every (token, class) pair's */
        MK_TRY(be->move_pair_relative_backward(m->stream, G(m, head(m, H_MOVE_PAIRS)),
                                               c->num_tokens, c->move_pairs, c->board_width,
                                               c->board_height, c->board_kinds,
                                               G(m, head(m, H_MOVE_PAIR_REL))));
    if (c->move_hidden)
        MK_TRY(be->move_hidden_backward(
            m->stream, a->dlogits, a->hidden_pre,
            c->move_hidden_gate ? a->gate : P(m, head(m, H_MOVE_HIDDEN_OUT)),
            c->move_hidden_gate ? c->move_hidden : 0, bt->tokens, S * T, bt->legal, bt->counts,
            B, T, bt->L, c->move_pairs, c->board_width, c->board_height, c->board_kinds,
            c->move_hidden, G(m, head(m, H_MOVE_HIDDEN_REL)), G(m, head(m, H_MOVE_HIDDEN_CLASS)),
            c->move_hidden_gate ? a->dgate : G(m, head(m, H_MOVE_HIDDEN_OUT)), a->work,
            a->work_bytes));
    if (c->move_hidden_gate) { /* dout = the column sums of dgate; dG = q^T dgate; dq += dgate G^T */
        const int64_t D = c->move_hidden;
        MK_TRY(be->bias_act_backward(m->stream, a->dgate, a->gate, B, D, 0,
                                     G(m, head(m, H_MOVE_HIDDEN_OUT))));
        MK_TRY(be->gemm(m->stream, 1, 0, W, D, B, 1.0f, a->q, W, a->dgate, D, 0.0f,
                        G(m, gate_head(m)), D));
        MK_TRY(be->gemm(m->stream, 0, 1, B, W, D, 1.0f, a->dgate, D, P(m, gate_head(m)), D, 1.0f,
                        a->dq, W));
    }
    if (c->move_kinds) { /* the kind table's gradient, and its part of dq added to dq */
        MK_TRY(be->gather_dot_backward(m->stream, a->dlogits, a->q, P(m, kind_head(m)),
                                       a->kind_rows, bt->counts, B, bt->L, W,
                                       kind_classes(c) * c->move_kinds, a->dq_kind,
                                       G(m, kind_head(m)), NULL, a->work, a->work_bytes));
        MK_TRY(be->bias_act(m->stream, a->dq, a->dq_kind, 1, B * W, 0));
    }
    if (c->move_shared) { /* dcls, dgrp; the tables' gradients dS = d^T q; dq += d S */
        const int64_t C = c->move_pairs, groups = c->num_moves / C;
        MK_TRY(be->move_shared_backward(m->stream, a->dlogits, bt->legal, bt->counts, B, bt->L, C,
                                        groups, a->dcls, a->dgrp));
        MK_TRY(be->gemm(m->stream, 1, 0, C, W, B, 1.0f, a->dcls, C, a->q, W, 0.0f,
                        G(m, shared_head(m, S_CLASS)), W));
        MK_TRY(be->gemm(m->stream, 1, 0, groups, W, B, 1.0f, a->dgrp, groups, a->q, W, 0.0f,
                        G(m, shared_head(m, S_GROUP)), W));
        MK_TRY(be->gemm(m->stream, 0, 0, B, W, C, 1.0f, a->dcls, C, P(m, shared_head(m, S_CLASS)),
                        W, 1.0f, a->dq, W));
        MK_TRY(be->gemm(m->stream, 0, 0, B, W, groups, 1.0f, a->dgrp, groups,
                        P(m, shared_head(m, S_GROUP)), W, 1.0f, a->dq, W));
    }
    MK_TRY(be->bias_act_backward(m->stream, a->dq, a->q, B, W, 0, G(m, head(m, H_POLICY_B))));
    MK_TRY(be->bias_act_backward(m->stream, a->dz, a->z, B, 1, 0, G(m, head(m, H_VALUE_B))));
    /* both heads read x_n: the value head's dx accumulates onto the policy head's */
    input x = layer_input(m, n);
    MK_TRY(linear_backward(m, &x, P(m, head(m, H_POLICY_W)), a->dq, B, W, G(m, head(m, H_POLICY_W)),
                           0.0f));
    if (c->value_hidden) { /* dvh = dz value.weight (masked by the ReLU), then into x_n */
        const int64_t Hv = c->value_hidden;
        input v = value_input(m);
        MK_TRY(linear_backward(m, &v, P(m, head(m, H_VALUE_W)), a->dz, B, 1,
                               G(m, head(m, H_VALUE_W)), 0.0f));
        MK_TRY(be->bias_act_backward(m->stream, a->dvh, a->vh, B, Hv, 1,
                                     G(m, value_hidden_head(m) + 1)));
        if (!c->value_power_sums) /* else into the power sums' gradient, after layer 0's */
            MK_TRY(linear_backward(m, &x, P(m, value_hidden_head(m)), a->dvh, B, Hv,
                                   G(m, value_hidden_head(m)), 1.0f));
    } else {
        MK_TRY(linear_backward(m, &x, P(m, head(m, H_VALUE_W)), a->dz, B, 1,
                               G(m, head(m, H_VALUE_W)), 1.0f));
    }
    for (int i = n - 1; i >= 0; i--) {
        MK_TRY(be->bias_act_backward(m->stream, a->dy[i], a->y[i], B, c->hidden[i], 1,
                                     G(m, trunk_b(i))));
        input xi = layer_input(m, i);
        MK_TRY(linear_backward(m, &xi, P(m, trunk_w(i)), a->dy[i], B, c->hidden[i],
                               G(m, trunk_w(i)), 0.0f));
    }
    if (c->value_power_sums) { /* dps += dvh value_hidden.weight: layer 0 wrote dps (beta 0) */
        input xv = value_hidden_input(m, n);
        MK_TRY(linear_backward(m, &xv, P(m, value_hidden_head(m)), a->dvh, B, c->value_hidden,
                               G(m, value_hidden_head(m)), 1.0f));
    }
    MK_TRY(be->power_sums_backward(m->stream, a->dps, P(m, T_EMBEDDING), bt->tokens, B * S, T,
                                   c->embed_dim, c->orders, c->num_tokens, G(m, T_EMBEDDING),
                                   a->work, a->work_bytes));
    if (pair_table)
        MK_TRY(be->pair_sums_backward(m->stream, a->dpair, bt->tokens, B * S, T, c->pair_dim,
                                      mk_num_pairs(c->num_tokens), G(m, T_PAIR_TABLE), a->work,
                                      a->work_bytes));
    return MK_OK;
}

mk_status mk_model_pair_table_adamw(mk_model *m, float *exp_avg, float *exp_avg_sq,
                                    const mk_adamw_args *args, const float *stats) {
    const mk_config *c = &m->cfg;
    return m->be->pair_sums_backward_adamw(m->stream, m->a.dpair, m->batch.tokens,
                                           m->batch.B * S, c->tokens_per_side, c->pair_dim,
                                           c->num_tokens, P(m, T_PAIR_TABLE),
                                           exp_avg, exp_avg_sq, args, stats, m->a.work,
                                           m->a.work_bytes);
}

mk_status mk_model_pair_table_adamw_bf16(mk_model *m, uint16_t *exp_avg, uint16_t *exp_avg_sq,
                                         const mk_adamw_args *args, const float *stats,
                                         uint64_t seed) {
    const mk_config *c = &m->cfg;
    return m->be->pair_sums_backward_adamw_bf16(
        m->stream, m->a.dpair, m->batch.tokens, m->batch.B * S, c->tokens_per_side, c->pair_dim,
        c->num_tokens, P(m, T_PAIR_TABLE), exp_avg, exp_avg_sq, args,
        stats, seed, m->a.work, m->a.work_bytes);
}

mk_status mk_model_pair_table_adamw_sparse(mk_model *m, void *exp_avg, void *exp_avg_sq,
                                           int bf16, int32_t *stamps, int64_t now,
                                           const mk_adamw_args *args, const float *stats,
                                           uint64_t seed, void *work, size_t work_bytes,
                                           int bucketed) {
    const mk_config *c = &m->cfg;
    return m->be->pair_sums_backward_adamw_sparse(
        m->stream, m->a.dpair, m->batch.tokens, m->batch.B * S, c->tokens_per_side, c->pair_dim,
        c->num_tokens, P(m, T_PAIR_TABLE), exp_avg, exp_avg_sq, bf16, stamps, now, args, stats,
        seed, work, work_bytes, bucketed);
}

size_t mk_model_work_bytes(const mk_model *m) { return m->a.work_bytes; }

mk_status mk_model_pair_grad_rows(mk_model *m, int64_t *ids, float *rows, int64_t capacity,
                                  int64_t *count) {
    const mk_config *c = &m->cfg;
    return m->be->pair_grad_rows(m->stream, m->a.dpair, m->batch.tokens, m->batch.B * S,
                                 c->tokens_per_side, c->pair_dim, c->num_tokens, ids, rows,
                                 capacity, count, m->a.work, m->a.work_bytes);
}

static mk_status loss_and_grad_staged(mk_model *m, const mk_batch *batch, float value_weight) {
    MK_TRY(mk_model_forward_loss(m, batch, value_weight));
    return mk_model_backward(m, 1, NULL);
}

mk_status mk_check_value_weight(const char *op, double w) {
    if (!(w >= 0.0 && isfinite(w)))
        return mk_fail(MK_ERR_VALUE, "%s: value_weight must be finite and >= 0, got %g", op, w);
    return MK_OK;
}

mk_status mk_model_loss_and_grad(mk_model *m, const mk_batch *batch, float value_weight,
                                 float *stats) {
    MK_TRY(mk_check_value_weight("Model.loss_and_grad", value_weight));
    MK_TRY(mk_model_check_batch(m, "Model.loss_and_grad", batch, 1));
    mk_status st = loss_and_grad_staged(m, batch, value_weight), end = mk_model_end_batch(m);
    MK_TRY(st);
    MK_TRY(end);
    return m->be->to_host(m->stream, stats, m->stats, MK_STAT_COUNT * sizeof(float));
}
