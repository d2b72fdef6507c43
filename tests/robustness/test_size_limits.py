"""Every size computed from a user's number is bounded and computed with
checked multiplies, so a huge dimension is a clear exception naming it, never a wrapped
size and a heap overrun.

Without those checks, ModelConfig(embed_dim=2**62, orders=2) built a model of -9.2e18
parameters whose forward overran the heap; Loader(ds, batch_size=2**62) allocated a
1-byte slot and corrupted the heap ("free(): corrupted unsorted chunks"). Calls that
would crash run in child processes here."""
import os
import subprocess
import sys

import numpy as np
import pytest

import manaka as mk
from manaka import synthetic

from paths import ROOT

BASE = dict(num_tokens=10, num_moves=12, tokens_per_side=4, embed_dim=4, orders=2, pair_dim=2, hidden=(4,),
            head_width=4)


def run_child(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), \
        f"exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"


@pytest.mark.parametrize("field,value", [("embed_dim", 2**62), ("orders", 2**40), ("pair_dim", 2**31),
                                         ("head_width", 2**31), ("num_moves", 2**33), ("embed_dim", 2**64),
                                         ("head_width", 2**100)])
def test_a_dimension_above_int32_is_refused_by_name(field, value):
    with pytest.raises(ValueError, match=rf"ModelConfig: {field} = {value} is above 2\^31 - 1"):
        mk.Model(mk.ModelConfig(**{**BASE, field: value}))


def test_a_hidden_width_above_int32_is_refused():
    with pytest.raises(ValueError, match=r"ModelConfig: hidden\[0\] = 2147483648 is above 2\^31 - 1"):
        mk.Model(mk.ModelConfig(**{**BASE, "hidden": (2**31,)}))


def test_the_feature_width_is_a_checked_product():
    # each factor fits in int32, their product does not: the first layer's GEMM width
    with pytest.raises(ValueError, match=r"2 \* \(orders \* embed_dim \+ pair_dim\) features \(orders = 4, "
                                         r"embed_dim = 1073741824, pair_dim = 2\)"):
        mk.Model(mk.ModelConfig(**{**BASE, "orders": 4, "embed_dim": 2**30}))
    with pytest.raises(ValueError, match="features"):
        mk.Model(mk.ModelConfig(**{**BASE, "orders": 2**31 - 1, "embed_dim": 2**31 - 1}))


def test_a_tensor_past_the_element_limit_is_refused_before_allocating():
    # pair_table: 2^20 (2^20 + 1) / 2 rows x 2^29 columns = 2^68 values: wrapped to 0 before
    with pytest.raises(ValueError, match=r"too many parameters: pair_table \[549756338176, 536870912\]"):
        mk.Model(mk.ModelConfig(**{**BASE, "num_tokens": 2**20, "embed_dim": 1, "orders": 1, "pair_dim": 2**29}))


def test_forward_of_a_wrapped_config_cannot_run():
    # embed_dim = 2**62 wraps the parameter count: the model is refused, so forward can never
    # overrun the heap
    run_child("""
import numpy as np, manaka as mk
try:
    m = mk.Model(mk.ModelConfig(num_tokens=10, num_moves=12, tokens_per_side=4, embed_dim=2**62, orders=2,
                                pair_dim=2, hidden=(4,), head_width=4))
    b = mk.Batch(np.zeros((3, 2, 4), np.int32), np.zeros((3, 5), np.int32), np.ones(3, np.int32),
                 np.zeros(3, np.int32), np.ones(3, np.float32))
    m.forward(b)
    print("forward ran on a model of", m.num_parameters(), "parameters")
except ValueError as e:
    assert "embed_dim" in str(e), e
    print("ok")
""")


def test_the_arena_size_is_checked():
    model = mk.Model(mk.ModelConfig(**BASE))
    cfg = model.config
    rng = np.random.default_rng(0)
    B, L = 7, 5
    counts = rng.integers(1, L + 1, B).astype(np.int32)
    batch = mk.Batch(rng.integers(0, cfg.num_tokens, (B, 2, cfg.tokens_per_side)).astype(np.int32),
                     rng.integers(0, cfg.num_moves, (B, L)).astype(np.int32), counts,
                     np.zeros(B, np.int32), np.full(B, 0.5, np.float32))
    model.forward(batch)
    assert model._core.arena_bytes_for(B, L)[0] == model._core.arena_bytes
    # B * L and the total pass 2^58 bytes: refused naming B and L (wrapped before)
    with pytest.raises(MemoryError, match=r"B = 1 positions with L = 72057594037927936 legal slots"):
        model._core.arena_bytes_for(1, 2**56)
    with pytest.raises(MemoryError, match=r"B = 4611686018427387904 positions"):
        model._core.arena_bytes_for(2**62, 1)
    # the CPU pair-table backward numbers token slots in int32: a batch past that is refused
    with pytest.raises(ValueError, match=r"2\^31 - 1 token slots"):
        model._core.arena_bytes_for(2**28, 1)
    for B_, L_ in ((0, 1), (1, 0), (-1, 5)):
        with pytest.raises(ValueError, match="B and L must be >= 1"):
            model._core.arena_bytes_for(B_, L_)


def _dataset():
    return synthetic.make(40, mk.ModelConfig(num_tokens=20, num_moves=30, tokens_per_side=4, embed_dim=4, orders=1,
                                             pair_dim=2, hidden=(), head_width=4))


def test_a_loader_batch_size_that_overflows_the_slot_is_refused():
    run_child("""
import manaka as mk
from manaka import synthetic
ds = synthetic.make(40, mk.ModelConfig(num_tokens=20, num_moves=30, tokens_per_side=4, embed_dim=4, orders=1,
                                       pair_dim=2, hidden=(), head_width=4))
for bs in (2**62, 2**63 - 1, 2**55, 2**61 + 1):
    try:
        loader = mk.Loader(ds, batch_size=bs)
        print("accepted", bs, next(iter(loader)).tokens.shape)
    except ValueError as e:
        assert f"batch_size = {bs} is too large" in str(e), e
print("ok")
""")


def test_a_loader_batch_size_too_large_to_allocate_is_a_memory_error():
    with pytest.raises(MemoryError, match=r"batch buffer \(batch_size = 1099511627776\)"):
        mk.Loader(_dataset(), batch_size=2**40)


def test_a_loader_batch_size_beyond_64_bits_is_refused_by_name():
    with pytest.raises(ValueError, match=r"Loader: batch_size must be <= 9223372036854775807"):
        mk.Loader(_dataset(), batch_size=2**64)
    with pytest.raises(ValueError, match=r"Loader: seed must be <= "):
        mk.Loader(_dataset(), batch_size=8, seed=2**64)


def test_a_batch_size_above_the_dataset_still_gives_one_batch():
    ds = _dataset()
    loader = mk.Loader(ds, batch_size=1000, shuffle=False)
    (batch,) = list(loader)
    assert len(batch) == len(ds)
    assert len(mk.Loader(ds, batch_size=1000, drop_last=True)) == 0


def test_the_cli_prints_one_line_for_a_huge_size(tmp_path):
    base = [sys.executable, "-m", "manaka.train", "--steps", "1", "--synthetic", "200", "--eval-positions", "0",
            "--device", "cpu", "--no-progress"]
    for extra, words in ((["--embed-dim", str(2**62)], "parameters"), (["--batch-size", str(2**62)], "batch_size"),
                         (["--batch-size", str(2**40)], "batch_size"),
                         (["--synthetic", str(10**12)], "positions take at least")):
        out = subprocess.run(base + extra, capture_output=True, text=True, timeout=300, cwd=ROOT)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and words in lines[0], (extra, out.stderr[-2000:])


def test_synthetic_data_larger_than_memory_is_refused_before_any_work():
    # made a chunk at a time, 10**12 positions ran for hours before memory ran out
    import time

    start = time.perf_counter()
    for n in (10**12, 2**62):
        with pytest.raises(MemoryError, match=rf"synthetic: {n:,} positions take at least .* GiB, more than this "):
            synthetic.make(n, None)
    assert time.perf_counter() - start < 5
    for bad in (1.5, "10", True, None):  # 1.5 was made 1 position, "10" ten
        with pytest.raises(TypeError, match="synthetic: n must be an int"):
            mk.Dataset.synthetic(bad)
