"""examples/torch_interop.ipynb runs top to bottom (40 steps via MANAKA_TORCH_NOTEBOOK_STEPS),
and what it shows holds: the module's curve is mk.Trainer's, to_model gives back the same
logits, and to_model refuses the residual block's parameters."""
import re

import pytest

pytest.importorskip("torch", reason="torch not installed: pip install torch (manaka[torch])")

from notebooks import execute  # noqa: E402


def test_torch_interop_notebook_runs(monkeypatch):
    text = execute("torch_interop.ipynb", {"MANAKA_TORCH_NOTEBOOK_STEPS": "40"}, monkeypatch)
    gap = float(re.search(r"largest relative gap to mk.Trainer's curve: (\S+)", text).group(1))
    assert gap < 1e-4, text
    diff = float(re.search(r"to_model: largest logit difference (\S+)", text).group(1))
    assert diff < 1e-4, text
    assert "residual.to_model(): " in text and "block.0.weight" in text
    assert "residual Network + AdamW: first loss" in text
