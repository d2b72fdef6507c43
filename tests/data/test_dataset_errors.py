"""Dataset errors: one exception type (DatasetError, a ValueError naming the folder) for
every damaged folder, a repeated legal move refused with its position, the tokens message
naming the axis it read, and a meta.json that would size a model beyond memory refused by
the CLI before anything is allocated."""
import json
import os

import numpy as np
import pytest

import manaka as mk
from model_cases import arrays


def test_a_corrupt_npy_header_is_a_dataset_error(tmp_path):
    path = mk.Dataset.from_arrays(**arrays()).save(tmp_path / "ds")
    file = os.path.join(path, "target.npy")
    raw = bytearray(open(file, "rb").read())
    # the header is a Python literal: an unterminated string made numpy raise tokenize.TokenError
    raw[10:60] = b"{'descr': '<i4, 'fortran_order': False, 'shape': ("
    open(file, "wb").write(bytes(raw))
    with pytest.raises(mk.DatasetError, match=r"target\.npy: cannot be read") as info:
        mk.Dataset.open(path)
    assert info.value.path == str(path)


def test_bad_meta_json_is_a_dataset_error(tmp_path):
    path = mk.Dataset.from_arrays(**arrays()).save(tmp_path / "ds")
    with open(os.path.join(path, "meta.json"), "w") as f:
        f.write("[" * 100000)
    with pytest.raises(mk.DatasetError, match="meta.json: not valid JSON"):
        mk.Dataset.open(path)
    meta = {"version": 1, "num_tokens": 50, "num_moves": 2**40, "T": 4}
    with open(os.path.join(path, "meta.json"), "w") as f:
        json.dump(meta, f)
    with pytest.raises(mk.DatasetError, match="num_moves must be a positive integer below 2\\*\\*31"):
        mk.Dataset.open(path)


@pytest.mark.parametrize("name", ["num_tokens", "num_moves"])
@pytest.mark.parametrize("bad", [0.7, "40", True, None])
def test_a_vocabulary_size_that_is_not_an_int_is_refused_by_name(name, bad):
    """int() made 40.7 a vocabulary of 40, "40" one of 40 and True one of 1."""
    a = arrays()
    size = a[name]
    if isinstance(bad, float):
        bad += size
    with pytest.raises(TypeError, match=f"Dataset.from_arrays: {name} must be an int, got {type(bad).__name__}"):
        mk.Dataset.from_arrays(**{**a, name: bad})
    assert mk.Dataset.from_arrays(**{**a, name: np.int64(size)}).meta[name] == size  # NumPy's ints are ints


def test_a_repeated_legal_move_is_refused_with_its_position():
    a = arrays(N=6, M=40, seed=3)
    offsets = a["legal_offsets"]
    i = int(np.flatnonzero(np.diff(offsets) >= 2)[-1])
    moves = np.array(a["legal_moves"])
    moves[offsets[i] + 1] = moves[offsets[i]]
    with pytest.raises(ValueError, match=f"position {i}: move {moves[offsets[i]]} appears twice"):
        mk.Dataset.from_arrays(**{**a, "legal_moves": moves})


@pytest.mark.parametrize("num_moves", [40, 40000])  # legal_moves stored as int16, as int32
def test_a_legal_list_may_come_in_any_order_but_not_repeat_a_move(num_moves):
    a = arrays(N=6, M=num_moves, seed=4)
    offsets, moves = a["legal_offsets"], np.array(a["legal_moves"])
    i = int(np.flatnonzero(np.diff(offsets) >= 3)[0])
    lo, hi = offsets[i], offsets[i + 1]
    moves[lo:hi] = np.sort(moves[lo:hi])[::-1]  # descending, distinct: accepted
    assert mk.Dataset.from_arrays(**{**a, "legal_moves": moves}).legal_moves.dtype == (
        np.int16 if num_moves <= 32768 else np.int32)
    moves[hi - 1] = moves[lo + 1]  # the second and the last now repeat, out of order
    with pytest.raises(ValueError, match=f"position {i}: move {moves[lo + 1]} appears twice"):
        mk.Dataset.from_arrays(**{**a, "legal_moves": moves})


@pytest.mark.parametrize("bad", [(2**62, -2**63 + 5), (-2**63, 3), (2**63 - 1, 0)])
def test_offsets_at_the_int64_extremes_are_refused_with_their_position(bad):
    """A count is judged by comparing offsets, never by subtracting them: the subtraction of
    a corrupt offset from another can overflow (a fuzzed file found it)."""
    a = arrays(N=6, M=40, seed=5)
    offsets = np.array(a["legal_offsets"])
    offsets[2:4] = bad
    first = 1 if bad[0] <= offsets[1] else 2
    with pytest.raises(ValueError, match=f"position {first}: offsets must increase strictly .*"
                                         f"legal_offsets\\[{first + 1}\\] = {offsets[first + 1]}"):
        mk.Dataset.from_arrays(**{**a, "legal_offsets": offsets})


def test_swapped_token_axes_are_named():
    a = arrays(T=4)
    with pytest.raises(ValueError, match=r"axis 1 holds the 2 perspectives, got length 4 \(axes swapped"):
        mk.Dataset.from_arrays(**{**a, "tokens": np.swapaxes(a["tokens"], 1, 2)})


def test_the_cli_refuses_a_model_beyond_memory_in_one_line(tmp_path, capsys, monkeypatch):
    from manaka import train
    path = mk.Dataset.from_arrays(**arrays(V=50, M=40)).save(tmp_path / "ds")
    monkeypatch.setattr(os, "sysconf", lambda name: {"SC_PHYS_PAGES": 1, "SC_PAGE_SIZE": 4096}[name])
    built = []
    monkeypatch.setattr(mk.Model, "__init__", lambda self, *a, **k: built.append(a))
    assert train.main(["--data", path, "--steps", "1", "--device", "cpu", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "meta.json" in err[0] and "more than this machine's" in err[0] and built == []


def test_the_cli_prints_one_line_for_a_corrupt_dataset(tmp_path):
    import subprocess
    import sys
    path = mk.Dataset.from_arrays(**arrays()).save(tmp_path / "ds")
    with open(os.path.join(path, "tokens.npy"), "r+b") as f:
        f.seek(12)
        f.write(b"'descr': '<i2, 'fortran")
    out = subprocess.run([sys.executable, "-m", "manaka.train", "--data", path, "--steps", "1", "--device", "cpu"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "tokens.npy: cannot be read" in lines[0] and path in lines[0]


@pytest.mark.parametrize("name", ["meta.json", "tokens.npy", "policy_target.npy"])
def test_a_fifo_in_the_folder_is_refused_without_waiting(tmp_path, name):
    # open() of a FIFO blocks until a writer comes: Dataset.open hung on one
    import subprocess
    import sys

    path = mk.Dataset.from_arrays(**arrays(soft=True)).save(tmp_path / "ds")
    os.remove(os.path.join(path, name))
    os.mkfifo(os.path.join(path, name))
    code = ("import sys, manaka as mk\ntry:\n    mk.Dataset.open(sys.argv[1])\n"
            "except mk.DatasetError as e:\n    print(e)\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert f"{name}: not a regular file (a folder, FIFO, socket or device)" in done.stdout, done.stdout
