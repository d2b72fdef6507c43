"""Loads manaka._core so that the other extensions share its engine.

manaka._cuda and manaka._testing link no engine code: their calls to mk_* functions (the
checks, the per-thread error message, the argument conversion, the op registry) resolve to
_core's when they are loaded, which needs _core's symbols in the global scope of the
dynamic loader, i.e. _core opened with RTLD_GLOBAL (csrc/python/common/engine_link.h says
why one engine: one error buffer, one thread count). _core exports only PyInit__core and
mk_* names, so nothing else in the process can be shadowed by it.
"""
import importlib
import os
import sys


def load():
    """manaka._core, imported with RTLD_GLOBAL added to the interpreter's dlopen flags for
    that one import (a later import is the cached module)."""
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | os.RTLD_GLOBAL)
    try:
        return importlib.import_module("manaka._core")
    finally:
        sys.setdlopenflags(flags)
