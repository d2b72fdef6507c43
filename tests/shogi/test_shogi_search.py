"""The searches behind the USI engine, in process: batched priors and values equal the model's
one position at a time, the one-ply search's arithmetic, the PUCT tree's bookkeeping and
budget, and the engine's time management."""
import numpy as np
import pytest

cshogi = pytest.importorskip("cshogi")

import manaka as mk  # noqa: E402
from manaka import shogi  # noqa: E402
from manaka.shogi import search  # noqa: E402
from manaka.shogi.game import Game  # noqa: E402
from manaka.shogi.position import move_to_usi, parse_sfen, usi_to_move  # noqa: E402
from manaka.shogi.usi_protocol import GoLimits, think_time  # noqa: E402

from shogi_reference import random_positions  # noqa: E402


@pytest.fixture(scope="module")
def model():
    cfg = mk.ModelConfig(num_tokens=shogi.NUM_TOKENS, num_moves=shogi.NUM_LABELS, embed_dim=8, orders=2,
                         pair_dim=2, hidden=(16,), head_width=8)
    return mk.Model(cfg, seed=7)


def analyse(pos):
    return pos.analyse()


def test_batched_priors_and_values_equal_one_position_at_a_time(model):
    evaluate = search.Evaluator(model)
    positions = [parse_sfen(b.sfen()) for b in random_positions(12, seed=2)]
    priors, values = evaluate([analyse(p) for p in positions])
    for pos, prior, value in zip(positions, priors, values):
        ranked, v = shogi.policy(model, pos)  # its own forward, labels sorted
        by_usi = dict(ranked)
        moves = analyse(pos)[1]
        assert np.allclose([by_usi[move_to_usi(int(m))] for m in moves], prior, rtol=1e-5, atol=1e-7)
        assert value == pytest.approx(v, rel=1e-5)
    assert evaluate.positions == len(positions)


def test_value_search_scores_every_child_in_one_forward(model):
    evaluate = search.Evaluator(model)
    pos = parse_sfen(shogi.STARTING_SFEN)
    result = search.value_search(evaluate, pos, prior_weight=0.5)
    moves = analyse(pos)[1]
    priors, _ = evaluate([analyse(pos)])
    children = [pos.play(int(m))[0] for m in moves]
    _, child_values = evaluate([analyse(c) for c in children])
    score = (1 - child_values) + 0.5 * priors[0]
    assert result.move == int(moves[int(np.argmax(score))])
    assert result.nodes == 1 + len(moves)
    # a child that repeats a position of the game is a draw, not asked of the network
    history = frozenset([children[0].key()])
    again = search.value_search(evaluate, pos, history=history, prior_weight=0.0)
    assert again.nodes == len(moves)


def test_puct_respects_the_node_budget_and_keeps_its_counts(model):
    evaluate = search.Evaluator(model)
    pos = parse_sfen(shogi.STARTING_SFEN)
    for nodes, batch in ((1, 8), (2, 8), (50, 8), (97, 16)):
        puct = search.PuctSearch(evaluate, batch_size=batch)
        result = puct(pos, search.Budget(nodes=nodes))
        assert result.nodes == nodes
        assert result.move in [int(m) for m in analyse(pos)[1]]
    # one forward for the root, then batches of at most batch_size leaves (fewer when a
    # path ends in a repetition or a mate, which needs no network, or collides)
    calls = []

    class Counting(search.Evaluator):
        def __call__(self, analyses):
            calls.append(len(analyses))
            return super().__call__(analyses)

    puct = search.PuctSearch(Counting(model), batch_size=16)
    result = puct(pos, search.Budget(nodes=97))
    assert result.nodes == 97 and calls[0] == 1 and sum(calls) <= 97 and max(calls) <= 16 and max(calls[1:]) > 1
    # with nodes = 1 the search is the policy's move
    assert search.PuctSearch(evaluate)(pos, search.Budget(nodes=1)).move == search.policy_search(evaluate, pos).move


def test_puct_tree_values_are_consistent(model):
    evaluate = search.Evaluator(model)
    pos = parse_sfen("lnsgkgsnl/1r5b1/ppppppppp/9/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL w - 2")
    puct = search.PuctSearch(evaluate, batch_size=4)
    root_holder = {}  # the root, caught where the result is made from it
    original = puct._result

    def keep(root, nodes):
        root_holder["root"] = root
        return original(root, nodes)

    puct._result = keep
    result = puct(pos, search.Budget(nodes=60))
    root = root_holder["root"]
    assert root.n.sum() == result.nodes - 1  # every playout but the root's own evaluation
    # each visited child's summed value from the root's side is n - (its own summed values + its value)
    for i in np.nonzero(root.n)[0]:
        child = root.children[i]
        if child.terminal is not None:
            assert root.w[i] == pytest.approx(root.n[i] * (1 - child.terminal))
            continue
        assert root.n[i] == 1 + child.n.sum()
        inner = child.value + child.w.sum()
        assert root.w[i] == pytest.approx(root.n[i] - inner)
    assert root.n[[int(m) for m in root.moves].index(result.move)] == root.n.max()  # the most visited


def test_puct_sees_repetition_as_a_draw(model):
    # kings only: every line repeats soon; the search must end and return a legal move
    game = Game("4k4/9/9/9/9/9/9/9/4K4 b - 1")
    for m in ["5i5h", "5a5b", "5h5i", "5b5a"]:
        game.play(usi_to_move(m))
    history = game.positions_seen()
    result = search.PuctSearch(search.Evaluator(model), batch_size=8)(game.position, search.Budget(nodes=200),
                                                                      history=history)
    assert result.nodes == 200 and result.move in game.legal_moves()


def test_stop_event_ends_the_search(model):
    budget = search.Budget()
    budget.stop.set()
    result = search.PuctSearch(search.Evaluator(model))(parse_sfen(shogi.STARTING_SFEN), budget)
    assert result.nodes == 1 and result.move is not None


def test_think_time():
    black = 0
    assert think_time(GoLimits(byoyomi=1000, btime=0, wtime=0), black, 100) == pytest.approx(0.9)
    assert think_time(GoLimits(btime=40000, wtime=5, byoyomi=0), black, 0) == pytest.approx(1.0)
    assert think_time(GoLimits(btime=40000, wtime=5, byoyomi=0), 1, 0) == pytest.approx(5 / 40 / 1000)
    assert think_time(GoLimits(btime=100, wtime=100, binc=1000, winc=1000), black, 0) == pytest.approx(0.1)
    assert think_time(GoLimits(btime=0, wtime=0, byoyomi=30), black, 50) == 0.0
    assert think_time(GoLimits(infinite=True), black, 50) is None
    assert think_time(GoLimits(nodes=100), black, 50) is None
    assert think_time(GoLimits(), black, 50) == pytest.approx(0.95)   # a bare go: one second
    assert think_time(GoLimits(movetime=300), black, 50) == pytest.approx(0.25)
    assert GoLimits.parse("btime 1 wtime 2 byoyomi 3 nodes 4 infinite".split()) == GoLimits(1, 2, 3, nodes=4,
                                                                                          infinite=True)
    for bad in ("btime", "nodes x", "depth 3", "byoyomi -1"):
        with pytest.raises(ValueError):
            GoLimits.parse(bad.split())


def test_puct_ends_at_its_node_limit_without_a_budget(model):
    # go infinite: no node or time budget; the tree (Python objects, about 3.5 kB a node)
    # grew until the machine ran out of memory
    evaluate = search.Evaluator(model)
    pos = parse_sfen(shogi.STARTING_SFEN)
    assert search.PuctSearch(evaluate).node_limit == search.NODE_LIMIT
    result = search.PuctSearch(evaluate, batch_size=8, node_limit=50)(pos, search.Budget())
    assert result.nodes == 50 and result.move in [int(m) for m in analyse(pos)[1]]
    # a node budget under the limit is kept exactly; one over it stops at the limit
    assert search.PuctSearch(evaluate, batch_size=8, node_limit=50)(pos, search.Budget(nodes=20)).nodes == 20
    assert search.PuctSearch(evaluate, batch_size=8, node_limit=50)(pos, search.Budget(nodes=90)).nodes == 50
    with pytest.raises(ValueError, match="node_limit must be >= 1"):
        search.PuctSearch(evaluate, node_limit=0)
