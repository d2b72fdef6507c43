"""tools/gpu_check.sh, the one run a GPU gets, rehearsed here in its cheap form: the steps in
their order, each under its limit (a step past its limit is recorded and the run goes on),
every benchmark's arguments parsed by the benchmark itself (--dry-run), the GPU test files
collected, and the files the device tool brings back (at most 8) well-formed. The wheel
check is tested on wheel folders made here."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

from paths import ROOT

SCRIPT = os.path.join(ROOT, "tools", "gpu_check.sh")
ORDER = ["preflight", "timeout-drill", "wheels", "probe", "gpu-tests", "step-fp32", "step-tf32",
         "pair-update", "move-update", "nccl-ddp", "kernel-profile", "ops", "torch-baselines", "step-torch-module"]
WHEELS = ["scipy_openblas32-0.3.30.0.1-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
          "tqdm-4.67.1-py3-none-any.whl", "hypothesis-6.150.0-py3-none-any.whl",
          "sortedcontainers-2.4.0-py2.py3-none-any.whl", "attrs-25.3.0-py3-none-any.whl"]


def run(*args, **env):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "PYTHON": sys.executable, **env})


@pytest.fixture(scope="module")
def cheap(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    done = run("--rehearse", "--cheap", str(out))
    return done, out


def test_cheap_rehearsal_passes_and_writes_at_most_8_files(cheap):
    done, out = cheap
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = sorted(os.listdir(out))
    assert files == ["gpu_check.json", "gpu_check.log", "results.tar"], files
    assert len(files) <= 8


def test_steps_run_in_order_within_their_limits(cheap):
    done, out = cheap
    summary = json.loads((out / "gpu_check.json").read_text())
    assert summary["mode"] == "rehearse --cheap" and summary["passed"] is True
    steps = summary["steps"]
    assert [s["step"] for s in steps] == ORDER
    for s in steps:
        assert s["seconds"] <= s["limit_s"] + 6, s  # timeout's grace is 5 s
        assert s["status"] == ("timed-out" if s["step"] == "timeout-drill" else "passed"), s
    assert steps[1]["rc"] == 124 and steps[1]["limit_s"] == 1  # stopped at its limit; the run went on
    assert summary["elapsed_s"] <= summary["budget_s"]


def test_every_benchmark_parsed_its_own_arguments(cheap):
    done, out = cheap
    log = (out / "gpu_check.log").read_text()
    dry = [json_like for json_like in log.splitlines() if json_like.startswith("dry run: {")]
    assert len(dry) == 8, dry  # step fp32, step tf32, pair update, move update, kernel profile, ops,
    #                            torch baselines, manaka.torch
    assert "'tag': 'cuda'" in dry[0] and "'no_torch': True" in dry[0]
    assert "'tf32': True" in dry[1] and "'tag': 'cuda-tf32'" in dry[1]
    assert "'pair_update': 'dense,sparse,lazy'" in dry[2] and "'device': 'cuda'" in dry[2]
    assert "'move_update': 'dense,sparse'" in dry[3] and "'device': 'cuda'" in dry[3]
    assert "fsf-train.hcpe" in dry[3]
    assert "'no_compile': True" in dry[5]
    assert "'tag': 'cuda-torch'" in dry[6] and "'no_torch': False" in dry[6]
    assert "'device': 'cuda'" in dry[7] and "'no_compile': False" in dry[7]


def test_results_tar_holds_the_step_records(cheap):
    done, out = cheap
    with tarfile.open(out / "results.tar") as tar:
        names = tar.getnames()
        assert "./steps.jsonl" in names
        records = [json.loads(line) for line in tar.extractfile("./steps.jsonl").read().decode().splitlines()]
    assert [r["step"] for r in records] == ORDER


def test_wheel_check_accepts_a_complete_folder_and_names_what_is_missing(tmp_path):
    for name in WHEELS:
        (tmp_path / name).write_bytes(b"")
    ok = run("--check-wheels", str(tmp_path))
    assert ok.returncode == 0, ok.stdout
    (tmp_path / WHEELS[0]).unlink()
    (tmp_path / "scipy_openblas32-0.3.30.0.1-cp311-cp311-win_amd64.whl").write_bytes(b"")  # wrong platform
    missing = run("--check-wheels", str(tmp_path))
    assert missing.returncode == 1
    assert "scipy_openblas32: 0 wheels" in missing.stdout
    (tmp_path / WHEELS[0]).write_bytes(b"")
    (tmp_path / WHEELS[1].replace("4.67.1", "4.66.0")).write_bytes(b"")  # two versions stop an install
    assert "tqdm: 2 wheels" in run("--check-wheels", str(tmp_path)).stdout
    assert "no wheel folder" in run("--check-wheels", str(tmp_path / "absent")).stdout


def test_bad_options_are_refused(tmp_path):
    assert run("--cheap", str(tmp_path)).returncode == 2
    assert run("--bogus", str(tmp_path)).returncode == 2
