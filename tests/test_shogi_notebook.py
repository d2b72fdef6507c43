"""examples/shogi.ipynb runs top to bottom (short settings via MANAKA_NOTEBOOK_QUICK=1)."""
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_shogi_notebook_runs(monkeypatch):
    pytest.importorskip("cshogi")
    nbformat = pytest.importorskip("nbformat", reason="SKIPPED: pip install -e '.[test]' installs nbformat")
    nbclient = pytest.importorskip("nbclient", reason="SKIPPED: pip install -e '.[test]' installs nbclient")
    monkeypatch.setenv("MANAKA_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(os.path.join(ROOT, "examples", "shogi.ipynb"), as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": ROOT}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "held-out loss" in text and "value for the side to move" in text and "skipped records: 0" in text
    # the held-out curve is fit's own (eval_data / History), not a loop of mk.evaluate calls
    source = "".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    assert "eval_data=held_out" in source and 'history.series("eval_' in source and "mk.evaluate" not in source
    assert text.count("eval_loss=") == 4, text  # steps 5, 10, 15, 20 of the quick run
