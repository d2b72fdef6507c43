"""The seed configuration of docs/design.md §5 and random inputs at its shapes: the one
place every benchmark takes its shapes from."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Tuple

import numpy as np


@dataclass(frozen=True)
class SeedShapes:
    B: int = 1024     # batch
    T: int = 40       # tokens per perspective
    S: int = 2        # perspectives
    V: int = 2344     # token vocabulary
    D: int = 256      # embedding width
    K: int = 4        # power orders
    P: int = 16       # pair width
    W: int = 300      # policy head width
    M: int = 2187     # move vocabulary
    L: int = 600      # padded legal slots
    H: ClassVar[Tuple[int, ...]] = (512, 512)  # trunk widths (not a field: the ops have none)

    @property
    def num_pairs(self) -> int:
        return self.V * (self.V + 1) // 2

    def model_config(self) -> dict:
        """The seed network's manaka.ModelConfig arguments."""
        return dict(num_tokens=self.V, num_moves=self.M, tokens_per_side=self.T, embed_dim=self.D,
                    orders=self.K, pair_dim=self.P, hidden=self.H, head_width=self.W)


# A small network to test the benchmarks themselves (a rehearsal without a GPU runs them on the
# CUDA emulator, far too slow for the seed shapes); its timings are not results.
SMALL = dict(num_tokens=60, num_moves=50, tokens_per_side=8, embed_dim=8, orders=2, pair_dim=4,
             hidden=(16,), head_width=12)
# Its legal-move slots: a seed batch's 600 do not fit its 50 moves (seed_batch refuses them).
SMALL_MAX_LEGAL = 20
MAX_LEGAL_HELP = f"L (default 600; {SMALL_MAX_LEGAL} with --small)"


def max_legal(given, small: bool) -> int:
    """--max-legal as given, else the default of the configuration: 600, or SMALL_MAX_LEGAL
    for SMALL."""
    if given is not None:
        return given
    return SMALL_MAX_LEGAL if small else 600


def legal_counts(rng: np.random.Generator, B: int, L: int = 600) -> np.ndarray:
    """Legal-move counts ~ clip(round(lognormal(ln 90, 0.6)), 1, 593), as in the seed."""
    return np.clip(np.round(rng.lognormal(np.log(90), 0.6, B)), 1, min(593, L)).astype(np.int32)


def op_inputs(shapes: SeedShapes = SeedShapes(), seed: int = 0) -> dict:
    """Random inputs for the three ops at the seed shapes (about 200 MB, mostly the pair table)."""
    s, rng = shapes, np.random.default_rng(seed)
    counts = legal_counts(rng, s.B, s.L)
    indices = rng.integers(0, s.M, (s.B, s.L), dtype=np.int32)
    indices[np.arange(s.L)[None] >= counts[:, None]] = -1
    tokens = rng.integers(0, s.V, (s.B, s.S, s.T), dtype=np.int32)
    tokens[rng.random(tokens.shape) < 0.2] = -1  # captured / empty slots
    return dict(
        counts=counts, indices=indices, tokens=tokens,
        hidden=rng.standard_normal((s.B, s.W), dtype=np.float32),
        table=rng.standard_normal((s.M, s.W), dtype=np.float32) * 0.05,
        emb=rng.standard_normal((s.V, s.D), dtype=np.float32) * 0.1,
        pair_table=rng.standard_normal((s.num_pairs, s.P), dtype=np.float32) * 0.01,
        grad_logits=rng.standard_normal((s.B, s.L), dtype=np.float32),
        grad_power=rng.standard_normal((s.B, s.S, s.K, s.D), dtype=np.float32),
        grad_pair=rng.standard_normal((s.B, s.S, s.P), dtype=np.float32),
    )
