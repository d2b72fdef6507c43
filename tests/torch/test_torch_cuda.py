"""manaka.torch's operators on CUDA tensors, against the same operators on the CPU; skipped
(saying why) without torch, a CUDA build of torch, manaka's CUDA backend, or a GPU."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")

import manaka as mk  # noqa: E402
import manaka.torch as mkt  # noqa: E402
import reference as ref  # noqa: E402
from assertions import assert_close  # noqa: E402
from op_inputs import legal_indices, tokens as make_tokens  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.cuda.is_available() is False: a CPU build of torch, or no GPU"),
    pytest.mark.skipif(not mk.cuda.is_available(), reason=f"manaka CUDA backend: {mk.cuda.why_unavailable()}"),
]


def cuda(a, requires_grad=False):
    x = torch.from_numpy(np.ascontiguousarray(a)).cuda()
    return x.requires_grad_() if requires_grad else x


def run_all(rng, stream=None):
    """Every op and gradient on the GPU (optionally under a side stream), vs the references."""
    B, L, W, M = 16, 33, 12, 20
    indices, c = legal_indices(rng, B, L, M, collide=5)
    hidden = rng.standard_normal((B, W), dtype=np.float32)
    table = rng.standard_normal((M, W), dtype=np.float32)
    g = rng.standard_normal((B, L), dtype=np.float32)
    tok = make_tokens(rng, 8, 2, 9, 10)
    emb = (rng.standard_normal((10, 4)) * 0.7).astype(np.float32)
    pt = rng.standard_normal((55, 3), dtype=np.float32)
    gp = rng.standard_normal((8, 2, 3, 4), dtype=np.float32)
    gq = rng.standard_normal((8, 2, 3), dtype=np.float32)
    with torch.cuda.stream(stream) if stream is not None else torch.cuda.device(0):
        h, tb, e, p = cuda(hidden, True), cuda(table, True), cuda(emb, True), cuda(pt, True)
        logits = mkt.gather_dot(h, tb, cuda(indices), cuda(c))
        ps = mkt.power_sums(e, cuda(tok), 3)
        pair = mkt.pair_sums(p, cuda(tok))
        ((logits * cuda(g)).sum() + (ps * cuda(gp)).sum() + (pair * cuda(gq)).sum()).backward()
        got = [x.detach().cpu().numpy() for x in (logits, ps, pair, h.grad, tb.grad, e.grad, p.grad)]
    want = [ref.gather_dot(hidden, table, indices, c), ref.power_sums(emb, tok, 3), ref.pair_sums(pt, tok),
            *ref.gather_dot_backward(g, hidden, table, indices, c), ref.power_sums_backward(gp, emb, tok),
            ref.pair_sums_backward(gq, tok, 55)]
    for a, b in zip(got, want):
        assert_close(a, b)


def test_ops_and_gradients_on_cuda(rng):
    run_all(rng)


def test_ops_on_a_side_stream_are_ordered(rng):
    run_all(rng, torch.cuda.Stream())


def test_mixed_devices_is_the_manaka_ops_error(rng):
    with pytest.raises(TypeError, match="table is a CPU array but other arguments are on the GPU"):
        mkt.gather_dot(cuda(np.ones((2, 3), np.float32)), torch.ones(4, 3), cuda(np.zeros((2, 5), np.int32)))


@pytest.mark.parametrize("move_pairs, board, move_hidden, move_shared, gate, kinds, value_hidden",
                         [(0, (0, 0, 0), 0, 0, 0, 0, 0), (8, (2, 2, 2), 0, 0, 0, 0, 0), (8, (2, 2, 2), 3, 0, 0, 0, 0),
                          (8, (2, 2, 2), 3, 1, 0, 0, 0), (8, (2, 2, 2), 3, 1, 1, 0, 0), (8, (0, 0, 0), 0, 0, 0, 3, 0),
                          (8, (2, 2, 2), 3, 1, 1, 2, 0), (0, (0, 0, 0), 0, 0, 0, 0, 4), (8, (2, 2, 2), 3, 1, 1, 2, 5)],
                         ids=["plain", "relative-pairs", "relative-pairs-move-hidden", "relative-pairs-move-hidden-shared",
                              "relative-pairs-gated-move-hidden-shared", "pairs-kinds",
                              "relative-pairs-gated-move-hidden-shared-kinds", "value-hidden",
                              "relative-pairs-gated-move-hidden-shared-kinds-value-hidden"])
def test_network_on_cuda_matches_cpu(rng, move_pairs, board, move_hidden, move_shared, gate, kinds, value_hidden):
    import model_cases as cases

    # num_moves a multiple of C (of C F with kinds: F kinds of 24 moves)
    num_moves = 24 * kinds if kinds else 24 if move_shared else 17
    cfg = cases.config(hidden=(8,), num_moves=num_moves, move_pairs=move_pairs, board=board,
                       move_hidden=move_hidden, move_shared=move_shared, move_hidden_gate=gate, move_kinds=kinds,
                       value_hidden=value_hidden)
    b = cases.batch(cfg)
    net = mkt.Network.from_model(cases.model(cfg, seed=3))  # random move-pair tables, if any
    tens = mkt.network.batch_tensors(b)
    want = net.loss(**tens)
    want.backward()
    grads = {n: p.grad.clone() for n, p in net.named_parameters()}
    net.zero_grad()
    net = net.cuda()  # the relative part's index buffers move with it
    assert all(t.is_cuda for t in net.buffers())
    got = net.loss(**mkt.network.batch_tensors(b, "cuda"))
    got.backward()
    assert float(got) == pytest.approx(float(want), rel=1e-5)
    for name, p in net.named_parameters():
        assert_close(p.grad.cpu().numpy(), grads[name].numpy(), tol=1e-4)
