"""Choosing a move with a trained model: the policy's best move, a one-ply value search, and a
PUCT tree search like dlshogi's (docs/shogi.md, "Playing").

Every network call is one batched mk.Model.forward over positions encoded by the C core;
priors are the softmax of the logits over each position's legal moves and values the
value head's win probability for the side to move. All three return a move found among the
C generator's legal moves of the root, so they can only choose a legal move.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from .. import _core
from ..batch import Batch
from .position import MOVE_ENCODINGS, Position, model_encoding, move_to_usi

__all__ = ["Evaluator", "Budget", "SearchResult", "mate_in_one", "policy_search", "value_search", "PuctSearch", "SEARCHES",
           "value_to_cp"]

SEARCHES = ("policy", "value", "puct")
# The most playouts of one PUCT search, whatever its budget: the tree is kept in Python
# objects of about 3.5 kB a node, so ``go infinite`` (a GUI's analysis) would otherwise
# grow it until the machine runs out of memory (about 13 MB/s on one CPU thread).
NODE_LIMIT = 1_000_000


def value_to_cp(value: float) -> int:
    """A win probability as centipawns: 600 ln(v / (1 - v)) (the logistic scale engines'
    evaluations are usually mapped with), clipped to +-30000."""
    v = min(max(value, 1e-6), 1 - 1e-6)
    return int(max(-30000, min(30000, round(600.0 * math.log(v / (1.0 - v))))))


class Evaluator:
    """Priors and values of positions in one forward per call. `positions` are the C core's
    analyses (status, moves, labels, tokens) of valid positions with at least one move, made
    by :meth:`analyse` (labels in the move encoding the model reads)."""

    def __init__(self, model):
        self.model = model
        # a model that cannot read shogi positions is refused here, not at its first forward
        self.encoding = MOVE_ENCODINGS[model_encoding(model, "shogi Evaluator")]
        self.positions = 0  # evaluated so far
        self.lock = threading.Lock()  # a Model runs one call at a time

    def analyse(self, pos: Position) -> tuple:
        """The C core's (status, moves, labels, tokens) of `pos`, labels in the model's encoding."""
        return _core.shogi_analyse(pos.board, pos.hand, pos.side, self.encoding)

    def __call__(self, analyses: Sequence[tuple]) -> Tuple[List[np.ndarray], np.ndarray]:
        n = len(analyses)
        width = max(len(a[2]) for a in analyses)
        tokens = np.stack([a[3] for a in analyses]).astype(np.int32)
        legal = np.zeros((n, width), np.int32)  # padding slots are ignored (counts)
        counts = np.empty(n, np.int32)
        for i, a in enumerate(analyses):
            legal[i, :len(a[2])] = a[2]
            counts[i] = len(a[2])
        batch = Batch(tokens, legal, counts, np.zeros(n, np.int32), np.full(n, 0.5, np.float32))
        with self.lock:
            logits, value = self.model.forward(batch)
        self.positions += n
        z = np.where(np.arange(width) < counts[:, None], np.asarray(logits, np.float64), -np.inf)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return [p[i, :counts[i]] for i in range(n)], np.asarray(value, np.float64)


@dataclass
class Budget:
    """When a search must stop: after `nodes` evaluated positions (None: no limit), at
    `deadline` (time.monotonic(); None: none), or when `stop` is set."""
    nodes: Optional[int] = None
    deadline: Optional[float] = None
    stop: threading.Event = field(default_factory=threading.Event)

    def spent(self, nodes: int) -> bool:
        return (self.stop.is_set() or (self.nodes is not None and nodes >= self.nodes)
                or (self.deadline is not None and time.monotonic() >= self.deadline))


@dataclass
class SearchResult:
    move: Optional[int]         # move16, None when the root has no legal move (resign)
    value: float                # win probability for the side to move at the root
    nodes: int                  # positions evaluated by the network
    pv: List[int] = field(default_factory=list)
    depth: int = 1


def _root(evaluate: Evaluator, pos: Position):
    analysis = evaluate.analyse(pos)
    if analysis[0] != 0:
        raise ValueError(f"shogi: {pos.sfen()!r} is not a valid position: {_core.shogi_reason(analysis[0])}")
    return analysis


def mate_in_one(pos: Position, moves) -> Optional[int]:
    """A legal move (of `moves`, the position's) after which the opponent has no legal move."""
    for m in moves:
        child = pos.play(int(m))[0]
        if len(_core.shogi_analyse(child.board, child.hand, child.side)[1]) == 0:
            return int(m)
    return None


def policy_search(evaluate: Evaluator, pos: Position, **_) -> SearchResult:
    """The legal move the policy gives the highest probability (one forward)."""
    analysis = _root(evaluate, pos)
    if len(analysis[1]) == 0:
        return SearchResult(None, 0.0, 0)
    priors, value = evaluate([analysis])
    best = int(np.argmax(priors[0]))
    return SearchResult(int(analysis[1][best]), float(value[0]), 1, [int(analysis[1][best])])


def value_search(evaluate: Evaluator, pos: Position, history: frozenset = frozenset(),
                 prior_weight: float = 0.5, **_) -> SearchResult:
    """One ply: every legal move's child evaluated in ONE forward, the move maximising
    (1 - child's value) + prior_weight * prior. A move that mates (the child has no legal
    move) is played outright; one that repeats a position of the game is valued 0.5 (a
    draw) without asking the network."""
    analysis = _root(evaluate, pos)
    moves = analysis[1]
    if len(moves) == 0:
        return SearchResult(None, 0.0, 0)
    children = [pos.play(int(m))[0] for m in moves]
    analyses = [evaluate.analyse(c) for c in children]
    for a, m in zip(analyses, moves):
        if len(a[1]) == 0:
            return SearchResult(int(m), 1.0, 0, [int(m)])
    win = np.empty(len(moves))
    ask = []
    for i, c in enumerate(children):
        if c.key() in history:
            win[i] = 0.5
        else:
            ask.append(i)
    priors, values = evaluate([analysis] + [analyses[i] for i in ask])
    win[ask] = 1.0 - values[1:]
    score = win + prior_weight * priors[0]
    best = int(np.argmax(score))
    return SearchResult(int(moves[best]), float(win[best]), 1 + len(ask), [int(moves[best])])


class _Node:
    """A position in the tree: its legal moves, their priors, and per move the visits `n`,
    the summed values `w` from this node's side to move's point of view and their mean `q`
    (kept up to date with n and w, so that a selection is a handful of array operations;
    `fpu` for a move not visited yet); `total` is n's sum."""
    __slots__ = ("pos", "key", "moves", "prior", "value", "n", "w", "q", "fpu", "total", "children", "terminal",
                 "pending", "analysis")

    def __init__(self, pos: Position, k: bytes):
        self.pos, self.key = pos, k
        self.moves = self.prior = self.n = self.w = self.q = self.children = None
        self.value, self.fpu, self.total = 0.5, 0.0, 0
        self.terminal = None  # the value for the side to move when the game ends here
        self.pending = False  # waiting for the network in the current batch
        self.analysis = None  # the C core's (status, moves, labels, tokens) until expanded

    def expand(self, moves: np.ndarray, prior: np.ndarray, value: float, fpu_reduction: float) -> None:
        self.moves, self.prior, self.value = moves, prior, value
        self.fpu = value - fpu_reduction
        self.n = np.zeros(len(moves), np.int64)
        self.w = np.zeros(len(moves), np.float64)
        self.q = np.full(len(moves), self.fpu)
        self.children = [None] * len(moves)

    def visit(self, i: int, delta: int) -> None:
        """A visit added (virtual loss: a visit that has not won yet) or undone."""
        self.n[i] += delta
        self.total += delta
        self.q[i] = self.w[i] / self.n[i] if self.n[i] else self.fpu

    def add(self, i: int, value: float) -> None:
        self.w[i] += value
        self.q[i] = self.w[i] / self.n[i]


class PuctSearch:
    """dlshogi-style PUCT: leaves are selected with virtual loss, evaluated `batch_size` at a
    time in one forward, and their values backed up; the move played is the root's most
    visited. Selection maximises Q + c(N) P sqrt(N) / (1 + n) with AlphaZero's
    c(N) = c_init + ln((N + c_base + 1) / c_base); an unvisited move's Q is the node's own
    network value minus `fpu_reduction`. A position with no legal move is a loss for its
    side to move, and one that occurred earlier in the game or on the path a draw (0.5). A
    mate in one at the root is played without a search. The search ends after `node_limit`
    playouts (NODE_LIMIT: the tree's memory) even when its budget has no limit."""

    def __init__(self, evaluate: Evaluator, batch_size: int = 32, c_init: float = 1.0, c_base: float = 19652.0,
                 fpu_reduction: float = 0.2, node_limit: int = NODE_LIMIT):
        if node_limit < 1:
            raise ValueError(f"PuctSearch: node_limit must be >= 1, got {node_limit}")
        self.evaluate, self.batch_size, self.node_limit = evaluate, int(batch_size), int(node_limit)
        self.c_init, self.c_base, self.fpu_reduction = c_init, c_base, fpu_reduction

    def __call__(self, pos: Position, budget: Budget, history: frozenset = frozenset(),
                 report: Optional[Callable[[SearchResult], None]] = None, **_) -> SearchResult:
        analysis = _root(self.evaluate, pos)
        if len(analysis[1]) == 0:
            return SearchResult(None, 0.0, 0)
        mate = mate_in_one(pos, analysis[1])
        if mate is not None:  # found before any visit: PUCT may not visit every root move
            return SearchResult(mate, 1.0, 0, [mate])
        root = _Node(pos, pos.key())
        priors, value = self.evaluate([analysis])
        root.expand(analysis[1].astype(np.int64), priors[0], float(value[0]), self.fpu_reduction)
        nodes, last_report = 1, time.monotonic()
        self.max_depth = 1
        limit = self.node_limit if budget.nodes is None else min(budget.nodes, self.node_limit)
        while len(root.moves) > 1 and not budget.spent(nodes) and nodes < limit:
            want = min(self.batch_size, limit - nodes)
            nodes += self._batch(root, max(1, want), history)
            if report is not None and time.monotonic() - last_report >= 1.0:
                last_report = time.monotonic()
                report(self._result(root, nodes))
        return self._result(root, nodes)

    # -- one batch: select with virtual loss, evaluate together, back up; returns the
    # playouts made (leaves evaluated and terminal positions reached)
    def _batch(self, root: _Node, want: int, history: frozenset) -> int:
        leaves, paths, collisions, playouts = [], [], 0, 0
        while playouts < want and collisions < want:
            path, node, keys = [], root, {root.key}
            while True:
                i = self._select(node)
                path.append((node, i))
                node.visit(i, 1)
                child = node.children[i]
                if child is None:
                    child = node.children[i] = self._child(node, i, history, keys)
                    break
                if child.terminal is not None or child.pending:
                    break
                keys.add(child.key)
                node = child
            if child.pending:  # selected twice in this batch: undo and try another path
                for nd, j in path:
                    nd.visit(j, -1)
                collisions += 1
                continue
            self.max_depth = max(self.max_depth, len(path))
            playouts += 1
            if child.terminal is not None:
                self._backup(path, child.terminal)
            else:
                child.pending = True
                leaves.append(child)
                paths.append(path)
        if leaves:
            analyses = [c.analysis for c in leaves]
            priors, values = self.evaluate(analyses)
            for leaf, path, a, p, v in zip(leaves, paths, analyses, priors, values):
                leaf.expand(a[1].astype(np.int64), p, float(v), self.fpu_reduction)
                leaf.pending, leaf.analysis = False, None
                self._backup(path, float(v))
        return playouts

    def _child(self, node: _Node, i: int, history: frozenset, path_keys: set) -> _Node:
        pos = node.pos.play(int(node.moves[i]))[0]
        child = _Node(pos, pos.key())
        if child.key in history or child.key in path_keys:
            child.terminal = 0.5
            return child
        child.analysis = self.evaluate.analyse(pos)
        if len(child.analysis[1]) == 0:
            child.terminal = 0.0
        return child

    def _select(self, node: _Node) -> int:
        total = node.total
        c = (self.c_init + math.log((total + self.c_base + 1) / self.c_base)) * math.sqrt(max(total, 1))
        return int((node.q + c * node.prior / (1 + node.n)).argmax())

    @staticmethod
    def _backup(path, value: float) -> None:
        """`value` is for the side to move at the leaf; each parent sees 1 - its child's."""
        for node, i in reversed(path):
            value = 1.0 - value
            node.add(i, value)

    def _result(self, root: _Node, nodes: int) -> SearchResult:
        best = self._best(root)
        q = root.w[best] / root.n[best] if root.n[best] else root.value
        pv, node = [int(root.moves[best])], root.children[best]
        while node is not None and node.moves is not None and node.total > 0 and len(pv) < 32:
            i = self._best(node)
            pv.append(int(node.moves[i]))
            node = node.children[i]
        return SearchResult(int(root.moves[best]), float(q), nodes, pv, self.max_depth)

    @staticmethod
    def _best(node: _Node) -> int:
        # most visits, ties (e.g. no visits at all) broken by the prior
        return int(np.lexsort((node.prior, node.n))[-1])


def pv_usi(pv: List[int]) -> str:
    return " ".join(move_to_usi(m) for m in pv)
