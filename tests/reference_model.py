"""NumPy float64 reference of the whole network of docs/design.md §1: forward, loss, every
gradient, AdamW and the learning-rate schedule. Written for clarity and independent of the
C code; the ops come from reference.py (one reference per op)."""
import math

import numpy as np

import reference as ref

S = 2


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
    logits = ref.gather_dot(q, p["move_table"], legal, counts)
    z = (x @ p["value.weight"].T)[:, 0] + p["value.bias"][0]
    return {"p": p, "ps": ps, "pair": pair, "xs": xs, "q": q, "logits": logits, "z": z,
            "value": 1.0 / (1.0 + np.exp(-z))}


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
    dq, g["move_table"] = ref.gather_dot_backward(dlogits, act["q"], p["move_table"], legal, counts)
    x = xs[-1]
    g["policy.weight"] = dq.T @ x
    g["policy.bias"] = dq.sum(axis=0)
    g["value.weight"] = dz[None, :] @ x
    g["value.bias"] = np.array([dz.sum()])
    dx = dq @ p["policy.weight"] + dz[:, None] @ p["value.weight"]
    for i in reversed(range(len(cfg.hidden))):
        dh = dx * (xs[i + 1] > 0)
        g[f"trunk.{i}.weight"] = dh.T @ xs[i]
        g[f"trunk.{i}.bias"] = dh.sum(axis=0)
        dx = dh @ p[f"trunk.{i}.weight"]
    df = dx.reshape(B, S, K * D + P)
    g["embedding"] = ref.power_sums_backward(df[:, :, :K * D].reshape(B, S, K, D), p["embedding"], tokens)
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
