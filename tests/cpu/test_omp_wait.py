"""OpenMP waits passively unless the user chose (manaka/_omp_wait.py), and the team-size
threshold of the small loops (csrc/cpu/threads.c) changes no bits: each kernel gives the
same bits with 1 and 2 threads, at sizes below and above the threshold, and agrees with
the NumPy reference."""
import os
import subprocess
import sys

import numpy as np
import pytest

import manaka as mk
import manaka.ops as ops

import reference as ref
from assertions import assert_close
from paths import ROOT


def fresh_import(env_policy):
    """(os.environ's OMP_WAIT_POLICY after `import manaka`, libgomp's own report of the policy
    it initialised with) in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(OMP_DISPLAY_ENV="true", PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    if env_policy is not None:
        env["OMP_WAIT_POLICY"] = env_policy
    r = subprocess.run([sys.executable, "-c", "import os, manaka; print(os.environ.get('OMP_WAIT_POLICY'))"],
                       env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    libgomp = [ln.split("=", 1)[1].strip() for ln in r.stderr.splitlines() if "OMP_WAIT_POLICY" in ln]
    return r.stdout.strip(), libgomp


# A build without OpenMP (MANAKA_OPENMP=0, the TSan build) may load no libgomp to report;
# one that is loaded must report the policy.
OPENMP = bool(mk.build_info()["openmp"])


def reported(libgomp, policy):
    return libgomp == [f"'{policy.upper()}'"] or (not OPENMP and libgomp == [])


def test_import_sets_passive_waiting_before_libgomp_starts():
    policy, libgomp = fresh_import(None)
    assert policy == "passive"
    assert reported(libgomp, "passive"), libgomp  # read when libgomp loaded, after our setting


@pytest.mark.parametrize("user", ["active", "passive"])
def test_a_policy_the_user_set_is_kept(user):
    policy, libgomp = fresh_import(user)
    assert policy == user
    assert reported(libgomp, user), libgomp


@pytest.fixture
def threads():
    before = mk.get_num_threads()
    yield
    mk.set_num_threads(before)


def per_thread_count(fn):
    """fn() with 1 and with 2 threads: the two results, which must be the same bits."""
    out = []
    for n in (1, 2):
        mk.set_num_threads(n)
        out.append(fn())
    return out


def same_bits(a, b):
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# rows of tokens: 1 row (one team of 1, the threshold's case) up to rows that split over 2
@pytest.mark.parametrize("rows", [1, 2, 37])
def test_sum_kernels_same_bits_for_1_and_2_threads(rng, threads, rows):
    V, D, K, T, P = 61, 40, 3, 12, 5
    emb = rng.standard_normal((V, D)).astype(np.float32)
    tokens = rng.integers(0, V, (rows, 2, T), dtype=np.int32)
    tokens[rng.random(tokens.shape) < 0.2] = -1
    num_pairs = V * (V + 1) // 2
    table = rng.standard_normal((num_pairs, P)).astype(np.float32)
    g_power = rng.standard_normal((rows, 2, K, D)).astype(np.float32)
    g_pair = rng.standard_normal((rows, 2, P)).astype(np.float32)
    cases = {
        "power_sums": (lambda: ops.power_sums(emb, tokens, K), ref.power_sums(emb, tokens, K)),
        "power_sums_backward": (lambda: ops.power_sums_backward(g_power, emb, tokens),
                                ref.power_sums_backward(g_power, emb, tokens)),
        "pair_sums": (lambda: ops.pair_sums(table, tokens), ref.pair_sums(table, tokens)),
        "pair_sums_backward": (lambda: ops.pair_sums_backward(g_pair, tokens, num_pairs),
                               ref.pair_sums_backward(g_pair, tokens, num_pairs)),
    }
    for name, (fn, want) in cases.items():
        one, two = per_thread_count(fn)
        assert same_bits(one, two), name
        assert_close(one, want, 1e-5)


@pytest.mark.parametrize("B", [1, 3, 300])
def test_gather_dot_same_bits_for_1_and_2_threads(rng, threads, B):
    L, W, M = 50, 24, 97
    hidden = rng.standard_normal((B, W)).astype(np.float32)
    table = rng.standard_normal((M, W)).astype(np.float32)
    counts = rng.integers(1, L + 1, B).astype(np.int32)
    indices = np.argsort(rng.random((B, M)), axis=1)[:, :L].astype(np.int32)
    indices[np.arange(L)[None, :] >= counts[:, None]] = -1
    grad = rng.standard_normal((B, L)).astype(np.float32)
    one, two = per_thread_count(lambda: ops.gather_dot(hidden, table, indices, counts))
    assert same_bits(one, two)
    assert_close(one, ref.gather_dot(hidden, table, indices, counts))
    one, two = per_thread_count(lambda: ops.gather_dot_backward(grad, hidden, table, indices, counts))
    for a, b, want in zip(one, two, ref.gather_dot_backward(grad, hidden, table, indices, counts)):
        assert same_bits(a, b)
        assert_close(a, want)


@pytest.mark.parametrize("B, pair_update", [(1, "dense"), (96, "dense"), (96, "sparse")])
def test_training_steps_same_bits_for_1_and_2_threads(threads, B, pair_update):
    import model_cases as cases

    # large enough that the batch of 96 crosses the threshold in every kernel
    cfg = cases.config(hidden=(64,), num_tokens=300, num_moves=400, T=20, D=32, W=48)
    batch = cases.batch(cfg, B=B, L=120)

    def run():
        model = mk.Model(cfg, seed=0)
        trainer = mk.Trainer(model, lr=1e-3, pair_update=pair_update)
        losses = [trainer.step(batch).loss for _ in range(2)]
        return np.float64(losses), model.state_dict()

    (l1, s1), (l2, s2) = per_thread_count(run)
    assert same_bits(l1, l2)
    assert s1.keys() == s2.keys() and all(same_bits(s1[k], s2[k]) for k in s1)
