"""mk.Trainer(model, process_group=...) on gloo with 2 and 3 processes spawned on this
machine: after a few steps every rank holds the same bits, equal to one process (no
process group) on the concatenated batches to reordered float sums, for the dense, sparse
and lazy pair-table updates; the step's loss is the ranks' mean; mismatched models and a
process group that is not one are refused; a rank lost mid-step makes the others raise
within the process group's timeout."""
import re
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import manaka as mk  # noqa: E402
import spawn_ranks  # noqa: E402
from assertions import assert_adam_close  # noqa: E402
import trainer_ddp_workers as workers  # noqa: E402

LIMIT_S = 120  # per spawned group: a hang fails the test instead of blocking the suite
TIMEOUT_S = 6  # the process group's timeout in the tests that lose a rank


def spawn(tmp_path, world, updates, kill=-1, how="exit", model_seed=3, timeout=20):
    seed = int(np.random.default_rng().integers(1 << 20))
    codes = spawn_ranks.run(workers.run, lambda r: (r, world, str(tmp_path / "rendezvous"), str(tmp_path), updates,
                                                    seed, kill, how, model_seed, timeout), world, LIMIT_S, kill, how)
    errors = {r: (tmp_path / f"error{r}.txt").read_text() for r in range(world) if (tmp_path / f"error{r}.txt").exists()}
    return seed, codes, errors


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.parametrize("world,updates", [(2, ("dense", "sparse", "lazy")), (3, ("dense", "sparse"))],
                         ids=["2", "3"])
def test_ranks_agree_bitwise_and_with_one_process(tmp_path, world, updates):
    seed, codes, errors = spawn(tmp_path, world, updates)
    assert codes == [0] * world and not errors, (codes, errors)
    start = mk.Model(workers.config(), seed=3).state_dict()
    for update in updates:
        ranks = [dict(np.load(tmp_path / f"{update}-rank{r}.npz")) for r in range(world)]
        for r in range(1, world):
            for name, a in ranks[0].items():
                np.testing.assert_array_equal(ranks[r][name], a, err_msg=f"{update}: rank {r} differs in {name}")
        want, losses = workers.one_process(world, update, seed)
        for name, p in want.items():
            assert not np.array_equal(p, start[name]), f"{name} did not train"
            assert_adam_close(ranks[0][name], p, workers.LR, f"{update}: {name}")
        # the step's loss is the mean of the ranks' mean losses: one process's on the W * B rows
        np.testing.assert_allclose(ranks[0]["losses"], losses, rtol=1e-6)
        assert (ranks[0]["sent"] > 0).all()


def test_mismatched_models_are_refused_on_every_rank(tmp_path):
    _, codes, errors = spawn(tmp_path, 2, ("dense",), model_seed=4)
    assert codes == [1, 1], (codes, errors)
    for r in (0, 1):
        assert re.search(r"ValueError: Trainer: process_group: rank 1's parameters .*differ from rank 0's",
                         errors[r]), errors[r]


@pytest.mark.parametrize("how", ["exit", "stall"])
def test_a_rank_lost_mid_step_makes_the_others_raise(tmp_path, how):
    """A rank that exits (gloo sees the connection close) or stalls (the others reach the
    process group's timeout) between its backward and the exchange: the others raise a
    RuntimeError naming the exchange, within the timeout (plus start-up)."""
    start = time.monotonic()
    world = 3 if how == "exit" else 2
    _, codes, errors = spawn(tmp_path, world, ("sparse",), kill=1, how=how, timeout=TIMEOUT_S)
    if how == "exit":
        assert codes[1] == 3
    for r in range(world):
        if r == 1:
            continue
        assert codes[r] == 1, (codes, errors)
        assert re.search(r"ExchangeFailed: Trainer.step: the exchange of .* failed at step 2 on rank \d of "
                         rf"{world}: a rank died or did not answer", errors[r]), errors[r]
    assert time.monotonic() - start < LIMIT_S


def test_process_group_must_be_a_torch_group():
    model = mk.Model(workers.config(), seed=3)
    for bad in (object(), "gloo", 2):
        with pytest.raises(TypeError, match="process_group must be a torch.distributed ProcessGroup"):
            mk.Trainer(model, process_group=bad)
    t = mk.Trainer(model)  # no group: one process, torch untouched
    assert t.process_group is None and t.world_size == 1 and t.rank == 0 and t.last_exchange == {}


def test_apply_without_backward_and_bad_rows_are_refused():
    """The core's two halves, called out of order or with bad rows: a ValueError naming
    the problem, nothing changed."""
    model = mk.Model(workers.config(), seed=3)
    t = mk.Trainer(model, lr=workers.LR)
    before = model.state_dict()
    stats = np.zeros(8, np.float32)
    stats[5] = 1
    P = workers.config().pair_dim
    with pytest.raises(ValueError, match="no backward to apply"):
        t._core.apply(np.zeros(0, np.int64), np.zeros((0, P), np.float32), stats)
    b = workers.global_batch(1, 0, 0)
    _, rows = t._core.backward(mk.Batch(b.tokens, b.legal, b.counts, b.target, b.value))
    ids, grads = t._core.pair_rows(rows)
    assert rows > 0 and (np.diff(ids) > 0).all()
    with pytest.raises(ValueError, match=r"strictly ascending .* follows a larger or equal one"):
        t._core.apply(ids[::-1].copy(), grads, stats)
    with pytest.raises(ValueError, match=r"grads must be \["):
        t._core.apply(ids, grads[:, :1].copy(), stats)
    bad = stats.copy()
    bad[0] = np.nan
    with pytest.raises(FloatingPointError, match="not finite"):
        t._core.apply(ids, grads, bad)
    for name, a in before.items():
        np.testing.assert_array_equal(model.state_dict()[name], a)
    assert t.step_count == 0
    t._core.apply(ids, grads, stats)
    assert t.step_count == 1
    with pytest.raises(ValueError, match="no backward to apply"):  # applied once only
        t._core.apply(ids, grads, stats)


@pytest.fixture
def group_of_one(tmp_path):
    """A gloo group of this process alone (world size 1), destroyed after the test."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'one'}", rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("update", ["dense", "sparse", "lazy"])
@pytest.mark.parametrize("dtype", ["float32", "bf16"])
def test_one_rank_is_the_plain_step_bit_for_bit(group_of_one, update, dtype):
    """The two halves with the exchange in between (a world of one) give exactly the plain
    step's parameters, moments and stats; a non-finite loss raises and changes nothing."""
    import model_cases as cases

    cfg = cases.config()
    a, b = mk.Model(cfg, seed=1), mk.Model(cfg, seed=1)
    ta = mk.Trainer(a, lr=0.02, pair_update=update, pair_state_dtype=dtype)
    tb = mk.Trainer(b, lr=0.02, pair_update=update, pair_state_dtype=dtype, process_group=group_of_one)
    assert (tb.rank, tb.world_size, tb.process_group) == (0, 1, group_of_one)
    for k in range(4):
        batch = cases.batch(cfg, seed=k)
        assert ta.step(batch).as_dict() == tb.step(batch).as_dict()
    cases.assert_parameters_match(b, a)
    sa, sb = ta.state_dict(), tb.state_dict()
    for kind in ("exp_avg", "exp_avg_sq"):
        for name, m in sa[kind].items():
            np.testing.assert_array_equal(sb[kind][name], m, err_msg=f"{kind} {name}")
    ex = tb.last_exchange
    # int32 ids on the wire (the table has fewer than 2**31 rows) and pair_dim floats a row
    assert ex["rows_per_rank"][0] > 0 and ex["rows"] == ex["rows_per_rank"][0] * (4 + 4 * cfg.pair_dim)
    assert set(ex["seconds"]) == {"backward", "exchange", "apply"}
    b.parameters()["value.bias"][...] = np.nan
    before = b.state_dict()
    with pytest.raises(FloatingPointError, match=r"not finite on rank\(s\) \[0\] at step 4; no rank applied"):
        tb.step(cases.batch(cfg, seed=9))
    assert tb.step_count == 4
    for name, p in b.state_dict().items():
        np.testing.assert_array_equal(p, before[name])
