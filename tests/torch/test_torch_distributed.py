"""manaka.torch.distributed on gloo with 2 and 3 processes spawned on this machine: after
a few steps every rank holds the same bits, equal to one process on the concatenated
batches (to reordered float sums), with the pair table dense through DDP or sparse through
the rank-ordered row exchange; a rank killed mid-step makes the others fail, not hang."""
import re
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import ddp_workers  # noqa: E402
from assertions import assert_adam_close  # noqa: E402
import spawn_ranks  # noqa: E402

LIMIT_S = 240  # per spawned group: a hang fails the test instead of blocking the suite


def spawn(tmp_path, world, sparse, kill=-1, how="exit", relative=False, move_hidden=0):
    seed = int(np.random.default_rng().integers(1 << 20))
    codes = spawn_ranks.run(ddp_workers.run, lambda r: (r, world, str(tmp_path / "rendezvous"), str(tmp_path),
                                                        sparse, seed, kill, how, relative, move_hidden), world,
                                  LIMIT_S, kill, how)
    return seed, codes


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.mark.parametrize("world,sparse,relative,move_hidden", [(2, True, False, 0), (2, False, False, 0),
                                                               (3, True, False, 0), (2, True, True, 0),
                                                               (2, True, True, 3)],
                         ids=["2-sparse", "2-dense", "3-sparse", "2-sparse-relative", "2-sparse-relative-hidden"])
def test_ranks_agree_bitwise_and_with_one_process(tmp_path, world, sparse, relative, move_hidden):
    seed, codes = spawn(tmp_path, world, sparse, relative=relative, move_hidden=move_hidden)
    errors = {r: (tmp_path / f"error{r}.txt").read_text() for r in range(world)
              if (tmp_path / f"error{r}.txt").exists()}
    assert codes == [0] * world and not errors, (codes, errors)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    for r in range(1, world):
        for name, p in ranks[0].items():
            assert torch.equal(ranks[r][name], p), f"rank {r} differs from rank 0 in {name}"
    want = ddp_workers.one_process(world, sparse, seed, relative, move_hidden)
    start = ddp_workers.mkt.Network(ddp_workers.config(relative, move_hidden), seed=3).state_dict()
    assert ("move_pair_relative" in want) == relative and ("move_hidden_out" in want) == bool(move_hidden)
    for name, p in want.items():
        assert not torch.equal(p, start[name]), f"{name} did not train"
        assert_adam_close(ranks[0][name].numpy(), p.numpy(), ddp_workers.LR, name)


@pytest.mark.parametrize("how", ["exit", "stall"])
def test_a_rank_lost_mid_step_makes_the_others_fail(tmp_path, how):
    """A rank that exits (gloo sees the connection close) or stalls (the others reach the
    process group's 20 s timeout) between its forward and backward: the others raise."""
    start = time.monotonic()
    _, codes = spawn(tmp_path, 3, True, kill=1, how=how)
    if how == "exit":
        assert codes[1] == 3
    for r in (0, 2):
        assert codes[r] == 1, codes
        text = (tmp_path / f"error{r}.txt").read_text()
        assert re.search(r"RuntimeError.*(Connection (closed|reset)|[Tt]imed out|[Tt]imeout)", text), text
    assert time.monotonic() - start < LIMIT_S


def test_bad_calls_without_a_process_group():
    import manaka.torch as mkt
    from manaka.torch import distributed as mktd
    net = mkt.Network(ddp_workers.config(), sparse_pair_grad=True)
    with pytest.raises(RuntimeError, match="init_process_group"):
        mktd.data_parallel(net)
    with pytest.raises(RuntimeError, match="after loss.backward"):
        mktd.all_reduce_pair_grad(net)
    with pytest.raises(ValueError, match="sparse_pair_grad=False"):
        mktd.all_reduce_pair_grad(mkt.Network(ddp_workers.config()))
    with pytest.raises(TypeError, match="Network"):
        mktd.LossModule(object())
    # a value weight Network.loss refuses: at construction, not at every rank's first forward
    for bad, exc in ((float("nan"), ValueError), (-1.0, ValueError), ("1", TypeError)):
        with pytest.raises(exc, match="LossModule: value_weight must be"):
            mktd.LossModule(net, value_weight=bad)
    assert mktd.LossModule(net, value_weight=0.5).value_weight == 0.5
