"""``python -m manaka.shogi usi --model m.manaka [--search policy|value|puct] [--threads N]``:
a trained model as a USI engine (docs/shogi.md, "Playing")."""
from __future__ import annotations

import argparse
import sys

from ..model import Model
from .position import model_encoding
from .search import NODE_LIMIT, SEARCHES, Budget, Evaluator, PuctSearch, policy_search, value_search
from .usi_protocol import Option, UsiEngine

__all__ = ["main", "model_player"]

MAX_BATCH_SIZE = 4096  # leaves per forward of the PUCT search (--batch-size, option BatchSize)


class ModelPlayer:
    """The network's move in a game, by one of the searches (settable while the engine runs)."""

    def __init__(self, model: Model, search: str = "puct", batch_size: int = 32, node_limit: int = NODE_LIMIT):
        self.evaluate = Evaluator(model)
        self.search, self.batch_size, self.node_limit = search, batch_size, node_limit

    def __call__(self, game, budget: Budget, report):
        # the game's earlier positions: reaching one again is scored a draw
        history = game.positions_seen()
        if self.search == "policy":
            return policy_search(self.evaluate, game.position)
        if self.search == "value":
            return value_search(self.evaluate, game.position, history=history)
        return PuctSearch(self.evaluate, batch_size=self.batch_size, node_limit=self.node_limit)(
            game.position, budget, history=history, report=report)


def model_player(model: Model, search: str = "puct", batch_size: int = 32) -> ModelPlayer:
    if search not in SEARCHES:
        raise ValueError(f"search must be one of {', '.join(SEARCHES)}, got {search!r}")
    return ModelPlayer(model, search, batch_size)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m manaka.shogi usi", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a model file written by mk.Model.save / manaka.train --save")
    p.add_argument("--search", choices=SEARCHES, default="puct",
                   help="policy: the policy's best move; value: one ply, every child valued in one forward; "
                        "puct: a PUCT tree search with batched leaves (default)")
    p.add_argument("--threads", type=int, help="CPU threads of the model's ops (default: all cores)")
    p.add_argument("--batch-size", type=int, default=32, help="leaves per forward in the PUCT search (default 32)")
    args = p.parse_args(argv)
    # the BatchSize option's range: a batch ends only after batch-size playouts or as many
    # collisions, whatever the clock, so --batch-size 1000000 took 10 s on a 0.5 s byoyomi
    if not 1 <= args.batch_size <= MAX_BATCH_SIZE:
        p.error(f"--batch-size must be in [1, {MAX_BATCH_SIZE}], got {args.batch_size}")
    from .. import set_num_threads
    if args.threads is not None:
        if args.threads < 1:
            p.error("--threads must be >= 1")
        try:
            set_num_threads(args.threads)
        except ValueError as e:  # more than the core's limit
            p.error(f"--threads: {e}")
    try:
        model = Model.load(args.model)
        model_encoding(model, repr(args.model))  # a model of other data: refused now, not mid-game
    except (ValueError, OSError, MemoryError) as e:  # ModelFileError is a ValueError
        print(f"python -m manaka.shogi usi: {e}", file=sys.stderr)
        return 2
    player = model_player(model, args.search, args.batch_size)
    options = {
        "Search": Option("combo", args.search, lambda v: setattr(player, "search", v), choices=SEARCHES),
        "BatchSize": Option("spin", args.batch_size, lambda v: setattr(player, "batch_size", v), 1, MAX_BATCH_SIZE),
        # the PUCT tree's size bound (about 3.5 kB a node): go infinite ends its search there
        "NodeLimit": Option("spin", NODE_LIMIT, lambda v: setattr(player, "node_limit", v), 1, 100_000_000),
        "Threads": Option("spin", args.threads or 0, set_num_threads, 0, 1024),
    }
    return UsiEngine(f"manaka ({args.search})", player, options).run()


if __name__ == "__main__":
    sys.exit(main())
