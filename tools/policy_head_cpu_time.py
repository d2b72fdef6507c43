"""The CPU policy head of a training step, timed alone, against its floor; interleaved A/B
across source trees (bench/results/policy-head-cpu.md).

    python tools/policy_head_cpu_time.py ROUNDS TREE [TREE ...] [--records FILE]

Each round runs one process per tree (order rotated every round, so other processes' load
falls on all alike) that times, on one thread, in process CPU time, the backend's policy head
(manaka._testing.backend_policy_head, the hook the step benchmark uses) per call as
(median t(R) - median t(1)) / (R - 1), the copies in and out subtracted:
  seed fused          the fused entry (logits, cross-entropy, dq) at the seed batch (B 1024, L 600,
                      W 300, M 2187, ~103 legal moves a position)
  seed fused+table    the same and gather_dot_backward's grad_table: the whole policy head of a
                      seed step
  recipe split        gather_dot + softmax_xent + grad_hidden at the shogi recipe's shapes (W 64,
                      M 262,440) over B 512 real positions (--records; the recipe's model adds
                      MovePairSums to the logits, so its step runs the split head)
  recipe split+table  the same and grad_table (every row written: move_update="dense")
q and the table are random normals (logits ~ N(0, 1)), as in policy_head.compare_ops.

The floor (manaka/bench/floors.py, measured once, before the rounds, with this repository's
manaka): max(the bytes that must move at this core's copy rate, the multiply-adds at the
sgemm rate), the rates from floors.cpu_rates on one thread (a 256 MiB NumPy copy, read +
write; NumPy's sgemm on a 2048 cube; each the best of 9 in process CPU time). Bytes
(floors.policy_head_floor): q and the legal slots read, each distinct table row read once,
dlogits [B, L] and dq written, the per-row stats; with the table, grad_table [M, W] written.
FLOPs: 2 n W for the logits, 2 n W for dq, 2 n W for grad_table (n legal slots). The
exponentials and logarithms are not counted.

Beside it, the row-read floor: each pass of the head reads one W-float row per legal slot
(the logits and dq read the slot's table row, grad_table the slot's q row): n W 4 bytes a
pass, 2 passes fused, 3 with the table, at the rate NumPy's sgemv reads a random [M, W]
table (one thread, best of 9; for the seed's 2.6 MB table that is the L3 cache's rate);
the seed cases only (the recipe's batch names a few thousand rows, which stay in cache).
The floor above counts each distinct row once, which only a reuse of rows across positions
inside a cache could reach; a batch of positions naming ~5 % of the moves each has little."""
import json
import os

# NumPy's BLAS on one thread for the row-read floor's sgemv (before NumPy is imported; the
# children time manaka with mk.set_num_threads(1), the sgemm probe sets its own)
os.environ["OPENBLAS_NUM_THREADS"] = "1"
import statistics
import subprocess
import sys
import time

import numpy as np

CASES = ["seed fused", "seed fused+table", "recipe split", "recipe split+table"]


def inputs(records):
    import manaka as mk
    from manaka.bench.step import SEED, seed_batch
    out = {}
    cfg = mk.ModelConfig(**SEED)
    b = seed_batch(cfg, 1024, 600)
    out["seed"] = (b, cfg.head_width, cfg.num_moves)
    if records:
        from manaka.bench.pair_update import record_batches
        from manaka.shogi import recipe
        rcfg = recipe.model_config()
        rb = record_batches(records, 512, 1, moves=recipe.RECIPE["moves"])[0]
        # with move kinds, a label's move-table row is label % rows (backend move_kind_split)
        rows = rcfg.num_moves // rcfg.move_kinds if rcfg.move_kinds else rcfg.num_moves
        out["recipe"] = (rb, rcfg.head_width, rows)
    data = {}
    for name, (batch, W, M) in out.items():
        rng = np.random.default_rng(0)
        B = len(batch)
        q = rng.standard_normal((B, W), dtype=np.float32) / np.float32(np.sqrt(W))
        table = rng.standard_normal((M, W), dtype=np.float32)
        data[name] = (q, table, np.ascontiguousarray(batch.legal % M), batch.counts, batch.target)
    return data


def floors(data):
    """The floor of each case (manaka.bench.floors: policy_head_floor, with the table's
    gradient where M is given), at this core's rates, one thread."""
    from manaka.bench.floors import cpu_rates, floor_ms, policy_head_floor
    rates = cpu_rates(1, runs=9)
    out = {"copy_gbs": rates["copy_gbs"], "gemm_gflops": rates["gemm_gflops"]}
    for name, (q, table, legal, counts, _) in data.items():
        W, M = q.shape[1], len(table)
        head = policy_head_floor(legal, counts, W)
        with_table = policy_head_floor(legal, counts, W, M)
        kind = "fused" if name == "seed" else "split"
        for case, need in ((f"{name} {kind}", head), (f"{name} {kind}+table", with_table)):
            out[case] = {**need, "floor_ms": floor_ms(need, rates["copy_gbs"], rates["gemm_gflops"])}
    return out


def row_read_floors(data):
    """{case: (ms, bytes)}: the row-read floor of each case (the module's docstring)."""
    out = {}
    for name, (q, table, legal, counts, _) in data.items():
        if name != "seed":  # the recipe's batch names ~4,400 of 262,440 rows: they stay in cache
            continue
        n, W = int(np.asarray(counts).sum()), q.shape[1]
        t = np.random.default_rng(0).standard_normal(table.shape, dtype=np.float32)
        v = np.ones(W, np.float32)
        reps = max(1, int(2e8 // t.nbytes))
        best = []
        for _ in range(9):
            start = time.process_time()
            for _ in range(reps):
                t @ v
            best.append((time.process_time() - start) / reps)
        gbs = t.nbytes / max(min(best), 1e-9) / 1e9
        kind = "fused" if name == "seed" else "split"
        for case, passes in ((f"{name} {kind}", 2), (f"{name} {kind}+table", 3)):
            need = passes * n * W * 4
            out[case] = (need / gbs / 1e6, need, gbs)
    return out


def child(records, calls=7, R=8):
    import manaka as mk
    from manaka import _testing
    mk.set_num_threads(1)
    data = inputs(records)
    res = {}
    for case in CASES:
        shape, rest = case.split(" ")
        if shape not in data:
            continue
        head, _, tg = rest.partition("+")
        q, table, legal, counts, target = data[shape]
        args = (q, table, legal, counts, target, None, 1.0 / len(q))

        def run(r):
            t = time.process_time()
            _testing.backend_policy_head("cpu", *args, head=head, repeats=r, table_grad=bool(tg))
            return time.process_time() - t
        run(1), run(R)
        t1, tR = [], []
        for _ in range(calls):
            t1.append(run(1))
            tR.append(run(R))
        res[case] = (statistics.median(tR) - statistics.median(t1)) / (R - 1) * 1e3
    res["load"] = os.getloadavg()[0]
    print(json.dumps(res))


def main(argv):
    records = None
    if "--records" in argv:
        i = argv.index("--records")
        records = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if argv and argv[0] == "--child":
        return child(records)
    rounds, trees = int(argv[0]), [os.path.abspath(t) for t in argv[1:]]
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    data = inputs(records)
    floor, rows = floors(data), row_read_floors(data)  # this repository's manaka, before the rounds
    got = {t: [] for t in trees}
    for r in range(rounds):
        for k in range(len(trees)):
            tree = trees[(r + k) % len(trees)]
            env = dict(os.environ, PYTHONPATH=tree)
            cmd = [sys.executable, os.path.abspath(__file__), "--child"] + (["--records", records] if records else [])
            line = json.loads(subprocess.run(cmd, env=env, cwd="/tmp", check=True, capture_output=True,
                                             text=True).stdout.strip().splitlines()[-1])
            got[tree].append(line)
            print(f"round {r + 1} {tree}: " + " | ".join(f"{k} {v:.3f}" for k, v in line.items()), flush=True)
    print(f"floor: copy {floor['copy_gbs']:.1f} GB/s, sgemm {floor['gemm_gflops']:.1f} GFLOP/s")
    for case in CASES:
        if case not in floor:
            continue
        f = floor[case]
        cells = []
        for tree in trees:
            med = statistics.median(x[case] for x in got[tree])
            cells.append(f"{os.path.basename(tree)} {med:.3f} ms ({med / f['floor_ms']:.2f}x)")
        print(f"{case:20s} floor {f['floor_ms']:.3f} ms ({f['bytes'] / 1e6:.2f} MB, {f['flops'] / 1e6:.1f} MFLOP) | "
              + " | ".join(cells))
        if case not in rows:
            continue
        ms, need, gbs = rows[case]
        cells = [f"{os.path.basename(t)} {statistics.median(x[case] for x in got[t]) / ms:.2f}x" for t in trees]
        print(f"{'':20s} row-read floor {ms:.3f} ms ({need / 1e6:.1f} MB at {gbs:.1f} GB/s) | " + " | ".join(cells))
    loads = [x["load"] for t in trees for x in got[t]]
    print(f"load average over the runs: {min(loads):.2f} - {max(loads):.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
