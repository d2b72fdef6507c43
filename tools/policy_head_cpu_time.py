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
exponentials and logarithms are not counted."""
import json
import os
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
        out["recipe"] = (rb, rcfg.head_width, rcfg.num_moves)
    data = {}
    for name, (batch, W, M) in out.items():
        rng = np.random.default_rng(0)
        B = len(batch)
        q = rng.standard_normal((B, W), dtype=np.float32) / np.float32(np.sqrt(W))
        table = rng.standard_normal((M, W), dtype=np.float32)
        data[name] = (q, table, batch.legal, batch.counts, batch.target)
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
    floor = floors(inputs(records))  # this repository's manaka, measured before the rounds
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
    loads = [x["load"] for t in trees for x in got[t]]
    print(f"load average over the runs: {min(loads):.2f} - {max(loads):.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
