"""The floor model of manaka/bench/floors.py on inputs counted by hand: the bytes and FLOPs of
each op, of the policy head and of the step's three phases, and the rule that turns them into
milliseconds at given rates (max within a phase, a sum over the step's phases). No timing:
the rates are given, except for one check that the rate probe returns two positive rates."""
import numpy as np
import pytest

import manaka as mk
from manaka.bench import floors as fl
from manaka.bench.seed import SeedShapes


def test_one_phase_is_the_larger_of_its_two_times_not_their_sum():
    need = {"bytes": 2e9, "flops": 3e9}
    # 2 GB at 10 GB/s = 200 ms; 3 GFLOP at 20 GFLOP/s = 150 ms, at 10 GFLOP/s = 300 ms
    assert fl.floor_terms_ms(need, 10.0, 20.0) == pytest.approx((200.0, 150.0))
    assert fl.floor_ms(need, 10.0, 20.0) == pytest.approx(200.0)
    assert fl.floor_ms(need, 10.0, 10.0) == pytest.approx(300.0)
    # a GPU's rates in the same units: 2 GB at 2,000 GB/s = 1 ms; 3 GFLOP at 50 TFLOP/s = 0.06 ms
    assert fl.floor_ms(need, 2000.0, 50e3) == pytest.approx(1.0)
    # no GEMM rate measured (a GPU without PyTorch): the bandwidth floor alone
    assert fl.floor_terms_ms(need, 10.0, None) == (pytest.approx(200.0), 0.0)
    assert fl.floor_ms({"bytes": 1e9, "flops": 1e12}, 10.0, None) == pytest.approx(100.0)


def test_phases_that_cannot_overlap_add_their_floors():
    phases = {"a": {"bytes": 1e9, "flops": 4e9},   # max(100 ms, 200 ms) at 10 GB/s, 20 GFLOP/s
              "b": {"bytes": 3e9, "flops": 0}}     # max(300 ms, 0)
    assert fl.phases_floor_ms(phases, 10.0, 20.0) == pytest.approx(500.0)
    assert fl.phases_total(phases) == {"bytes": 4e9, "flops": 4e9}
    # the same work as one phase would be max(400 ms, 200 ms): the split is what adds
    assert fl.floor_ms(fl.phases_total(phases), 10.0, 20.0) == pytest.approx(400.0)


def test_explain_states_both_terms_and_the_floor():
    text = fl.explain({"bytes": 2e6, "flops": 3e6}, 10.0, 20.0)
    assert text == "max(2.00 MB at 10.0 GB/s = 0.200 ms, 3.0 MFLOP at 20.0 GFLOP/s = 0.150 ms) = 0.200 ms"
    assert "FLOP rate not measured" in fl.explain({"bytes": 2e6, "flops": 3e6}, 10.0, None)


def test_bad_rates_are_refused_by_name():
    with pytest.raises(ValueError, match="copy_gbs"):
        fl.floor_ms({"bytes": 1, "flops": 1}, 0.0, 1.0)
    with pytest.raises(ValueError, match="gemm_gflops"):
        fl.floor_ms({"bytes": 1, "flops": 1}, 1.0, -2.0)
    for kwargs, name in (({"threads": 0}, "threads"), ({"threads": 1, "runs": 0}, "runs"),
                         ({"threads": 1, "copy_mib": 0}, "copy_mib"), ({"threads": 1, "gemm_n": 1.5}, "gemm_n")):
        with pytest.raises(ValueError, match=name):
            fl.cpu_rates(**kwargs)


def test_op_floors_count_bytes_and_flops_by_hand():
    s = SeedShapes(B=1, T=3, S=2, V=5, D=2, K=2, P=2, W=3, M=6, L=3)
    # side 0 holds tokens 0, 1, 2 (3 pairs, 3 distinct), side 1 token 3; 2 legal moves of 3 slots
    x = {"tokens": np.array([[[0, 1, 2], [3, -1, -1]]], np.int32),
         "indices": np.array([[0, 1, -1]], np.int32), "counts": np.array([2], np.int32)}
    need = fl.floors(x, s)
    assert need == {
        # q 1x3, 2 used rows x 3, 2 slots, counts 1, logits 1x3 | 2 slots x W 3 x 2 FLOPs
        "gather_dot forward": {"bytes": 4 * (3 + 6 + 2 + 1 + 3), "flops": 12},
        # dlogits 3, q and dq 2x3, table and its gradient 2x6x3, slots 2, counts 1 | 4 n W
        "gather_dot backward": {"bytes": 4 * (3 + 6 + 36 + 2 + 1), "flops": 24},
        # tokens 6, 4 used rows x D 2, out 2 rows x K 2 x D 2 | 2 K D n_tok = 2*2*2*4
        "power_sums forward": {"bytes": 4 * (6 + 8 + 8), "flops": 32},
        # G 8, tokens 6, emb and grad_emb 2 x 5 x 2 | 3 K D n_tok
        "power_sums backward": {"bytes": 4 * (8 + 6 + 20), "flops": 48},
        # tokens 6, 3 used pair rows x P 2, out 2 x 2 | 3 pairs x P
        "pair_sums forward": {"bytes": 4 * (6 + 6 + 4), "flops": 6},
        # G 2 x 2, tokens 6, dense gradient 15 rows x 2
        "pair_sums backward": {"bytes": 4 * (4 + 6 + 30), "flops": 6},
    }


def test_policy_head_floor_with_the_table_gradient():
    legal = np.array([[3, 1, -1], [1, 1, 2]], np.int32)
    counts = np.array([2, 3], np.int32)
    head = fl.policy_head_floor(legal, counts, 4)
    # see tests/conformance/test_policy_head.py: 4 x 47 bytes, 2 x 2 x 5 x 4 FLOPs
    assert head == {"bytes": 188, "flops": 80}
    # M = 7 rows: grad_table 7 x 4 written, 2 n W more FLOPs
    assert fl.policy_head_floor(legal, counts, 4, 7) == {"bytes": 188 + 4 * 28, "flops": 80 + 40}
    # one phase: the larger term, 188 bytes at 1 GB/s = 1.88e-4 ms
    assert fl.floor_ms(head, 1.0, 1.0) == pytest.approx(1.88e-4)
    with pytest.raises(ValueError, match="counts"):
        fl.policy_head_floor(legal, counts[:1], 4)
    with pytest.raises(ValueError, match="legal"):
        fl.policy_head_floor(legal[0], counts, 4)


def test_step_floor_phases_by_hand():
    cfg = mk.ModelConfig(num_tokens=5, num_moves=6, tokens_per_side=3, embed_dim=2, orders=2,
                         pair_dim=2, hidden=(4,), head_width=3)
    tokens = np.array([[[0, 1, 2], [3, -1, -1]], [[4, -1, -1], [0, 1, -1]]], np.int32)
    legal = np.array([[0, 1, -1], [2, 3, 4]], np.int32)
    batch = mk.Batch(tokens, legal, np.array([2, 3], np.int32), np.array([0, 1], np.int32),
                     np.array([1.0, 0.0], np.float32))
    # parameters: embedding 5x2, pair table 15x2, trunk 4x12 + 4, policy 3x4 + 3, move table 6x3, value 4 + 1
    n_params = mk.Model(cfg, seed=0).num_parameters()
    assert n_params == 10 + 30 + 52 + 15 + 18 + 5
    phases = fl.step_floor(cfg, batch, n_params)
    # 4 pairs of present tokens (3 + 0 + 0 + 1), P = 2: 32 bytes of pair rows each way.
    # GEMMs forward: 2 B (12 x 4) + 2 B 4 (3 + 1) = 192 + 64; x3 with the backward; GatherDot
    # 3 x 2 x 5 legal x W 3 = 90
    assert phases["gather"] == {"bytes": 32, "flops": 0}
    assert phases["gemm"] == {"bytes": 0, "flops": 3 * 256 + 90}
    # AdamW: 6 x 4 bytes per pair-table parameter (30), 7 x 4 per other (100), + pair rows
    assert phases["update"] == {"bytes": 4 * (6 * 30 + 7 * 100) + 32, "flops": 0}
    # at 1 GB/s and 1 GFLOP/s: 3.2e-5 (gather) + 8.58e-4 (gemm) + 3.552e-3 (update) ms
    assert fl.phases_floor_ms(phases, 1.0, 1.0) == pytest.approx(3.2e-5 + 8.58e-4 + 3.552e-3)
    with pytest.raises(ValueError, match="num_parameters"):
        fl.step_floor(cfg, batch, 29)


def test_cpu_rates_measures_two_positive_rates():
    rates = fl.cpu_rates(1, runs=1, copy_mib=1, gemm_n=32)
    assert set(rates) == {"copy_gbs", "gemm_gflops"}
    assert rates["copy_gbs"] > 0 and rates["gemm_gflops"] > 0
