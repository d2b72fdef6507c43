"""Seeded random arguments for manaka's API: manaka.ops (all six
ops), mk.Batch with Model.forward / Model.loss_and_grad / Trainer.step, Loader (its
arguments, iteration, load_state_dict) and Dataset.open (folders of mutated arrays and
meta.json, then a Loader over them). Cases and their validity predicates are in
tests/helpers/api_fuzz_cases.py.

Every case runs in a child process (tests/helpers/fuzz_runner.py), so a crash or a hang (no
result in --case-timeout seconds) is counted and named. Outcomes:

    accepted            a valid call returned the right result
    clean error         an invalid call raised ValueError / TypeError / OverflowError /
                        MemoryError (manaka's file errors are ValueErrors) with a message,
                        and changed no state
    silent acceptance   an invalid call returned                                  (failure)
    refused valid input a valid call raised                                       (failure)
    wrong result        a valid call returned a result that disagrees with NumPy  (failure)
    escaped <type>      another exception type, or one without a message          (failure)
    state changed       a refused call changed the model or trainer               (failure)
    crash / hang                                                                  (failure)

A short run is part of the test suite; a long one is a command:

    python tests/robustness/test_api_fuzz.py --cases 4000 [--seed 0] [--kind ops]
    python tests/robustness/test_api_fuzz.py --kind ops --seed 0 --replay 17      # one case, in this process
"""
import argparse
import json
import os
import sys
import tempfile
import traceback

import pytest

HELPERS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "helpers")
# Run as a script, this checkout's manaka comes first (not whichever one is installed).
sys.path[:0] = [HELPERS] + ([os.path.dirname(os.path.dirname(HELPERS))] if __name__ == "__main__" else [])
import fuzz_runner  # noqa: E402

KINDS = ["ops", "model", "loader", "dataset"]
FAILURES = ("harness error", "silent acceptance", "refused valid input", "wrong result", "escaped", "state changed", "crash", "hang")

# Known defects, as fixed cases (not left to the random draw): each must end in a clean
# error. Names listed in UNFIXED are strict xfails until their fix lands on main.
PENDING = {
    "huge size: Loader batch_size=2**62": "loader_batch_size",
    "huge size: ModelConfig(embed_dim=2**62, orders=2)": "config_embed_dim",
}
UNFIXED = set()


def pending_case(which):
    import numpy as np
    import manaka as mk
    import api_fuzz_cases as cases
    if which == "loader_batch_size":
        ds = mk.Dataset.from_arrays(**cases.small_dataset(np.random.default_rng(0), 10), num_tokens=9, num_moves=13)

        def call():
            with mk.Loader(ds, batch_size=2**62, producers=1) as loader:
                return [len(b) for b in loader]
    elif which == "config_embed_dim":
        def call():
            return mk.Model(mk.ModelConfig(**{**cases.CFG, "embed_dim": 2**62, "orders": 2}))  # numel wraps
        return cases.Case(which, call, False)  # 11 * 2**62 floats: no machine can hold it
    return cases.Case(which, call, None)


def _same(a, b):
    import numpy as np
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and a.tobytes() == b.tobytes()
    return a == b


def outcome(case):
    """(outcome, detail) of running one case in this process."""
    import api_fuzz_cases as cases
    before = case.state() if case.state else None
    try:
        result = case.call()
    except cases.CLEAN + tuple(case.allowed) as e:
        if not str(e).strip():
            return f"escaped {type(e).__name__} without a message", ""
        if case.state and not _same(case.state(), before):
            return "state changed", f"{type(e).__name__}: {e}"
        if case.valid is True:
            return "refused valid input", f"{type(e).__name__}: {str(e)[:300]}"
        return "clean error", ""
    except BaseException as e:  # the one thing this harness exists to find
        return f"escaped {type(e).__name__}", f"{str(e)[:300]} | {traceback.format_exc(limit=-3)[-600:]}"
    if case.valid is False:
        return "silent acceptance", ""
    try:
        problem = case.check(result) if case.check else None
    except Exception as e:
        return "harness error", f"the check of an accepted call raised {e!r:.300}"
    return ("wrong result", problem) if problem else ("accepted", "")


def make_case(kind, seed, index, workdir):
    import numpy as np
    if kind == "pending":
        return pending_case(list(PENDING.values())[index])
    import api_fuzz_cases as cases
    return cases.make(kind, np.random.default_rng([seed, KINDS.index(kind), index]), workdir)


def child(kind, first, count, seed, report):
    workdir = tempfile.mkdtemp(prefix=f"api-fuzz-{kind}-")
    with open(report, "a") as out:
        for index in range(first, first + count):
            try:
                case = make_case(kind, seed, index, workdir)
            except Exception as e:  # a bug of the harness, not of manaka: reported as a failure
                out.write(json.dumps({"case": index, "name": "making the case", "result": "harness error",
                                      "detail": repr(e)[:300], "failure": True}) + "\n")
                continue
            out.write(json.dumps({"case": index, "name": case.name, "start": True}) + "\n")
            out.flush()
            result, detail = outcome(case)
            failure = result.startswith(FAILURES)
            out.write(json.dumps({"case": index, "name": case.name, "result": result, "detail": detail,
                                  "failure": failure}) + "\n")
            out.flush()


def run(kind, cases, seed=0, case_timeout=60.0):
    """(tally, failures) of `cases` cases of `kind`."""
    return fuzz_runner.run(
        lambda first, count, report: fuzz_runner.child_argv(__file__, "--child", kind, "--first", first, "--cases",
                                                            count, "--seed", seed, "--report", report),
        cases, case_timeout)


def failures_of(tally, failures):
    bad = {k: v for k, v in tally.items() if k.startswith(FAILURES)}
    return bad, [f"case {c}: {name}: {result}" for c, name, result in failures]


# A short run per kind: a few seconds each, on every test run.
SHORT = {"ops": 120, "model": 100, "loader": 50, "dataset": 60}


@pytest.mark.parametrize("kind", KINDS)
def test_api_fuzz_short_run(kind):
    tally, failures = run(kind, SHORT[kind], seed=0)
    assert sum(tally.values()) == SHORT[kind], tally
    bad, named = failures_of(tally, failures)
    assert not bad, "\n".join(named)
    assert tally.get("accepted", 0) > 0 and tally.get("clean error", 0) > 0, tally  # both sides were exercised


def test_findings_of_the_fuzz():
    """What the fuzz found beyond the known defects, each fixed; each line failed before its fix."""
    import numpy as np
    import manaka as mk
    import api_fuzz_cases as cases
    emb, tokens = np.ones((3, 2), np.float32), np.zeros((1, 2, 2), np.int32)
    # a NumPy integer is an int, as it already was for pair_sums_backward's num_pairs
    assert mk.ops.power_sums(emb, tokens, np.int64(2)).shape == (1, 2, 2, 2)
    # int() took "3" and 1.5 as trunk widths, and 1.5 / True / "3" as a loader position
    for bad in (["3"], [1.5], [True]):
        with pytest.raises(TypeError, match="hidden"):
            mk.ModelConfig(**{**cases.CFG, "hidden": bad})
    ds = mk.Dataset.from_arrays(**cases.small_dataset(np.random.default_rng(0), 10), num_tokens=9, num_moves=13)
    loader = mk.Loader(ds, batch_size=3, producers=1)
    for bad in (1.5, True, "1", np.float64(1.0)):
        with pytest.raises(TypeError, match="batch_index"):
            loader.load_state_dict({"epoch": 0, "batch_index": bad})
    assert loader.state_dict()["batch_index"] == 0
    loader.close()
    # a 24 TiB zero-stride view: refused at once, not after min() / max() over every element
    huge = np.broadcast_to(np.zeros((1, 1, 1), np.int64), (2**20, 2**20, 6))
    with pytest.raises(MemoryError):
        mk.Batch(huge, np.zeros((2**20, 1)), np.ones(2**20), np.zeros(2**20), np.zeros(2**20))


@pytest.mark.parametrize("item", [pytest.param(name, marks=[pytest.mark.xfail(strict=True, reason=f"known defect {name}")]
                                               if name in UNFIXED else []) for name in PENDING])
def test_pending_defect_is_a_clean_error(item):
    """Each case in a child process with a time limit: a crash or a hang fails it."""
    if item in UNFIXED and os.environ.get("MANAKA_SANITIZER"):  # set by tools/sanitize.sh
        pytest.skip("a known crash until its fix lands: the sanitizer's report would fail the run")
    index = list(PENDING).index(item)
    tally, failures = fuzz_runner.run(
        lambda first, count, report: fuzz_runner.child_argv(__file__, "--child", "pending", "--first", index,
                                                            "--cases", 1, "--report", report), 1, case_timeout=60)
    assert set(tally) <= {"clean error", "accepted"}, failures


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=1000, help="cases per kind")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kind", choices=KINDS, action="append", help="only these kinds (repeatable)")
    p.add_argument("--case-timeout", type=float, default=60.0, help="seconds without a result that make a hang")
    p.add_argument("--replay", type=int, help="run this one case here and print its outcome")
    p.add_argument("--child", choices=KINDS + ["pending"])
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--report")
    a = p.parse_args()
    if a.child:
        child(a.child, a.first, a.cases, a.seed, a.report)
    elif a.replay is not None:
        for kind in a.kind or KINDS:
            case = make_case(kind, a.seed, a.replay, tempfile.mkdtemp(prefix="api-fuzz-replay-"))
            print(f"{kind} case {a.replay}: {case.name} (valid: {case.valid}) -> {outcome(case)}")
    else:
        total = {}
        for kind in a.kind or KINDS:
            tally, failures = run(kind, a.cases, a.seed, a.case_timeout)
            for k, v in tally.items():
                total[k] = total.get(k, 0) + v
            print(f"{kind}: {a.cases} cases: " + ", ".join(f"{v} {k}" for k, v in sorted(tally.items())), flush=True)
            for c, name, result in failures:
                print(f"  case {c}: {name}: {result}", flush=True)
        print(f"total: {sum(total.values())} cases: " + ", ".join(f"{v} {k}" for k, v in sorted(total.items())))
        sys.exit(1 if any(k.startswith(FAILURES) for k in total) else 0)
