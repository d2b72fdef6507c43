"""The step with each pair-table update (``python -m manaka.bench step --pair-update
dense,sparse,lazy``) or move-table update (``--move-update dense,sparse --records FILES``):
one trainer per mode on its own copy of the model, timed interleaved (round r runs one step
of every mode, in a rotating order), so the machine's load falls on all of them alike. The
batches cycle through ``--pair-batches`` distinct ones, so rows come back after gaps and the
sparse modes pay their catch-up as in training; with ``--records FILES`` (dlshogi HCPE or
YaneuraOu PSV) they are real positions, whose tokens name far fewer pair rows than the
uniform seed batch (that share is printed). The move-table comparison runs the shogi
recipe's model and settings (manaka/shogi/recipe.py) on records in its move encoding."""
from __future__ import annotations

import time
from typing import Dict, List, Sequence

import numpy as np

import manaka as mk

MODES = ("dense", "sparse", "lazy")


def named_rows(batch: mk.Batch) -> int:
    """How many pair-table rows some pair of the batch's tokens names (distinct)."""
    tok = np.asarray(batch.tokens, np.int64).reshape(-1, batch.tokens.shape[-1])
    i, j = np.triu_indices(tok.shape[1], 1)
    a, b = tok[:, i], tok[:, j]
    ok = (a >= 0) & (b >= 0)
    lo, hi = np.minimum(a, b)[ok], np.maximum(a, b)[ok]
    return int(np.unique(hi * (hi + 1) // 2 + lo).size)


def named_moves(batch: mk.Batch, rows: int) -> int:
    """How many of the move table's `rows` the batch's legal moves name (distinct): row label %
    rows (the label itself, but for a model with move kinds: ModelConfig.move_kinds)."""
    legal, counts = np.asarray(batch.legal), np.asarray(batch.counts)
    return int(np.unique(np.concatenate([legal[b, :counts[b]] for b in range(len(counts))]) % rows).size)


def record_batches(path: str, B: int, count: int, seed: int = 0, moves: str = "dlshogi") -> List[mk.Batch]:
    """`count` shuffled batches of B positions from shogi records (HCPE / PSV / hcpe3: labels in
    the `moves` encoding, by default dlshogi's, the seed configuration's 2,187 moves; no
    mirrors) or a dataset folder, opened as ``python -m manaka.train`` opens them (copies:
    safe to keep)."""
    from manaka.train import data_kind, open_data

    try:
        data = open_data(path, data_kind(path, "--records"), moves=moves)
    except ValueError as e:
        raise SystemExit(str(e))
    with mk.Loader(data, batch_size=B, producers=1, shuffle=True, seed=seed, drop_last=True,
                   copy=True) as loader:
        out = []
        for batch in loader:
            out.append(batch)
            if len(out) == count:
                break
    if len(out) < count:
        raise SystemExit(f"--records {path}: {len(out)} full batches of {B}, {count} asked")
    return out


def parse_modes(text: str, option: str = "--pair-update") -> List[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise SystemExit(f"{option}: each of {text!r} must be one of {', '.join(MODES)}")
    return modes


def compare(cfg: mk.ModelConfig, state: Dict[str, np.ndarray], batches: Sequence[mk.Batch],
            modes: Sequence[str], rounds: int, warmup: int, device: str = "cpu", table: str = "pair",
            settings: Dict = None):
    """(lines, results): per mode the median / min / max ms of `rounds` interleaved steps.
    On a GPU each timed step ends by reading its loss, which waits for the step. `table`:
    "pair" (each mode is a pair_update) or "move" (a move_update); `settings`: the trainers'
    other arguments (default lr 1e-3)."""
    trainers = {}
    for mode in modes:
        model = mk.Model(cfg, device=device, seed=0)
        model.load_state_dict(state)
        trainers[mode] = mk.Trainer(model, **(settings or {"lr": 1e-3}), **{f"{table}_update": mode})
    times = {m: [] for m in modes}
    k = 0
    for r in range(warmup + rounds):
        order = list(modes[r % len(modes):]) + list(modes[:r % len(modes)])
        batch = batches[k % len(batches)]
        k += 1
        for mode in order:
            t0 = time.perf_counter()
            stats = trainers[mode].step(batch)
            if device != "cpu":
                stats.loss  # noqa: B018 (the read waits for the device)
            dt = time.perf_counter() - t0
            if r >= warmup:
                times[mode].append(dt * 1e3)
    if table == "pair":
        share, rows = float(np.mean([named_rows(b) for b in batches])) / cfg.num_pairs, cfg.num_pairs
    else:
        rows = cfg.num_moves // max(cfg.move_kinds, 1)
        share = float(np.mean([named_moves(b, rows) for b in batches])) / rows
    lines = [f"  {table}-table update, {rounds} interleaved rounds over {len(batches)} batches "
             f"(a batch names {share:.1%} of the {rows:,} {table} rows on average):"]
    results = {"named_rows_share": share, "rounds": rounds, "batches": len(batches)}
    base = float(np.median(times[modes[0]]))
    for mode in modes:
        t = np.array(times[mode])
        med = float(np.median(t))
        lines.append(f"    {mode:<6} step {med:8.1f} ms median (min {t.min():.1f}, max {t.max():.1f})"
                     f"  {base / med:5.2f}x vs {modes[0]}")
        results[mode] = {"median_ms": med, "min_ms": float(t.min()), "max_ms": float(t.max()),
                         "times_ms": [float(x) for x in t]}
    # the optimizer phases of each mode (profiled steps: they synchronise, on a GPU)
    for mode in modes:
        tr = trainers[mode]
        tr.profile(True)
        for b in batches[:min(len(batches), 4)]:
            tr.step(b)
        ph = tr.phase_times()
        n = max(ph["steps"], 1)
        lines.append(f"    {mode:<6} phases (ms/step, {n} profiled): forward+catch-up {1e3 * ph['forward'] / n:.1f}"
                     f" | backward {1e3 * ph['backward'] / n:.1f} | pair-table update"
                     f" {1e3 * ph['optimizer_pair_table'] / n:.1f} | other AdamW"
                     f" {1e3 * (ph['optimizer'] - ph['optimizer_pair_table']) / n:.1f}")
        results[mode]["phases_ms"] = {k: 1e3 * v / n for k, v in ph.items() if k != "steps"}
        tr.profile(False)
    return lines, results
