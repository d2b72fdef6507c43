"""The GPU step benchmark runs end to end (on a small configuration) and writes its results.
Skipped, saying why, where there is no usable CUDA device; tools/cuda_emu/run_gpu_tests.py
also runs it on the CPU emulation of the device."""
import json

import pytest

from manaka import cuda
from manaka.bench import step_cuda

pytestmark = [pytest.mark.cuda,  # tools/cuda_emu/run_gpu_tests.py runs it on the emulated device
              pytest.mark.skipif(not cuda.is_available(), reason=f"no CUDA device: {cuda.why_unavailable()}")]


def test_step_benchmark_runs_and_writes_results(tmp_path, capsys):
    rc = step_cuda.main(["--small", "--batch", "16", "--max-legal", "20", "--runs", "3",
                         "--warmup", "1", "--head-runs", "2", "--no-compile", "--tag", "test",
                         "--out", str(tmp_path)])
    assert rc == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "step-test.json").read_text())
    assert result["manaka"]["median_ms"] > 0
    assert result["manaka_device_batch"]["median_ms"] > 0  # the step on a batch already on the GPU
    throughput = result["manaka_throughput"]  # N steps, one synchronise; host time of one call
    assert throughput["median_ms"] > 0 and 0 < float(throughput["extra"]["host ms"]) <= throughput["median_ms"] * 3
    skewed = result["manaka_skewed_batch"]  # hot ids, as in real positions
    assert skewed["median_ms"] > 0 and float(skewed["extra"]["top-10 token share"]) > 0.3
    assert result["launches_per_step"] > 5  # forward, loss, backward and AdamW kernels at least
    floor = result["floor"]
    assert floor["bytes"] > 0 and floor["floor_ms"] > 0
    # the sum of the three phases' floors, each max(bytes at the bandwidth, FLOPs at the FP32 rate)
    flop_rate = floor["fp32_tflops"] * 1e12 if floor["fp32_tflops"] else None
    assert floor["floor_ms"] == pytest.approx(sum(
        max(p["bytes"] / (floor["bandwidth_gbs"] * 1e9), p["flops"] / flop_rate if flop_rate else 0.0) * 1e3
        for p in floor["phases"].values()))
    assert set(floor["phases"]) == {"gather", "gemm", "update"}
    head = result["policy_head"]  # the fused policy head beside the split one
    assert head["fused"]["median_ms"] > 0 and head["split"]["median_ms"] > 0
    assert head["launches_per_step"]["split"] > head["launches_per_step"]["fused"]
