"""`python -m manaka.bench`: --help lists every suite with one line, an unknown suite is
named, and results go to --out, or ./bench_results by default: never over a bench/results/
folder that holds committed measurements."""
import hashlib
import importlib
import json
import os
import subprocess
import sys

import pytest

from manaka.bench import SUITES
from paths import ROOT

TINY_OPS = ["ops", "--batch", "4", "--runs", "1", "--baseline-runs", "1"]


def bench(*args, cwd=None, env=None):
    """Runs the CLI of this checkout's manaka (from any `cwd`) with MANAKA_BENCH_DIR unset
    unless `env` sets it."""
    full_env = {k: v for k, v in os.environ.items() if k != "MANAKA_BENCH_DIR"}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "manaka.bench", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=full_env)


def test_help_lists_every_suite_with_one_line():
    out = bench("--help")
    assert out.returncode == 0, out.stderr
    listed = {}
    for line in out.stdout.splitlines():
        words = line.split(None, 1)
        if line.startswith("  ") and words and words[0] in SUITES:
            listed[words[0]] = words[1].strip()
    assert listed == {name: line for name, line in SUITES.items()}
    assert all(listed.values())
    assert "--out" in out.stdout and "bench_results" in out.stdout


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_listed_suite_is_a_module_whose_help_offers_out(name):
    assert callable(importlib.import_module(f"manaka.bench.{name}").main)
    out = bench(name, "--help")
    assert out.returncode == 0, out.stderr
    assert "--out" in out.stdout


def test_no_suite_or_an_unknown_one_is_an_error_naming_it():
    out = bench()
    assert out.returncode == 2 and "suites:" in out.stderr
    out = bench("opz")
    assert out.returncode == 2 and "unknown suite 'opz'" in out.stderr


def test_a_suite_that_times_through_the_test_hooks_names_them_when_they_are_missing(monkeypatch):
    """The gemm suite and the policy-head comparison time single op-table entries through
    manaka._testing, an extension installed beside _core; without it they say so."""
    import manaka
    from manaka.bench import gemm, policy_head, testing_hooks

    assert testing_hooks("x").backend_gemm  # present in this build
    monkeypatch.delattr(manaka, "_testing", raising=False)
    monkeypatch.setitem(sys.modules, "manaka._testing", None)  # what a failed import leaves
    with pytest.raises(ImportError, match=r"^python -m manaka.bench gemm needs manaka._testing"):
        gemm.main(["--batch", "4", "--runs", "1", "--no-write"])
    with pytest.raises(ImportError, match="policy head comparison .* needs manaka._testing"):
        policy_head.compare_ops("cpu", None, 8, 16, runs=1, repeats=2)


def digest(folder):
    return {f: hashlib.sha256(open(os.path.join(folder, f), "rb").read()).hexdigest()
            for f in sorted(os.listdir(folder))}


def test_default_output_is_bench_results_not_the_committed_folder(tmp_path):
    committed = tmp_path / "bench" / "results"
    committed.mkdir(parents=True)
    (committed / "ops-cpu.json").write_text('{"committed": true}')
    (committed / "ops-cpu.md").write_text("committed\n")
    before = digest(committed)
    out = bench(*TINY_OPS, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert digest(committed) == before
    written = json.loads((tmp_path / "bench_results" / "ops-cpu.json").read_text())
    assert written["suite"] == "ops" and written["results"]
    # each op beside its floor (manaka.bench.floors): positive rates, floor and ratio
    assert written["copy_gbs"] > 0 and written["gemm_gflops"] > 0
    for r in written["results"]:
        assert r["floor_ms"] > 0 and r["fused_over_floor"] == r["fused"]["median_ms"] / r["floor_ms"]
    assert (tmp_path / "bench_results" / "ops-cpu.md").read_text().startswith("# manaka.bench ops")


def test_out_writes_where_the_user_says(tmp_path):
    target = tmp_path / "deep" / "er"
    out = bench(*TINY_OPS, "--out", str(target), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert sorted(os.listdir(target)) == ["ops-cpu.json", "ops-cpu.md"]
    assert not (tmp_path / "bench_results").exists()


def test_environment_variable_names_the_default_folder(tmp_path):
    out = bench(*TINY_OPS, cwd=tmp_path, env={"MANAKA_BENCH_DIR": str(tmp_path / "env_dir")})
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "env_dir" / "ops-cpu.json").exists()
    assert not (tmp_path / "bench_results").exists()


def test_results_that_cannot_be_written_leave_the_earlier_ones_whole(tmp_path):
    # a payload json cannot encode (a tuple key) fails before either file is touched: the
    # earlier results stay as they were, and no truncated or temporary file is left
    from manaka.bench.timing import write_results

    path = write_results("ops", "t", {"x": 1}, ["first"], out_dir=str(tmp_path))
    assert json.load(open(path))["x"] == 1
    before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)}
    with pytest.raises(TypeError, match="keys must be str"):
        write_results("ops", "t", {"x": 2, "by_shape": {(4, 8): 1.0}}, ["second"], out_dir=str(tmp_path))
    assert {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)} == before


def test_play_refuses_a_model_its_engine_cannot_run_and_an_engine_that_fails_in_one_line(tmp_path):
    # a model of other data: refused before any match (the engine's refusal at its start
    # escaped run_match as a traceback); an opponent that cannot start: one line too
    import manaka as mk

    other = tmp_path / "other.manaka"
    mk.Model(mk.ModelConfig(num_tokens=5, num_moves=7, tokens_per_side=2, embed_dim=2, orders=1, pair_dim=1,
                            hidden=(), head_width=2)).save(other)
    out = bench("play", "--model", other, "--games", "1", "--fsf", "/nonexistent", "--searches", "policy",
                "--out", tmp_path / "results")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"bench play: {str(other)!r}: the model "), out.stderr
    assert "not a shogi model" in out.stderr
    shogi_model = tmp_path / "shogi.manaka"
    mk.Model(mk.ModelConfig(num_tokens=2344, num_moves=2187, embed_dim=2, orders=1, pair_dim=1, hidden=(),
                            head_width=2)).save(shogi_model)
    out = bench("play", "--model", shogi_model, "--games", "1", "--no-heuristic", "--fsf", "/bin/false",
                "--fsf-nodes", "1", "--searches", "policy", "--out", tmp_path / "results")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("bench play: usi: the engine '/bin/false' ") and len(out.stderr.splitlines()) == 1
    assert not (tmp_path / "results").exists()


def test_a_results_folder_that_is_a_file_is_refused_before_the_suite_runs(tmp_path):
    # it failed with a traceback in write_results once the measurements were made
    (tmp_path / "taken").write_text("mine")
    for args, env, where in (((*TINY_OPS, "--out", tmp_path / "taken"), None, f"--out {tmp_path / 'taken'}"),
                             ((*TINY_OPS, f"--out={tmp_path / 'taken' / 'sub'}"), None,
                              f"--out {tmp_path / 'taken' / 'sub'}"),
                             (TINY_OPS, {"MANAKA_BENCH_DIR": str(tmp_path / "taken")},
                              f"MANAKA_BENCH_DIR={tmp_path / 'taken'}")):
        out = bench(*args, env=env)
        assert out.returncode == 2 and out.stdout == "", out
        assert out.stderr == f"python -m manaka.bench ops: {where}: {tmp_path / 'taken'} is a file, not a folder " \
                             "for the results\n", out.stderr
    assert (tmp_path / "taken").read_text() == "mine" and os.listdir(tmp_path) == ["taken"]


@pytest.mark.parametrize("suite", ["ops", "step", "gemm", "step_torch"])
@pytest.mark.parametrize("threads, why", [(100_000, "at most 4096"), (-1, ">= 0")])
def test_a_thread_count_manaka_refuses_is_one_line_naming_the_option(suite, threads, why, tmp_path):
    out = bench(suite, "--threads", threads, "--out", tmp_path)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"python -m manaka.bench {suite}: --threads: ") and why in lines[0]
    assert not os.listdir(tmp_path)  # nothing measured, nothing written


def test_small_runs_with_the_default_max_legal(tmp_path):
    """--small's network has 50 moves: the default --max-legal is then 20, not the seed batch's
    600, which seed_batch refuses (step --pair-update --small and step_torch --small stopped with
    a traceback unless --max-legal was given)."""
    out = bench("step", "--pair-update", "dense", "--small", "--batch", "8", "--runs", "1", "--warmup", "0",
                "--pair-batches", "1", "--threads", "1", "--no-write", cwd=tmp_path)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    out = bench("step", "--device", "cuda", "--small", "--dry-run", cwd=tmp_path)
    assert out.returncode == 0 and "'max_legal': 20" in out.stdout, out.stdout + out.stderr
    out = bench("step_torch", "--small", "--dry-run", cwd=tmp_path)
    assert out.returncode == 0 and "'max_legal': 20" in out.stdout, out.stdout + out.stderr
    out = bench("step_torch", "--dry-run", cwd=tmp_path)
    assert out.returncode == 0 and "'max_legal': 600" in out.stdout, out.stdout + out.stderr
