"""torch.compile(fullgraph=True) of a small module using all three manaka.torch operators:
no graph break (fullgraph raises on one), and the same outputs and gradients as eager; and
Network.loss with a move_pair_table (and its relative part, MoveHidden and its gated
readout, the shared move embeddings, move kinds, the value head's hidden layer) compiled
whole."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")

import manaka.torch as mkt  # noqa: E402

V, D, K, P, W, M = 7, 3, 3, 2, 4, 9


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(0.5 * torch.randn(V, D, generator=g))
        self.pairs = torch.nn.Parameter(torch.randn(V * (V + 1) // 2, P, generator=g))
        self.table = torch.nn.Parameter(torch.randn(M, W, generator=g))
        self.lin = torch.nn.Linear(2 * (K * D + P), W)

    def forward(self, tokens, legal, counts):
        B = tokens.shape[0]
        x = torch.cat([mkt.power_sums(self.emb, tokens, K).reshape(B, 2, K * D),
                       mkt.pair_sums(self.pairs, tokens)], 2).reshape(B, -1)
        return mkt.gather_dot(torch.tanh(self.lin(x)), self.table, legal, counts)


def test_compiled_module_has_no_graph_break_and_matches_eager():
    rng = np.random.default_rng(5)
    net = Small()
    tokens = torch.from_numpy(rng.integers(-1, V, (6, 2, 5)))
    counts = torch.from_numpy(rng.integers(0, 8, 6))
    counts[0], counts[1] = 0, 8
    legal = torch.from_numpy(rng.integers(0, M, (6, 8)))
    w = torch.from_numpy(rng.standard_normal((6, 8)).astype(np.float32))

    explanation = torch._dynamo.explain(net)(tokens, legal, counts)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1

    eager = net(tokens, legal, counts)
    (eager * w).sum().backward()
    want = {n: p.grad.clone() for n, p in net.named_parameters()}
    net.zero_grad()
    torch._dynamo.reset()
    compiled = torch.compile(net, fullgraph=True)(tokens, legal, counts)
    (compiled * w).sum().backward()
    torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-6)
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.grad, want[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("move_pairs, board, move_hidden, move_shared, gate, kinds, value_hidden",
                         [(5, (0, 0, 0), 0, 0, 0, 0, 0), (8, (2, 2, 2), 0, 0, 0, 0, 0), (8, (2, 2, 2), 3, 0, 0, 0, 0),
                          (8, (2, 2, 2), 3, 1, 0, 0, 0), (8, (2, 2, 2), 3, 1, 1, 0, 0), (8, (0, 0, 0), 0, 0, 0, 3, 0),
                          (8, (2, 2, 2), 3, 1, 1, 2, 0), (5, (0, 0, 0), 0, 0, 0, 0, 4), (8, (2, 2, 2), 3, 1, 1, 2, 5)],
                         ids=["table", "table-and-relative", "table-relative-and-move-hidden",
                              "table-relative-move-hidden-and-shared", "table-relative-gated-move-hidden-and-shared",
                              "table-and-kinds", "table-relative-gated-move-hidden-shared-and-kinds",
                              "table-and-value-hidden", "table-relative-gated-move-hidden-shared-kinds-and-value-hidden"])
def test_compiled_network_with_a_move_pair_table_matches_eager(move_pairs, board, move_hidden, move_shared, gate,
                                                               kinds, value_hidden):
    import model_cases as cases

    # num_moves a multiple of C (of C F with kinds: F kinds of 24 moves)
    num_moves = 24 * kinds if kinds else 24 if move_shared else 17
    cfg = cases.config(hidden=(8,), num_moves=num_moves, move_pairs=move_pairs, board=board,
                       move_hidden=move_hidden, move_shared=move_shared, move_hidden_gate=gate, move_kinds=kinds,
                       value_hidden=value_hidden)
    net = mkt.Network(cfg, seed=2)
    tables = [n for n in ("move_pair_table", "move_pair_relative", "move_hidden_relative", "move_hidden_class",
                          "move_hidden_out", "move_shared_class", "move_shared_group", "move_hidden_gate",
                          "move_kind_table") if hasattr(net, n)]
    with torch.no_grad():
        for k, name in enumerate(tables):
            p = getattr(net, name)
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1 + k)))
        if value_hidden:  # the bias (0 at the start) puts the units' pre-activations on both sides of 0
            net.value_hidden.bias.copy_(0.3 * torch.randn(value_hidden, generator=torch.Generator().manual_seed(9)))
    tens = mkt.batch_tensors(cases.batch(cfg, B=7, L=10, seed=3, soft=True))
    eager = net.loss(**tens, check=False)
    eager.backward()
    want = {n: p.grad.clone() for n, p in net.named_parameters()}
    assert len(tables) == 1 + any(board) + 3 * bool(move_hidden) + 2 * move_shared + gate + bool(kinds)
    assert all(want[n].abs().max() > 0 for n in tables)
    assert all(want[n].abs().max() > 0 for n in want if n.startswith("value_hidden."))
    assert sum(n.startswith("value_hidden.") for n in want) == 2 * bool(value_hidden)
    net.zero_grad()
    torch._dynamo.reset()
    compiled = torch.compile(net.loss, fullgraph=True)(**tens, check=False)
    compiled.backward()
    torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-6)
    for name, p in net.named_parameters():
        torch.testing.assert_close(p.grad, want[name], rtol=1e-5, atol=1e-6, msg=name)
