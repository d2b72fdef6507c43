/* The fused ops' argument descriptions and the checks that read them (op_args.h). */
#include "op_args.h"

/* The six ops through a table, arguments in mk_op_spec.args order. */
#define IN_F(i) ((const float *)c->a[i].data)
#define IN_I(i) ((const int32_t *)c->a[i].data)
#define DIM(i, d) (c->a[i].shape[d])
/* hidden, table, indices, counts (, grad) */
static mk_status run_gather_dot(const mk_backend *be, const mk_op_call *c, float *const *out) {
    return be->gather_dot(NULL, IN_F(0), IN_F(1), IN_I(2), IN_I(3), DIM(2, 0), DIM(2, 1), DIM(0, 1),
                          out[0]);
}
static mk_status run_gather_dot_backward(const mk_backend *be, const mk_op_call *c,
                                         float *const *out) {
    return be->gather_dot_backward(NULL, IN_F(4), IN_F(0), IN_F(1), IN_I(2), IN_I(3), DIM(2, 0),
                                   DIM(2, 1), DIM(0, 1), DIM(1, 0), out[0], out[1], NULL, NULL, 0);
}
/* emb, tokens */
static mk_status run_power_sums(const mk_backend *be, const mk_op_call *c, float *const *out) {
    return be->power_sums(NULL, IN_F(0), IN_I(1), DIM(1, 0) * DIM(1, 1), DIM(1, 2), DIM(0, 1),
                          c->scalar, out[0]);
}
/* grad, emb, tokens */
static mk_status run_power_sums_backward(const mk_backend *be, const mk_op_call *c,
                                         float *const *out) {
    return be->power_sums_backward(NULL, IN_F(0), IN_F(1), IN_I(2), DIM(2, 0) * DIM(2, 1),
                                   DIM(2, 2), DIM(1, 1), DIM(0, 2), DIM(1, 0), out[0], NULL, 0);
}
/* pair_table, tokens */
static mk_status run_pair_sums(const mk_backend *be, const mk_op_call *c, float *const *out) {
    return be->pair_sums(NULL, IN_F(0), IN_I(1), DIM(1, 0) * DIM(1, 1), DIM(1, 2), DIM(0, 1),
                         out[0]);
}
/* grad, tokens */
static mk_status run_pair_sums_backward(const mk_backend *be, const mk_op_call *c,
                                        float *const *out) {
    return be->pair_sums_backward(NULL, IN_F(0), IN_I(1), DIM(1, 0) * DIM(1, 1), DIM(1, 2),
                                  DIM(0, 2), c->scalar, out[0], NULL, 0);
}
#undef IN_F
#undef IN_I
#undef DIM

#define ARG(n, idx, nd) {.name = n, .index = idx, .ndim = nd
#define F32(n, nd, pos) ARG(n, 0, nd), .position = pos}
#define IDX(n, nd, pos) ARG(n, 1, nd), .position = pos}
#define D(arg, dim) {arg, dim}
#define SCALAR {MK_OP_SCALAR, 0}

/* hidden [B, W], table [M, W], indices [B, L], counts [B] or None; logits [B, L] */
#define GATHER_DOT_ARGS                                                                        \
    F32("hidden", 2, 0 + G), F32("table", 2, 1 + G), IDX("indices", 2, 2 + G),               \
        {.name = "counts", .index = 1, .ndim = 1, .optional = 1, .position = 3 + G}
#define GATHER_DOT_SAME                                                                        \
    {D(1, 1), D(0, 1), 4, "W"}, {D(2, 0), D(0, 0), 4, "B"}, {D(3, 0), D(0, 0), 4, "B"}
#define GATHER_DOT_RANGE .tokens = -1, .legal = 2, .counts = 3, .rows = D(1, 0)

#define G 0
const mk_op_spec mk_op_gather_dot = {
    .name = "gather_dot",
    .run = run_gather_dot,
    .n_args = 4, .args = {GATHER_DOT_ARGS}, .n_positional = 4,
    .n_same = 3, .same = {GATHER_DOT_SAME},
    GATHER_DOT_RANGE,
    .n_outs = 1, .out_ndim = {2}, .out = {{D(2, 0), D(2, 1)}}, .out_names = {"out"},
};
#undef G

/* grad [B, L] first among the positional arguments, converted last */
#define G 1
const mk_op_spec mk_op_gather_dot_backward = {
    .name = "gather_dot_backward",
    .run = run_gather_dot_backward,
    .n_args = 5, .args = {GATHER_DOT_ARGS, F32("grad", 2, 0)}, .n_positional = 5,
    .n_same = 5, .same = {GATHER_DOT_SAME, {D(4, 0), D(2, 0), 5, "B"}, {D(4, 1), D(2, 1), 5, "L"}},
    GATHER_DOT_RANGE,
    .n_outs = 2, .out_ndim = {2, 2}, .out = {{D(0, 0), D(0, 1)}, {D(1, 0), D(1, 1)}},
    .out_names = {"out[0] (grad_hidden)", "out[1] (grad_table)"},
};
#undef G

/* emb [V, D], tokens [B, S, T], orders K; out [B, S, K, D] */
const mk_op_spec mk_op_power_sums = {
    .name = "power_sums",
    .run = run_power_sums,
    .n_args = 2, .args = {F32("emb", 2, 0), IDX("tokens", 3, 1)}, .n_positional = 3,
    .scalar = MK_OP_ORDERS,
    .tokens = 1, .legal = -1, .counts = -1,
    .vocab_kind = MK_VOCAB_ROWS, .vocab = D(0, 0), .vocab_words = "emb has that many rows",
    .n_outs = 1, .out_ndim = {4}, .out = {{D(1, 0), D(1, 1), SCALAR, D(0, 1)}}, .out_names = {"out"},
};

/* grad [B, S, K, D], emb [V, D], tokens [B, S, T]; grad_emb [V, D] */
const mk_op_spec mk_op_power_sums_backward = {
    .name = "power_sums_backward",
    .run = run_power_sums_backward,
    .n_args = 3, .args = {F32("grad", 4, 0), F32("emb", 2, 1), IDX("tokens", 3, 2)},
    .n_positional = 3,
    .n_same = 3, .same = {{D(0, 0), D(2, 0), 3, "B"}, {D(0, 1), D(2, 1), 3, "S"},
                          {D(0, 3), D(1, 1), 3, "D"}},
    .positive = D(0, 2), .positive_what = "orders",
    .tokens = 2, .legal = -1, .counts = -1,
    .vocab_kind = MK_VOCAB_ROWS, .vocab = D(1, 0), .vocab_words = "emb has that many rows",
    .n_outs = 1, .out_ndim = {2}, .out = {{D(1, 0), D(1, 1)}}, .out_names = {"out"},
};

#define PAIR_WORDS "the pair table's vocabulary size V"

/* pair_table [V (V + 1) / 2, P], tokens [B, S, T]; out [B, S, P] */
const mk_op_spec mk_op_pair_sums = {
    .name = "pair_sums",
    .run = run_pair_sums,
    .n_args = 2, .args = {F32("pair_table", 2, 0), IDX("tokens", 3, 1)}, .n_positional = 2,
    .tokens = 1, .legal = -1, .counts = -1,
    .vocab_kind = MK_VOCAB_PAIRS, .vocab = D(0, 0), .vocab_what = "pair_table.shape[0]",
    .vocab_words = PAIR_WORDS,
    .n_outs = 1, .out_ndim = {3}, .out = {{D(1, 0), D(1, 1), D(0, 1)}}, .out_names = {"out"},
};

/* grad [B, S, P], tokens [B, S, T], num_pairs; grad_pair_table [num_pairs, P] */
const mk_op_spec mk_op_pair_sums_backward = {
    .name = "pair_sums_backward",
    .run = run_pair_sums_backward,
    .n_args = 2, .args = {F32("grad", 3, 0), IDX("tokens", 3, 1)}, .n_positional = 3,
    .scalar = MK_OP_NUM_PAIRS,
    .n_same = 2, .same = {{D(0, 0), D(1, 0), 2, "B"}, {D(0, 1), D(1, 1), 2, "S"}},
    .tokens = 1, .legal = -1, .counts = -1,
    .vocab_kind = MK_VOCAB_PAIRS, .vocab = SCALAR, .vocab_what = "num_pairs",
    .vocab_words = PAIR_WORDS,
    .n_outs = 1, .out_ndim = {2}, .out = {{SCALAR, D(0, 2)}}, .out_names = {"out"},
};

/* The `orders` argument: an int >= 1. */
static int orders_arg(PyObject *obj, const char *op, int64_t *orders) {
    PyObject *value = mk_config_int_arg(obj, op, "orders");
    long long K = value ? PyLong_AsLongLong(value) : -1;
    Py_XDECREF(value);
    if (K == -1 && PyErr_Occurred()) return -1;
    if (K < 1) {
        PyErr_Format(PyExc_ValueError, "%s: orders must be >= 1, got %lld", op, K);
        return -1;
    }
    *orders = K;
    return 0;
}

/* The vocabulary size V of a pair table with `num_pairs` = V (V + 1) / 2 rows, or -1
 * with a ValueError naming `what` when there is no such V. */
static int64_t pair_vocab_arg(int64_t num_pairs, const char *op, const char *what) {
    int64_t V = mk_vocab_of_pairs(num_pairs);
    if (V < 0 && num_pairs > mk_num_pairs(MK_MAX_PAIR_VOCAB))
        PyErr_Format(PyExc_ValueError,
                     "%s: %s is %lld, above the largest pair table, %lld rows (V = 2^31: "
                     "tokens are int32)",
                     op, what, (long long)num_pairs, (long long)mk_num_pairs(MK_MAX_PAIR_VOCAB));
    else if (V < 0)
        PyErr_Format(PyExc_ValueError,
                     "%s: %s is %lld, which is not V (V + 1) / 2 for any vocabulary size V", op,
                     what, (long long)num_pairs);
    return V;
}

static int64_t dim_of(const mk_op_call *c, mk_op_dim d) {
    return d.arg == MK_OP_SCALAR ? c->scalar : c->a[d.arg].shape[d.dim];
}

/* The rules that can be checked once `parsed` arrays are converted, from *next on. */
static int check_same(const mk_op_spec *s, const mk_op_call *c, int parsed, int *next) {
    for (; *next < s->n_same && s->same[*next].after <= parsed; (*next)++) {
        const mk_op_same *r = &s->same[*next];
        if (!c->a[r->a.arg].present) continue;
        int64_t got = dim_of(c, r->a), want = dim_of(c, r->b);
        if (got == want) continue;
        PyErr_Format(PyExc_ValueError, "%s: %s.shape[%d] must equal %s.shape[%d] (%s): expected %lld, got %lld",
                     s->name, s->args[r->a.arg].name, r->a.dim, s->args[r->b.arg].name, r->b.dim,
                     r->what, (long long)want, (long long)got);
        return -1;
    }
    return 0;
}

int mk_op_prepare(const mk_op_spec *s, PyObject *const *positional, const mk_op_layer *layer,
                  void *held, mk_op_call *c) {
    int next = 0;
    PyObject *scalar = positional[s->n_positional - 1];
    c->V = 0;
    if (s->scalar == MK_OP_ORDERS && orders_arg(scalar, s->name, &c->scalar) < 0) return -1;
    if (s->scalar == MK_OP_NUM_PAIRS && (c->scalar = PyLong_AsLongLong(scalar)) == -1 &&
        PyErr_Occurred())
        return -1;
    for (int i = 0; i < s->n_args; i++) {
        const mk_op_arg *arg = &s->args[i];
        PyObject *obj = positional[arg->position];
        c->a[i].data = NULL;
        c->a[i].present = 0;
        if (!(arg->optional && (!obj || obj == Py_None))) {
            if (layer->obtain(held, s->name, arg->name, arg->index ? MK_OP_INDEX : MK_OP_FLOAT,
                              arg->ndim, obj, &c->a[i]) < 0)
                return -1;
            c->a[i].present = 1;
        }
        if (check_same(s, c, i + 1, &next) < 0) return -1;
    }
    if (s->positive_what && dim_of(c, s->positive) < 1) {
        PyErr_Format(PyExc_ValueError, "%s: %s.shape[%d] (%s) must be >= 1, got %lld", s->name,
                     s->args[s->positive.arg].name, s->positive.dim, s->positive_what,
                     (long long)dim_of(c, s->positive));
        return -1;
    }
    if (s->vocab_kind == MK_VOCAB_ROWS) c->V = dim_of(c, s->vocab);
    if (s->vocab_kind == MK_VOCAB_PAIRS &&
        (c->V = pair_vocab_arg(dim_of(c, s->vocab), s->name, s->vocab_what)) < 0)
        return -1;
    for (int o = 0; o < s->n_outs; o++)
        for (int d = 0; d < s->out_ndim[o]; d++) c->out[o][d] = dim_of(c, s->out[o][d]);
    return 0;
}

mk_check mk_op_rules(const mk_op_spec *s, const mk_op_call *c) {
    mk_check r = {0};
    if (s->tokens >= 0) {
        const mk_op_view *t = &c->a[s->tokens];
        r.tokens = t->data;
        r.n_tokens = t->shape[0] * t->shape[1] * t->shape[2];
        r.V = c->V;
    }
    if (s->legal >= 0) {
        const mk_op_view *l = &c->a[s->legal];
        r.legal = l->data;
        r.counts = s->counts >= 0 ? c->a[s->counts].data : NULL;
        r.B = l->shape[0];
        r.L = l->shape[1];
        r.M = dim_of(c, s->rows);
        r.min_count = 0; /* an op's row may hold no legal move */
    }
    return r;
}

int mk_op_fault(const mk_op_spec *s, const mk_op_call *c, const mk_check *r, const mk_fault *f) {
    const char *op = s->name;
    long long i = (long long)f->index, v = (long long)f->value;
    switch (f->kind) {
    case MK_FAULT_NONE:
        return 0;
    case MK_FAULT_TOKEN: {
        const int64_t S = c->a[s->tokens].shape[1], T = c->a[s->tokens].shape[2];
        PyErr_Format(PyExc_ValueError,
                     "%s: tokens[%lld, %lld, %lld] = %lld is out of range: must be -1 (empty) or "
                     "in [0, %lld) (%s)",
                     op, i / (S * T), i / T % S, i % T, v, (long long)r->V, s->vocab_words);
        break;
    }
    case MK_FAULT_COUNT:
        PyErr_Format(PyExc_ValueError, "%s: counts[%lld] = %lld is outside [%lld, L = %lld]", op,
                     i, v, (long long)r->min_count, (long long)r->L);
        break;
    case MK_FAULT_LEGAL:
        PyErr_Format(PyExc_ValueError,
                     "%s: indices[%lld, %lld] = %lld is out of range for a table of %lld rows "
                     "(legal slots are l < counts[b] = %lld)",
                     op, i, (long long)f->slot, v, (long long)r->M, (long long)f->count);
        break;
    default: /* the ops check no targets */
        PyErr_Format(PyExc_RuntimeError, "%s: unexpected range fault of kind %d", op, f->kind);
    }
    return -1;
}
