"""``python -m manaka.bench strength TRAIN.hcpe HELD.hcpe``: what manaka's training buys on
engine-labelled games, beside baselines and a dlshogi-style ResNet trained for the same time.

The held-out games (split BY GAME from the training games, e.g. with
``python -m manaka.bench.strength_split``) are scored against the engine's move (top-1,
top-5 over the legal moves) and against the game result (value BCE; value accuracy over the
decisive positions: the prediction > 0.5 iff the side to move won). Rows:

- chance, frequency, heuristic (manaka/bench/strength_baselines.py);
- manaka: the default shogi recipe (manaka/shogi/recipe.py; ``--set NAME=VALUE`` changes a
  setting), trained through mk.Loader / mk.Trainer on the records, one model thread and one
  producer thread;
- resnet: manaka/bench/strength_resnet.py (torch, one thread), trained on the same records
  with the same value target.

The two models are trained at the same time in two processes (so the machine's load falls
on both alike) for the same budget of training wall time (``--time``; the evaluations are
not counted) and/or positions (``--positions``), evaluated every ``--eval-every`` seconds of
training on the first ``--eval-positions`` held-out positions (the curve) and at the end on
all of them. Each row's figures come from its model's outputs through :func:`metrics`.

Results: ``--out DIR`` (default ./bench_results), strength-<tag>.json and .md.
"""
from __future__ import annotations

import argparse
import concurrent.futures as futures
import math
import multiprocessing
import os
import sys
import time
from typing import Dict, List, Optional

import numpy as np

from ..shogi.eval_scale import EVAL_SCALE
from .timing import OUT_HELP, note_resources, write_results

NUM_LABELS = 27 * 81
RECORD = 38


# ---------------------------------------------------------------------------------------
# The figures


def metrics(logits: np.ndarray, counts: np.ndarray, target: np.ndarray, value: np.ndarray,
            result: np.ndarray) -> Dict[str, float]:
    """Sums over positions: top1, top5 (the target among the 5 largest logits of its legal
    slots, ties broken by slot order as a stable descending sort does), policy_nll (minus
    the log-softmax over the legal slots at the target), value_bce (the value
    probability clipped to [1e-7, 1 - 1e-7] against the result), decisive (positions whose
    result is not 0.5), value_correct (among those, value > 0.5 iff result > 0.5), n."""
    logits = np.asarray(logits, np.float64)
    n, L = logits.shape
    valid = np.arange(L)[None, :] < counts[:, None]
    z = np.where(valid, logits, -np.inf)
    rows = np.arange(n)
    zt = z[rows, target][:, None]
    before = (z > zt) | ((z == zt) & (np.arange(L)[None, :] < target[:, None]))
    rank = before.sum(axis=1)
    m = z.max(axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)  # baselines' scores may be huge; logsumexp stays finite
    lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
    nll = lse - zt[:, 0]
    p = np.clip(np.asarray(value, np.float64), 1e-7, 1 - 1e-7)
    r = np.asarray(result, np.float64)
    bce = -(r * np.log(p) + (1 - r) * np.log(1 - p))
    decisive = r != 0.5
    return {"n": n, "top1": float((rank == 0).sum()), "top5": float((rank < 5).sum()), "policy_nll": float(nll.sum()),
            "value_bce": float(bce.sum()), "decisive": float(decisive.sum()),
            "value_correct": float(((p > 0.5) == (r > 0.5))[decisive].sum())}


def finish(sums: Dict[str, float]) -> Dict[str, float]:
    """Means from :func:`metrics` sums (added over batches)."""
    n = max(sums["n"], 1)
    return {"positions": int(sums["n"]), "top1": sums["top1"] / n, "top5": sums["top5"] / n,
            "policy_nll": sums["policy_nll"] / n,
            "value_bce": sums["value_bce"] / n,
            "value_accuracy": sums["value_correct"] / sums["decisive"] if sums["decisive"] else float("nan")}


def add(total: Optional[Dict[str, float]], part: Dict[str, float]) -> Dict[str, float]:
    return dict(part) if total is None else {k: total[k] + part[k] for k in total}


# ---------------------------------------------------------------------------------------
# Positions as the producers see them


class Table:
    """The records of one HCPE file decoded by manaka's producers' code (_core.shogi_rows):
    tokens, the legal labels (in encoding `moves`, ascending dlshogi label), the played move's index, the result (value with eval
    weight 0) and the training value target (with the recipe's eval weight)."""

    def __init__(self, path: str, eval_weight: float = 0.0, limit: int = 0, moves: str = "dlshogi",
                 eval_scale: float = EVAL_SCALE):
        from .. import _core
        from ..shogi.position import MOVE_ENCODINGS
        from ..shogi.records import HCPE, read_records

        records, _ = read_records(path, HCPE)
        if limit:
            records = records[:limit]
        self.records = np.ascontiguousarray(records)
        tokens, offsets, labels, target, result, status = _core.shogi_rows(HCPE, self.records, 0.0, False,
                                                                           MOVE_ENCODINGS[moves])
        if status.any():
            i = int(np.nonzero(status)[0][0])
            raise ValueError(f"{path}: record {i}: {_core.shogi_reason(int(status[i]))}")
        self.tokens, self.offsets, self.labels = tokens, offsets, labels.astype(np.int32)
        self.target, self.result = target, result
        self.value = (result if eval_weight == 0 else
                      _core.shogi_rows(HCPE, self.records, float(eval_weight), False, 0, float(eval_scale))[4])
        self.counts = np.diff(offsets).astype(np.int32)

    def __len__(self) -> int:
        return len(self.target)

    def legal(self, idx: np.ndarray) -> np.ndarray:
        """Padded legal labels [len(idx), max count] (-1 beyond each count)."""
        counts = self.counts[idx]
        out = np.full((len(idx), int(counts.max())), -1, np.int32)
        for row, i in enumerate(idx):
            out[row, :counts[row]] = self.labels[self.offsets[i]:self.offsets[i + 1]]
        return out

    def target_labels(self) -> np.ndarray:
        return self.labels[self.offsets[:-1] + self.target]

    def batches(self, size: int, limit: int = 0):
        n = min(len(self), limit) if limit else len(self)
        for s in range(0, n, size):
            yield np.arange(s, min(s + size, n))


# ---------------------------------------------------------------------------------------
# Baselines


def chance(held: Table) -> Dict[str, float]:
    """Exact expectations of a uniform choice among the legal moves, value 0.5."""
    c = held.counts.astype(np.float64)
    r = held.result.astype(np.float64)
    return {"positions": len(held), "top1": float((1 / c).mean()), "top5": float((np.minimum(5, c) / c).mean()),
            "policy_nll": float(np.log(c).mean()),
            "value_bce": math.log(2.0), "value_accuracy": 0.5 if (r != 0.5).any() else float("nan")}


def baselines(train: Table, held: Table, limit: int = 0) -> Dict[str, Dict[str, float]]:
    from . import strength_baselines as sb

    freq = sb.label_frequency(train.target_labels())
    mean_result = float(train.result.mean())
    mats = np.array([sb.material(b) for b in sb.boards_of(train.records)])
    slope = sb.fit_material_slope(mats, train.result.astype(np.float64))
    out = {"chance": chance(held)}
    f_sums = h_sums = None
    boards = sb.boards_of(held.records)
    for idx in held.batches(1024, limit):
        legal = held.legal(idx)
        counts, target, result = held.counts[idx], held.target[idx], held.result[idx]
        # log(count + 1): the ranking of the counts, and a policy NLL of add-one smoothing
        f_logits = np.where(legal >= 0, np.log1p(freq[np.maximum(legal, 0)]), 0.0)
        f_sums = add(f_sums, metrics(f_logits, counts, target, np.full(len(idx), mean_result), result))
        h_logits = np.zeros(legal.shape)
        h_value = np.zeros(len(idx))
        for row in range(len(idx)):
            board = next(boards)
            labels = legal[row, :counts[row]]
            h_logits[row, :counts[row]] = sb.heuristic_scores(board, labels, freq)
            h_value[row] = 1.0 / (1.0 + math.exp(-slope * sb.material(board)))
        h_sums = add(h_sums, metrics(h_logits, counts, target, h_value, result))
    out["frequency"] = finish(f_sums)
    out["heuristic"] = finish(h_sums)
    out["heuristic"]["material_slope"] = slope
    out["heuristic"]["policy_nll"] = float("nan")  # its scores rank moves; they are no probabilities
    return out


# ---------------------------------------------------------------------------------------
# The two trained models (each in its own process)


def evaluate_manaka(model, held: Table, limit: int = 0) -> Dict[str, float]:
    import manaka as mk

    sums = None
    for idx in held.batches(1024, limit):
        legal = held.legal(idx)
        batch = mk.Batch(held.tokens[idx].astype(np.int32), legal, held.counts[idx], held.target[idx],
                         held.result[idx])
        logits, value = model.forward(batch)
        sums = add(sums, metrics(logits, held.counts[idx], held.target[idx], value, held.result[idx]))
    return finish(sums)


def evaluate_resnet(run, held: Table, limit: int = 0) -> Dict[str, float]:
    from .strength_resnet import features

    sums = None
    for idx in held.batches(256, limit):
        legal = held.legal(idx)
        logits, value = run.predict(features(held.records[idx]), legal, held.counts[idx])
        sums = add(sums, metrics(logits, held.counts[idx], held.target[idx], value, held.result[idx]))
    return finish(sums)


class Budget:
    """Training wall time (evaluations excluded) and positions; a curve point every
    `every` seconds of training."""

    def __init__(self, seconds: float, positions: int, every: float, every_positions: int = 0):
        self.seconds, self.positions, self.every, self.every_positions = seconds, positions, every, every_positions
        self.trained, self.seen, self.next_eval, self.next_seen = 0.0, 0, every, every_positions

    def spent(self) -> bool:
        return (self.seconds and self.trained >= self.seconds) or (self.positions and self.seen >= self.positions)

    def due(self) -> bool:
        if self.every_positions:
            if self.seen < self.next_seen:
                return False
            while self.next_seen <= self.seen:
                self.next_seen += self.every_positions
            return True
        if self.every and self.trained >= self.next_eval:
            while self.next_eval <= self.trained:
                self.next_eval += self.every
            return True
        return False


def _curve_point(budget: Budget, steps: int, r: Dict[str, float]) -> Dict[str, float]:
    return {"seconds": round(budget.trained, 2), "positions_seen": budget.seen, "steps": steps, **r}


def train_manaka(cfg: dict) -> dict:
    """Trains the recipe's model under the budget; returns its curve and final figures."""
    import manaka as mk
    from ..shogi import open_hcpe
    from ..shogi.recipe import model_config, recipe, trainer_settings

    mk.set_num_threads(1)
    r = recipe(**cfg["settings"])
    held = Table(cfg["held"], moves=r["moves"])
    data = open_hcpe(cfg["train"], value=r["value"], mirror=r["mirror"], moves=r["moves"], eval_scale=cfg["eval_scale"])
    model = mk.Model(model_config(r), seed=cfg["seed"])  # the vocabularies of open_hcpe's encoding
    loader = mk.Loader(data, batch_size=r["batch_size"], producers=1, prefetch=4, shuffle=True, seed=cfg["seed"])
    total = estimate_steps(cfg, r["batch_size"], len(loader))
    trainer = mk.Trainer(model, **trainer_settings(r), total_steps=total)
    budget = Budget(cfg["seconds"], cfg["positions"], cfg["every"], cfg["every_positions"])
    curve, best, best_state, steps, schedule_end = [], None, None, 0, None
    t = time.perf_counter()
    try:
        while not budget.spent():
            for batch in loader:
                trainer.step(batch)
                steps += 1
                now = time.perf_counter()
                budget.trained += now - t
                budget.seen += len(batch)
                if r["schedule"] == "cosine" and steps == total:  # lr is min_lr from here on
                    schedule_end = {"steps": steps, "seconds": budget.trained, "positions_seen": budget.seen}
                if budget.due() or budget.spent():
                    point = _curve_point(budget, steps, evaluate_manaka(model, held, cfg["eval_positions"]))
                    curve.append(point)
                    if r["keep_best"] and (best is None or _better(point, best)):
                        best, best_state = point, model.state_dict()
                if budget.spent():
                    break
                t = time.perf_counter()
    finally:
        loader.close()
    last = curve[-1] if curve else None
    out = {"curve": curve, "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()},
           "parameters": model.num_parameters(), "steps": steps, "positions_seen": budget.seen,
           "seconds": budget.trained, "final_of_last": evaluate_manaka(model, held), "total_steps": total}
    if schedule_end and steps > total:
        out["schedule_end"] = schedule_end
    if r["keep_best"] and best is not None and best is not last:
        model.load_state_dict(best_state)
        out["kept"] = {"seconds": best["seconds"], "steps": best["steps"]}
    out["final"] = evaluate_manaka(model, held) if "kept" in out else out["final_of_last"]
    if cfg["save"]:
        model.save(os.path.join(cfg["save"], "manaka.model"))
    return out


def _better(a: Dict[str, float], b: Dict[str, float]) -> bool:
    """The lower held-out loss (policy NLL + value BCE against the result), as mk.fit's
    keep_best judges by its held-out loss."""
    return a["policy_nll"] + a["value_bce"] < b["policy_nll"] + b["value_bce"]


def estimate_steps(cfg: dict, batch_size: int, per_epoch: int) -> Optional[int]:
    """Steps of the run for a cosine schedule: from --positions, else from --time at
    --rate-guess positions/s."""
    if cfg["positions"]:
        return max(2, cfg["positions"] // batch_size)
    return max(2, int(cfg["seconds"] * cfg["rate_guess"] / batch_size))


def train_resnet(cfg: dict) -> dict:
    import torch

    from .strength_resnet import ResNetRun, features

    torch.set_num_threads(1)
    held = Table(cfg["held"])
    train = Table(cfg["train"], eval_weight=cfg["eval_weight"], eval_scale=cfg["eval_scale"])
    run = ResNetRun(cfg["blocks"], cfg["channels"], lr=cfg["resnet_lr"], seed=cfg["seed"])
    rng = np.random.default_rng(cfg["seed"])
    budget = Budget(cfg["seconds"], cfg["positions"], cfg["every"], cfg["every_positions"])
    curve, steps, B = [], 0, cfg["resnet_batch"]
    order, at = rng.permutation(len(train)), 0
    t = time.perf_counter()
    while not budget.spent():
        if at + B > len(order):
            order, at = rng.permutation(len(train)), 0
        idx = np.sort(order[at:at + B])
        at += B
        run.step(features(train.records[idx]), train.legal(idx), train.counts[idx], train.target[idx],
                 train.value[idx])
        steps += 1
        now = time.perf_counter()
        budget.trained += now - t
        budget.seen += len(idx)
        if budget.due() or budget.spent():
            curve.append(_curve_point(budget, steps, evaluate_resnet(run, held, cfg["eval_positions"])))
        t = time.perf_counter()
    if cfg["save"]:
        torch.save(run.net.state_dict(), os.path.join(cfg["save"], "resnet.pt"))
    return {"curve": curve, "parameters": run.num_parameters(), "steps": steps, "positions_seen": budget.seen,
            "seconds": budget.trained, "final": evaluate_resnet(run, held),
            "settings": {"blocks": cfg["blocks"], "channels": cfg["channels"], "lr": cfg["resnet_lr"],
                         "batch_size": B, "weight_decay": 1e-4, "value": cfg["eval_weight"],
                         "eval_scale": cfg["eval_scale"]}}


# ---------------------------------------------------------------------------------------
# The command


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m manaka.bench strength", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("train", help="training HCPE file (games split from the held-out ones)")
    p.add_argument("held", help="held-out HCPE file (other games)")
    p.add_argument("--time", type=float, default=300.0, help="training seconds of each model (default 300; 0: none)")
    p.add_argument("--positions", type=int, default=0, help="or a budget of positions seen (0: none)")
    p.add_argument("--eval-every", type=float, default=30.0, help="a curve point every this many training seconds")
    p.add_argument("--eval-every-positions", type=int, default=0,
                   help="or a curve point every this many positions seen (for runs compared at equal positions)")
    p.add_argument("--eval-positions", type=int, default=4096, help="held-out positions of each curve point "
                   "(the final row uses all; 0: all)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a manaka recipe setting (manaka/shogi/recipe.py), e.g. --set value=0.5")
    p.add_argument("--only", choices=["manaka", "resnet", "baselines"], action="append",
                   help="run only these rows (repeatable; default all)")
    p.add_argument("--blocks", type=int, default=3, help="ResNet residual blocks (default 3)")
    p.add_argument("--channels", type=int, default=64, help="ResNet channels (default 64)")
    p.add_argument("--resnet-lr", type=float, default=1e-3)
    p.add_argument("--resnet-batch", type=int, default=64)
    p.add_argument("--rate-guess", type=float, default=4000.0,
                   help="manaka positions/s assumed to size a cosine schedule under --time (default 4000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a few seconds each, for a test")
    p.add_argument("--save", metavar="DIR", help="also save the trained models there (manaka.model, resnet.pt)")
    p.add_argument("--tag", default="cpu", help="results name: strength-<tag>.json/.md")
    p.add_argument("--out", help=OUT_HELP)
    return p


def _eval_scale(train: str, r: dict) -> float:
    """The recipe's eval_scale as a number (fitted to the training records as manaka.train
    fits it, with its fallback): both models train on the same value target."""
    from ..train import open_records_scaled

    records = dict(value=r["value"], on_bad="raise", moves=r["moves"])
    scale = open_records_scaled(train, "hcpe", records, r["eval_scale"], True, mirror=False).eval_scale
    return EVAL_SCALE if scale is None else scale  # None: the value target reads no evaluation


def run(a) -> dict:
    from ..shogi.recipe import parse_setting, recipe
    from ..shogi.records import value_weight

    settings = dict(parse_setting(s) for s in a.set)
    r = recipe(**settings)
    only = set(a.only or ["manaka", "resnet", "baselines"])
    cfg = {"train": a.train, "held": a.held, "seconds": a.time, "positions": a.positions, "every": a.eval_every, "every_positions": a.eval_every_positions,
           "eval_positions": a.eval_positions, "settings": settings, "seed": a.seed, "rate_guess": a.rate_guess,
           "blocks": a.blocks, "channels": a.channels, "resnet_lr": a.resnet_lr, "resnet_batch": a.resnet_batch,
           "eval_weight": value_weight(r["value"]), "eval_scale": _eval_scale(a.train, r), "save": a.save}
    if a.save:
        os.makedirs(a.save, exist_ok=True)
    if not a.time and not a.positions:
        raise ValueError("give --time or --positions (a budget > 0)")
    out = {"config": {**{k: v for k, v in cfg.items() if k != "settings"}, "set": list(a.set)},
           "data": {"train_positions": os.path.getsize(a.train) // RECORD,
                    "held_positions": os.path.getsize(a.held) // RECORD}, "recipe": {
        k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()}, "rows": {}}
    jobs = {}
    ctx = multiprocessing.get_context("spawn")
    with futures.ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
        if "manaka" in only:
            jobs["manaka"] = pool.submit(train_manaka, cfg)
        if "resnet" in only:
            jobs["resnet"] = pool.submit(train_resnet, cfg)
        if "baselines" in only:  # in this process, while the two train
            held, train = Table(a.held), Table(a.train)
            out["rows"].update(baselines(train, held))
        for name, job in jobs.items():
            res = job.result()
            out["rows"][name] = res["final"]
            out[name] = res
    return out


def report(out: dict) -> List[str]:
    c = out["config"]
    lines = [f"train {c['train']}, held-out {c['held']}"
             + (f" ({out['data']['train_positions']:,} / {out['data']['held_positions']:,} positions)" if "data" in out else ""),
             f"budget per model: {c['seconds']:g} s of training" + (f", {c['positions']:,} positions" if c['positions'] else "")
             + "; 1 model thread each (manaka: + 1 producer thread), both trained at the same time",
             f"manaka recipe: {out['recipe']}"]
    if c.get("eval_weight") and "eval_scale" in c:
        lines.append(f"value target of both models: {c['eval_weight']:g} x sigmoid(eval / {c['eval_scale']:g}) + "
                     f"{1 - c['eval_weight']:g} x result")
    lines.append("")
    lines.append(f"{'row':<12} {'top-1':>7} {'top-5':>7} {'policy NLL':>10} {'value BCE':>10} {'value acc':>10} "
                 f"{'seen':>10} {'params':>12}")
    for name, r in out["rows"].items():
        extra = out.get(name, {})
        seen = f"{extra['positions_seen']:,}" if "positions_seen" in extra else ""
        params = f"{extra['parameters']:,}" if "parameters" in extra else ""
        lines.append(f"{name:<12} {100 * r['top1']:6.1f}% {100 * r['top5']:6.1f}% {r['policy_nll']:10.4f} {r['value_bce']:10.4f} "
                     f"{100 * r['value_accuracy']:9.1f}% {seen:>10} {params:>12}")
    for name in ("manaka", "resnet"):
        if name not in out:
            continue
        res = out[name]
        lines += ["", f"{name} curve (first {c['eval_positions'] or 'all'} held-out positions):",
                  f"{'seconds':>8} {'seen':>10} {'steps':>7} {'top-1':>7} {'top-5':>7} {'policy NLL':>10} {'value BCE':>10} {'value acc':>10}"]
        for p in res["curve"]:
            lines.append(f"{p['seconds']:8.1f} {p['positions_seen']:10,} {p['steps']:7,} {100 * p['top1']:6.1f}% "
                         f"{100 * p['top5']:6.1f}% {p['policy_nll']:10.4f} {p['value_bce']:10.4f} {100 * p['value_accuracy']:9.1f}%")
        if res.get("schedule_end"):
            e, rate = res["schedule_end"], res["positions_seen"] / max(res["seconds"], 1e-9)
            lines.append(f"note: the cosine schedule (total_steps {res['total_steps']:,} from --rate-guess "
                         f"{c['rate_guess']:g}) ended at {e['seconds']:.1f} s of {res['seconds']:.1f}: the rest trained "
                         f"at min_lr; this run's rate was {rate:,.0f} positions/s (--rate-guess {rate:.0f} fits it)")
        if "kept" in res:
            f = res["final_of_last"]
            lines.append(f"kept the best curve point ({res['kept']['seconds']:.1f} s, step {res['kept']['steps']}); "
                         f"the last one scored top-1 {100 * f['top1']:.1f}%, value BCE {f['value_bce']:.4f} on all")
    return lines


def _argument_error(a) -> str:
    """What is wrong with the numbers and --save, or "": each budget and cadence finite and
    >= 0 (a negative --eval-every or --eval-every-positions looped forever in Budget.due, a
    NaN --time never ran out, a negative --time or --positions reported an untrained model),
    each size >= 1, each rate finite and > 0, --save a folder (or none yet)."""
    import math

    for option, value in (("--time", a.time), ("--eval-every", a.eval_every), ("--positions", a.positions),
                          ("--eval-every-positions", a.eval_every_positions), ("--eval-positions", a.eval_positions)):
        if not (math.isfinite(value) and value >= 0):
            return f"{option} must be a finite number >= 0, got {value}"
    for option, value in (("--blocks", a.blocks), ("--channels", a.channels), ("--resnet-batch", a.resnet_batch)):
        if value < 1:
            return f"{option} must be >= 1, got {value}"
    for option, value in (("--resnet-lr", a.resnet_lr), ("--rate-guess", a.rate_guess)):
        if not (math.isfinite(value) and value > 0):
            return f"{option} must be a finite number > 0, got {value}"
    if not a.time and not a.positions:
        return "give --time or --positions (a budget > 0)"
    if a.save and os.path.exists(a.save) and not os.path.isdir(a.save):
        return f"--save {a.save} is a file, not a folder"
    return ""


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    if a.quick:
        a.time, a.eval_every, a.eval_positions = min(a.time, 6.0), 2.0, min(a.eval_positions or 512, 512)
    why = _argument_error(a)
    if why:
        print(f"strength: {why}", file=sys.stderr)
        return 2
    for path in (a.train, a.held):
        if not os.path.isfile(path):
            print(f"strength: {path}: no such file", file=sys.stderr)
            return 2
    try:
        out = run(a)
    except (ValueError, KeyError) as e:
        print(f"strength: {e}", file=sys.stderr)
        return 2
    lines = report(out)
    note_resources(lines, out, "a shared machine: the two models train side by side under the same load")
    print("\n".join(lines))
    path = write_results("strength", a.tag, out, lines, a.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
