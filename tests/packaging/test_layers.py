"""The layers of csrc/ as docs/design.md draws them, read from the #include lines
(tools/layers.py): every arrow points down, no circle, and the product never reaches into
lab/ or tests/."""
import importlib.util
import os
import re

from paths import ROOT

_spec = importlib.util.spec_from_file_location("layers", os.path.join(ROOT, "tools", "layers.py"))
layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layers)


def test_every_layer_has_rules():
    """A new folder of csrc/ must say where it sits before it can include anything."""
    found = {layers.layer_of(path) for path in layers.files()}
    assert found <= set(layers.ALLOWED), sorted(found - set(layers.ALLOWED))
    assert set(layers.ENGINE) | set(layers.BINDINGS) | set(layers.TEST_HOOKS) == set(layers.ALLOWED)


def test_arrows_point_down():
    bad = {f"{a} -> {b}": where[:3] for (a, b), where in layers.include_arrows().items()
           if b not in layers.ALLOWED[a]}
    assert not bad, bad


def test_no_circle():
    assert not layers.cycles(layers.include_arrows())


def test_no_circle_among_the_package_imports():
    """manaka's modules import each other at module level as a tree (a circle there works
    only until an import order changes)."""
    arrows = {(a, b): [] for a, targets in layers.python_import_arrows().items() for b in targets}
    assert arrows and not layers.cycles(arrows)


def test_the_checks_can_fail():
    """The graph code itself: a made-up upward arrow and a circle are seen."""
    arrows = {("core", "python/core"): [("x", "y")], ("python/core", "core"): [("y", "x")]}
    assert layers.cycles(arrows) == {"core", "python/core"}
    assert "python/core" not in layers.ALLOWED["core"]


def test_the_product_never_includes_lab_or_tests():
    for folder in ("csrc", "manaka"):
        for path, _, names in os.walk(os.path.join(ROOT, folder)):
            for name in names:
                if not name.endswith((".c", ".h", ".cu", ".cuh", ".py")):
                    continue
                with open(os.path.join(path, name), errors="replace") as f:
                    text = f.read()
                assert not re.search(r'#\s*include\s+"(\.\./)*(lab|tests)/', text), os.path.join(path, name)
                assert not re.search(r"^\s*(from|import)\s+(lab|tests)\b", text, re.M), os.path.join(path, name)
