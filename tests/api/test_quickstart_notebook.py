"""examples/quickstart.ipynb runs top to bottom (short settings via MANAKA_NOTEBOOK_QUICK=1)."""
from notebooks import execute


def test_quickstart_notebook_runs(monkeypatch):
    text = execute("quickstart.ipynb", {"MANAKA_NOTEBOOK_QUICK": "1"}, monkeypatch, timeout=300)
    assert "teacher's ceiling" in text and "step=" in text
