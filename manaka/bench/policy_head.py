"""The fused policy head against the split one, inside the whole training step: the fused
head is kept only while it beats the two-kernel path, so the comparison is recorded either
way. Used by ``python -m manaka.bench step`` on the CPU and with ``--device cuda``.

fused: one pass per position computes the logits over its legal moves, the masked
log-softmax, the cross-entropy, the logit gradient and dq (backend entry policy_head);
split: GatherDot writes logits [B, L], softmax_xent reads them and writes dlogits, and
GatherDot's backward reads dlogits again to form dq. Both heads run the same model from the
same parameters; their steps are timed interleaved (A B, B A, ...), so other processes'
load falls on both alike, after checking that they compute the same loss and gradients.

The heads alone (`compare_ops`): the part of the step that differs is small beside the
rest (PairSums, the GEMMs, AdamW), so the step comparison can drown in noise on a shared
machine. compare_ops times the backend's policy_head entry against the three entries it
replaces, on the seed batch, through manaka._testing.backend_policy_head with `repeats` runs per
call on the same device buffers; the fixed cost of the call (copies in and out) is
measured with repeats=1 and subtracted: per op = (t(R) - t(1)) / (R - 1).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

import manaka as mk

from . import testing_hooks
from .floors import explain, floor_ms, policy_head_floor
from .timing import measure_interleaved, phase_ms

GRAD_TOL = 1e-4  # the fused and split gradients agree to float rounding (tests: 1e-5 .. 1e-4)


def _max_rel_err(a: Dict[str, np.ndarray], b: Dict[str, np.ndarray]) -> float:
    worst = 0.0
    for name, x in a.items():
        y = np.float64(b[name])
        worst = max(worst, float(np.abs(np.float64(x) - y).max() / max(np.abs(y).max(), 1e-30)))
    return worst


def compare(fused: mk.Model, fused_trainer: mk.Trainer, batch: mk.Batch, runs: int, warmup: int,
            sync: Callable[[], None] = lambda: None,
            launches: Optional[Callable[[], int]] = None) -> Tuple[List[str], Dict[str, object]]:
    """(report lines, results) for `fused` (a model with policy_head="fused" and its trainer)
    against a split-head twin built here from the same parameters."""
    if fused.policy_head != "fused":
        raise ValueError(f"compare: the model must have policy_head='fused', got {fused.policy_head!r}")
    split = mk.Model(fused.config, device=fused.device, seed=fused.seed, policy_head="split")
    split.load_state_dict(fused.state_dict())
    split_trainer = mk.Trainer(split, lr=fused_trainer.lr, pair_state_dtype=fused_trainer.pair_state_dtype)
    (s1, g1), (s2, g2) = fused.loss_and_grad(batch), split.loss_and_grad(batch)
    grad_err = _max_rel_err(g1, g2)
    if abs(s1["loss"] - s2["loss"]) > 1e-5 * abs(s2["loss"]) or grad_err > GRAD_TOL:
        raise RuntimeError(f"policy heads disagree: loss fused {s1['loss']} split {s2['loss']}, "
                           f"largest relative gradient difference {grad_err:.2e}")
    del g1, g2
    trainers = {"fused": fused_trainer, "split": split_trainer}
    results: Dict[str, object] = {"loss_fused": s1["loss"], "loss_split": s2["loss"],
                                  "max_rel_grad_difference": grad_err}
    if launches is not None:
        per_step = {}
        for head, trainer in trainers.items():
            before = launches()
            trainer.step(batch)
            sync()
            per_step[head] = launches() - before
        results["launches_per_step"] = per_step
    times = measure_interleaved({head: (lambda t=t: t.step(batch)) for head, t in trainers.items()},
                                runs=runs, warmup=warmup, sync=sync)
    phases = {head: phase_ms(trainer, batch, max(3, runs // 2)) for head, trainer in trainers.items()}
    ratio = times["split"].median_ms / times["fused"].median_ms
    results.update(fused=times["fused"], split=times["split"], split_over_fused=ratio,
                   phases_ms=phases, interleaved_rounds=runs)
    B = len(batch)
    lines = [f"policy head, fused vs split (the same step, {runs} interleaved rounds; losses agree,"
             f" gradients within {grad_err:.1e}):"]
    for head in ("fused", "split"):
        t = times[head]
        t.name = f"  step with the {head} policy head"
        t.count_positions(B)
        if launches is not None:
            t.extra["launches/step"] = results["launches_per_step"][head]
        lines.append(t.row())
        p = phases[head]
        lines.append(f"    phases (ms): forward+loss {p['forward']:.3f} | backward {p['backward']:.3f}"
                     f" | AdamW {p['optimizer']:.3f} | forward+loss+backward {p['forward'] + p['backward']:.3f}")
    lines.append(f"  split / fused median step time: {ratio:.3f}"
                 f" ({'fused faster' if ratio > 1 else 'fused not faster'})")
    del split_trainer, split
    return lines, results


def compare_ops(backend, batch: mk.Batch, W: int, M: int, runs: int, repeats: int,
                sync: Callable[[], None] = lambda: None,
                rates: Optional[Dict[str, float]] = None) -> Tuple[List[str], Dict[str, object]]:
    """(report lines, results): the fused policy head entry against the split entries, on
    `backend` (a name or a capsule), for q [B, W] and a move table [M, W] of random normals
    (logits ~ N(0, 1)) over the batch's legal lists and targets. With `rates` (the CPU's,
    floors.cpu_rates), also the fused entry's floor (floors.policy_head_floor and
    floors.floor_ms: max(bytes at the copy rate, FLOPs at the GEMM rate)) and its time over
    it."""
    hooks = testing_hooks("the policy head comparison of python -m manaka.bench step")
    rng = np.random.default_rng(0)
    B = len(batch)
    q = rng.standard_normal((B, W), dtype=np.float32) / np.float32(np.sqrt(W))
    table = rng.standard_normal((M, W), dtype=np.float32)
    args = (q, table, batch.legal, batch.counts, batch.target, batch.policy_target, 1.0 / B)
    outs = {head: hooks.backend_policy_head(backend, *args, head=head) for head in ("fused", "split")}
    worst = max(_max_rel_err({"x": a}, {"x": b}) for a, b in zip(outs["fused"][:3], outs["split"][:3]))
    if worst > GRAD_TOL or not np.array_equal(outs["fused"][3], outs["split"][3]):
        raise RuntimeError(f"policy head entries disagree: largest relative difference {worst:.2e}")
    fns = {}
    for head in ("fused", "split"):
        for r in (repeats, 1):
            fns[(head, r)] = (lambda h=head, r=r: hooks.backend_policy_head(backend, *args, head=h, repeats=r))
    t = measure_interleaved(fns, runs=runs, warmup=1, sync=sync)
    per_op = {head: (t[(head, repeats)].median_ms - t[(head, 1)].median_ms) / (repeats - 1)
              for head in ("fused", "split")}
    ratio = per_op["split"] / per_op["fused"]
    n = int(batch.counts.sum())
    lines = [f"policy head entries alone (B={B} L={batch.legal.shape[1]} W={W} M={M}, {n / B:.0f} legal"
             f" moves per position; {runs} interleaved rounds of {repeats} runs per call, the call's"
             f" fixed cost subtracted):",
             f"  fused policy_head                            {per_op['fused']:10.3f} ms",
             f"  split gather_dot + softmax_xent + grad_hidden {per_op['split']:9.3f} ms",
             f"  split / fused: {ratio:.3f} ({'fused faster' if ratio > 1 else 'fused not faster'})"]
    results = {"per_op_ms": per_op, "split_over_fused": ratio, "repeats": repeats, "rounds": runs,
               "calls_ms": {f"{h} x{r}": v for (h, r), v in t.items()},
               "max_rel_difference": worst}
    if rates is not None and rates.get("gemm_gflops"):
        need = policy_head_floor(batch.legal, batch.counts, W)
        ms = floor_ms(need, rates["copy_gbs"], rates["gemm_gflops"])
        results["floor"] = {**need, **rates, "floor_ms": ms, "fused_over_floor": per_op["fused"] / ms}
        lines.append(f"  fused floor: {explain(need, rates['copy_gbs'], rates['gemm_gflops'])};"
                     f" the fused entry takes {per_op['fused'] / ms:.2f}x that")
    return lines, results
