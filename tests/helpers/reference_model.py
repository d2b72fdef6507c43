"""NumPy float64 reference of the whole network of docs/design.md §1: forward, loss, every
gradient, AdamW and the learning-rate schedule. Written for clarity and independent of the
C code; the ops come from reference.py (one reference per op)."""
import math

import numpy as np

import reference as ref

S = 2


def board(cfg):
    """(W, H, K) of the move-pair table's relative part."""
    return cfg.board_width, cfg.board_height, cfg.board_kinds


def forward(p, cfg, tokens, legal, counts):
    """Every activation of the forward pass, as a dict (float64)."""
    p = {k: np.float64(v) for k, v in p.items()}
    B = tokens.shape[0]
    K, D = cfg.orders, cfg.embed_dim
    ps = ref.power_sums(p["embedding"], tokens, K)              # [B, S, K, D]
    pair = ref.pair_sums(p["pair_table"], tokens)               # [B, S, P]
    f = np.concatenate([ps.reshape(B, S, K * D), pair], axis=2)  # [B, S, K D + P]
    xs = [f.reshape(B, -1)]
    for i in range(len(cfg.hidden)):
        h = xs[-1] @ p[f"trunk.{i}.weight"].T + p[f"trunk.{i}.bias"]
        xs.append(np.maximum(h, 0.0))
    x = xs[-1]
    q = x @ p["policy.weight"].T + p["policy.bias"]
    moves, kind_rows = table_rows(cfg, legal, counts)
    logits = ref.gather_dot(q, p["move_table"], moves, counts)
    if "move_kind_table" in p:  # q . move_kind_table[l % C + C kind]
        logits = logits + ref.gather_dot(q, p["move_kind_table"], kind_rows, counts)
    if "move_pair_table" in p:  # the side to move's tokens (perspective 0)
        logits = logits + ref.move_pair_sums(p["move_pair_table"], tokens[:, 0], legal, counts)
    if "move_pair_relative" in p:
        logits = logits + ref.move_pair_relative_sums(p["move_pair_relative"], tokens[:, 0], legal, counts,
                                                      cfg.move_pairs, *board(cfg))
    hidden_pre = None
    gate = None
    if "move_hidden_gate" in p:  # a readout per position: out + q G
        gate = p["move_hidden_out"] + q @ p["move_hidden_gate"]
    if "move_hidden_out" in p:
        add, hidden_pre = ref.move_hidden(p["move_hidden_relative"], p["move_hidden_class"],
                                          p["move_hidden_out"][0] if gate is None else gate,
                                          tokens[:, 0], legal, counts, cfg.move_pairs, *board(cfg))
        logits = logits + add
    if "move_shared_class" in p:
        logits = logits + ref.move_shared_add(q @ p["move_shared_class"].T, q @ p["move_shared_group"].T,
                                              legal, counts, cfg.move_pairs)
    vh = None
    if "value_hidden.weight" in p:  # the value head's hidden layer, over x_n or the power sums
        xv = ps.reshape(B, S * K * D) if getattr(cfg, "value_power_sums", 0) else x
        vh = np.maximum(xv @ p["value_hidden.weight"].T + p["value_hidden.bias"], 0.0)
    z = ((x if vh is None else vh) @ p["value.weight"].T)[:, 0] + p["value.bias"][0]
    return {"p": p, "ps": ps, "pair": pair, "xs": xs, "q": q, "logits": logits, "z": z, "vh": vh,
            "value": 1.0 / (1.0 + np.exp(-z)), "hidden_pre": hidden_pre, "gate": gate}


def table_rows(cfg, legal, counts):
    """(the move table's row, the kind table's row) of each label: with move kinds, label l
    is move l % R (R = num_moves // move_kinds) and kind l // R; else the label itself."""
    if not getattr(cfg, "move_kinds", 0):
        return legal, None
    return ref.move_kind_split(legal, counts, cfg.num_moves // cfg.move_kinds, max(cfg.move_pairs, 1))


def log_softmax_masked(logits, counts):
    mask = ref.legal_mask(logits, counts)
    x = np.where(mask, logits, -np.inf)
    top = x.max(axis=1, keepdims=True)
    lse = top + np.log(np.exp(x - top).sum(axis=1, keepdims=True))
    return np.where(mask, logits - lse, 0.0), mask


def policy_rows(logits, counts, target, policy_target=None):
    """Per position: the cross-entropy over its legal slots, 1.0 if the first argmax is the
    target, and d CE / d logits (0 at padded slots), for hard (target) or soft targets."""
    B, L = logits.shape
    logp, mask = log_softmax_masked(logits, counts)
    if policy_target is None:
        y = np.zeros((B, L))
        y[np.arange(B), target] = 1.0
    else:
        y = np.where(mask, np.float64(policy_target), 0.0)
    row_loss = -(y * logp).sum(axis=1)
    correct = (np.where(mask, logits, -np.inf).argmax(axis=1) == target).astype(np.float64)
    return row_loss, correct, np.where(mask, np.exp(logp) - y, 0.0)


def policy_head(q, table, legal, counts, target, policy_target=None, grad_scale=1.0):
    """The backend's fused policy head (csrc/core/backend.h, policy_head) composed from the
    references: (dlogits, dq, row_loss, row_correct), float64."""
    logits = ref.gather_dot(q, table, legal, counts)
    row_loss, correct, d = policy_rows(logits, counts, target, policy_target)
    dlogits = grad_scale * d
    dq, _ = ref.gather_dot_backward(dlogits, q, table, legal, counts)
    return dlogits, dq, row_loss, correct


def loss(act, counts, target, value, policy_target=None, value_weight=1.0):
    """(stats dict, dlogits, dz) for the activations of `forward`."""
    logits, z = act["logits"], act["z"]
    B = logits.shape[0]
    row_loss, correct, d = policy_rows(logits, counts, target, policy_target)
    policy_loss = row_loss.mean()
    t = np.float64(value)
    value_loss = (np.maximum(z, 0) - t * z + np.log1p(np.exp(-np.abs(z)))).mean()
    dlogits = d / B
    dz = value_weight * (act["value"] - t) / B
    stats = {"loss": policy_loss + value_weight * value_loss, "policy_loss": policy_loss,
             "value_loss": value_loss, "accuracy": correct.mean()}
    return stats, dlogits, dz


def backward(act, cfg, tokens, legal, counts, dlogits, dz):
    """{name: d loss / d parameter} (float64)."""
    p, xs = act["p"], act["xs"]
    B = tokens.shape[0]
    K, D, P = cfg.orders, cfg.embed_dim, cfg.pair_dim
    g = {}
    moves, kind_rows = table_rows(cfg, legal, counts)
    dq, g["move_table"] = ref.gather_dot_backward(dlogits, act["q"], p["move_table"], moves, counts)
    if "move_kind_table" in p:
        dq_kind, g["move_kind_table"] = ref.gather_dot_backward(dlogits, act["q"], p["move_kind_table"],
                                                                kind_rows, counts)
        dq = dq + dq_kind
    if "move_pair_table" in p:
        g["move_pair_table"] = ref.move_pair_sums_backward(dlogits, tokens[:, 0], legal, counts,
                                                           *p["move_pair_table"].shape)
    if "move_pair_relative" in p:
        g["move_pair_relative"] = ref.move_pair_relative_backward(g["move_pair_table"], cfg.move_pairs, *board(cfg))
    if "move_hidden_out" in p:
        gate = act["gate"]
        rel, cls, out = ref.move_hidden_backward(dlogits, act["hidden_pre"],
                                                 p["move_hidden_out"][0] if gate is None else gate, tokens[:, 0],
                                                 legal, counts, cfg.move_pairs, *board(cfg),
                                                 p["move_hidden_relative"].shape[0])
        g["move_hidden_relative"], g["move_hidden_class"] = rel, cls
        if gate is None:
            g["move_hidden_out"] = out.reshape(1, -1)
        else:  # out [B, D] is the gradient of each position's readout
            g["move_hidden_out"] = out.sum(axis=0, keepdims=True)
            g["move_hidden_gate"] = act["q"].T @ out
            dq = dq + out @ p["move_hidden_gate"].T
    if "move_shared_class" in p:
        sc, sg = p["move_shared_class"], p["move_shared_group"]
        dcls, dgrp = ref.move_shared_backward(dlogits, legal, counts, sc.shape[0], sg.shape[0])
        g["move_shared_class"], g["move_shared_group"] = dcls.T @ act["q"], dgrp.T @ act["q"]
        dq = dq + dcls @ sc + dgrp @ sg
    x = xs[-1]
    g["policy.weight"] = dq.T @ x
    g["policy.bias"] = dq.sum(axis=0)
    g["value.bias"] = np.array([dz.sum()])
    if act["vh"] is None:
        g["value.weight"] = dz[None, :] @ x
        dx = dq @ p["policy.weight"] + dz[:, None] @ p["value.weight"]
    else:
        vh = act["vh"]
        g["value.weight"] = dz[None, :] @ vh
        dvh = np.where(vh > 0, dz[:, None] @ p["value.weight"], 0.0)
        g["value_hidden.bias"] = dvh.sum(axis=0)
        dx = dq @ p["policy.weight"]
        if getattr(cfg, "value_power_sums", 0):  # the power sums' gradient, below
            g["value_hidden.weight"] = dvh.T @ act["ps"].reshape(B, S * K * D)
        else:
            g["value_hidden.weight"] = dvh.T @ x
            dx = dx + dvh @ p["value_hidden.weight"]
    for i in reversed(range(len(cfg.hidden))):
        dh = dx * (xs[i + 1] > 0)
        g[f"trunk.{i}.weight"] = dh.T @ xs[i]
        g[f"trunk.{i}.bias"] = dh.sum(axis=0)
        dx = dh @ p[f"trunk.{i}.weight"]
    df = dx.reshape(B, S, K * D + P)
    dps = df[:, :, :K * D]
    if getattr(cfg, "value_power_sums", 0):
        dps = dps + (dvh @ p["value_hidden.weight"]).reshape(B, S, K * D)
    g["embedding"] = ref.power_sums_backward(dps.reshape(B, S, K, D), p["embedding"], tokens)
    g["pair_table"] = ref.pair_sums_backward(df[:, :, K * D:], tokens, p["pair_table"].shape[0])
    return g


def loss_and_grad(params, cfg, batch, value_weight=1.0):
    """(stats, grads) of docs/design.md §1 for a manaka.Batch, in float64."""
    act = forward(params, cfg, batch.tokens, batch.legal, batch.counts)
    stats, dlogits, dz = loss(act, batch.counts, batch.target, batch.value, batch.policy_target,
                              value_weight)
    return stats, backward(act, cfg, batch.tokens, batch.legal, batch.counts, dlogits, dz)


def lr_at(step, lr, warmup_steps=0, schedule="constant", total_steps=None, min_lr=0.0):
    """Learning rate of the step with 0-based index `step`."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return lr
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


FLT_MIN = float(np.finfo(np.float32).tiny)


def flush_denormal(x):
    """Moments whose magnitude is below FLT_MIN are stored as 0 (denormals cost 10-20x)."""
    return np.where(np.abs(x) < FLT_MIN, 0.0, x)


def adamw(params, grads, m, v, t, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    """One AdamW step (torch.optim.AdamW semantics, with moments below FLT_MIN stored as 0),
    t = 1-based step; returns new (params, m, v) as float64 dicts. No decay for names
    ending in 'bias'."""
    b1, b2 = betas
    out_p, out_m, out_v = {}, {}, {}
    for name in params:
        p, g = np.float64(params[name]), np.float64(grads[name])
        wd = 0.0 if name.endswith("bias") else weight_decay
        p = p * (1 - lr * wd)
        mm = flush_denormal(b1 * np.float64(m[name]) + (1 - b1) * g)
        vv = flush_denormal(b2 * np.float64(v[name]) + (1 - b2) * g * g)
        denom = np.sqrt(vv) / math.sqrt(1 - b2 ** t) + eps
        out_p[name] = p - lr / (1 - b1 ** t) * mm / denom
        out_m[name], out_v[name] = mm, vv
    return out_p, out_m, out_v


# ------------------------------------------------------------------ sparse pair-table update

def named_pair_rows(tokens):
    """The pair-table rows some pair (i < j, both tokens >= 0) of tokens [..., T] names."""
    named = set()
    for row in np.asarray(tokens).reshape(-1, np.shape(tokens)[-1]):
        t = [int(x) for x in row if x >= 0]
        for j in range(len(t)):
            for i in range(j):
                lo, hi = min(t[i], t[j]), max(t[i], t[j])
                named.add(hi * (hi + 1) // 2 + lo)
    return np.array(sorted(named), np.int64)


def gap_terms(s, u, lr_of, betas, weight_decay):
    """The documented catch-up of a pair-table row over the applied steps w = s+1 .. u with
    zero gradient (csrc/core/pair_gap.h), from its definitions by direct sums (float64):
    (decay, m_scale, v_scale, drift, drift_c) with, for d_w = 1 - lr_w wd,
    a_w = lr_w / (1 - b1^w), c'_w = b2^((w - s) / 2) / sqrt(1 - b2^w):
      decay = prod d_w, m_scale = b1^k, v_scale = b2^k (k = u - s),
      drift = sum_w [prod_{x > w} d_x] a_w b1^(w - s),  drift_c = sum_w (same) / c'_w."""
    b1, b2 = betas
    d = {w: 1 - lr_of(w - 1) * weight_decay for w in range(s + 1, u + 1)}
    decay = math.prod(d.values())
    drift = drift_c = 0.0
    for w in range(s + 1, u + 1):
        later = math.prod(d[x] for x in range(w + 1, u + 1))
        q = later * lr_of(w - 1) / (1 - b1 ** w) * b1 ** (w - s)
        drift += q
        drift_c += q * math.sqrt(1 - b2 ** w) / b2 ** ((w - s) / 2)
    return decay, b1 ** (u - s), b2 ** (u - s), drift, drift_c


def catch_up_row(p, m, v, terms, mode, eps):
    """A row (float64 arrays) caught up by gap_terms: p decay - drift m / (c~ sqrt(v) + eps)
    with c~ = drift / drift_c ("sparse"; "lazy" has no drift term), moments scaled and
    flushed below FLT_MIN."""
    decay, m_scale, v_scale, drift, drift_c = terms
    out = p * decay
    if mode == "sparse" and drift > 0:
        out = out - drift * m / (drift / drift_c * np.sqrt(v) + eps)
    return out, flush_denormal(m * m_scale), flush_denormal(v * v_scale)


def dense_gap(p, m, v, s, u, lr_of, betas, eps, weight_decay):
    """What the dense AdamW does to a row over steps s+1 .. u with zero gradient, step by step
    (float64): the exact result the "sparse" catch-up approximates."""
    b1, b2 = betas
    for w in range(s + 1, u + 1):
        lr = lr_of(w - 1)
        p = p * (1 - lr * weight_decay)
        m, v = b1 * m, b2 * v
        p = p - lr / (1 - b1 ** w) * m / (np.sqrt(v) / math.sqrt(1 - b2 ** w) + eps)
    return p, m, v


def named_move_rows(batch, cfg=None):
    """The move-table rows some legal move of the batch names (padding ignored): its labels,
    or with move kinds (cfg.move_kinds) the labels' moves."""
    legal, counts = np.asarray(batch.legal), np.asarray(batch.counts)
    labels = np.concatenate([legal[b, :counts[b]] for b in range(len(counts))] + [np.zeros(0, legal.dtype)])
    if cfg is not None and getattr(cfg, "move_kinds", 0):
        labels = labels % (cfg.num_moves // cfg.move_kinds)
    return np.unique(labels).astype(np.int64)


class SparseAdamW:
    """Trainer(pair_update=mode, move_update=move_mode) in float64: every tensor but the
    sparse tables gets AdamW each step; a row of a sparse table named by the batch (the
    pair table: a pair of its tokens; the move table: a legal move's label) is caught up
    over its gap (gap_terms, catch_up_row) before the forward pass, then gets AdamW;
    flush() catches every row up. "dense" leaves a table to the dense update. `lr_of(s)` is
    the learning rate of the step with 0-based index s."""

    NAMED = {"pair_table": lambda batch, cfg=None: named_pair_rows(batch.tokens), "move_table": named_move_rows}

    def __init__(self, params, mode, lr_of, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 move_mode="dense"):
        self.params = {n: np.float64(a) for n, a in params.items()}
        self.m = {n: np.zeros_like(a) for n, a in self.params.items()}
        self.v = {n: np.zeros_like(a) for n, a in self.params.items()}
        self.modes = {n: md for n, md in (("pair_table", mode), ("move_table", move_mode)) if md != "dense"}
        self.stamps = {n: np.zeros(len(self.params[n]), np.int64) for n in self.modes}
        self.lr_of, self.betas, self.eps, self.wd = lr_of, betas, eps, weight_decay
        self.t = 0

    @property
    def stamp(self):
        return self.stamps["pair_table"]

    def catch_up(self, rows, name="pair_table"):
        p, m, v, stamp = self.params[name], self.m[name], self.v[name], self.stamps[name]
        for q in rows:
            if stamp[q] < self.t:
                terms = gap_terms(int(stamp[q]), self.t, self.lr_of, self.betas, self.wd)
                p[q], m[q], v[q] = catch_up_row(p[q], m[q], v[q], terms, self.modes[name], self.eps)
                stamp[q] = self.t

    def flush(self):
        for name, stamp in self.stamps.items():
            self.catch_up(range(len(stamp)), name)

    def step(self, cfg, batch, value_weight=1.0):
        named = {name: self.NAMED[name](batch, cfg) for name in self.modes}
        for name, rows in named.items():
            self.catch_up(rows, name)
        stats, grads = loss_and_grad(self.params, cfg, batch, value_weight)
        t, lr = self.t + 1, self.lr_of(self.t)
        names = [n for n in self.params if n not in self.modes]
        new = adamw({n: self.params[n] for n in names}, grads, self.m, self.v, t, lr, self.betas,
                    self.eps, self.wd)
        for n in names:
            self.params[n], self.m[n], self.v[n] = new[0][n], new[1][n], new[2][n]
        for name, rows in named.items():
            sub = {k: {name: d[name][rows]} for k, d in
                   (("p", self.params), ("g", grads), ("m", self.m), ("v", self.v))}
            p, m, v = adamw(sub["p"], sub["g"], sub["m"], sub["v"], t, lr, self.betas, self.eps, self.wd)
            self.params[name][rows] = p[name]
            self.m[name][rows], self.v[name][rows] = m[name], v[name]
            self.stamps[name][rows] = t
        self.t = t
        return stats
