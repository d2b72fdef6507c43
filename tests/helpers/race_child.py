"""Child process of tests/robustness/test_input_races.py: one scenario in which a
thread keeps flipping entries of the caller's index arrays between their valid value and
an out-of-range one while the main thread runs a step / forward / op on them.

Every call must either raise a clean ValueError (it saw a bad value) or return exactly
what it returns on the untouched arrays; an out-of-bounds access is a crash (the parent
sees the signal) or a wrong result. Prints "ok <accepted> <refused>" and exits 0.

    python tests/helpers/race_child.py SCENARIO [ROUNDS]
"""
import random
import sys
import threading
import time

import numpy as np

import manaka as mk
from manaka import ops

BAD = 10**8  # far outside any table: a kernel reading it is out of bounds by ~400 MB


def flipper(targets, stop):
    """Until `stop` is set, writes BAD (one time in four) or the good value into a random
    entry of `targets` ((array, index, good) triples): whenever the GIL changes hands,
    each entry is bad with probability 1/4, whatever the loop's rhythm."""
    rng = random.Random(0)
    while not stop.is_set():
        arr, idx, good = targets[rng.randrange(len(targets))]
        arr[idx] = BAD if rng.random() < 0.25 else good


def run(call, targets, rounds, reference):
    sys.setswitchinterval(1e-4)  # hand the GIL back and forth often: more, shorter rounds
    stop = threading.Event()
    thread = threading.Thread(target=flipper, args=(targets, stop))
    thread.start()
    accepted = refused = 0
    try:
        # At least `rounds` calls, then on until both outcomes were seen (a quick op on a quiet
        # machine can go 100 calls without the flipper getting the GIL in between), capped.
        for i in range(50 * rounds):
            if i >= rounds and accepted and refused:
                break
            try:
                got = call()
            except ValueError:
                refused += 1
            else:
                accepted += 1
                reference(got)
            time.sleep(0)  # let the flipper run: the next call sees a fresh state
    finally:
        stop.set()
        thread.join()
    print("ok", accepted, refused)


def batch_arrays(rng, B, T, L, V, M):
    tokens = rng.integers(0, V, (B, 2, T), dtype=np.int32)
    counts = rng.integers(1, L + 1, B, dtype=np.int32)
    legal = rng.integers(0, M, (B, L), dtype=np.int32)
    target = (rng.random(B) * counts).astype(np.int32)
    value = rng.random(B).astype(np.float32)
    return tokens, legal, counts, target, value


def model_scenario(kind, rounds):
    cfg = mk.ModelConfig(num_tokens=60, num_moves=90, tokens_per_side=6, embed_dim=8, orders=2,
                         pair_dim=4, hidden=(8,), head_width=8)
    rng = np.random.default_rng(0)
    tokens, legal, counts, target, value = batch_arrays(rng, 16, 6, 12, 60, 90)
    clean = [a.copy() for a in (tokens, legal, counts, target, value)]
    # the Batch holds the caller's arrays themselves (int32, contiguous: no copy in Python)
    batch = mk.Batch(tokens, legal, counts, target, value)
    assert batch.tokens is tokens and batch.legal is legal and batch.counts is counts
    # entries of the last row: a token, the first legal id (always a legal slot), the count
    # and the target; read unchecked, a BAD id lands ~400 MB past its table
    targets = [(tokens, (15, 1, 5), int(tokens[15, 1, 5])), (legal, (15, 0), int(legal[15, 0])),
               (counts, 15, int(counts[15])), (target, 15, int(target[15]))]
    clean_batch = mk.Batch(*clean)
    if kind == "forward":
        model = mk.Model(cfg, seed=1)
        want = model.forward(clean_batch)

        def check(got):
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
        run(lambda: model.forward(batch), targets, rounds, check)
    else:  # step: each accepted step is replayed on a twin trainer with the untouched batch
        model, twin = mk.Model(cfg, seed=1), mk.Model(cfg, seed=1)
        trainer, twin_trainer = mk.Trainer(model, lr=1e-2), mk.Trainer(twin, lr=1e-2)

        def check(stats):
            want = twin_trainer.step(clean_batch)
            assert stats.as_dict() == want.as_dict(), (stats, want)
        run(lambda: trainer.step(batch), targets, rounds, check)
        for name, value in twin.state_dict().items():
            np.testing.assert_array_equal(model.state_dict()[name], value)


def ops_scenario(kind, rounds):
    rng = np.random.default_rng(0)
    B, S, T, V, L, M, W, P, D = 512, 2, 16, 40, 64, 50, 32, 8, 16  # kernels long enough to be raced
    tokens = rng.integers(0, V, (B, S, T), dtype=np.int32)
    if kind == "gather_dot":
        hidden = rng.standard_normal((B, W), dtype=np.float32)
        table = rng.standard_normal((M, W), dtype=np.float32)
        indices = rng.integers(0, M, (B, L), dtype=np.int32)
        counts = np.full(B, L, np.int32)
        want = ops.gather_dot(hidden, table, indices.copy(), counts.copy())
        targets = [(indices, (B - 1, L - 1), int(indices[B - 1, L - 1])), (counts, 0, L)]
        call = lambda: ops.gather_dot(hidden, table, indices, counts)
    elif kind == "pair_sums":
        table = rng.standard_normal((V * (V + 1) // 2, P), dtype=np.float32)
        want = ops.pair_sums(table, tokens.copy())
        call = lambda: ops.pair_sums(table, tokens)
        targets = [(tokens, (B - 1, 1, T - 1), int(tokens[B - 1, 1, T - 1]))]
    elif kind == "pair_sums_backward":
        grad = rng.standard_normal((B, S, P), dtype=np.float32)
        want = ops.pair_sums_backward(grad, tokens.copy(), V * (V + 1) // 2)
        call = lambda: ops.pair_sums_backward(grad, tokens, V * (V + 1) // 2)
        targets = [(tokens, (B - 1, 1, T - 1), int(tokens[B - 1, 1, T - 1]))]
    elif kind == "power_sums":
        emb = rng.standard_normal((V, D), dtype=np.float32)
        want = ops.power_sums(emb, tokens.copy(), 2)
        call = lambda: ops.power_sums(emb, tokens, 2)
        targets = [(tokens, (B - 1, 1, T - 1), int(tokens[B - 1, 1, T - 1]))]
    else:
        raise SystemExit(f"unknown scenario {kind}")
    run(call, targets, rounds, lambda got: np.testing.assert_array_equal(got, want))


if __name__ == "__main__":
    kind, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 300
    (model_scenario if kind in ("step", "forward") else ops_scenario)(kind, rounds)
