"""Runs a notebook of examples/ top to bottom in a fresh kernel that imports this checkout's
manaka; shared by the notebook tests."""
import os

import pytest

from paths import ROOT

# What a notebook may print when run by the tests (the quick settings).
MAX_OUTPUTS, MAX_LINES = 60, 200


def execute(name, env, monkeypatch, timeout=600):
    """Executes examples/<name> with the environment variables `env` set; returns the text of
    every output. Fails on any error output; skips without nbformat/nbclient."""
    nbformat = pytest.importorskip("nbformat", reason="SKIPPED: pip install -e '.[test]' installs nbformat")
    nbclient = pytest.importorskip("nbclient", reason="SKIPPED: pip install -e '.[test]' installs nbclient")
    for key, value in {"MPLBACKEND": "Agg", **env}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(os.path.join(ROOT, "examples", name), as_version=4)
    nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": ROOT}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, errors[0].get("evalue")
    text = "".join(o.get("text", "") for o in outputs)
    # A saved notebook stays readable: no text progress bar (each refresh is kept, hundreds of
    # lines), which a notebook shows as a widget (ipywidgets) or not at all.
    assert "\r" not in text, f"{name}: a text progress bar in the outputs: {text[text.index(chr(13)) - 80:][:200]!r}"
    assert len(outputs) <= MAX_OUTPUTS and text.count("\n") <= MAX_LINES, (len(outputs), text.count("\n"))
    return text
