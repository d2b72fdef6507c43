"""A fingerprint of the bits manaka's CPU kernels and trainer produce on fixed inputs: one
line per output, its name and the start of its SHA-256. Run it on a tree before and after
a kernel change, and with 1 and 2 threads, and diff the outputs: a change that promises the
same bits must print the same lines.

    PYTHONPATH=TREE python tools/cpu_bits.py THREADS > bits.txt"""
import hashlib
import sys

import numpy as np

import manaka as mk
import manaka.ops as ops
from manaka import _testing
from manaka.bench.step import SEED, seed_batch

mk.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
out = {}


def digest(name, *arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(np.asarray(a)).tobytes())
    out[name] = h.hexdigest()[:16]


def _flat(d, prefix=""):
    """(key, array) pairs of a nested dict of arrays and numbers."""
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}/")
        elif isinstance(v, (np.ndarray, int, float)):
            yield f"{prefix}{k}", v


rng = np.random.default_rng(1)
V, D, K, T, P = 2344, 256, 4, 40, 16  # the seed shapes
emb = rng.standard_normal((V, D)).astype(np.float32) * 0.5
tok = rng.integers(0, V, (389, 2, T), dtype=np.int32)
tok[rng.random(tok.shape) < 0.1] = -1
ps = ops.power_sums(emb, tok, K)
digest("power_sums", ps)
digest("power_sums_backward", ops.power_sums_backward(rng.standard_normal(ps.shape).astype(np.float32), emb, tok))
for k in (1, 2, 3, 5, 7):  # other orders, odd widths
    for d in (1, 13, 37):
        e = (rng.standard_normal((97, d)) * 0.9).astype(np.float32)
        t = rng.integers(0, 97, (31, 2, 23), dtype=np.int32)
        t[rng.random(t.shape) < 0.2] = -1
        f = ops.power_sums(e, t, k)
        digest(f"power_sums K={k} D={d}", f, ops.power_sums_backward(rng.standard_normal(f.shape).astype(np.float32), e, t))
# the kernel's other paths and slab shapes (csrc/cpu/power_sums.c): direct gathers for small
# batches (one position at the seed's shapes, two), packed slabs at wider odd widths; a rng
# of their own, so the lines below keep their inputs
rng_p = np.random.default_rng(2)
for (B, T_, Vp, d), ks in [((1, 40, V, D), (4,)), ((2, 40, 300, 100), (3, 4, 6)),
                           ((16, 40, 50, 100), (2, 4)), ((16, 40, 50, 143), (4, 5))]:
    e = (rng_p.standard_normal((Vp, d)) * 0.9).astype(np.float32)
    t = rng_p.integers(0, Vp, (B, 2, T_), dtype=np.int32)
    t[rng_p.random(t.shape) < 0.2] = -1
    for k in ks:
        f = ops.power_sums(e, t, k)
        digest(f"power_sums B={B} V={Vp} K={k} D={d}", f,
               ops.power_sums_backward(rng_p.standard_normal(f.shape).astype(np.float32), e, t))
num_pairs = V * (V + 1) // 2
table = rng.standard_normal((num_pairs, P)).astype(np.float32)
pr = ops.pair_sums(table, tok)
digest("pair_sums", pr)
digest("pair_sums_backward", ops.pair_sums_backward(rng.standard_normal(pr.shape).astype(np.float32), tok, num_pairs))
B, L, W, M = 512, 600, 300, 2187
q = rng.standard_normal((B, W)).astype(np.float32)
moves = rng.standard_normal((M, W)).astype(np.float32) * 0.1
counts = rng.integers(1, L, B).astype(np.int32)
legal = np.argsort(rng.random((B, M)), axis=1)[:, :L].astype(np.int32)
legal[np.arange(L)[None, :] >= counts[:, None]] = -1
target = (rng.random(B) * counts).astype(np.int32)
digest("policy_head", *_testing.backend_policy_head("cpu", q, moves, legal, counts, target))
digest("policy_head + grad_table", *_testing.backend_policy_head("cpu", q, moves, legal, counts, target, table_grad=True))
# GatherDot at odd widths (every column block of the CPU's kernels), counts 0, 1 and many
for w in (1, 3, 13, 125, 300):
    b, ll, m = 37, 300, 97
    h = rng.standard_normal((b, w)).astype(np.float32)
    t = rng.standard_normal((m, w)).astype(np.float32)
    idx = rng.integers(0, m, (b, ll)).astype(np.int32)
    c = rng.integers(0, ll + 1, b).astype(np.int32)
    c[:3] = (0, 1, ll)
    idx[np.arange(ll)[None, :] >= c[:, None]] = -1
    lg = ops.gather_dot(h, t, idx, c)
    digest(f"gather_dot W={w}", lg, *ops.gather_dot_backward(rng.standard_normal(lg.shape).astype(np.float32), h, t, idx, c))
for m, n, k, ta, tb in [(1024, 512, 2080, 0, 1), (512, 2080, 1024, 1, 0), (1024, 2080, 512, 0, 0),
                        (1024, 512, 512, 0, 1), (512, 512, 1024, 1, 0), (1024, 300, 512, 0, 1),
                        (97, 1000, 33, 0, 0)]:
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    digest(f"gemm {m}x{n}x{k} {'nt'[ta]}{'nt'[tb]}", _testing.backend_gemm("cpu", a, b, trans_a=bool(ta), trans_b=bool(tb)))
cfg = mk.ModelConfig(**SEED)
batch = seed_batch(cfg, 256, 600)
for mode in ("dense", "sparse"):
    model = mk.Model(cfg, seed=0)
    trainer = mk.Trainer(model, lr=1e-3, pair_update=mode, move_update=mode)
    losses = [trainer.step(batch).loss for _ in range(3)]
    state = model.state_dict()
    digest(f"trainer {mode}: 3 losses", np.float64(losses))
    digest(f"trainer {mode}: parameters", *[state[n] for n in sorted(state)])
# bf16 pair moments (dense and sparse) and sparse steps over distinct batches, so that rows
# come back after gaps and the catch-up runs; the moments come from the trainer's state
batches = [seed_batch(cfg, 256, 600, seed=s) for s in range(3)]
for mode, dtype in (("dense", "bf16"), ("sparse", "bf16"), ("sparse", "float32"),
                    ("lazy", "bf16")):
    model = mk.Model(cfg, seed=0)
    trainer = mk.Trainer(model, lr=1e-3, pair_update=mode, pair_state_dtype=dtype)
    losses = [trainer.step(batches[i % 3]).loss for i in range(5)]
    state = model.state_dict()
    tstate = trainer.state_dict()
    digest(f"trainer {mode} {dtype}: 5 losses", np.float64(losses))
    digest(f"trainer {mode} {dtype}: parameters", *[state[n] for n in sorted(state)])
    digest(f"trainer {mode} {dtype}: state", *[np.asarray(v) for _, v in sorted(_flat(tstate))])
for name, h in out.items():
    print(f"{name:40s} {h}")
