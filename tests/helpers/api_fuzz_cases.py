"""Seeded random calls of manaka's API for tests/robustness/test_api_fuzz.py, each judged against an
independent validity predicate written here from the documentation (docstrings and
docs/design.md), not from manaka's own checks.

A case is a valid call mutated 0-3 times (wrong dtypes, shapes, out-of-range and huge
values, negative sizes, non-contiguous / Fortran / byte-swapped / unaligned / read-only /
empty arrays, objects of the wrong type). `valid` is True (the call must succeed, and its
result is checked), False (it must raise a documented error with a message and change
nothing) or None (the contract does not say: either is fine, as long as nothing crashes,
hangs or returns a wrong result).
"""
import os
import shutil
import tempfile

import numpy as np

import manaka as mk
import reference

CLEAN = (ValueError, TypeError, OverflowError, MemoryError)  # manaka's file errors are ValueErrors
NASTY_INTS = [-1, 0, -2, 2**31 - 1, 2**31, 2**32, 2**32 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, -2**31 - 1, -2**63]
NASTY_OBJECTS = [None, 1.5, "3", [], True, np.float64(2.0), object()]
NASTY_FLOATS = [np.nan, np.inf, -np.inf, 3.4e38, -1e-45, 1.5, -0.5, 1e300]
DTYPES = [np.float64, np.float16, np.float32, np.int64, np.int32, np.int16, np.int8, np.uint8, np.uint64,
          np.bool_, np.complex64, object]
BIG = 2**20  # a broadcast dimension: BIG * BIG elements can never be allocated


class Case:
    def __init__(self, name, call, valid, check=None, state=None, allowed=()):
        self.name, self.call, self.valid, self.check = name, call, valid, check
        self.state = state          # a function: the state a refused call must leave as it was
        self.allowed = allowed      # further exception types documented for this call


def both(*verdicts):
    """Three-valued and: False wins, then None (unspecified), then True."""
    return False if False in verdicts else (None if None in verdicts else True)


# ---------------------------------------------------------------- mutations
def strided(x):
    """The same values in a non-contiguous view (every other element of a bigger array)."""
    big = np.zeros((2 * x.shape[0],) + x.shape[1:], x.dtype) if x.ndim else None
    if big is None:
        return x
    big[::2] = x
    return big[::2]


def unaligned(x):
    raw = np.zeros(x.nbytes + 1, np.uint8)
    y = np.frombuffer(raw.data, x.dtype, count=x.size, offset=1).reshape(x.shape)
    y[...] = x
    return y


def mutate(rng, x, ints: bool):
    """(new value, description) for one argument `x` (an array, or an int for ints=True)."""
    if huge(x):
        return x, "(left huge)"  # any copy of it would fail to allocate
    if not isinstance(x, np.ndarray):
        choice = rng.integers(3)
        if choice == 0:
            v = NASTY_INTS[rng.integers(len(NASTY_INTS))]
        elif choice == 1:
            v = NASTY_OBJECTS[rng.integers(len(NASTY_OBJECTS))]
        else:
            v = (np.int64, np.uint8, np.int32)[rng.integers(3)](max(0, min(int(x), 200)) if isinstance(x, int) else 1)
        return v, f"{v!r}"
    kinds = ["dtype", "ndim+1", "ndim-1", "rows+1", "cols+1", "empty", "empty-last", "strided", "fortran",
             "byteswap", "readonly", "unaligned", "value", "value", "value", "list", "object", "huge-broadcast"]
    kind = kinds[rng.integers(len(kinds))]
    if kind == "dtype":
        dt = DTYPES[rng.integers(len(DTYPES))]
        with np.errstate(all="ignore"):
            return x.astype(dt), f"dtype {np.dtype(dt).name}"
    if kind == "ndim+1":
        return x[..., None], "extra dimension"
    if kind == "ndim-1":
        return (x.reshape(x.shape[:-2] + (-1,)) if x.ndim >= 2 else np.zeros((), x.dtype)), "one dimension less"
    if kind == "rows+1" and x.ndim:
        return np.concatenate([x, x[:1] if len(x) else np.zeros((1,) + x.shape[1:], x.dtype)]), "one more row"
    if kind == "cols+1" and x.ndim >= 2:
        return np.concatenate([x, x[..., :1] if x.shape[-1] else np.zeros(x.shape[:-1] + (1,), x.dtype)], -1), \
            "one more column"
    if kind == "empty" and x.ndim:
        return x[:0], "zero rows"
    if kind == "empty-last" and x.ndim:
        return x[..., :0], "zero-size last dimension"
    if kind == "strided" and x.ndim:
        return strided(x), "non-contiguous"
    if kind == "fortran":
        return np.asfortranarray(x), "Fortran order"
    if kind == "byteswap":
        return x.astype(x.dtype.newbyteorder()), "byte-swapped"
    if kind == "readonly":
        y = x.copy()
        y.flags.writeable = False
        return y, "read-only"
    if kind == "unaligned":
        return unaligned(x), "unaligned"
    if kind == "list":
        return x.tolist(), "a list"
    if kind == "object":
        v = NASTY_OBJECTS[rng.integers(len(NASTY_OBJECTS))]
        return v, f"{v!r}"
    if kind == "huge-broadcast" and x.ndim:
        shape = (BIG,) * min(x.ndim, 2) + x.shape[2:]
        return np.broadcast_to(x.reshape(-1)[:1].reshape((1,) * x.ndim) if x.size else np.zeros((1,) * x.ndim, x.dtype),
                               shape), f"broadcast to {shape}"
    if not x.size:
        return x, "unchanged (empty)"
    at = tuple(int(rng.integers(n)) for n in x.shape)
    if ints:
        v = NASTY_INTS[rng.integers(len(NASTY_INTS))]
        y = x.astype(np.uint64 if v >= 2**63 else np.int64)
    else:
        v = NASTY_FLOATS[rng.integers(len(NASTY_FLOATS))]
        y = x.copy()
    with np.errstate(all="ignore"):
        y[at] = v
    return y, f"[{', '.join(map(str, at))}] = {v!r}"


# ---------------------------------------------------------------- predicates
def is_float32(x, ndim):
    if not isinstance(x, np.ndarray):
        return None if isinstance(x, list) else False
    if x.dtype.kind != "f" or x.dtype.itemsize != 4 or x.ndim != ndim:
        return False
    return True if x.dtype.isnative else None


def is_index(x, ndim, ignored=None):
    """Any integer dtype whose values fit int32; `ignored` masks slots the op does not read
    (whose values the docs both ignore and require to fit: unspecified)."""
    if isinstance(x, list):
        return None
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "iu" or x.ndim != ndim:
        return False
    wide = x.astype(np.float64) if x.dtype == np.uint64 else x.astype(np.int64)
    out = (wide < -2**31) | (wide >= 2**31)
    if not out.any():
        return True
    if ignored is not None and not out[~ignored].any():
        return None
    return False


def as_int(x):
    """`x` as an index array (int64), or None when it is not one."""
    if isinstance(x, list):
        try:
            x = np.array(x)
        except ValueError:
            return None
    if not isinstance(x, np.ndarray) or x.dtype.kind not in "iu":
        return None
    return x.astype(np.float64).astype(np.int64) if x.dtype == np.uint64 and x.size and x.max() >= 2**63 else \
        x.astype(np.int64)


def is_int(v, lo=None):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        return False
    return lo is None or int(v) >= lo


def zero_dims(*arrays):
    return any(isinstance(a, np.ndarray) and 0 in a.shape for a in arrays)


def huge(*arrays):
    return any(isinstance(a, np.ndarray) and a.size >= BIG * BIG for a in arrays)


# ---------------------------------------------------------------- ops
def _shape_ok(cond):
    return True if cond else False


def ops_validity(op, a):
    """The contract of manaka.ops (module docstring and each op's docstring)."""
    if huge(*a.values()):
        return None  # too large to allocate: a MemoryError, or a result nobody can check
    v = []
    if op in ("gather_dot", "gather_dot_backward"):
        h, t, i, c = a["hidden"], a["table"], a["indices"], a["counts"]
        v += [is_float32(h, 2), is_float32(t, 2)]
        if op == "gather_dot_backward":
            v.append(is_float32(a["grad"], 2))
        if c is not None:
            v.append(is_index(c, 1))
        ii, cc = as_int(i), None if c is None else as_int(c)
        if ii is None or ii.ndim != 2 or (c is not None and (cc is None or cc.ndim != 1)):
            return False
        B, L = ii.shape
        hs, ts = np.shape(h), np.shape(t)
        if len(hs) != 2 or len(ts) != 2 or hs[0] != B or hs[1] != ts[1] or (cc is not None and cc.shape[0] != B):
            return False
        if op == "gather_dot_backward" and np.shape(a["grad"]) != (B, L):
            return False
        if cc is not None and ((cc < 0) | (cc > L)).any():
            return False
        read = np.ones((B, L), bool) if cc is None else np.arange(L)[None] < cc[:, None]
        if ((ii < 0) | (ii >= ts[0]))[read].any():
            return False
        v.append(is_index(i, 2, ignored=~read))
        v.append(None if zero_dims(h, t, i) or huge(h, t, i, c) else True)
        return both(*v)
    if op in ("power_sums", "power_sums_backward"):
        e, tok = a["emb"], a["tokens"]
        v += [is_float32(e, 2), is_index(tok, 3)]
        tt = as_int(tok)
        if tt is None or tt.ndim != 3 or len(np.shape(e)) != 2:
            return False
        if ((tt < -1) | (tt >= np.shape(e)[0])).any():
            return False
        if op == "power_sums":
            k = a["orders"]
            if not is_int(k, 1):
                return False
            v.append(True if k <= 64 else None)
        else:
            g = a["grad"]
            v.append(is_float32(g, 4))
            gs = np.shape(g)
            if len(gs) != 4 or gs[:2] != tt.shape[:2] or gs[3] != np.shape(e)[1] or gs[2] < 1:
                return both(False, *v)
        v.append(None if zero_dims(e, tok) or huge(e, tok, a.get("grad")) else True)
        return both(*v)
    # pair_sums, pair_sums_backward
    tok = a["tokens"]
    v.append(is_index(tok, 3))
    tt = as_int(tok)
    if tt is None or tt.ndim != 3:
        return False
    if op == "pair_sums":
        p = a["pair_table"]
        v.append(is_float32(p, 2))
        if len(np.shape(p)) != 2:
            return False
        rows = np.shape(p)[0]
    else:
        g, rows = a["grad"], a["num_pairs"]
        v.append(is_float32(g, 3))
        if not is_int(rows, 0) or len(np.shape(g)) != 3 or np.shape(g)[:2] != tt.shape[:2]:
            return False
        rows = int(rows)
    V = int((np.sqrt(8.0 * rows + 1) - 1) / 2) if rows < 2**100 else 0
    V = next((w for w in (V - 1, V, V + 1) if w >= 0 and w * (w + 1) // 2 == rows), None)
    if V is None:
        return False
    if ((tt < -1) | (tt >= V)).any():
        return False
    if op == "pair_sums_backward" and rows >= 2**26:  # a table that large: MemoryError or a result
        v.append(None)
    v.append(None if V == 0 or zero_dims(tok, a.get("grad"), a.get("pair_table"))
             or huge(tok, a.get("grad"), a.get("pair_table")) else True)
    return both(*v)


def _close(got, want, what):
    got = np.asarray(got)
    if np.size(want) == 0:
        return None if got.shape == np.shape(want) else f"{what}: got shape {got.shape}, want {np.shape(want)}"
    if got.shape != np.shape(want) or got.dtype != np.float32:
        return f"{what}: got {got.dtype} {got.shape}, want float32 {np.shape(want)}"
    if not np.isfinite(want).all() or np.abs(want).max(initial=0) > 1e30:
        return None  # non-finite inputs or float32 overflow: only the shape is compared
    scale = max(float(np.abs(want).max()), 1.0)
    err = float(np.abs(got.astype(np.float64) - want).max()) / scale
    return None if err < 1e-4 else f"{what}: max error {err:.2e} against the NumPy reference"


def ops_check(op, a):
    """A function of the op's result: None when it matches tests/helpers/reference.py."""
    def check(result):
        if huge(*a.values()):
            return None
        f = {k: (np.asarray(v, np.float64) if k in ("hidden", "table", "grad", "emb", "pair_table") else
                 (as_int(v) if k in ("indices", "counts", "tokens") and v is not None else v)) for k, v in a.items()}
        if op == "gather_dot":
            return _close(result, reference.gather_dot(f["hidden"], f["table"], f["indices"], f["counts"]), op)
        if op == "gather_dot_backward":
            gh, gt = reference.gather_dot_backward(f["grad"], f["hidden"], f["table"], f["indices"], f["counts"])
            return _close(result[0], gh, op + " grad_hidden") or _close(result[1], gt, op + " grad_table")
        if op == "power_sums":
            return _close(result, reference.power_sums(f["emb"], f["tokens"], int(f["orders"])), op)
        if op == "power_sums_backward":
            return _close(result, reference.power_sums_backward(f["grad"], f["emb"], f["tokens"]), op)
        if op == "pair_sums":
            return _close(result, reference.pair_sums(f["pair_table"], f["tokens"]), op)
        return _close(result, reference.pair_sums_backward(f["grad"], f["tokens"], int(f["num_pairs"])), op)
    return check


OPS = ["gather_dot", "gather_dot_backward", "power_sums", "power_sums_backward", "pair_sums", "pair_sums_backward"]


def ops_case(rng):
    op = OPS[rng.integers(len(OPS))]
    B, L, W, M, S, T, D, K, V, P = (int(n) for n in rng.integers(1, 6, 10))
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    tokens = rng.integers(-1, V, (B, S, T)).astype(np.int32)
    if op.startswith("gather_dot"):
        counts = rng.integers(0, L + 1, B).astype(np.int32) if rng.random() < 0.7 else None
        idx = rng.integers(0, M, (B, L)).astype(np.int32)
        if counts is not None:
            idx[np.arange(L)[None] >= counts[:, None]] = -1
        a = {"hidden": f32(B, W), "table": f32(M, W), "indices": idx, "counts": counts}
        if op == "gather_dot_backward":
            a = {"grad": f32(B, L), **a}
    elif op == "power_sums":
        a = {"emb": f32(V, D), "tokens": tokens, "orders": K}
    elif op == "power_sums_backward":
        a = {"grad": f32(B, S, K, D), "emb": f32(V, D), "tokens": tokens}
    elif op == "pair_sums":
        a = {"pair_table": f32(V * (V + 1) // 2, P), "tokens": tokens}
    else:
        a = {"grad": f32(B, S, P), "tokens": tokens, "num_pairs": V * (V + 1) // 2}
    changes = []
    for _ in range(int(rng.choice([0, 1, 1, 2, 3]))):
        name = list(a)[rng.integers(len(a))]
        a[name], what = mutate(rng, a[name] if a[name] is not None else np.zeros(B, np.int32),
                               ints=name in ("indices", "counts", "tokens", "orders", "num_pairs"))
        changes.append(f"{name} {what}")
    valid = ops_validity(op, a)
    fn = getattr(mk.ops, op)
    return Case(f"ops.{op}: " + ("; ".join(changes) or "valid"), lambda: fn(**a), valid,
                check=ops_check(op, a) if valid is not False else None)


# ---------------------------------------------------------------- Batch, Model, Trainer
CFG = dict(num_tokens=11, num_moves=17, tokens_per_side=6, embed_dim=5, orders=3, pair_dim=4, hidden=(12,),
           head_width=7)
# the newer terms over a second config: move kinds (F = 2 kinds over C = 3 move-pair classes,
# M / F = 9 move-table rows), the move-pair table and the value head's hidden layer
KINDS_CFG = dict(CFG, num_moves=18, move_pairs=3, move_kinds=2, value_hidden=4)
COUNT_FIELDS = ("move_pairs", "move_kinds", "value_hidden")  # may be 0
INDEX_FIELDS = ("tokens", "legal", "counts", "target")


def batch_validity(f, action, cfg=CFG):
    """mk.Batch's contract (its docstring) and the model's (docs/design.md §1-2, csrc/core/batch.c's
    rules restated): index fields any integer dtype whose values fit int32, float fields any
    float dtype (converted to float32), shapes [B, 2, T], [B, L], [B], [B], [B], [B, L]."""
    v = []
    dims = {"tokens": 3, "legal": 2, "counts": 1, "target": 1, "value": 1, "policy_target": 2}
    for name, x in f.items():
        if x is None and name == "policy_target":
            continue
        if not isinstance(x, np.ndarray) or x.ndim != dims[name]:
            return False
        if x.dtype.kind not in ("iu" if name in INDEX_FIELDS else "f"):
            return False
        if huge(x):
            return None
        if name in INDEX_FIELDS:
            v.append(is_index(x, dims[name]))
            if v[-1] is False:
                return False
    B = f["tokens"].shape[0]
    if any(x is not None and x.shape[0] != B for x in f.values()):
        return False
    pt = f["policy_target"]
    if pt is not None and pt.shape != f["legal"].shape:
        return False
    # the model's rules
    tok, legal, counts, target = (f[n].astype(np.int64) for n in INDEX_FIELDS)
    value = f["value"].astype(np.float32)
    _, S, T = tok.shape
    L = legal.shape[1]
    if B < 1 or S != 2 or T != cfg["tokens_per_side"] or L < 1:
        return False
    if ((tok < -1) | (tok >= cfg["num_tokens"])).any() or ((counts < 1) | (counts > L)).any():
        return False
    if ((legal < 0) | (legal >= cfg["num_moves"]))[np.arange(L)[None] < counts[:, None]].any():
        return False
    if action == "forward":
        return both(*v)
    if ((target < 0) | (target >= counts)).any() or not ((value >= 0) & (value <= 1)).all():
        return False
    if pt is not None:
        p = pt.astype(np.float32).astype(np.float64)
        read = np.arange(L)[None] < counts[:, None]
        if not np.isfinite(p[read]).all() or (p[read] < 0).any():
            return False
        err = np.abs(np.where(read, p, 0).sum(1) - 1).max()
        v.append(True if err < 0.5e-3 else (False if err > 2e-3 else None))
    return both(*v)


def _valid_batch(rng, soft, cfg=CFG):
    B, L = (int(n) for n in rng.integers(1, 7, 2))
    tokens = rng.integers(-1, cfg["num_tokens"], (B, 2, cfg["tokens_per_side"]))
    counts = rng.integers(1, L + 1, B)
    legal = np.where(np.arange(L)[None] < counts[:, None], rng.integers(0, cfg["num_moves"], (B, L)), -1)
    target = (rng.random(B) * counts).astype(np.int64)
    value = rng.choice([0.0, 0.5, 1.0], B).astype(np.float32)
    pt = None
    if soft:
        w = np.where(np.arange(L)[None] < counts[:, None], rng.random((B, L)) + 0.1, 0.0)
        pt = (w / w.sum(1, keepdims=True)).astype(np.float32)
    return {"tokens": tokens, "legal": legal, "counts": counts, "target": target, "value": value,
            "policy_target": pt}


def config_case(rng):
    """mk.Model(ModelConfig(...)) with mutated sizes, then a forward pass: a size too large
    to allocate is a MemoryError / ValueError / OverflowError, never a wrapped size. Half the
    cases start from KINDS_CFG, whose move_kinds must divide num_moves into a multiple of
    the move-pair classes (docs/design.md, "Move kinds")."""
    kinds = rng.random() >= 0.5
    cfg = dict(KINDS_CFG if kinds else CFG)
    changes = []
    for _ in range(int(rng.integers(1, 3))):
        name = list(cfg)[rng.integers(len(cfg))]
        if name == "hidden":
            h = list(cfg[name]) if isinstance(cfg[name], (list, tuple)) else [12]
            choice = rng.integers(3)
            if choice == 0 and h:
                h[rng.integers(len(h))], what = mutate(rng, 12, ints=True)
                cfg[name], what = h, f"{h!r}"
            elif choice == 1:
                cfg[name], what = [], "[]"
            else:
                cfg[name], what = mutate(rng, 12, ints=True)
        else:
            cfg[name], what = mutate(rng, cfg[name], ints=True)
        changes.append(f"{name}={what}")
    v = [is_int(cfg[k], 0 if k in COUNT_FIELDS else 1) for k in cfg if k != "hidden"]
    h = cfg["hidden"]
    v.append(isinstance(h, (list, tuple)) and all(is_int(x, 1) for x in h))
    valid = both(*v)
    if valid:
        V, D, K, P, W, M, T = (int(cfg[k]) for k in ("num_tokens", "embed_dim", "orders", "pair_dim", "head_width",
                                                       "num_moves", "tokens_per_side"))
        C, F, Hv = (int(cfg.get(k, 0)) for k in COUNT_FIELDS)
        if F and (M % F or (M // F) % max(C, 1)):
            valid = False
    if valid:
        widths = [int(x) for x in h]
        top = max(widths + [2 * K * D + 2 * P, W])
        size = (V * D + V * (V + 1) // 2 * P + M * W + top * top * (len(widths) + 2) + V * C
                + max(C, 1) * F * W + Hv * (top + 1))
        if size > 2**24 or T > 2**16:
            valid = None  # large: it may fit in memory or be refused; no crash either way

    def call():
        model = mk.Model(mk.ModelConfig(**cfg))
        T = model.config.tokens_per_side
        return model.forward(mk.Batch(np.full((1, 2, T), -1), np.zeros((1, 1), np.int32), np.ones(1, np.int32),
                                      np.zeros(1, np.int32), np.zeros(1, np.float32)))

    def check(result):
        return None if result[0].shape == (1, 1) and np.isfinite(result[0]).all() else "Model.forward: bad logits"
    return Case(("KINDS_CFG: " if kinds else "") + "Model(ModelConfig(" + ", ".join(changes) + ")).forward", call,
                valid, check=check)


def model_case(rng):
    if rng.random() < 0.15:
        return config_case(rng)
    action = ("forward", "loss_and_grad", "step")[rng.integers(3)]
    cfg = CFG if rng.random() < 0.5 else KINDS_CFG
    f = _valid_batch(rng, soft=rng.random() < 0.3, cfg=cfg)
    changes = []
    for _ in range(int(rng.choice([0, 1, 1, 2, 3]))):
        name = list(f)[rng.integers(len(f))]
        # soft targets shaped like legal (a small stand-in when legal was made huge)
        base = f[name] if f[name] is not None else np.zeros(np.shape(f["legal"]) if not huge(f["legal"]) else (1, 1),
                                                            np.float32)
        f[name], what = mutate(rng, base, ints=name in INDEX_FIELDS)
        changes.append(f"{name} {what}")
    valid = batch_validity(f, action, cfg)
    model = mk.Model(mk.ModelConfig(**cfg), seed=int(rng.integers(100)))
    trainer = mk.Trainer(model) if action == "step" else None

    def call():
        batch = mk.Batch(**f)
        if action == "forward":
            return model.forward(batch)
        if action == "loss_and_grad":
            return model.loss_and_grad(batch)
        return trainer.step(batch)

    def check(result):
        B = len(f["tokens"])
        if action == "forward":
            logits, value = result
            ok = logits.shape == (B, f["legal"].shape[1]) and value.shape == (B,) and np.isfinite(logits).all()
        elif action == "loss_and_grad":
            ok = np.isfinite(result[0]["loss"]) and all(np.isfinite(g).all() for g in result[1].values())
        else:
            ok = np.isfinite(result.loss) and trainer.step_count == 1
        return None if ok else f"{action}: a non-finite or misshapen result for a valid batch"

    def state():
        return (model.state_dict(), trainer.step_count if trainer else None)
    name = ("KINDS_CFG " if cfg is KINDS_CFG else "") + ("Trainer.step" if action == "step" else f"Model.{action}")
    return Case(name + ": " + ("; ".join(changes) or "valid"), call, valid, check=check, state=state)


# ---------------------------------------------------------------- Loader
def small_dataset(rng, N):
    T = 3
    counts = rng.integers(1, 5, N)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    arrays = dict(tokens=rng.integers(-1, 9, (N, 2, T)), legal_offsets=offsets,
                  legal_moves=np.concatenate([rng.permutation(13)[:c] for c in counts]), target=(rng.random(N) * counts).astype(np.int64),
                  value=rng.random(N).astype(np.float32))
    return arrays


LOADER_ARGS = {"batch_size": 1, "producers": 1, "prefetch": 1, "seed": 0}


def loader_case(rng):
    N = int(rng.integers(1, 40))
    ds = mk.Dataset.from_arrays(**small_dataset(rng, N), num_tokens=9, num_moves=13)
    args = {"batch_size": int(rng.integers(1, 12)), "producers": int(rng.integers(1, 5)),
            "prefetch": int(rng.integers(1, 6)), "shuffle": bool(rng.integers(2)), "seed": int(rng.integers(100)),
            "drop_last": bool(rng.integers(2)), "copy": bool(rng.integers(2))}
    changes = []
    for _ in range(int(rng.choice([0, 1, 1, 2]))):
        name = list(args)[rng.integers(len(args))]
        args[name], what = mutate(rng, args[name] if name in LOADER_ARGS else 1, ints=True)
        changes.append(f"{name}={what}")
    action = ("epoch", "break and resume", "two epochs", "state")[rng.integers(4)]
    state_in = None
    if action == "state":
        state_in = {"epoch": 0, "batch_index": 0}
        key = ("epoch", "batch_index")[rng.integers(2)]
        state_in[key], what = mutate(rng, 0, ints=True)
        changes.append(f"load_state_dict({key}={what})")
    v = []
    for name, low in LOADER_ARGS.items():
        x = args[name]
        if not is_int(x, low):
            v.append(False)
        elif x > {"batch_size": 2**20, "producers": 64, "prefetch": 1024, "seed": 2**63 - 1}[name]:
            v.append(None)  # resources or a C type's range: a clean refusal or it works
    for name in ("shuffle", "drop_last", "copy"):  # True or False: bools, or the ints 0 and 1
        x = args[name]
        if not (isinstance(x, (bool, np.bool_)) or (isinstance(x, (int, np.integer)) and x in (0, 1))):
            v.append(False)
    nb = None
    if both(*v) is not False:
        bs = int(args["batch_size"])
        nb = N // bs if args["drop_last"] else -(-N // bs)
        if state_in is not None:
            e, i = state_in["epoch"], state_in["batch_index"]
            v.append(is_int(e, 0) and is_int(i, 0) and i <= nb)
            if v[-1] and e > 2**62:
                v[-1] = None
    valid = both(*v)
    def take(loader, batch):
        return loader.last_indices.copy(), batch.target.copy(), batch.value.copy()

    def call():
        loader = mk.Loader(ds, **args)
        out = []
        try:
            if state_in is not None:
                loader.load_state_dict(state_in)
            for _ in range(2 if action == "two epochs" else 1):
                got = []
                for batch in loader:
                    got.append(take(loader, batch))
                    if action == "break and resume":
                        break  # the generator is dropped: its producers stop; the next loop resumes
                if action == "break and resume":
                    got += [take(loader, batch) for batch in loader]
                out.append(got)
        finally:
            loader.close()
        return out

    def check(result):
        bs = int(args["batch_size"])
        first = int(state_in["batch_index"]) if state_in is not None else 0
        for n, got in enumerate(result):
            start = first if n == 0 and first < nb else 0
            want = (nb * bs if args["drop_last"] else N) - start * bs
            if action == "break and resume" and nb == 1:
                want *= 2  # the one batch ended the epoch: the resumed loop runs the next one
            idx = np.concatenate([g[0] for g in got]) if got else np.zeros(0, np.int64)
            unique = len(np.unique(idx)) == len(idx) or (action == "break and resume" and nb == 1)
            if len(idx) != want or not unique or (len(idx) and (idx.min() < 0 or idx.max() >= N)):
                return f"Loader: an epoch yielded positions {sorted(idx.tolist())[:20]} of {N} (want {want})"
            for i, t, val in got:
                if not (np.array_equal(np.asarray(ds.target)[i], t) and np.array_equal(np.asarray(ds.value)[i], val)):
                    return "Loader: a batch's targets or values are not its positions'"
        return None
    return Case("Loader: " + action + ("; " + "; ".join(changes) if changes else ""), call, valid, check=check)


# ---------------------------------------------------------------- Dataset.open
def dataset_validity(arrays, meta):
    """docs/design.md §4, 'The dataset folder', restated."""
    if not isinstance(meta, dict):
        return False
    for key in ("version", "num_tokens", "num_moves", "T"):
        if not is_int(meta.get(key), 1):
            return False
    if meta["version"] != 1 or meta["num_tokens"] > 32767:
        return False
    V, M, T = meta["num_tokens"], meta["num_moves"], meta["T"]
    want = {"tokens": ("i2", 3), "legal_offsets": ("i8", 2 - 1), "legal_moves": (("i4",) if M > 32768 else ("i2", "i4"), 1),
            "target": ("i4", 1), "value": ("f4", 1), "policy_target": ("f4", 1)}
    for name, (dtypes, ndim) in want.items():
        x = arrays.get(name)
        if x is None:
            if name == "policy_target":
                continue
            return False
        if x.dtype.str[1:] not in ((dtypes,) if isinstance(dtypes, str) else dtypes) or x.ndim != ndim:
            return False
        if not x.dtype.isnative or not x.flags.c_contiguous:
            return False
    tok, off, mv = arrays["tokens"], arrays["legal_offsets"].astype(np.int64), arrays["legal_moves"]
    N = tok.shape[0]
    if N < 1 or tok.shape[1:] != (2, T) or off.shape != (N + 1,) or arrays["target"].shape != (N,) \
            or arrays["value"].shape != (N,):
        return False
    pt = arrays.get("policy_target")
    if pt is not None and pt.shape != mv.shape:
        return False
    if off[0] != 0 or off[-1] != len(mv) or (np.diff(off) <= 0).any():
        return False
    if ((tok < -1) | (tok >= V)).any() or ((mv < 0) | (mv >= M)).any():
        return False
    counts = np.diff(off)
    for i in range(N):  # the format's rule: each legal move listed once (manaka/validate.py)
        if len(np.unique(mv[off[i]:off[i + 1]])) != counts[i]:
            return False
    tg, val = arrays["target"].astype(np.int64), arrays["value"]
    if ((tg < 0) | (tg >= counts)).any() or not ((val >= 0) & (val <= 1)).all():
        return False
    if pt is not None:
        if not np.isfinite(pt).all() or (pt < 0).any():
            return False
        err = np.abs(np.add.reduceat(pt.astype(np.float64), off[:-1]) - 1).max()
        if err > 2e-3:
            return False
        if err > 0.5e-3:
            return None
    return True


META_NASTY = [0, -1, 2, 2**31, 2**63, 32767, 32768, 32769, 1.0, "1", None, True, [], {}]


def dataset_case(rng, workdir):
    N = int(rng.integers(1, 12))
    arrays = small_dataset(rng, N)
    counts = np.diff(arrays["legal_offsets"])
    arrays = {"tokens": arrays["tokens"].astype(np.int16), "legal_offsets": arrays["legal_offsets"].astype(np.int64),
              "legal_moves": arrays["legal_moves"].astype(np.int16), "target": arrays["target"].astype(np.int32),
              "value": arrays["value"].astype(np.float32)}
    if rng.random() < 0.4:
        w = rng.random(int(counts.sum())) + 0.1
        arrays["policy_target"] = (w / np.repeat(np.add.reduceat(w, arrays["legal_offsets"][:-1]), counts)).astype(np.float32)
    meta = {"version": 1, "num_tokens": 9, "num_moves": 13, "T": 3}
    changes = []
    for _ in range(int(rng.choice([0, 1, 1, 2]))):
        if rng.random() < 0.3:
            key = ("version", "num_tokens", "num_moves", "T", "extra")[rng.integers(5)]
            meta[key] = META_NASTY[rng.integers(len(META_NASTY))]
            changes.append(f"meta {key}={meta[key]!r}")
            continue
        name = list(arrays)[rng.integers(len(arrays))]
        new, what = mutate(rng, arrays[name], ints=name not in ("value", "policy_target"))
        if not isinstance(new, np.ndarray) or new.dtype == object or new.size >= BIG:
            what += " (not saved: .npy of it would be a pickle or too big)"
        else:
            arrays[name] = new
        changes.append(f"{name}.npy {what}")
    folder = os.path.join(workdir, "ds")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for name, x in arrays.items():
        np.save(os.path.join(folder, name + ".npy"), x)
    import json
    with open(os.path.join(folder, "meta.json"), "w") as out:
        json.dump(meta, out)
    # judged on what the files hold (np.save writes a non-contiguous array contiguously)
    valid = dataset_validity({n: np.load(os.path.join(folder, n + ".npy"), mmap_mode="r") for n in arrays}, meta)

    def call():
        ds = mk.Dataset.open(folder)
        with mk.Loader(ds, batch_size=int(rng.integers(1, 5)), producers=2, seed=1) as loader:
            return sum(len(b) for b in loader), len(ds)

    def check(result):
        return None if result[0] == result[1] == N else f"Dataset.open: {result} positions, want {N}"
    return Case("Dataset.open: " + ("; ".join(changes) or "valid"), call, valid, check=check)


def dataset_path_case(rng, workdir):
    """Dataset.open with a path that is no dataset folder: a DatasetError or a TypeError."""
    afile = os.path.join(workdir, "a-file")
    open(afile, "w").close()
    path = [None, 3, b"\xff", "", os.path.join(workdir, "missing"), afile, workdir, "\0", 1.5,
            os.path.join(workdir, "x" * 300)][rng.integers(10)]
    return Case(f"Dataset.open({path!r})", lambda: mk.Dataset.open(path), False)


KINDS = {"ops": ops_case, "model": model_case, "loader": loader_case, "dataset": dataset_case}


def make(kind, rng, workdir):
    if kind == "dataset":
        return (dataset_path_case if rng.random() < 0.1 else dataset_case)(rng, workdir)
    return KINDS[kind](rng)
