"""One in-order pass over the data mk.evaluate and its baselines read, and the checks
around it: the data fits the model, and the pass found positions."""
from __future__ import annotations

from ..loader import Loader
from ..model import ModelConfig

__all__ = ["batches", "check_fits", "describe"]


def _source(data):
    return data.dataset if isinstance(data, Loader) else data


def describe(data) -> str:
    """The files or folder `data` was read from (its repr when it has neither)."""
    src = _source(data)
    files = getattr(src, "files", None)
    if files:
        more = f" and {len(files) - 3} more file(s)" if len(files) > 3 else ""
        return ", ".join(repr(f) for f in files[:3]) + more
    return repr(getattr(src, "path", None) or src)


def check_fits(model, data) -> None:
    """A ValueError when `data`'s tokens or moves do not fit `model` (a manaka.Model, or
    anything with a ModelConfig as ``.config``; other models are not checked here)."""
    from ..shogi.position import check_encoding

    check_encoding(model, data, "evaluate")
    cfg = getattr(model, "config", None)
    src = _source(data)
    if not isinstance(cfg, ModelConfig) or not hasattr(src, "num_tokens"):
        return
    if (src.num_tokens > cfg.num_tokens or src.num_moves > cfg.num_moves
            or src.tokens_per_side != cfg.tokens_per_side):
        raise ValueError(f"evaluate: the data {describe(data)} (num_tokens={src.num_tokens}, "
                         f"num_moves={src.num_moves}, T={src.tokens_per_side}) does not fit the model "
                         f"(num_tokens={cfg.num_tokens}, num_moves={cfg.num_moves}, T={cfg.tokens_per_side})")


class batches:
    """``with batches(data, batch_size) as loader: for batch in loader: ...``: the caller's
    own Loader (one epoch from its position, left open), or one made here that reads the
    data in order and is closed afterwards."""

    def __init__(self, data, batch_size: int):
        self.data = data
        self.own = not isinstance(data, Loader)
        self.loader = Loader(data, batch_size=batch_size, producers=1, prefetch=2, shuffle=False) if self.own else data
        self.skipped_before = self.loader.stats["skipped"]

    def __enter__(self) -> "batches":
        return self

    def __exit__(self, *exc) -> None:
        if self.own:
            self.loader.close()

    def __iter__(self):
        return iter(self.loader)

    def check_not_empty(self, positions: int) -> None:
        """A ValueError naming the data when the pass gave no position."""
        if positions:
            return
        skipped = self.loader.stats["skipped"] - self.skipped_before
        why = (f": all {skipped} record(s) read were bad and skipped (on_bad='skip')" if skipped else
               ": it gave no batch")
        raise ValueError(f"evaluate: no position to evaluate in {describe(self.data)}{why}; "
                         "a mean over no position is not a loss")
