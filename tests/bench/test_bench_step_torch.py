"""python -m manaka.bench step_torch runs end to end on the small
configuration: the three variants start from the same first loss (the suite refuses to time
them otherwise), every variant is timed, and the results land where --out says."""
import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")


def test_step_torch_small_writes_ratios_for_every_variant(tmp_path):
    out = subprocess.run([sys.executable, "-m", "manaka.bench", "step_torch", "--small", "--batch", "16",
                          "--max-legal", "20", "--runs", "2", "--warmup", "1", "--no-compile", "--threads", "1",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    results = json.loads((tmp_path / "step-torch-cpu.json").read_text())
    losses = results["loss_check"]
    assert set(losses) == {"mk.Trainer", "manaka.torch", "plain torch", "plain torch, SparseAdam pairs",
                           "manaka.torch autocast bf16"}
    for name, loss in losses.items():
        rel = 2e-2 if "bf16" in name else 1e-4  # bfloat16's rounding in the trunk
        assert loss == pytest.approx(losses["mk.Trainer"], rel=rel), (name, losses)
    ratios = results["ratio_to_trainer"]
    assert set(ratios) == {"mk.Trainer step", "mk.Trainer step, sparse pair update",
                           "manaka.torch.Network + AdamW eager",
                           "manaka.torch.Network + AdamW eager, autocast bf16",
                           "plain torch (dense) + AdamW eager", "plain torch (dense) + SparseAdam pairs eager"}
    assert ratios["mk.Trainer step"] == 1.0 and all(r > 0 for r in ratios.values())
    sparse = results["ratio_to_sparse_trainer"]
    assert sparse["mk.Trainer step, sparse pair update"] == 1.0 and set(sparse) == set(ratios)
    text = (tmp_path / "step-torch-cpu.md").read_text()
    assert text.count("x mk.Trainer's time") == 5 and text.count("x mk.Trainer sparse's time") == 2
    floor = results["floor"]
    assert floor["bytes"] > 0 and floor["flops"] > 0 and floor["copy_gbs"] > 0 and floor["gemm_gflops"] > 0
    # a lower bound: no step runs under it (the small configuration's steps are far above)
    assert 0 < floor["floor_ms"] < results["timings"]["mk.Trainer step"]["median_ms"]
    assert "the dense step's floor" in text
    # the sum of the three phases' floors, each max(bytes at the copy rate, FLOPs at the GEMM rate)
    assert set(floor["phases"]) == {"gather", "gemm", "update"}
    assert floor["floor_ms"] == pytest.approx(sum(
        max(p["bytes"] / floor["copy_gbs"], p["flops"] / floor["gemm_gflops"]) / 1e6 for p in floor["phases"].values()))
