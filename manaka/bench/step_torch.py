"""``python -m manaka.bench step_torch`` (also ``step --torch``): the training step at the seed
configuration, four ways, on the same parameters and batch:

* ``mk.Trainer`` (manaka's C step: forward, loss, backward and AdamW fused in C);
* ``manaka.torch.Network`` + ``torch.optim.AdamW(fused=True)``, eager and under
  ``torch.compile(fullgraph=True)`` (the fused ops as PyTorch custom operators), and eager
  under ``torch.autocast(device, torch.bfloat16)`` (the trunk in bfloat16; the fused ops
  run in float32 there, see manaka/torch/ops.py);
* plain PyTorch without manaka (manaka/bench/torch_baseline.py, DenseTorchNet: policy
  logits as one dense GEMM over all M moves then gathered, PowerSums and PairSums as
  ``embedding_bag``), with the same fused AdamW, eager and compiled;
* the same plain PyTorch step with a sparse pair-table gradient and
  ``torch.optim.SparseAdam`` for the pair table (AdamW for the rest), eager and compiled
  (the pair table's embedding_bag eager, the rest compiled: inductor fails on its sparse
  backward);
* ``mk.Trainer(pair_update="sparse")`` beside the dense ``mk.Trainer``; the ratios are
  also given against it.

All four start from the same parameters; their first losses are checked to agree before
anything is timed. Steps are timed interleaved (each round runs every variant once, in an
order reversed every round), so load from other processes falls on all of them alike.

The batch: the uniform seed batch of docs/design.md §5 by default, whose random tokens name
~44 % of the pair table's rows; with ``--records FILES`` real positions from shogi records
(dlshogi labels, legal lists padded to --max-legal), of which a batch names a few percent, as
in training. Every variant cycles through the same ``--batches`` batches in the same order, so
the sparse updates pay their catch-up of rows that come back after a gap.

On the CPU it ends with the dense step's floor (manaka/bench/floors.py, step_floor): per
phase (the pair gathers, the GEMMs and GatherDot, the update), max(the bytes it cannot avoid
at this machine's copy rate, the FLOPs at its GEMM rate), summed over the phases; rates measured in the
same run (floors.cpu_rates).
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from typing import List

import numpy as np

import manaka as mk
from manaka.bench.seed import MAX_LEGAL_HELP, SMALL, max_legal
from manaka.bench.step import SEED, seed_batch
from manaka.bench.floors import cpu_rates, explain, phases_floor_ms, step_floor, phases_total
from manaka.bench.timing import HEADER, OUT_HELP, measure_interleaved, note_resources, write_results, use_threads


def padded(batch: mk.Batch, L: int) -> mk.Batch:
    """`batch` with its legal lists padded with -1 to L slots (every batch the same shape, so a
    compiled step compiles once)."""
    if batch.max_legal > L:
        raise SystemExit(f"--max-legal {L}: a batch has {batch.max_legal} legal slots; raise --max-legal")
    legal = np.full((len(batch), L), -1, np.int32)
    legal[:, :batch.max_legal] = batch.legal
    return mk.Batch(batch.tokens, legal, batch.counts, batch.target, batch.value)


def step_batches(cfg: mk.ModelConfig, args):
    """(batches, a line saying what they are) for --records / --batches."""
    count = args.batches or (8 if args.records else 1)
    if not args.records:
        return [seed_batch(cfg, args.batch, args.max_legal, seed=i) for i in range(count)], \
            f"{count} seed batch(es) (uniform random tokens)"
    from manaka.bench.pair_update import named_rows, record_batches

    batches = [padded(b, args.max_legal) for b in record_batches(args.records, args.batch, count)]
    share = np.mean([named_rows(b) for b in batches]) / cfg.num_pairs
    return batches, f"{count} batches of positions from {args.records} (a batch names {share:.1%} of the pair rows)"


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m manaka.bench step_torch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1024, help="B (default 1024)")
    ap.add_argument("--max-legal", type=int, default=None, help=MAX_LEGAL_HELP)
    ap.add_argument("--records", default=None, metavar="FILES",
                    help="real positions from shogi records (HCPE / PSV file, glob or folder) instead of the seed batch")
    ap.add_argument("--batches", type=int, default=None,
                    help="distinct batches every variant cycles through (default 1; 8 with --records)")
    ap.add_argument("--runs", type=int, default=5, help="timed interleaved rounds (median of N)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed rounds first (compilation happens here)")
    ap.add_argument("--threads", type=int, default=0, help="threads for manaka and torch (0: manaka's default)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants")
    ap.add_argument("--small", action="store_true",
                    help="a small configuration, to test the benchmark itself (not a result)")
    ap.add_argument("--tag", default=None, help="results file tag: <out>/step-torch-<tag>.* (default: the device)")
    ap.add_argument("--out", default=None, help=OUT_HELP)
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--dry-run", action="store_true",
                    help="parse the arguments, print them and exit (tools/gpu_check.sh --rehearse)")
    args = ap.parse_args(argv)
    args.max_legal = max_legal(args.max_legal, args.small)
    if args.dry_run:
        print(f"dry run: {vars(args)}")
        return 0
    try:
        import torch
        import manaka.torch as mkt
        from manaka.bench import torch_baseline
    except ImportError as e:
        print(f"python -m manaka.bench step_torch needs torch: {e}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"step_torch --device cuda: torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        return 2

    use_threads("step_torch", args.threads)
    torch.set_num_threads(mk.get_num_threads())
    load = os.getloadavg()
    cfg = mk.ModelConfig(**(SMALL if args.small else SEED))
    B, dev = args.batch, args.device
    batches, source = step_batches(cfg, args)
    batch = batches[0]
    model = mk.Model(cfg, seed=0, device=dev)
    state = model.state_dict()
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    results = {"config": cfg.to_dict(), "batch": B, "max_legal": args.max_legal, "device": dev, "source": source,
               "threads": mk.get_num_threads(), "torch": torch.__version__, "load_average_at_start": load}

    # every variant starts from the same parameters; their first losses must agree
    losses = {"mk.Trainer": model.loss_and_grad(batch)[0]["loss"]}
    trainer = mk.Trainer(model, lr=1e-3)
    sparse_trainer = mk.Trainer(mk.Model(cfg, seed=0, device=dev), lr=1e-3, pair_update="sparse")
    net = mkt.Network.from_model(model, device=dev)
    tensors = mkt.batch_tensors(batch, dev)
    tensor_sets = [tensors] + [mkt.batch_tensors(b, dev) for b in batches[1:]]
    opt = torch.optim.AdamW(mkt.param_groups(net, 0.01), lr=1e-3, fused=True)
    with torch.no_grad():
        losses["manaka.torch"] = float(net.loss(**tensors))
    with torch.no_grad(), torch.autocast(dev, torch.bfloat16):
        autocast_loss = float(net.loss(**tensors))
    dense = torch_baseline.TorchStep(cfg, state, batches, lr=1e-3, device=dev, dense=True, fused=True)
    losses["plain torch"] = dense.loss()
    sparse_adam = torch_baseline.TorchStep(cfg, state, batches, lr=1e-3, device=dev, dense=True, fused=True,
                                           sparse_adam=True)
    losses["plain torch, SparseAdam pairs"] = sparse_adam.loss()
    bad = {k: v for k, v in losses.items() if abs(v - losses["mk.Trainer"]) > 1e-4 * abs(losses["mk.Trainer"])}
    results["loss_check"] = {**losses, "manaka.torch autocast bf16": autocast_loss}
    if abs(autocast_loss - losses["mk.Trainer"]) > 2e-2 * abs(losses["mk.Trainer"]):
        bad["manaka.torch autocast bf16"] = autocast_loss  # bfloat16's rounding: a looser bound
    if bad:
        print(f"error: first losses disagree: {losses}", file=sys.stderr)
        return 1

    def network_step(loss_fn, autocast=False):
        cycle = itertools.cycle(tensor_sets)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev, torch.bfloat16, enabled=autocast):
                loss = loss_fn(**next(cycle))
            loss.backward()
            opt.step()
            return loss.detach()
        return step

    dense_cycle, sparse_cycle = itertools.cycle(batches), itertools.cycle(batches)

    def trainer_step():
        trainer.step(next(dense_cycle)).loss  # reading the loss waits for a GPU step too

    def sparse_trainer_step():
        sparse_trainer.step(next(sparse_cycle)).loss

    variants = {
        "mk.Trainer step": trainer_step,
        "mk.Trainer step, sparse pair update": sparse_trainer_step,
        "manaka.torch.Network + AdamW eager": network_step(net.loss),
        "manaka.torch.Network + AdamW eager, autocast bf16": network_step(net.loss, autocast=True),
        "plain torch (dense) + AdamW eager": dense.step,
        "plain torch (dense) + SparseAdam pairs eager": sparse_adam.step,
    }
    compile_s = {}
    if not args.no_compile:
        compiled_net = torch_baseline.TorchStep(cfg, state, batches, lr=1e-3, device=dev, dense=True,
                                                fused=True, compile=True)
        compiled_sparse = torch_baseline.TorchStep(cfg, state, batches, lr=1e-3, device=dev, dense=True,
                                                   fused=True, compile=True, sparse_adam=True)
        net_compiled = network_step(torch.compile(net.loss, fullgraph=True))
        for name, fn in (("manaka.torch.Network + AdamW compiled", net_compiled),
                         ("plain torch (dense) + AdamW compiled", compiled_net.step),
                         ("plain torch (dense) + SparseAdam pairs compiled", compiled_sparse.step)):
            start = time.perf_counter()
            fn()  # the first call compiles
            sync()
            compile_s[name] = time.perf_counter() - start
            variants[name] = fn
    results["first_call_s_compiled"] = compile_s

    timings = measure_interleaved(variants, runs=args.runs, warmup=args.warmup, sync=sync)
    base = timings["mk.Trainer step"]
    lines = [f"seed configuration: {cfg}",
             f"B={B} L={args.max_legal} device={dev} threads={mk.get_num_threads()} torch {torch.__version__}",
             f"batches: {source}",
             "first losses at the same parameters: " + ", ".join(f"{k} {v:.6f}" for k, v in losses.items())
             + f" (autocast bf16: {autocast_loss:.6f})",
             "", HEADER]
    for name, t in timings.items():
        t.count_positions(B)
        lines.append(t.row(baseline=None))
    lines.append("")
    sparse_base = timings["mk.Trainer step, sparse pair update"]
    for name, t in timings.items():
        if name != "mk.Trainer step":
            lines.append(f"  {name}: {t.median_ms / base.median_ms:.2f}x mk.Trainer's time")
    for name, t in timings.items():
        if name.startswith("plain torch"):
            lines.append(f"  {name}: {t.median_ms / sparse_base.median_ms:.2f}x mk.Trainer sparse's time")
    for name, s in compile_s.items():
        lines.append(f"  first call of {name} (compilation): {s:.1f} s")
    if dev == "cpu":
        phases, rates = step_floor(cfg, batch, model.num_parameters()), cpu_rates(mk.get_num_threads())
        ms = phases_floor_ms(phases, rates["copy_gbs"], rates["gemm_gflops"])
        results["floor"] = {**phases_total(phases), "phases": phases, **rates, "floor_ms": ms}
        lines.append(f"  the dense step's floor (the sum of its phases' floors; NumPy copy and NumPy sgemm"
                     f" rates, best of 7) = {ms:.1f} ms; mk.Trainer step is {base.median_ms / ms:.2f}x the floor")
        lines += [f"    {name}: {explain(need, rates['copy_gbs'], rates['gemm_gflops'])}"
                  for name, need in phases.items()]
    results["timings"] = timings
    results["ratio_to_trainer"] = {n: t.median_ms / base.median_ms for n, t in timings.items()}
    results["ratio_to_sparse_trainer"] = {n: t.median_ms / sparse_base.median_ms for n, t in timings.items()}
    note_resources(lines, results, "other processes inflate every time above, all variants alike: they are interleaved")
    print("\n".join(lines))
    if not args.no_write:
        print("wrote", write_results("step-torch", args.tag or dev, results, lines, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
