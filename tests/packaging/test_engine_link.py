"""One engine for the three extensions (csrc/python/common/engine_link.h): manaka._core is
loaded with RTLD_GLOBAL and exports only PyInit__core and mk_* names; manaka._testing and
manaka._cuda define nothing but their PyInit (hidden visibility) and leave their engine
calls to _core, so a failure inside a _testing hook is read from _core's error buffer and
mk.set_num_threads reaches them."""
import os
import shutil
import subprocess
import sys

import pytest

import manaka as mk
import manaka._core

NM = shutil.which("nm")


def exported(path, defined=True):
    """The dynamic symbols of `path` (defined, or needed from elsewhere), without those a
    sanitizer build adds (ASan's ODR indicators "__odr_asan.<global>", its runtime's)."""
    out = subprocess.run([NM, "-D", "--defined-only" if defined else "--undefined-only", path],
                         capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    return {n for n in names if not n.startswith(("__odr_asan", "__asan", "__ubsan", "__tsan", "__sanitizer"))}


@pytest.mark.skipif(NM is None or sys.platform != "linux", reason="needs binutils' nm on Linux")
def test_core_exports_only_its_engine_names_and_the_others_nothing_of_theirs():
    core = exported(manaka._core.__file__)
    assert "PyInit__core" in core and "mk_fail" in core and "mk_error" in core
    assert {s for s in core if not s.startswith("mk_")} == {"PyInit__core"}
    import manaka._testing as hooks
    testing = exported(hooks.__file__)
    assert {s for s in testing if not s.startswith("_Z")} == {"PyInit__testing"}
    needs = {s for s in exported(hooks.__file__, defined=False) if s.startswith("mk_")}
    assert needs and needs <= core, needs - core  # every engine call is one _core defines
    cuda = os.path.join(os.path.dirname(manaka._core.__file__),
                        os.path.basename(manaka._core.__file__).replace("_core", "_cuda"))
    if os.path.exists(cuda):
        assert {s for s in exported(cuda) if not s.startswith("_Z")} == {"PyInit__cuda"}
        needs = {s for s in exported(cuda, defined=False) if s.startswith("mk_")}
        assert needs and needs <= core, needs - core


def test_the_layout_core_reports_is_the_one_the_hooks_were_compiled_with():
    """The check each extension runs at import (mk_check_engine) compares its struct sizes
    with those _core reports: they agree in one build, and are the sizes _testing
    compiled (its backend_layout hook)."""
    import ctypes
    import manaka._testing as t

    class Layout(ctypes.Structure):
        _fields_ = [("backend", ctypes.c_size_t), ("batch", ctypes.c_size_t)]
    of_core = ctypes.CDLL(manaka._core.__file__).mk_engine_layout_of_core
    of_core.restype = Layout
    core, hooks = of_core(), t.backend_layout()
    assert (core.backend, core.batch) == (hooks["mk_backend"][0], hooks["mk_batch"][0])


def test_the_engine_is_loaded_once_and_globally():
    """A second dlopen of _core's file with RTLD_NOLOAD finds the loaded image (not a copy),
    which is how _cuda's and _testing's mk_* calls reach it."""
    import ctypes
    handle = ctypes.CDLL(manaka._core.__file__, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    assert handle.mk_error  # resolves in the one loaded image
    assert mk.get_num_threads() >= 1
