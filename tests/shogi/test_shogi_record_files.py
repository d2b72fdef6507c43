"""How record files are found and held open: a path that exists is that file or folder,
even with glob characters in its name (only a path that does not exist is a glob); and
any number of files can be open at once, with no file descriptor kept per file."""
import os
import subprocess
import sys

import numpy as np
import pytest

from shogi_reference import cshogi, random_positions, tokens

from manaka import shogi

from paths import ROOT


def hcpe_of(boards):
    arr = np.zeros(len(boards), cshogi.HuffmanCodedPosAndEval)
    for i, board in enumerate(boards):
        board.to_hcp(arr["hcp"][i])
        arr["bestMove16"][i] = cshogi.move16(next(iter(board.legal_moves)))
    return arr


@pytest.fixture(scope="module")
def pool():
    boards = [b.copy() for b in random_positions(60, 41)]
    return boards, hcpe_of(boards)


def same_positions(ds, boards):
    assert len(ds) == len(boards)
    for i, b in enumerate(boards):
        np.testing.assert_array_equal(ds[i].tokens, tokens(b))


def test_an_existing_path_with_glob_characters_is_itself(tmp_path, pool):
    boards, arr = pool
    arr[:5].tofile(tmp_path / "run[1].hcpe")  # what the user names
    arr[5:12].tofile(tmp_path / "run1.hcpe")  # what the glob run[1].hcpe matches
    arr[12:15].tofile(tmp_path / "a*b?.hcpe")
    same_positions(shogi.open_hcpe(str(tmp_path / "run[1].hcpe")), boards[:5])
    same_positions(shogi.open_hcpe([tmp_path / "run[1].hcpe"]), boards[:5])
    same_positions(shogi.open_hcpe(str(tmp_path / "a*b?.hcpe")), boards[12:15])
    # a path that does not exist is a glob
    same_positions(shogi.open_hcpe(str(tmp_path / "run[0-9].hcpe")), boards[5:12])
    with pytest.raises(ValueError, match=r"no file matches .*run\[2\]\.hcpe"):
        shogi.open_hcpe(str(tmp_path / "run[2].hcpe"))
    # a folder too
    folder = tmp_path / "games[2024]"
    folder.mkdir()
    arr[20:23].tofile(folder / "x.hcpe")
    (tmp_path / "games2").mkdir()
    arr[30:31].tofile(tmp_path / "games2" / "y.hcpe")
    same_positions(shogi.open_hcpe(str(folder)), boards[20:23])
    assert shogi.open_hcpe(str(folder)).files == [str(folder / "x.hcpe")]



def test_a_bytes_path_is_one_path_and_a_non_path_is_named(tmp_path, pool):
    # a bytes path was iterated as ints ("expected str, bytes or os.PathLike object, not int"),
    # None or 3 failed with "'NoneType' object is not iterable"
    boards, arr = pool
    arr[:4].tofile(tmp_path / "a.hcpe")
    same_positions(shogi.open_hcpe(os.fsencode(tmp_path / "a.hcpe")), boards[:4])
    same_positions(shogi.open_hcpe(iter([tmp_path / "a.hcpe"])), boards[:4])
    for bad, words in ((None, "NoneType None"), (3, "int 3"), ([str(tmp_path / "a.hcpe"), 7], "int 7")):
        with pytest.raises(TypeError, match=f"^shogi: paths must be a path, a glob, a folder or a list of them, "
                                            f"got {words}$"):
            shogi.open_hcpe(bad)
        with pytest.raises(TypeError, match="^shogi: paths must be"):
            shogi.open_hcpe3(bad)


# Opens the folder under a low limit of open files and reads it every way: prints the
# count of records, of rows a loader epoch delivered, and of the in-memory dataset.
CHILD = r"""
import resource, sys
import numpy as np
import manaka as mk
from manaka import shogi
folder, limit = sys.argv[1], int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
ds = shogi.open_hcpe(folder)
rows = {}
with mk.Loader(ds, batch_size=64, producers=2, shuffle=True, seed=3) as loader:
    for batch in loader:
        for r, i in enumerate(loader.last_indices):
            rows[int(i)] = batch.tokens[r].copy()
whole = ds.to_dataset()
np.save(sys.argv[3], np.stack([rows[i] for i in range(len(ds))]))
print(len(ds), len(rows), len(whole), ds[len(ds) - 1].target >= 0)
"""


def test_more_files_than_the_open_file_limit(tmp_path, pool):
    boards, arr = pool
    folder = tmp_path / "many"
    folder.mkdir()
    n = 1500
    for k in range(n):  # file k holds the one record pool[k % 60]; names sort as k does
        arr[k % 60:k % 60 + 1].tofile(folder / f"{k:05d}.hcpe")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    out = tmp_path / "tokens.npy"
    child = subprocess.run([sys.executable, "-c", CHILD, str(folder), "256", str(out)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split() == [str(n), str(n), str(n), "True"]
    got = np.load(out)
    for k in range(0, n, 13):
        np.testing.assert_array_equal(got[k], tokens(boards[k % 60]))


@pytest.mark.parametrize("how", ["folder", "glob", "hcpe3 folder"])
def test_a_fifo_among_the_records_is_refused_without_waiting(tmp_path, pool, how):
    # a folder's or a glob's FIFO was opened like a file: its reader blocked (a hang)
    _, arr = pool
    suffix = ".hcpe3" if how == "hcpe3 folder" else ".hcpe"
    arr[:5].tofile(tmp_path / "a.hcpe")
    os.mkfifo(tmp_path / f"z{suffix}")
    arg = str(tmp_path / "*.hcpe") if how == "glob" else str(tmp_path)
    opener = "open_hcpe3" if how == "hcpe3 folder" else "open_hcpe"
    code = (f"import sys\nfrom manaka import shogi\ntry:\n    shogi.{opener}(sys.argv[1])\n"
            "except ValueError as e:\n    print(e)\n")
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    want = f"shogi: {str(tmp_path / f'z{suffix}')!r} is not a regular file (a folder, FIFO, socket or device)"
    assert done.stdout.strip() == want, done.stdout


def test_the_identity_is_of_the_records_opened_whatever_the_file_became(tmp_path, pool):
    # it read the files' sizes now: a training file appended to since (selfplay still
    # writing it) gave a checkpoint identity of records the run never read
    _, arr = pool
    path = tmp_path / "a.hcpe"
    arr[:40].tofile(path)
    grown = shogi.open_hcpe(str(path))
    want = shogi.open_hcpe(str(path)).identity
    with open(path, "ab") as f:
        arr[40:].tofile(f)
    assert grown.identity == want and grown.identity["files"] == [["a.hcpe", 40 * 38]]
    # cut short under its map: a ValueError naming the file (the sampled records past its end
    # would have been a SIGBUS)
    cut = shogi.open_hcpe(str(path))
    os.truncate(path, 10 * 38)
    with pytest.raises(ValueError, match=r"a\.hcpe is shorter \(380 bytes\) than when it was opened \(2,280 bytes\)"):
        cut.fingerprint


CUT_UNDER_THE_MAP = """
import os, sys
import manaka as mk
from manaka import shogi
kind, path = sys.argv[1], sys.argv[2]
ds = shogi.open_hcpe(path) if kind == "records" else mk.Dataset.open(path)
victim = path if kind == "records" else os.path.join(path, "tokens.npy")
os.truncate(victim, 0)
for read in (lambda: ds[len(ds) - 1], lambda: ds.fingerprint) + ((ds.to_dataset,) if kind == "records" else ()):
    try:
        read()
        print("read")
    except ValueError as e:
        print("refused:", e)
"""


@pytest.mark.parametrize("kind", ["records", "dataset"])
def test_reading_a_file_cut_under_its_map_is_an_error_not_a_sigbus(tmp_path, pool, kind):
    # ds[i], the fingerprint (fit's first checkpoint) and to_dataset read the memory map in
    # Python: the lost pages of a file cut in place by another process killed it with SIGBUS
    import manaka as mk

    _, arr = pool
    arr.tofile(tmp_path / "a.hcpe")
    path = str(tmp_path / "a.hcpe")
    if kind == "dataset":
        path = shogi.open_hcpe(path).to_dataset().save(str(tmp_path / "ds"))
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", CUT_UNDER_THE_MAP, kind, path], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])  # -7: SIGBUS
    lines = out.stdout.splitlines()
    assert lines and all(line.startswith("refused:") and "cut while in use" in line for line in lines), lines
    # a file replaced by another (renamed over: what convert and Dataset.save do) is no fault
    arr.tofile(tmp_path / "a.hcpe")  # whole again (the child cut it)
    if kind == "dataset":
        shogi.open_hcpe(str(tmp_path / "a.hcpe")).to_dataset().save(path)
    ds = shogi.open_hcpe(str(tmp_path / "a.hcpe")) if kind == "records" else mk.Dataset.open(path)
    victim = str(tmp_path / "a.hcpe") if kind == "records" else os.path.join(path, "tokens.npy")
    with open(victim + ".new", "wb") as f:
        f.write(b"\0" * 38)
    os.replace(victim + ".new", victim)
    assert ds[len(ds) - 1] is not None and ds.fingerprint
