"""Refuses, before anything else is loaded, a manaka whose C core was never built here.

The usual cause is a clone of the repository shadowing an installed manaka: Python run in
the clone's folder imports ./manaka (the sources, no compiled ``_core``) before the copy in
site-packages, and what then fails is whatever is loaded first (OpenBLAS, or a "circular
import" of ``_core``), which says nothing of the cause. This says it.
"""
from __future__ import annotations

import importlib.machinery
import os
import sys

__all__ = ["check_built"]


def _installed_elsewhere(package_dir: str):
    """The __init__.py of another manaka on sys.path that has its C core, or None."""
    parent = os.path.dirname(package_dir)
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != parent]
    spec = importlib.machinery.PathFinder.find_spec("manaka", others)
    if spec is None or not spec.origin:
        return None
    folder = os.path.dirname(spec.origin)
    return spec.origin if os.path.abspath(folder) != package_dir and _core_file(folder) else None


def _core_file(folder: str):
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(os.path.join(folder, "_core" + suffix)):
            return suffix
    return None


def check_built(package_dir: str) -> None:
    """ImportError saying where and what to do when `package_dir` (the imported manaka's
    folder) holds no compiled ``_core``."""
    package_dir = os.path.abspath(package_dir)
    if _core_file(package_dir):
        return
    parent = os.path.dirname(package_dir)
    if parent == os.path.abspath(os.curdir):
        where, fix = "the current folder, which Python searches first", "run Python from another folder"
    else:
        where, fix = "on sys.path", f"take {parent} off sys.path (PYTHONPATH)"
    other = _installed_elsewhere(package_dir)
    shadows = f"; it shadows the installed manaka in {os.path.dirname(other)}" if other else ""
    raise ImportError(
        f"manaka: {package_dir} is manaka's source tree without its compiled C core "
        f"(no _core{importlib.machinery.EXTENSION_SUFFIXES[0]} there), imported because {parent} is "
        f"{where}{shadows}. To use {'that' if other else 'an'} installed manaka, {fix}; to use these sources, "
        f"build them in place: cd {parent} && python setup.py build_ext --inplace (or pip install -e .)")
