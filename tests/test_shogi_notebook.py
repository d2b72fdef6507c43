"""examples/shogi.ipynb runs top to bottom (short settings via MANAKA_NOTEBOOK_QUICK=1)."""
import json
import os

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
    assert text.count("eval_loss=") == 4, text  # steps 5, 10, 15, 20 of the quick run
