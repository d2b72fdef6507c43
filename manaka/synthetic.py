"""Built-in data: positions of the seed shapes labelled by a fixed random TEACHER network.

The teacher is a network of exactly the family of docs/design.md §1 (PowerSums + PairSums
features, a ReLU trunk, a GatherDot policy head and a sigmoid value head), with small
widths of its own (``TEACHER_DIMS``) and the vocabularies of the student's config, built
from :mod:`manaka.ops` plus NumPy matmuls (it does not need :class:`manaka.Model`).
Because the labels come from such a network, a student of the same family can really
learn them, and how far it got is measurable against the teacher's own ceiling.

Label rule (what a perfect student can reach):

* ``target`` is SAMPLED from the teacher's policy ``softmax(logits / temperature)`` over
  the position's legal moves (not its argmax), so labels are noisy like real games.
  The best any model can do is predict the teacher's argmax; its accuracy on these labels
  is ``meta["teacher_accuracy_ceiling"]`` (measured on the dataset; its expectation,
  mean of the teacher's top probability, is ``meta["teacher_expected_accuracy"]``; ~0.5 at
  the default sharpness). Chance level is ``meta["chance_accuracy"]`` (mean 1 / count).
* The lowest policy loss reachable is ``meta["teacher_policy_loss_floor"]`` (the teacher's
  own cross-entropy on the sampled targets).
* ``value`` is the teacher's win probability itself (a soft result in [0, 1]); the lowest
  value loss (BCE) reachable is ``meta["teacher_value_loss_floor"]``.
* With ``soft_targets=True`` the teacher's probabilities are also stored as
  ``policy_target``.

The teacher depends only on the vocabularies, T, orders and ``teacher_seed`` (not on `n` or
`seed`), so training and validation sets drawn with different seeds share one teacher.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np

from . import ops

__all__ = ["make", "teacher_parameters", "teacher_forward", "SEED_SHAPES", "TEACHER_DIMS"]

# docs/design.md §5: vocabularies and legal counts of the seed configuration.
SEED_SHAPES = dict(num_tokens=2344, num_moves=2187, tokens_per_side=40, orders=4)
MAX_LEGAL = 593
TEACHER_DIMS = dict(embed_dim=16, pair_dim=1, hidden=(64,), head_width=32)  # P = 1: the pair lookups dominate generation time
SHARPNESS = 3.5      # std of the teacher logits within a legal list: top-1 prob ~0.45
VALUE_SHARPNESS = 1.5  # std of the teacher's value logit
_CHUNK = 8192


def _shape_of(cfg: Any) -> Dict[str, int]:
    """Vocabularies, T and orders from a ModelConfig (or anything with those attributes)."""
    shape = dict(SEED_SHAPES)
    if cfg is not None:
        for key in shape:
            if hasattr(cfg, key):
                shape[key] = int(getattr(cfg, key))
    if not 1 <= shape["num_tokens"] <= 32767:
        raise ValueError(f"synthetic: num_tokens must be in [1, 32767], got {shape['num_tokens']}")
    if shape["num_moves"] < 1 or shape["tokens_per_side"] < 1 or shape["orders"] < 1:
        raise ValueError(f"synthetic: num_moves, tokens_per_side and orders must be >= 1, got {shape}")
    return shape


class _World:
    """Fixed structure shared by teacher and data: the perspective flip and the move sets."""

    def __init__(self, shape: Dict[str, int], rng: np.random.Generator):
        V, M = shape["num_tokens"], shape["num_moves"]
        self.shape = shape
        self.flip = rng.permutation(V).astype(np.int16)   # token seen from the other side
        self.move_perm = rng.permutation(M)
        units = np.arange(1, M + 1)
        self.units = units[np.gcd(units, M) == 1]          # strides that visit distinct moves
        self.max_count = min(MAX_LEGAL, M)

    def positions(self, rng: np.random.Generator, n: int):
        """Random positions: tokens [n, 2, T] int16, counts [n], offsets [n + 1], moves flat.

        Perspective 0 holds 70-100% of T tokens (empty slots at the end); perspective 1 is
        the same pieces seen from the other side (a fixed permutation of the vocabulary).
        Legal lists: counts ~ clip(round(lognormal(ln 90, 0.6)), 1, 593) distinct moves,
        move_perm[(a + s * i) mod M] for a random start a and a stride s coprime with M."""
        V, M, T = self.shape["num_tokens"], self.shape["num_moves"], self.shape["tokens_per_side"]
        tokens = np.empty((n, 2, T), np.int16)
        own = rng.integers(0, V, (n, T)).astype(np.int16)
        present = rng.integers(int(np.ceil(0.7 * T)), T + 1, n)
        empty = np.arange(T)[None, :] >= present[:, None]
        own[empty] = -1
        tokens[:, 0] = own
        tokens[:, 1] = np.where(empty, -1, self.flip[np.maximum(own, 0)])
        counts = np.clip(np.round(rng.lognormal(np.log(90), 0.6, n)), 1, self.max_count).astype(np.int64)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        row = np.repeat(np.arange(n), counts)
        slot = np.arange(offsets[-1]) - offsets[:-1][row]
        start = rng.integers(0, M, n)
        stride = self.units[rng.integers(0, len(self.units), n)]
        moves = self.move_perm[(start[row] + stride[row] * slot) % M]
        return tokens, counts, offsets, moves, row, slot


def _padded(moves, counts, row, slot) -> np.ndarray:
    legal = np.full((len(counts), int(counts.max())), -1, np.int32)
    legal[row, slot] = moves
    return legal


def _times_t(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w.T in a fixed order of sums: NumPy's own einsum loop, one thread, no BLAS. The
    dataset must not depend on the BLAS NumPy links or its thread count: on an AMD EPYC,
    OpenBLAS's 2-thread product rounded the value logits differently from its 1-thread one,
    so that OMP_NUM_THREADS=1 made another dataset (and refused its checkpoints)."""
    return np.einsum("ij,kj->ik", x, w)


def teacher_forward(params: Dict[str, np.ndarray], orders: int, tokens, legal, counts) -> Tuple[np.ndarray, np.ndarray]:
    """The network of docs/design.md §1 on NumPy: returns (logits [B, L], value [B])."""
    tokens = np.asarray(tokens, np.int32)
    B = tokens.shape[0]
    ps = ops.power_sums(params["embedding"], tokens, orders).reshape(B, 2, -1)
    pr = ops.pair_sums(params["pair_table"], tokens)
    x = np.concatenate([ps[:, 0], pr[:, 0], ps[:, 1], pr[:, 1]], axis=1)
    i = 0
    while f"trunk.{i}.weight" in params:
        x = np.maximum(_times_t(x, params[f"trunk.{i}.weight"]) + params[f"trunk.{i}.bias"], 0)
        i += 1
    q = np.ascontiguousarray(_times_t(x, params["policy.weight"]) + params["policy.bias"], np.float32)
    logits = ops.gather_dot(q, params["move_table"], legal, counts)
    z = (_times_t(x, params["value.weight"]) + params["value.bias"])[:, 0]
    return logits, 1.0 / (1.0 + np.exp(-z))


def _teacher(shape: Dict[str, int], teacher_seed: int):
    rng = np.random.default_rng([teacher_seed, 0x7EAC4E5])
    world = _World(shape, rng)
    V, M, K = shape["num_tokens"], shape["num_moves"], shape["orders"]
    D, P, W = TEACHER_DIMS["embed_dim"], TEACHER_DIMS["pair_dim"], TEACHER_DIMS["head_width"]
    f32 = lambda a: np.ascontiguousarray(a, np.float32)
    p: Dict[str, np.ndarray] = {
        "embedding": f32(rng.standard_normal((V, D)) * 0.5),
        "pair_table": f32(rng.standard_normal((V * (V + 1) // 2, P), np.float32)),
    }
    # Calibration positions fix the scales below, from the teacher's seed alone.
    tokens, counts, _, moves, row, slot = world.positions(rng, 2048)
    legal = _padded(moves, counts, row, slot)
    B = len(counts)
    ps = ops.power_sums(p["embedding"], tokens.astype(np.int32), K).reshape(B, 2, -1)
    pr = ops.pair_sums(p["pair_table"], tokens.astype(np.int32))
    x = np.concatenate([ps[:, 0], pr[:, 0], ps[:, 1], pr[:, 1]], axis=1).astype(np.float64)
    # Standardising the features is folded into the first layer, so the teacher stays a
    # plain network of the family: W' = W / sigma, b' = b - W' mu.
    mu, sigma = x.mean(0), x.std(0) + 1e-6
    width = x.shape[1]
    for i, h in enumerate(TEACHER_DIMS["hidden"]):
        w = rng.standard_normal((h, width)) * np.sqrt(2.0 / width)
        b = rng.standard_normal(h) * 0.1
        if i == 0:
            w = w / sigma
            b = b - _times_t(mu[None, :], w)[0]
        p[f"trunk.{i}.weight"], p[f"trunk.{i}.bias"] = f32(w), f32(b)
        x = np.maximum(_times_t(x, w) + b, 0)
        width = h
    wp = rng.standard_normal((W, width)) / np.sqrt(width)
    q = _times_t(x, wp)
    # Half of the policy's variance is a position-independent move prior (the bias),
    # half depends on the position: early learning is fast, the rest takes real training.
    bp = rng.standard_normal(W) * q.std()
    table = rng.standard_normal((M, W)) / np.sqrt(W)
    p["policy.weight"], p["policy.bias"] = f32(wp), f32(bp)
    p["move_table"] = f32(table)
    logits = ops.gather_dot(f32(q + bp), p["move_table"], legal, counts.astype(np.int32))
    spread = np.mean([logits[b, :counts[b]].std() for b in range(B) if counts[b] > 1])
    p["move_table"] = f32(table * (SHARPNESS / spread))
    wv = rng.standard_normal((1, width)) / np.sqrt(width)
    zv = _times_t(x, wv)[:, 0]
    p["value.weight"] = f32(wv * (VALUE_SHARPNESS / zv.std()))
    p["value.bias"] = f32(-np.mean(zv) * VALUE_SHARPNESS / zv.std() * np.ones(1))
    return world, p


def teacher_parameters(cfg: Any = None, teacher_seed: int = 0) -> Dict[str, np.ndarray]:
    """The teacher's parameters, named as in docs/design.md §1 (dims: ``TEACHER_DIMS``)."""
    return _teacher(_shape_of(cfg), teacher_seed)[1]


def _check_memory(n: int, shape: Dict[str, int]) -> None:
    """MemoryError, before any work, when `n` positions cannot fit in this machine's memory:
    the positions are made a chunk at a time, so --synthetic 10**12 ran for hours before
    memory ran out. Each position takes at least its tokens, one legal move, its target,
    value, count and offset."""
    import os

    least = n * (2 * shape["tokens_per_side"] * 2 + 4 + 4 + 4 + 4 + 8)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): nothing to compare with
        return
    if least > memory:
        raise MemoryError(f"synthetic: {n:,} positions take at least {least / 2**30:,.1f} GiB, more than this "
                          f"machine's {memory / 2**30:,.1f} GiB of memory")


def make(n: int, cfg: Any = None, seed: int = 0, *, teacher_seed: int = 0, temperature: float = 1.0,
         soft_targets: bool = False):
    """`n` synthetic positions at the shapes of `cfg`, labelled by the teacher (module docstring).

    Args:
        n: number of positions.
        cfg: a :class:`manaka.ModelConfig` (or anything with num_tokens, num_moves,
            tokens_per_side, orders); None means the seed shapes of docs/design.md §5.
        seed: the positions and sampled labels.
        teacher_seed: the teacher network (keep it fixed to draw train / validation sets).
        temperature: the teacher's policy is softmax(logits / temperature); higher = noisier
            labels and a lower ceiling.
        soft_targets: also store the teacher's probabilities as ``policy_target``.

    Returns:
        a :class:`manaka.Dataset` whose ``meta`` holds ``teacher_accuracy_ceiling``,
        ``teacher_expected_accuracy``, ``chance_accuracy``, ``teacher_policy_loss_floor``,
        ``teacher_value_loss_floor`` and the generator's settings.
    """
    import numbers

    from .dataset import Dataset
    # an int: 1.5 was made 1 position and "10" ten
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"synthetic: n must be an int, got {type(n).__name__}")
    n = int(n)
    if n < 1:
        raise ValueError(f"synthetic: n must be >= 1, got {n}")
    if not temperature > 0:
        raise ValueError(f"synthetic: temperature must be > 0, got {temperature}")
    shape = _shape_of(cfg)
    _check_memory(n, shape)
    world, params = _teacher(shape, teacher_seed)
    rng = np.random.default_rng(seed)
    parts = {k: [] for k in ("tokens", "counts", "moves", "target", "value", "policy")}
    hits = best = floor = vfloor = chance = 0.0
    for a in range(0, int(n), _CHUNK):
        c = min(_CHUNK, int(n) - a)
        tokens, counts, offsets, moves, row, slot = world.positions(rng, c)
        legal = _padded(moves, counts, row, slot)
        logits, value = teacher_forward(params, shape["orders"], tokens, legal, counts.astype(np.int32))
        # Softmax and sampling over the flat legal lists only (no padded [c, L] temporaries).
        starts = offsets[:-1]
        z = logits[row, slot].astype(np.float64) / temperature
        e = np.exp(z - np.maximum.reduceat(z, starts)[row])
        prob = e / np.add.reduceat(e, starts)[row]
        # Inverse-CDF sampling: each list's probabilities sum to 1 inside the running sum.
        cum = np.cumsum(prob)
        before = cum[starts] - prob[starts]
        pick = np.searchsorted(cum, before + rng.random(c) * (cum[offsets[1:] - 1] - before), side="right")
        target = np.clip(pick, starts, offsets[1:] - 1) - starts
        taken = prob[starts + target]
        top = np.maximum.reduceat(prob, starts)
        hits += float((taken >= top).sum())
        best += float(top.sum())
        floor += float(-np.log(taken).sum())
        v = np.clip(value.astype(np.float64), 1e-7, 1 - 1e-7)
        vfloor += float(-(v * np.log(v) + (1 - v) * np.log(1 - v)).sum())
        chance += float((1.0 / counts).sum())
        parts["tokens"].append(tokens)
        parts["counts"].append(counts)
        parts["moves"].append(moves)
        parts["target"].append(target.astype(np.int32))
        parts["value"].append(value.astype(np.float32))
        if soft_targets:
            parts["policy"].append(prob.astype(np.float32))
    counts = np.concatenate(parts["counts"])
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    policy = None
    if soft_targets:
        policy = np.concatenate(parts["policy"])
        # float32 rounding: renormalise per position so each list sums to 1 exactly enough
        sums = np.add.reduceat(policy.astype(np.float64), offsets[:-1])
        policy = (policy / np.repeat(sums, counts)).astype(np.float32)
    N = float(n)
    meta = {
        "generator": "manaka.Dataset.synthetic",
        "seed": int(seed), "teacher_seed": int(teacher_seed), "temperature": float(temperature),
        "teacher_dims": {**TEACHER_DIMS, "hidden": list(TEACHER_DIMS["hidden"]), "orders": shape["orders"]},
        "teacher_accuracy_ceiling": hits / N,
        "teacher_expected_accuracy": best / N,
        "chance_accuracy": chance / N,
        "teacher_policy_loss_floor": floor / N,
        "teacher_value_loss_floor": vfloor / N,
    }
    return Dataset.from_arrays(
        tokens=np.concatenate(parts["tokens"]), legal_offsets=offsets,
        legal_moves=np.concatenate(parts["moves"]), target=np.concatenate(parts["target"]),
        value=np.concatenate(parts["value"]), policy_target=policy,
        num_tokens=shape["num_tokens"], num_moves=shape["num_moves"], meta=meta)
