"""Does keeping the pair table's AdamW moments in bf16 (Trainer(pair_state_dtype="bf16"))
change learning, and what does it save?

1. Learning: identical students (same seed, same batches, same schedule), one with
   float32 moments, one with bf16, and a float32 control with lr nudged by 1e-6, learn the moves and values of a fixed random teacher
   network of the same family. The config is reduced to run on a small CPU in a minute or
   two, but keeps a pair table (V = 400: 80 k pairs x 16 = 1.3 M parameters, most of the
   model) that every step touches sparsely. Loss curves side by side every --log-every
   steps, held-out loss and accuracy (4096 positions) at the end, for each student seed.
2. Cost: the pair table's fused gradient + AdamW per step at the seed shapes (44 M
   parameters) with both dtypes, from the trainer's own phase timer (median of --time-steps
   alternating steps after a warm-up), and the moment memory. On a shared machine the
   times are noisy: read min and max beside the median. The learning runs' wall times are
   printed for orientation only (they are not alternated).

    python bench/bf16_moments.py [--steps 3000] [--tag cpu]

Writes <out>/bf16-moments-<tag>.{json,md} (--out, default ./bench_results).
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import manaka as mk  # noqa: E402
from manaka.bench.seed import SeedShapes  # noqa: E402
from manaka.bench.step import seed_batch  # noqa: E402
from manaka.bench.timing import OUT_HELP, write_results  # noqa: E402

DTYPES = ("float32", "bf16")
CFG = mk.ModelConfig(num_tokens=400, num_moves=300, tokens_per_side=24, embed_dim=16, orders=2,
                     pair_dim=16, hidden=(64,), head_width=32)


def labelled(teacher, rng, cfg, B, L=32):
    """Random positions labelled by the teacher's best legal move and its value."""
    tokens = rng.integers(0, cfg.num_tokens, (B, 2, cfg.tokens_per_side))
    tokens[rng.random(tokens.shape) < 0.2] = -1
    counts = rng.integers(2, L + 1, B)
    legal = np.full((B, L), -1)
    for b in range(B):
        legal[b, :counts[b]] = rng.choice(cfg.num_moves, counts[b], replace=False)
    unlabelled = mk.Batch(tokens, legal, counts, np.zeros(B, int), np.zeros(B, np.float32))
    logits, value = teacher.forward(unlabelled)
    logits[np.arange(L)[None, :] >= counts[:, None]] = -np.inf
    return mk.Batch(tokens, legal, counts, logits.argmax(axis=1), value)


# (label, pair_state_dtype, lr factor). The control is float32 again with lr nudged by one
# part in a million: how far chaos alone carries two all-but-identical runs apart, the
# yardstick for the float32 / bf16 difference.
VARIANTS = (("float32", "float32", 1.0), ("bf16", "bf16", 1.0), ("control", "float32", 1.0 + 1e-6))


def learning(args):
    """{student seed: {variant: run}} on one fixed data stream, and chance accuracy."""
    teacher = mk.Model(CFG, seed=1)
    rng = np.random.default_rng(0)
    batches = [labelled(teacher, rng, CFG, args.batch) for _ in range(args.steps)]
    held_out = labelled(teacher, rng, CFG, 4096)
    runs = {}
    for seed in args.seeds:
        for label, dtype, factor in VARIANTS:
            student = mk.Model(CFG, seed=seed)
            lr = args.lr * factor
            trainer = mk.Trainer(student, lr=lr, weight_decay=0.0, warmup_steps=100,
                                 schedule="cosine", total_steps=args.steps, min_lr=lr / 20,
                                 pair_state_dtype=dtype)
            start, losses, accs = time.perf_counter(), [], []
            for b in batches:
                stats = trainer.step(b)
                losses.append(stats.loss)
                accs.append(stats.accuracy)
            seconds = time.perf_counter() - start
            final, _ = student.loss_and_grad(held_out)
            runs.setdefault(seed, {})[label] = dict(
                loss=losses, accuracy=accs, seconds=seconds,
                held_out={k: float(v) for k, v in final.items()},
                moment_bytes=trainer._core.moment_bytes(),
                pair_table=student.state_dict()["pair_table"],
                pair_v=trainer.state_dict()["exp_avg_sq"]["pair_table"])
    return runs, float(np.mean(1.0 / held_out.counts))


def curve(values, every):
    """Mean over each window of `every` steps."""
    v = np.asarray(values)
    n = len(v) // every
    return v[:n * every].reshape(n, every).mean(axis=1)


def pair_adamw_ms(steps, batch):
    """Per dtype, ms per step of the pair table's fused gradient + AdamW at the seed shapes
    (median, min, max over `steps`). The two trainers step alternately, so a load from
    another process on the machine falls on both alike."""
    s = SeedShapes()
    cfg = mk.ModelConfig(num_tokens=s.V, num_moves=s.M, tokens_per_side=s.T, embed_dim=s.D,
                         orders=s.K, pair_dim=s.P, hidden=(512, 512), head_width=s.W)
    b = seed_batch(cfg, batch, s.L, seed=0)
    trainers = {d: mk.Trainer(mk.Model(cfg, seed=0), pair_state_dtype=d) for d in DTYPES}
    times = {d: [] for d in DTYPES}
    for t in trainers.values():
        t.step(b)  # warm-up: first touch of the moments, thread pool
    for _ in range(steps):
        for d, t in trainers.items():
            t.profile(True)  # resets the accumulated times
            t.step(b)
            times[d].append(t.phase_times()["optimizer_pair_table"] * 1e3)
            t.profile(False)
    return {d: dict(median_ms=float(np.median(times[d])), min_ms=float(np.min(times[d])),
                    max_ms=float(np.max(times[d])), steps=steps, batch=batch,
                    moment_bytes=trainers[d]._core.moment_bytes(), all_ms=times[d])
            for d in DTYPES}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seeds", type=int, nargs="+", default=[2, 3], help="student seeds")
    ap.add_argument("--log-every", type=int, default=250)
    ap.add_argument("--time-steps", type=int, default=9)
    ap.add_argument("--time-batch", type=int, default=256,
                    help="batch of the timing steps (the pair-table update sweeps the whole table anyway)")
    ap.add_argument("--tag", default="cpu")
    ap.add_argument("--out", default=None, help=OUT_HELP)
    args = ap.parse_args(argv)

    runs, chance = learning(args)
    labels = [v[0] for v in VARIANTS]
    first = runs[args.seeds[0]]
    lines = [f"Learning: teacher/student, V={CFG.num_tokens} T={CFG.tokens_per_side} "
             f"P={CFG.pair_dim} hidden={CFG.hidden}, {args.steps} steps of batch {args.batch}, "
             f"lr {args.lr} cosine, the same data for every run",
             f"control = float32 with lr x (1 + 1e-6): the spread chaos alone gives",
             f"training loss (mean per window), student seed {args.seeds[0]}:",
             f"{'steps':>11} | " + " ".join(f"{x:>8}" for x in labels) + f" | {'bf16-f32':>8} {'ctrl-f32':>8}"]
    c = {x: curve(first[x]["loss"], args.log_every) for x in labels}
    for i in range(len(c["float32"])):
        lo, hi = i * args.log_every + 1, (i + 1) * args.log_every
        lines.append(f"{lo:>5}-{hi:<5} | " + " ".join(f"{c[x][i]:8.4f}" for x in labels) +
                     f" | {c['bf16'][i] - c['float32'][i]:+8.4f} {c['control'][i] - c['float32'][i]:+8.4f}")
    lines += ["", f"held-out (4096 positions, chance accuracy {chance:.3f}):"]
    for seed in args.seeds:
        for x in labels:
            r = runs[seed][x]
            h = r["held_out"]
            dist = (np.linalg.norm(r["pair_table"] - runs[seed]["float32"]["pair_table"]) /
                    np.linalg.norm(runs[seed]["float32"]["pair_table"]))
            lines.append(f"  seed {seed} {x:>7}: loss {h['loss']:.4f}  policy {h['policy_loss']:.4f}  "
                         f"value {h['value_loss']:.4f}  accuracy {h['accuracy']:.4f}  "
                         f"pair_table off float32 by {dist:.3f} of its norm  "
                         f"({r['seconds']:.0f} s wall, moments {r['moment_bytes'] / 1e6:.1f} MB)")
    lines += ["", "the pair table's exp_avg_sq at the end against the float32 run's, |v - v_f32| / v_f32 "
              "over its non-zero entries. Stochastic rounding is unbiased but makes v a multiplicative "
              "random walk (~1/4 ulp of relative noise per step); for an entry whose gradient is zero on "
              "most steps, as in a sparsely hit pair table, decay shrinks v and its error alike, so the "
              "relative error grows like sqrt(steps) until a gradient arrives. The runs' diverging "
              "trajectories add to it (the control shows how much chaos alone gives):"]
    for seed in args.seeds:
        ref_v = runs[seed]["float32"]["pair_v"]
        nz = ref_v > 0
        for x in labels[1:]:
            rel = np.abs(runs[seed][x]["pair_v"][nz] - ref_v[nz]) / ref_v[nz]
            lines.append(f"  seed {seed} {x:>7}: median {np.median(rel):.4f}, 90th percentile "
                         f"{np.quantile(rel, 0.9):.4f}")
            runs[seed][x]["pair_v_rel_dev"] = dict(median=float(np.median(rel)),
                                                   p90=float(np.quantile(rel, 0.9)))
    mean = {x: {k: float(np.mean([runs[s][x]["held_out"][k] for s in args.seeds]))
                for k in ("loss", "accuracy")} for x in labels}
    lines.append("  mean over seeds: " + ", ".join(
        f"{x} loss {mean[x]['loss']:.4f} acc {mean[x]['accuracy']:.4f}" for x in labels))

    timing = pair_adamw_ms(args.time_steps, args.time_batch)
    lines += ["", f"Pair table fused gradient + AdamW at the seed shapes (V=2344, P=16: 44 M parameters), "
              f"batch {args.time_batch}, median of {args.time_steps} alternating steps, "
              f"{mk._core.build_info()['num_threads']} threads:"]
    for d in DTYPES:
        t = timing[d]
        lines.append(f"  {d:>7}: {t['median_ms']:8.1f} ms  (min {t['min_ms']:.1f}, max {t['max_ms']:.1f})  "
                     f"moments {t['moment_bytes'] / 1e6:.0f} MB")
    lines.append(f"  bf16 / float32 time: {timing['bf16']['median_ms'] / timing['float32']['median_ms']:.3f}")
    print("\n".join(lines))

    payload = dict(config=CFG.to_dict(), steps=args.steps, batch=args.batch, lr=args.lr,
                   seeds=args.seeds, log_every=args.log_every, chance_accuracy=chance,
                   variants=[dict(label=x, pair_state_dtype=d, lr_factor=f) for x, d, f in VARIANTS],
                   runs={str(seed): {x: dict(loss_curve=curve(r["loss"], args.log_every).tolist(),
                                             accuracy_curve=curve(r["accuracy"], args.log_every).tolist(),
                                             held_out=r["held_out"], seconds=r["seconds"],
                                             moment_bytes=r["moment_bytes"],
                                             pair_v_rel_dev=r.get("pair_v_rel_dev"))
                                     for x, r in by_label.items()}
                         for seed, by_label in runs.items()},
                   held_out_mean=mean, pair_adamw_seed_shapes=timing)
    print(write_results("bf16-moments", args.tag, payload, lines, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
