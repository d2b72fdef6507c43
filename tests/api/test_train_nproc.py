"""python -m manaka.train --nproc N: N gloo processes on this machine train one model;
process 0 alone prints, checkpoints and saves; the checkpoint resumes with another number
of processes, or is refused with an error from every process when its position is not a
step of theirs."""
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from paths import ROOT  # noqa: E402

SMALL = ["--synthetic", "3000", "--eval-positions", "256", "--embed-dim", "8", "--orders", "2", "--pair-dim", "3",
         "--hidden", "16", "--head-width", "8", "--log-every", "2", "--no-progress", "--producers", "1",
         "--pair-update", "sparse", "--dist-timeout", "60"]


def cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "manaka.train", *SMALL, *map(str, args)], capture_output=True,
                          text=True, timeout=240, cwd=cwd, env=env)


def test_two_processes_then_resume_in_one_and_three(tmp_path):
    out = cli("--nproc", 2, "--batch-size", 24, "--steps", 4, "--checkpoint", "run.ckpt", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "leaked semaphore" not in out.stderr, out.stderr  # the ranks' tqdm locks are thread locks
    assert "batch 24 x 2 processes" in out.stdout
    # one log line per logging step: process 1 prints nothing
    assert len(re.findall(r"^\[[^]]+\] step=\d+ ", out.stdout, flags=re.M)) == 2, out.stdout
    assert "the checkpoint run.ckpt holds step 4" in out.stdout and os.path.exists(tmp_path / "run.manaka")
    # the same 48 positions a step in one process (4 x 48 = 192 into the epoch: a step of
    # 48 and of 3 x 16 alike)
    out = cli("--batch-size", 48, "--steps", 6, "--checkpoint", "run.ckpt", "--resume", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "the checkpoint run.ckpt holds step 6" in out.stdout
    out = cli("--nproc", 3, "--batch-size", 16, "--steps", 8, "--checkpoint", "run.ckpt", "--resume", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "the checkpoint run.ckpt holds step 8" in out.stdout
    # a position that is not a step of the new processes: one line, every process failing
    out = cli("--nproc", 2, "--batch-size", 40, "--steps", 9, "--checkpoint", "run.ckpt", "--resume", cwd=tmp_path)
    assert out.returncode == 2 and "not a multiple of this loader's world_size 2 x batch_size 40" in out.stderr
    assert "failed" in out.stderr.splitlines()[-1]


def test_a_lost_process_ends_the_others_in_one_line(tmp_path, monkeypatch, capsys):
    """A rank killed (kill -9) mid-run made the others print ExchangeFailed's traceback; its
    message, which says what failed where, is the one line now."""
    import manaka as mk
    from manaka import train
    from manaka.distributed_trainer import ExchangeFailed

    said = ("Trainer.step: the exchange of the dense gradients with the other ranks failed at step 3 on rank 0 "
            "of 2: a rank died or did not answer within the process group's timeout")

    def lost(*args, **kwargs):
        raise ExchangeFailed(said)

    monkeypatch.setattr(mk, "fit", lost)
    monkeypatch.chdir(tmp_path)
    assert train.main([*SMALL, "--synthetic", "300", "--eval-positions", "0", "--steps", "3", "--device", "cpu"]) == 2
    assert capsys.readouterr().err == f"python -m manaka.train: {said}\n"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="children found through Linux's /proc")
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGKILL"])
def test_the_processes_end_with_the_command(tmp_path, signum):
    """kill PID (a job scheduler's SIGTERM) ended the command and left its processes training
    on their own, writing the checkpoint, until their last step; so did kill -9, which the
    command cannot see (its processes ask Linux for a SIGTERM when it ends)."""
    import signal
    import time

    signum = getattr(signal, signum)

    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "manaka.train", *SMALL, "--synthetic", "300", "--eval-positions", "0",
           "--batch-size", "8", "--nproc", "2", "--steps", "1000000", "--log-every", "5", "--no-save"]
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    children = []
    try:
        for line in run.stdout:  # training has started in every process
            if "step=" in line:
                break
        with open(f"/proc/{run.pid}/task/{run.pid}/children") as f:
            children = [int(c) for c in f.read().split()]
        run.send_signal(signum)
        code = run.wait(timeout=60)
        deadline = time.monotonic() + 30
        while any(_running(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(children) >= 2 and not [c for c in children if _running(c)]
        if signum == signal.SIGTERM:
            assert code == 143 and "terminated; stopped the 2 processes" in run.stderr.read()
        else:
            assert code == -signal.SIGKILL
    finally:
        for c in children:  # none, unless the test failed
            if _running(c):
                os.kill(c, signal.SIGKILL)
        run.kill()
        run.wait()
