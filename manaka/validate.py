"""The rules a dataset (docs/design.md §4) must obey, checked in chunks before training starts.

Every check is vectorised NumPy over chunks of positions, so a memory-mapped dataset of
millions of positions is validated in seconds without ever being loaded whole. The first
violation raises ``ValueError`` naming the source, the file (or argument), the first bad
position and the rule broken.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional

import numpy as np

FORMAT_VERSION = 1
FILES = ("tokens", "legal_offsets", "legal_moves", "target", "value", "policy_target")
# Soft targets are float32 sums over up to ~600 slots: allow rounding, catch real mistakes.
SOFT_SUM_TOLERANCE = 1e-3
CHUNK = 1 << 18  # positions per vectorised step: ~30 MB of temporaries at T = 40


class Rule:
    """Raises ValueError with the source and the name of the array it concerns."""

    def __init__(self, source: str, names: Mapping[str, str], path: Optional[str] = None):
        self.source, self.names, self.path = source, names, path

    def fail(self, array: str, message: str):
        text = f"{self.source}: {self.names.get(array, array)}: {message}"
        if self.path is not None:  # a folder on disk: DatasetError, a ValueError naming it
            from .errors import DatasetError
            raise DatasetError(self.path, text, named=True)
        raise ValueError(text)


def check_meta(meta: object, rule: Rule) -> Dict[str, int]:
    """meta.json: a dict with version, num_tokens, num_moves, T (positive ints)."""
    if not isinstance(meta, dict):
        rule.fail("meta", f"must hold a JSON object, got {type(meta).__name__}")
    for key in ("version", "num_tokens", "num_moves", "T"):
        if key not in meta:
            rule.fail("meta", f"missing the key {key!r} (needs version, num_tokens, num_moves, T)")
        value = meta[key]
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 2**31 - 1:
            rule.fail("meta", f"{key} must be a positive integer below 2**31, got {value!r:.50}")
    if meta["version"] != FORMAT_VERSION:
        rule.fail("meta", f"version {meta['version']} is not supported (this manaka reads version {FORMAT_VERSION})")
    if meta["num_tokens"] > 32767:
        rule.fail("meta", f"num_tokens = {meta['num_tokens']} does not fit the int16 token ids (at most 32767)")
    return {k: meta[k] for k in ("num_tokens", "num_moves", "T")}


def _check_array(rule: Rule, name: str, arr: np.ndarray, dtypes, ndim: int):
    if arr.dtype not in [np.dtype(d) for d in dtypes]:
        want = " or ".join(np.dtype(d).name for d in dtypes)
        rule.fail(name, f"has dtype {arr.dtype}, the format needs {want}")
    if arr.ndim != ndim:
        rule.fail(name, f"has {arr.ndim} dimension(s) (shape {arr.shape}), the format needs {ndim}")
    if not arr.flags.c_contiguous:
        rule.fail(name, "is not C-contiguous (saved in Fortran order?)")


def check_shapes(arrays: Mapping[str, Optional[np.ndarray]], meta: Mapping[str, int], rule: Rule) -> int:
    """Dtypes, dimensions and lengths agree with each other and with meta. Returns N."""
    tokens = arrays["tokens"]
    _check_array(rule, "tokens", tokens, [np.int16], 3)
    N = tokens.shape[0]
    if N < 1:
        rule.fail("tokens", "the dataset has no positions")
    if tokens.shape[1] != 2:
        swapped = " (axes swapped? it must be [N, 2, T], not [N, T, 2])" if tokens.shape[2] == 2 else ""
        rule.fail("tokens", f"has shape {tokens.shape}: axis 1 holds the 2 perspectives, got length "
                            f"{tokens.shape[1]}{swapped}")
    if tokens.shape[2] != meta["T"]:
        rule.fail("tokens", f"has shape {tokens.shape}: axis 2 holds the T = {meta['T']} token slots of "
                            f"meta.json, got length {tokens.shape[2]}")
    _check_array(rule, "legal_offsets", arrays["legal_offsets"], [np.int64], 1)
    _check_array(rule, "legal_moves", arrays["legal_moves"], [np.int16, np.int32], 1)
    _check_array(rule, "target", arrays["target"], [np.int32], 1)
    _check_array(rule, "value", arrays["value"], [np.float32], 1)
    if len(arrays["legal_offsets"]) != N + 1:
        rule.fail("legal_offsets", f"has {len(arrays['legal_offsets'])} entries, expected N + 1 = {N + 1} (tokens has N = {N} positions)")
    for name in ("target", "value"):
        if len(arrays[name]) != N:
            rule.fail(name, f"has {len(arrays[name])} entries, expected N = {N} (the number of positions in tokens)")
    if arrays["legal_moves"].dtype == np.int16 and meta["num_moves"] > 32768:
        rule.fail("legal_moves", f"is int16 but num_moves = {meta['num_moves']} needs int32")
    if arrays.get("policy_target") is not None:
        _check_array(rule, "policy_target", arrays["policy_target"], [np.float32], 1)
        if len(arrays["policy_target"]) != len(arrays["legal_moves"]):
            rule.fail("policy_target", f"has {len(arrays['policy_target'])} entries but legal_moves has {len(arrays['legal_moves'])}")
    return N


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask.reshape(-1))[0])


def check_values(arrays: Mapping[str, Optional[np.ndarray]], meta: Mapping[str, int], rule: Rule,
                 chunk: int = CHUNK) -> Dict[str, float]:
    """Every value rule, chunk by chunk. Returns summary statistics of the legal counts."""
    tokens, offsets, moves = arrays["tokens"], arrays["legal_offsets"], arrays["legal_moves"]
    target, value, policy = arrays["target"], arrays["value"], arrays.get("policy_target")
    V, M, N = meta["num_tokens"], meta["num_moves"], tokens.shape[0]
    if int(offsets[0]) != 0:
        rule.fail("legal_offsets", f"must start at 0, got legal_offsets[0] = {int(offsets[0])}")
    if int(offsets[N]) != len(moves):
        rule.fail("legal_offsets", f"ends at {int(offsets[N])} but legal_moves has {len(moves)} entries (they must agree)")
    max_count = 0
    for a in range(0, N, chunk):
        b = min(N, a + chunk)
        off = np.asarray(offsets[a:b + 1])
        counts = np.diff(off)
        if (counts < 1).any():
            i = a + _first(counts < 1)
            rule.fail("legal_offsets", f"position {i}: offsets must increase strictly (every position needs >= 1 legal move), got legal_offsets[{i}] = {int(offsets[i])}, legal_offsets[{i + 1}] = {int(offsets[i + 1])}")
        max_count = max(max_count, int(counts.max()))
        tok = np.asarray(tokens[a:b])
        bad = (tok < -1) | (tok >= V)
        if bad.any():
            i, s, t = np.unravel_index(_first(bad), tok.shape)
            rule.fail("tokens", f"position {a + i}: tokens[{a + i}, {s}, {t}] = {tok[i, s, t]} is out of range: must be -1 (empty) or in [0, num_tokens = {V})")
        mv = np.asarray(moves[off[0]:off[-1]])
        bad = (mv < 0) | (mv >= M)
        if bad.any():
            k = _first(bad)
            i = int(np.searchsorted(off, off[0] + k, side="right")) - 1
            rule.fail("legal_moves", f"position {a + i}: legal move {mv[k]} at slot {off[0] + k - off[i]} is out of range [0, num_moves = {M})")
        # a move listed twice would get two logits and split its probability
        pos = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        key = np.sort(pos * M + mv.astype(np.int64))
        dup = key[1:] == key[:-1]
        if dup.any():
            k = int(key[1:][dup][0])
            i, m = k // M, k % M
            rule.fail("legal_moves", f"position {a + i}: move {m} appears twice in its legal list (each legal "
                                     "move must be listed once)")
        tg = np.asarray(target[a:b])
        bad = (tg < 0) | (tg >= counts)
        if bad.any():
            i = _first(bad)
            rule.fail("target", f"position {a + i}: target {tg[i]} is beyond its legal list of {counts[i]} moves (must be in [0, {counts[i]}))")
        val = np.asarray(value[a:b])
        bad = ~np.isfinite(val) | (val < 0) | (val > 1)
        if bad.any():
            i = _first(bad)
            rule.fail("value", f"position {a + i}: value {val[i]} must be finite and in [0, 1] (win 1, draw 0.5, loss 0)")
        if policy is not None:
            pol = np.asarray(policy[off[0]:off[-1]])
            bad = ~np.isfinite(pol) | (pol < 0)
            if bad.any():
                k = _first(bad)
                i = int(np.searchsorted(off, off[0] + k, side="right")) - 1
                rule.fail("policy_target", f"position {a + i}: soft target {pol[k]} at slot {off[0] + k - off[i]} must be finite and >= 0")
            sums = np.add.reduceat(pol.astype(np.float64), off[:-1] - off[0])
            bad = np.abs(sums - 1.0) > SOFT_SUM_TOLERANCE
            if bad.any():
                i = _first(bad)
                rule.fail("policy_target", f"position {a + i}: soft targets sum to {sums[i]:.6f}, not 1 (tolerance {SOFT_SUM_TOLERANCE})")
    return {"max_legal": max_count, "mean_legal": len(moves) / N}
