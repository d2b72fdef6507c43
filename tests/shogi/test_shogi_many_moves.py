"""Records of positions with many legal moves (many pieces in hand, up to the 593-move
maximum) read through every path that builds training rows: ``ds[i]``, ``to_dataset()`` of
small and larger files, and the Loader's producers. Each path runs in a child process, so
that memory corruption (an abort, a segfault) is a failed test naming the path, not a
dead pytest; the rows it returns must equal cshogi's labels and the reference tokens."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from shogi_reference import MOST_MOVES, cshogi, hand_heavy_positions, labels, random_endgames, records, tokens

from manaka import shogi

from paths import ROOT

# Reads the record files named on the command line (format, output, paths...) every way a
# training row is made, and pickles the rows: {path: {"item": [...], "whole": [...],
# "loader": {i: ...}}}, each row (tokens, legal labels, target).
CHILD = r"""
import pickle, sys
import numpy as np
import manaka as mk
from manaka import shogi
fmt, out, paths = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
rows = {}
for path in paths:
    ds = shogi.open_records(path, fmt)
    item = [(ds[i].tokens, ds[i].legal_moves, ds[i].target) for i in range(len(ds))]
    whole = ds.to_dataset()
    whole = [(whole[i].tokens, whole[i].legal_moves, whole[i].target) for i in range(len(whole))]
    loader = {}
    with mk.Loader(ds, batch_size=3, producers=2, shuffle=True, seed=5) as batches:
        for batch in batches:
            for r, i in enumerate(batches.last_indices):
                loader[int(i)] = (batch.tokens[r].copy(), batch.legal[r, :batch.counts[r]].copy(), int(batch.target[r]))
    rows[path] = {"item": item, "whole": whole, "loader": loader}
with open(out, "wb") as f:
    pickle.dump(rows, f)
"""


def child_env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}


def write(boards, fmt, path, rng):
    """The boards as HCPE or PSV records with a random legal move each, written to path."""
    arr, moves = records(boards, fmt, rng)
    arr.tofile(path)
    return moves


@pytest.mark.parametrize("fmt", [shogi.HCPE, shogi.PSV])
def test_positions_with_hundreds_of_legal_moves(tmp_path, fmt):
    seed = int(np.random.SeedSequence().entropy % 100_000)
    rng = np.random.default_rng(seed)
    heavy = [b.copy() for b in hand_heavy_positions(40, seed)]
    endgames = [b.copy() for b in random_endgames(40, seed, absent=0.0)]
    most = cshogi.Board(MOST_MOVES)
    assert len(labels(most)) == 593
    # files of one to four records (a single ds[i], or to_dataset of a small file, made one
    # buffer too small for their labels) and a larger mixed one
    files = {"most.x": [most], "most3.x": [most, most.copy(), most.copy()],
             "endgames4.x": endgames[:4], "heavy1.x": heavy[:1],
             "mixed.x": heavy + endgames[4:] + [most] * 3}
    suffix = ".hcpe" if fmt == shogi.HCPE else ".bin"
    expected = {}
    for name, boards in files.items():
        path = str(tmp_path / name.replace(".x", suffix))
        expected[path] = (boards, write(boards, fmt, path, rng))
    many = sum(len(labels(b)) > 256 for b in files["mixed.x"])
    assert many >= 20, f"only {many} positions with more than 256 legal moves (seed {seed})"
    out = tmp_path / "rows.pickle"
    child = subprocess.run([sys.executable, "-c", CHILD, str(fmt), str(out), *expected], env=child_env(),
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, f"the reader died (seed {seed}, exit {child.returncode}): {child.stderr[-2000:]}"
    with open(out, "rb") as f:
        rows = pickle.load(f)
    for path, (boards, moves) in expected.items():
        for how in ("item", "whole", "loader"):
            got = rows[path][how]
            assert len(got) == len(boards), (path, how)
            for i, (board, move) in enumerate(zip(boards, moves)):
                tok, legal, target = got[i]
                want = labels(board)
                np.testing.assert_array_equal(legal, want, err_msg=f"{path} {how} {i}: {board.sfen()}")
                np.testing.assert_array_equal(tok, tokens(board), err_msg=f"{path} {how} {i}: {board.sfen()}")
                assert want[target] == cshogi.dlshogi.make_move_label(move, board.turn), (path, how, i)
