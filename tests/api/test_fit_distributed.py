"""mk.fit with a data-parallel trainer (Trainer(process_group=...)), 2 gloo processes
spawned on this machine: rank 0 alone logs and writes the checkpoint, both ranks end with
the same bits, equal to one process on the same global batches (to reordered float sums),
and the checkpoint resumes in one process (another number of ranks) where an
uninterrupted one-process run would be."""
import multiprocessing
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import manaka as mk  # noqa: E402
import trainer_ddp_workers as workers  # noqa: E402

LIMIT_S = 120


def one_process(steps, checkpoint=None, resume=False):
    model = workers.fit_model()
    trainer = mk.Trainer(model, lr=workers.LR, pair_update="sparse")
    history = mk.fit(model, workers.fit_loader(workers.fit_dataset(), 1), steps=steps, trainer=trainer,
                     checkpoint=checkpoint, resume=resume, progress=False, log=lambda line: None, log_every=1)
    return model.state_dict(), history


def test_fit_on_two_ranks_then_resume_in_one_process(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    ckpt = str(tmp_path / "run.ckpt")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=workers.fit_run, args=(r, 2, str(tmp_path / "rendezvous"), str(tmp_path), 4, ckpt))
             for r in range(2)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + LIMIT_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    alive = [p.is_alive() for p in procs]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    errors = [(tmp_path / f"error{r}.txt").read_text() for r in range(2) if (tmp_path / f"error{r}.txt").exists()]
    assert not any(alive) and [p.exitcode for p in procs] == [0, 0] and not errors, (alive, errors)
    ranks = [dict(np.load(tmp_path / f"fit-rank{r}.npz")) for r in range(2)]
    assert ranks[0]["lines"] == 4 and ranks[1]["lines"] == 0  # rank 0 alone logs
    want, history = one_process(4)
    for name, p in want.items():
        np.testing.assert_array_equal(ranks[1][name], ranks[0][name], err_msg=name)
        np.testing.assert_allclose(ranks[0][name], p, rtol=1e-5, atol=2e-6, err_msg=name)
    np.testing.assert_allclose(ranks[0]["loss"], history["loss"], rtol=1e-5)
    # rank 0's checkpoint, resumed by one process (16 positions a step instead of 2 x 8)
    resumed, history = one_process(7, checkpoint=ckpt, resume=True)
    assert history.start_step == 4
    straight, _ = one_process(7)
    for name, p in straight.items():
        np.testing.assert_allclose(resumed[name], p, rtol=1e-5, atol=4e-6, err_msg=name)


def test_a_shard_without_a_process_group_is_refused():
    model = workers.fit_model()
    with pytest.raises(ValueError, match=r"shard 1 of 2, but the trainer has no process group"):
        mk.fit(model, workers.fit_loader(workers.fit_dataset(), 2, rank=1), steps=1,
               trainer=mk.Trainer(model), progress=False)
