"""The rules a dataset (docs/design.md §4) must obey, checked before training starts.

Here: meta.json, and the arrays' dtypes and shapes. The value rules (every token, legal
move, target, value and soft target) are the C core's (`_core.check_dataset`, the rules of
csrc/core/check.h), run over the arrays in place, so a memory-mapped dataset of millions of
positions is validated without ever being loaded whole. The first violation raises
``ValueError`` naming the source, the file (or argument), the first bad position and the
rule broken.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional

import numpy as np

from . import _core

FORMAT_VERSION = 1
FILES = ("tokens", "legal_offsets", "legal_moves", "target", "value", "policy_target")


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


def check_values(arrays: Mapping[str, Optional[np.ndarray]], meta: Mapping[str, int], rule: Rule) -> Dict[str, float]:
    """Every value rule, by the C core's dataset check (csrc/core/check.h, the rules a batch
    is held to, and the format's own: the offsets and each legal move listed once), over
    the arrays in place. Returns summary statistics of the legal counts."""
    tokens, offsets, moves = arrays["tokens"], arrays["legal_offsets"], arrays["legal_moves"]
    V, M, N = meta["num_tokens"], meta["num_moves"], tokens.shape[0]
    max_count, fault = _core.check_dataset(tokens, offsets, moves, arrays["target"], arrays["value"],
                                           arrays.get("policy_target"), V, M)
    if fault is not None:
        _fail(rule, arrays, meta, *fault)
    return {"max_legal": max_count, "mean_legal": len(moves) / N}


def _fail(rule: Rule, arrays, meta, kind: str, i: int, slot: int, count: int, value: int, real: float):
    """Words the C check's first fault (which array, where, what) as the format's rule."""
    offsets, V, M = arrays["legal_offsets"], meta["num_tokens"], meta["num_moves"]
    if kind == "offset_start":
        rule.fail("legal_offsets", f"must start at 0, got legal_offsets[0] = {value}")
    if kind == "offset_end":
        rule.fail("legal_offsets", f"ends at {value} but legal_moves has {len(arrays['legal_moves'])} entries "
                                   "(they must agree)")
    if kind == "count":
        rule.fail("legal_offsets", f"position {i}: offsets must increase strictly (every position needs >= 1 legal "
                                   f"move), got legal_offsets[{i}] = {int(offsets[i])}, legal_offsets[{i + 1}] = "
                                   f"{int(offsets[i + 1])}")
    if kind == "token":
        p, s, t = np.unravel_index(i, arrays["tokens"].shape)
        rule.fail("tokens", f"position {p}: tokens[{p}, {s}, {t}] = {value} is out of range: must be -1 (empty) or "
                            f"in [0, num_tokens = {V})")
    if kind == "legal":
        rule.fail("legal_moves", f"position {i}: legal move {value} at slot {slot} is out of range [0, num_moves = {M})")
    if kind == "duplicate":  # a move listed twice would get two logits and split its probability
        rule.fail("legal_moves", f"position {i}: move {value} appears twice in its legal list (each legal move must "
                                 "be listed once)")
    if kind == "target":
        rule.fail("target", f"position {i}: target {value} is beyond its legal list of {count} moves (must be in "
                            f"[0, {count}))")
    if kind == "value":
        rule.fail("value", f"position {i}: value {arrays['value'][i]} must be finite and in [0, 1] (win 1, draw 0.5, "
                           "loss 0)")
    if kind == "soft_entry":
        rule.fail("policy_target", f"position {i}: soft target {arrays['policy_target'][int(offsets[i]) + slot]} at "
                                   f"slot {slot} must be finite and >= 0")
    rule.fail("policy_target", f"position {i}: soft targets sum to {real:.6f}, not 1 (tolerance "
                               f"{_core.SOFT_TARGET_TOLERANCE})")
