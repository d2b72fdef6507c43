"""Seeded random corruption of model files, checkpoints and dataset folders: every damaged
file is either refused with its one documented exception type
(ModelFileError, CheckpointError, DatasetError) or loads to exactly the original content.
No other exception, no crash, no silent change.

Each kind runs in a child process, every case under a guard, and the child reports after
each case, so a crash (a signal) is counted and its case named. A short run is part of the
test suite; a long one is a command:

    python tests/robustness/test_model_file_fuzz.py --cases 4000 [--seed 0]

Datasets have no checksum (a .npy holds raw numbers): a corrupted folder may hold other
positions that obey every rule of the format. Those count as "loaded" after a Loader has
read every batch of them; files of the checksummed container must load identical.
"""
import argparse
import json
import os
import struct
import sys
import tempfile
import zlib

import numpy as np

HELPERS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "helpers")
# Run as a script, this checkout's manaka comes first (not whichever one is installed).
sys.path[:0] = [HELPERS] + ([os.path.dirname(os.path.dirname(HELPERS))] if __name__ == "__main__" else [])
import fuzz_runner  # noqa: E402
NASTY = [-1, 0, 1, 2**31, 2**63, 2**64 + 1, -2**63, 1e308, float("inf"), 0.5, "x", None, True, [], {},
         [2**40, 2**40], [-3], {"a": 1}, [[[[1]]]]]


def _mutate_header(data: bytes, rng) -> bytes:
    """Changes one value of the JSON header and re-signs it (so the header's checksum does
    not catch it and the semantic checks are exercised)."""
    length = struct.unpack("<Q", data[8:16])[0]
    header = json.loads(data[24:24 + length])
    paths = []

    def walk(x, path):
        paths.append(path)
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, path + [k])
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, path + [i])
    walk(header, [])
    path = paths[rng.integers(len(paths))]
    if not path:
        return data
    target = header
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = NASTY[rng.integers(len(NASTY))]
    raw = json.dumps(header).encode()
    start = (24 + length + 63) // 64 * 64
    body = data[start:]
    new_start = (24 + len(raw) + 63) // 64 * 64
    return data[:8] + struct.pack("<QI4x", len(raw), zlib.crc32(raw)) + raw + bytes(new_start - 24 - len(raw)) + body


def corrupt(data: bytes, rng, header_aware: bool):
    """(damaged bytes, whether the header was re-signed: a forged, self-consistent file)."""
    b = bytearray(data)
    op = rng.integers(7 if header_aware else 6)
    if op == 0 and b:        # flip bits
        for _ in range(rng.integers(1, 9)):
            b[rng.integers(len(b))] ^= 1 << int(rng.integers(8))
    elif op == 1:            # truncate
        b = b[:rng.integers(len(b) + 1)]
    elif op == 2:            # extend
        b += rng.integers(0, 256, rng.integers(1, 200)).astype(np.uint8).tobytes()
    elif op == 3 and b:      # overwrite a span
        at = rng.integers(len(b))
        span = rng.integers(0, 256, rng.integers(1, 64)).astype(np.uint8).tobytes()
        b[at:at + len(span)] = span
    elif op == 4 and b:      # one byte to a random value
        b[rng.integers(len(b))] = int(rng.integers(256))
    elif op == 5:            # insert bytes
        at = rng.integers(len(b) + 1)
        b[at:at] = rng.integers(0, 256, rng.integers(1, 16)).astype(np.uint8).tobytes()
    elif op == 6:
        return _mutate_header(data, rng), True
    return bytes(b), False


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, float) and a != a:
        return isinstance(b, float) and b != b
    return type(a) is type(b) and a == b


def child(kind: str, cases: int, seed: int, report: str) -> None:
    """Runs the cases of one kind, appending one JSON line per case to `report`."""
    sys.path.insert(0, HELPERS)
    import manaka as mk
    from manaka import checkpoint
    import model_cases

    rng = np.random.default_rng([seed, ["model", "checkpoint", "dataset"].index(kind)])
    work = tempfile.mkdtemp(prefix=f"fuzz-{kind}-")
    if kind == "model":
        model = mk.Model(model_cases.config(), seed=1)
        original = os.path.join(work, "good.manaka")
        model.save(original)
        expected, error = model.state_dict(), mk.ModelFileError
    elif kind == "checkpoint":
        ds = mk.Dataset.synthetic(200, model_cases.config(), seed=0)
        model = mk.Model(model_cases.config(), seed=1)
        original = os.path.join(work, "good.ckpt")
        mk.fit(model, mk.Loader(ds, batch_size=64, seed=2), steps=3, checkpoint=original, progress=False,
               log=lambda s: None)
        expected, error = checkpoint.load(original), mk.CheckpointError
    else:
        from model_cases import arrays
        original = mk.Dataset.from_arrays(**arrays(N=20, soft=True)).save(os.path.join(work, "good"))
        error = mk.DatasetError
    good = {} if kind == "dataset" else {"": open(original, "rb").read()}
    if kind == "dataset":
        for name in sorted(os.listdir(original)):
            good[name] = open(os.path.join(original, name), "rb").read()
    with open(report, "a") as out:
        for case in range(cases):
            name = list(good)[rng.integers(len(good))]
            target = os.path.join(work, "case.manaka" if kind != "dataset" else "case")
            if kind == "dataset":
                os.makedirs(target, exist_ok=True)
                for n, data in good.items():
                    with open(os.path.join(target, n), "wb") as f:
                        f.write(corrupt(data, rng, False)[0] if n == name else data)
                forged = False
            else:
                damaged, forged = corrupt(good[name], rng, True)
                with open(target, "wb") as f:
                    f.write(damaged)
            out.write(json.dumps({"case": case, "start": True}) + "\n")
            out.flush()
            try:
                if kind == "model":
                    loaded = mk.Model.load(target)
                    result = "loaded" if (_same(loaded.state_dict(), expected)
                                          and loaded.config == model.config and loaded.seed == 1) else "silent"
                elif kind == "checkpoint":
                    result = "loaded" if _same(checkpoint.load(target), expected) else "silent"
                else:
                    ds = mk.Dataset.open(target)
                    with mk.Loader(ds, batch_size=7, producers=2, seed=1) as loader:
                        for _ in loader:
                            pass
                    result = "loaded"
            except error as e:
                result = "refused" if e.path is not None and os.fspath(target) in str(e) else "unnamed"
            except BaseException as e:  # the one thing this harness exists to find
                result = f"escaped {type(e).__name__}: {str(e)[:200]}"
            if result == "silent" and forged:  # a re-signed header may hold other valid values
                result = "loaded (forged header, other valid values)"
            out.write(json.dumps({"case": case, "result": result}) + "\n")
            out.flush()


def run(kind: str, cases: int, seed: int = 0, timeout: float = 600) -> dict:
    """Tallies {"refused", "loaded", other outcomes...} of `cases` corruptions of `kind`.
    A crash or a case taking over `timeout` seconds is counted and the child restarted after
    that case (tests/helpers/fuzz_runner.py), with the seed moved on by the cases done."""
    tally, _ = fuzz_runner.run(
        lambda done, count, report: fuzz_runner.child_argv(__file__, "--child", kind, "--cases", count,
                                                           "--seed", seed + done, "--report", report),
        cases, case_timeout=timeout)
    return tally


def _check(tally: dict, cases: int) -> None:
    assert sum(tally.values()) == cases, tally
    assert set(tally) <= {"refused", "loaded", "loaded (forged header, other valid values)"}, tally


def test_corrupt_model_files():
    tally = run("model", 300)
    _check(tally, 300)
    assert tally["refused"] >= 280, tally


def test_corrupt_checkpoints():
    tally = run("checkpoint", 200)
    _check(tally, 200)
    assert tally["refused"] >= 180, tally


def test_corrupt_datasets():
    tally = run("dataset", 200)
    _check(tally, 200)
    assert tally["refused"] >= 100, tally


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", choices=["model", "checkpoint", "dataset"])
    p.add_argument("--report")
    a = p.parse_args()
    if a.child:
        child(a.child, a.cases, a.seed, a.report)
    else:
        for kind in ("model", "checkpoint", "dataset"):
            tally = run(kind, a.cases, a.seed, timeout=3600)
            print(f"{kind}: {a.cases} cases: " + ", ".join(f"{v} {k}" for k, v in sorted(tally.items())))
