"""examples/shogi.ipynb runs top to bottom (short settings via MANAKA_NOTEBOOK_QUICK=1) on
the shipped engine games, and its held-out top-1 rises."""
import json
import os
import re

import pytest

from notebooks import ROOT, execute


def test_shogi_notebook_runs(monkeypatch):
    pytest.importorskip("cshogi")
    text = execute("shogi.ipynb", {"MANAKA_NOTEBOOK_QUICK": "1"}, monkeypatch, timeout=300)
    assert "held-out loss" in text and "value for the side to move" in text and "skipped records: 0" in text
    # the held-out curve is fit's own (eval_data / History), not a loop of mk.evaluate calls
    with open(os.path.join(ROOT, "examples", "shogi.ipynb")) as f:
        cells = json.load(f)["cells"]
    source = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "eval_data=held_out" in source and 'history.series("eval_' in source and "mk.evaluate" not in source
    assert text.count("eval_loss=") == 4, text  # steps 15, 30, 45, 60 of the quick run
    # it learns: the held-out top-1 (against the engine's move, in other games) rises from
    # the first evaluation and ends near twice chance (a uniform pick among the legal moves
    # scores 4.2 % on these positions: the mean of 1 / number of legal moves)
    acc = [float(a) for a in re.findall(r"eval_acc=([\d.]+)", text)]
    assert max(acc) > acc[0] + 0.01 and max(acc) > 0.07, acc


def test_shipped_games_are_small_and_split_by_game():
    folder = os.path.join(ROOT, "examples", "data")
    sizes = {name: os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder)}
    assert sum(sizes.values()) <= 1_600_000, sizes
    for name in ("fsf-train.hcpe", "fsf-held.hcpe"):
        with open(os.path.join(folder, name + ".games")) as f:
            assert sum(int(x) for x in f.read().split()) * 38 == sizes[name]
