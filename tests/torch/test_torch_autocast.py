"""manaka.torch in reduced precision: the ops on bfloat16 / float16 inputs (computed in
float32, results and gradients narrowed to the input dtype) and torch.autocast around
manaka.torch.Network (the ops registered to run in float32 there), against float32
references. CPU only; the CUDA paths are the same code (tests/torch/test_torch_cuda.py's devices).
Skipped when torch is not installed.

Tolerances: an op on reduced inputs must equal, bit for bit, the float32 op on the same
(widened) inputs rounded once to the reduced dtype; against the float32 op on the original
float32 inputs the difference is the inputs' rounding, bounded here by a relative 3e-2 of
the result's scale for bfloat16 (8-bit mantissa) and 4e-3 for float16 (11-bit). The
network's loss under autocast bfloat16 is within 2e-2 (relative) of its float32 loss and
all its parameter gradients together (one vector) within 5e-2 of the float32 gradients in
relative L2 norm (measured: 0.4-0.6 % with hard targets, up to 3.5 % with soft ones, whose
gradients are small and cancel; the trunk's bfloat16 rounding flips some ReLUs)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")

import manaka as mk  # noqa: E402
import manaka.torch as mkt  # noqa: E402
from op_inputs import legal_indices, tokens as make_tokens  # noqa: E402

REDUCED = [torch.bfloat16, torch.float16]
SCALE_TOL = {torch.bfloat16: 3e-2, torch.float16: 4e-3}


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def close_to_scale(got, want, rel):
    """|got - want| <= rel * max|want| (reduced inputs shift every entry by their rounding)."""
    got, want = got.double(), want.double()
    scale = float(want.abs().max()) if want.numel() else 0.0
    assert float((got - want).abs().max() if want.numel() else 0.0) <= rel * max(scale, 1e-6)


def run(op, float_inputs, other_args, grad):
    """(output, gradients of the float inputs) of op with a backward of `grad`."""
    leaves = [x.detach().clone().requires_grad_() for x in float_inputs]
    out = op(*leaves, *other_args)
    out.backward(grad)
    return out.detach(), [x.grad for x in leaves]


def check_reduced(op, float_inputs, other_args, grad_shape, dtype, rng):
    """The op on `dtype` inputs: output and gradients of that dtype, equal to the float32
    op on the widened inputs rounded once, and close to the float32 op on the originals."""
    grad32 = t(rng.standard_normal(grad_shape, dtype=np.float32))
    low = [x.to(dtype) for x in float_inputs]
    out, grads = run(op, low, other_args, grad32.to(dtype))
    assert out.dtype == dtype and all(g.dtype == dtype for g in grads)
    # the same computation in float32 on the same (rounded) values, rounded once at the end
    wide_out, wide_grads = run(op, [x.float() for x in low], other_args, grad32.to(dtype).float())
    assert torch.equal(out, wide_out.to(dtype))
    for g, w in zip(grads, wide_grads):
        assert torch.equal(g, w.to(dtype))
    # against float32 throughout: the inputs' rounding only
    ref_out, ref_grads = run(op, float_inputs, other_args, grad32)
    close_to_scale(out, ref_out, SCALE_TOL[dtype])
    for g, w in zip(grads, ref_grads):
        close_to_scale(g, w, SCALE_TOL[dtype])


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("shape", [(1, 1, 1, 1, None), (16, 33, 12, 20, 3), (5, 64, 40, 500, None)], ids=str)
def test_gather_dot_reduced_precision(rng, dtype, shape):
    B, L, W, M, collide = shape
    indices, counts = legal_indices(rng, B, L, M, counts=True, collide=collide)
    hidden = t(rng.standard_normal((B, W), dtype=np.float32))
    table = t(rng.standard_normal((M, W), dtype=np.float32))
    check_reduced(mkt.gather_dot, [hidden, table], [t(indices).long(), t(counts)], (B, L), dtype, rng)


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1, 1, 0.0), (4, 2, 6, 8, 3, 5, 0.25), (7, 2, 13, 30, 4, 9, 0.5)],
                         ids=str)
def test_power_sums_reduced_precision(rng, dtype, shape):
    B, S, T, V, K, D, empty = shape
    tok = t(make_tokens(rng, B, S, T, V, empty))
    emb = t((rng.standard_normal((V, D)) * 0.7).astype(np.float32))
    check_reduced(mkt.power_sums, [emb], [tok, K], (B, S, K, D), dtype, rng)


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1, 0.0), (4, 2, 6, 8, 4, 0.25), (7, 2, 13, 30, 3, 0.5)], ids=str)
def test_pair_sums_reduced_precision(rng, dtype, shape):
    B, S, T, V, P, empty = shape
    tok = t(make_tokens(rng, B, S, T, V, empty))
    table = t(rng.standard_normal((V * (V + 1) // 2, P), dtype=np.float32))
    check_reduced(mkt.pair_sums, [table], [tok], (B, S, P), dtype, rng)


def test_mixed_float_dtypes_are_a_type_error(rng):
    indices, counts = legal_indices(rng, 3, 4, 5)
    hidden = torch.zeros(3, 2, dtype=torch.bfloat16)
    table = torch.zeros(5, 2)
    with pytest.raises(TypeError, match=r"gather_dot: .*hidden is torch.bfloat16.*table is torch.float32"):
        mkt.gather_dot(hidden, table, t(indices), t(counts))
    with pytest.raises(TypeError, match="float16"):
        mkt.gather_dot(hidden, table.half(), t(indices), t(counts))
    # float64 stays manaka.ops' TypeError: no hidden conversion
    with pytest.raises(TypeError, match="hidden"):
        mkt.gather_dot(hidden.double(), table.double(), t(indices), t(counts))


def test_reduced_precision_keeps_manaka_errors(rng):
    tok = t(np.array([[[0, 9]]], np.int32))
    with pytest.raises(ValueError, match="tokens"):
        mkt.power_sums(torch.zeros(3, 2, dtype=torch.bfloat16), tok, 1)


@pytest.mark.parametrize("dtype", REDUCED, ids=str)
def test_opcheck_reduced_precision(rng, dtype):
    indices, counts = legal_indices(rng, 4, 6, 9)
    tok = t(make_tokens(rng, 3, 2, 5, 6, 0.3))
    cases = [
        (torch.ops.manaka.gather_dot.default,
         (torch.randn(4, 3, dtype=dtype, requires_grad=True), torch.randn(9, 3, dtype=dtype, requires_grad=True),
          t(indices), t(counts))),
        (torch.ops.manaka.power_sums.default, (torch.randn(6, 4, dtype=dtype, requires_grad=True), tok, 2)),
        (torch.ops.manaka.pair_sums.default, (torch.randn(21, 3, dtype=dtype, requires_grad=True), tok)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_autograd_registration",
                                                    "test_faketensor", "test_aot_dispatch_dynamic"))


def small_config():
    return mk.ModelConfig(num_tokens=30, num_moves=40, tokens_per_side=6, embed_dim=8, orders=2, pair_dim=4,
                          hidden=(16, 16), head_width=12)


def network_batch(rng, cfg, B=24, L=20, soft=False):
    indices, counts = legal_indices(rng, B, L, cfg.num_moves)
    empty = counts == 0  # every position needs a legal move to be the target
    counts[empty], indices[empty, 0] = 1, 3
    target = (rng.random(B) * counts).astype(np.int64)
    batch = {"tokens": t(make_tokens(rng, B, 2, cfg.tokens_per_side, cfg.num_tokens, 0.2)),
             "legal": t(indices), "counts": t(counts), "target": t(target),
             "value": t(rng.random(B).astype(np.float32)), "policy_target": None}
    if soft:
        p = rng.random((B, L)).astype(np.float32) * (np.arange(L)[None] < counts[:, None])
        batch["policy_target"] = t(p / p.sum(1, keepdims=True))
    return batch


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_network_under_cpu_autocast_bf16_matches_float32(rng, soft):
    cfg = small_config()
    batch = network_batch(rng, cfg, soft=soft)
    net32 = mkt.Network(cfg, seed=3)
    net16 = mkt.Network(cfg, seed=3)
    loss32 = net32.loss(**batch)
    loss32.backward()
    with torch.autocast("cpu", torch.bfloat16):
        logits, z = net16.logits(batch["tokens"], batch["legal"], batch["counts"])
        # the trunk really runs in bfloat16; the fused ops run in float32 (their registration)
        assert z.dtype == torch.bfloat16 and logits.dtype == torch.float32
        assert net16.features(batch["tokens"]).dtype == torch.float32
        loss16 = net16.loss(**batch)
    assert loss16.dtype == torch.float32
    assert abs(loss16.item() - loss32.item()) <= 2e-2 * abs(loss32.item())
    loss16.backward()
    for (name, p16), (_, p32) in zip(net16.named_parameters(), net32.named_parameters()):
        assert p16.grad is not None and p16.grad.dtype == torch.float32, name  # float32 master weights
    g16 = torch.cat([p.grad.flatten() for p in net16.parameters()]).double()
    g32 = torch.cat([p.grad.flatten() for p in net32.parameters()]).double()
    assert float((g16 - g32).norm()) <= 5e-2 * float(g32.norm())


def test_autocast_training_steps_track_float32(rng):
    """Ten AdamW steps under autocast bf16 stay near ten float32 steps, and learn."""
    cfg = small_config()
    batch = network_batch(rng, cfg)
    nets = {name: mkt.Network(cfg, seed=1) for name in ("fp32", "bf16")}
    opts = {name: torch.optim.AdamW(mkt.param_groups(n, 0.01), lr=1e-2) for name, n in nets.items()}
    losses = {"fp32": [], "bf16": []}
    for _ in range(10):
        for name, net in nets.items():
            opts[name].zero_grad()
            with torch.autocast("cpu", torch.bfloat16, enabled=name == "bf16"):
                loss = net.loss(**batch)
            loss.backward()
            opts[name].step()
            losses[name].append(loss.item())
    assert losses["bf16"][-1] < 0.8 * losses["bf16"][0]
    np.testing.assert_allclose(losses["bf16"], losses["fp32"], rtol=3e-2)


def test_autocast_backward_inside_the_region(rng):
    """backward() called inside the autocast region (the backward ops registered too)."""
    cfg = small_config()
    batch = network_batch(rng, cfg)
    net = mkt.Network(cfg, seed=2)
    with torch.autocast("cpu", torch.bfloat16):
        net.loss(**batch).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())


def test_autocast_registration_covers_cpu_and_cuda():
    """The float32 rule is registered for both autocast devices (the CUDA one cannot run
    here; this checks the dispatcher has the kernels)."""
    for name in ("gather_dot", "power_sums", "pair_sums", "gather_dot_backward", "power_sums_backward",
                 "pair_sums_backward"):
        op = getattr(torch.ops.manaka, name).default
        for key in ("AutocastCPU", "AutocastCUDA"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key), (name, key)


def test_compiled_network_under_autocast_matches_eager(rng):
    """torch.compile(fullgraph=True) traces through the ops' autocast registration: the
    compiled loss under autocast bf16 agrees with the eager one within bfloat16's rounding
    (inductor keeps some fused intermediates in float32: measured 5e-5 relative), and has
    gradients."""
    cfg = small_config()
    batch = network_batch(rng, cfg)
    net = mkt.Network(cfg, seed=4)
    compiled = torch.compile(net.loss, fullgraph=True)
    with torch.autocast("cpu", torch.bfloat16):
        got = compiled(**batch)
        want = net.loss(**batch)
    assert got.dtype == torch.float32
    assert abs(got.item() - want.item()) <= 4e-3 * abs(want.item())  # 2^-8: one bf16 rounding
    got.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())
