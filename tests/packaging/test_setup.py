"""setup.py's choice of what to build: manaka._cuda only when nvcc is found and a GPU is
visible (then for that GPU's generation), for every generation with MANAKA_CUDA=1, never
with MANAKA_CUDA=0; and the one line saying so. The GPU is asked of the driver through
ctypes; here a fake libcuda.so (compiled below) plays the driver, so every answer a driver
can give is tried on a machine without one."""
import importlib.util
import os
import shutil
import subprocess

import pytest

from paths import ROOT


@pytest.fixture(scope="module")
def setup_py():
    spec = importlib.util.spec_from_file_location("manaka_setup", os.path.join(ROOT, "setup.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # __name__ is not "__main__": nothing is built
    return module


# The driver API calls setup.py makes, answering from $FAKE_CUDA: "init:<CUresult>" or a
# comma-separated list of compute capabilities ("" = no device).
FAKE_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static const char *spec(void) { const char *s = getenv("FAKE_CUDA"); return s ? s : ""; }
static int nth(int i, int *major, int *minor) {
    const char *s = spec();
    for (int k = 0; *s; k++) {
        if (k == i) return sscanf(s, "%1d%1d", major, minor) == 2 ? 0 : 1;
        s = strchr(s, ',');
        if (!s) break;
        s++;
    }
    return 101; /* CUDA_ERROR_INVALID_DEVICE */
}
int cuInit(unsigned flags) { return strncmp(spec(), "init:", 5) == 0 ? atoi(spec() + 5) : 0; }
int cuDeviceGetCount(int *n) {
    const char *s = spec();
    *n = 0;
    if (*s) for (*n = 1; (s = strchr(s, ',')); s++) (*n)++;
    return 0;
}
int cuDeviceGet(int *device, int i) { *device = i; return 0; }
int cuDeviceGetAttribute(int *value, int attribute, int device) {
    int major, minor, rc = nth(device, &major, &minor);
    if (rc) return rc;
    if (attribute == 75) *value = major; else if (attribute == 76) *value = minor; else return 1;
    return 0;
}
int cuDeviceGetName(char *name, int len, int device) { snprintf(name, len, "Fake GPU %d", device); return 0; }
"""


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("no gcc to build the fake driver library")
    d = tmp_path_factory.mktemp("fake_cuda")
    (d / "fake.c").write_text(FAKE_DRIVER)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(d / "fake.c")], check=True)
    return str(d / "libcuda.so.1")


@pytest.mark.parametrize("spec, archs", [("90", ["90"]), ("80,86", ["80", "86"]), ("90,90", ["90"]),
                                          ("", []), ("init:100", [])])
def test_visible_gpus_asks_the_driver(setup_py, fake_libcuda, monkeypatch, spec, archs):
    monkeypatch.setenv("FAKE_CUDA", spec)
    found, detail = setup_py.visible_gpus(fake_libcuda)
    assert found == archs
    if archs:
        assert detail.startswith("Fake GPU")
    elif spec:
        assert detail == "cuInit failed: CUresult 100"
    else:
        assert detail == "the driver shows no device"


def test_no_driver_means_no_gpu_visible(setup_py, tmp_path):
    found, detail = setup_py.visible_gpus(str(tmp_path / "libcuda.so.1"))
    assert found == [] and "no NVIDIA driver" in detail


def config(setup_py, env, nvcc=True, gpus=([], "no NVIDIA driver: libcuda.so.1 not found"), nvcc_knows=None):
    setup_py.nvcc_archs = lambda root: nvcc_knows  # module global, read by cuda_config
    return setup_py.cuda_config(env=env, find_cuda=lambda: "/cuda" if nvcc else None,
                                find_cudart=lambda root: root + "/lib64/libcudart_static.a",
                                visible_gpus=lambda: gpus)


def test_no_gpu_builds_the_cpu_core_only_and_says_why(setup_py):
    cuda, line = config(setup_py, {})
    assert cuda is None
    assert line == ("setup.py: building manaka._core (CPU); manaka._cuda skipped: nvcc found but no GPU visible "
                    "(no NVIDIA driver: libcuda.so.1 not found; MANAKA_CUDA=1 builds it for sm_80..90)")


def test_a_visible_gpu_gets_its_generation_only(setup_py):
    cuda, line = config(setup_py, {}, gpus=(["90"], "NVIDIA H200"))
    assert cuda["archs"] == ["90"] and cuda["cudart"] == "/cuda/lib64/libcudart_static.a"
    assert line.startswith("setup.py: building manaka._core (CPU) and manaka._cuda for sm_90 + PTX (the visible GPU: NVIDIA H200")
    cuda, _ = config(setup_py, {}, gpus=(["86", "90"], "two"))
    assert cuda["archs"] == ["86", "90"]


def test_a_gpu_newer_than_nvcc_gets_the_newest_generation_nvcc_has(setup_py):
    cuda, _ = config(setup_py, {}, gpus=(["120"], "new"), nvcc_knows=["75", "80", "90", "100"])
    assert cuda["archs"] == ["100"]


def test_a_gpu_older_than_the_backend_supports_is_skipped_saying_so(setup_py):
    cuda, line = config(setup_py, {}, gpus=(["75"], "Tesla T4"))
    assert cuda is None and "sm_75, below the sm_80" in line and "MANAKA_CUDA_ARCH=75" in line


def test_manaka_cuda_1_builds_every_generation_without_a_gpu(setup_py):
    cuda, line = config(setup_py, {"MANAKA_CUDA": "1"})
    assert cuda["archs"] == ["80", "86", "89", "90"]
    assert "sm_80, sm_86, sm_89, sm_90 + PTX (MANAKA_CUDA=1" in line


def test_manaka_cuda_arch_overrides_and_asks_for_the_build(setup_py):
    for env in ({"MANAKA_CUDA_ARCH": "90"}, {"MANAKA_CUDA": "1", "MANAKA_CUDA_ARCH": "sm_90"}):
        cuda, line = config(setup_py, env)
        assert cuda["archs"] == ["90"] and "(MANAKA_CUDA_ARCH)" in line
    cuda, _ = config(setup_py, {"MANAKA_CUDA_ARCH": "86;80"}, gpus=(["90"], "H200"))
    assert cuda["archs"] == ["80", "86"]


def test_manaka_cuda_0_and_no_nvcc_skip(setup_py):
    cuda, line = config(setup_py, {"MANAKA_CUDA": "0"}, gpus=(["90"], "H200"))
    assert cuda is None and line.endswith("manaka._cuda skipped: MANAKA_CUDA=0")
    cuda, line = config(setup_py, {}, nvcc=False, gpus=(["90"], "H200"))
    assert cuda is None and "nvcc not found" in line
    with pytest.raises(SystemExit, match="MANAKA_CUDA=1 but nvcc was not found"):
        config(setup_py, {"MANAKA_CUDA": "1"}, nvcc=False)
    with pytest.raises(SystemExit, match="MANAKA_CUDA must be 0, 1 or unset"):
        config(setup_py, {"MANAKA_CUDA": "yes"})


def test_the_line_is_one_line(setup_py):
    for kwargs in ({}, {"gpus": (["90"], "H200")}, {"nvcc": False}):
        assert "\n" not in config(setup_py, {}, **kwargs)[1]


def test_the_test_hooks_and_the_cuda_backend_link_no_engine(setup_py, monkeypatch):
    """manaka._testing is built from csrc/python/testing/ only, manaka._cuda from csrc/cuda/
    and csrc/python/cuda/ only, both with hidden visibility; the shipped manaka._core from
    neither. The engine and the argument conversion belong to _core alone, which the other
    two call into (csrc/python/common/engine_link.h)."""
    monkeypatch.chdir(ROOT)  # setup.py globs csrc/ relative to the folder it runs in
    cuda = {"root": "/nowhere", "archs": ["90"], "cudart": "/nowhere/libcudart_static.a"}
    for config in (None, cuda):
        exts = {e.name: e for e in setup_py.extensions(config)}
        assert list(exts)[:2] == ["manaka._core", "manaka._testing"]
        core, testing = exts["manaka._core"].sources, exts["manaka._testing"].sources
        assert not [s for s in core if s.startswith(("csrc/python/testing/", "csrc/python/cuda/", "csrc/cuda/"))]
        assert sorted(testing) == \
            sorted(os.path.join("csrc", "python", "testing", f)
                   for f in os.listdir(os.path.join(ROOT, "csrc", "python", "testing")) if f.endswith(".c"))
        assert "-fvisibility=hidden" in exts["manaka._testing"].extra_compile_args
        assert "manaka._cuda" in exts if config else len(exts) == 2
        if config:
            ext = exts["manaka._cuda"]
            assert ext.sources and all(s.startswith(("csrc/cuda/", "csrc/python/cuda/")) for s in ext.sources)
            assert "-fvisibility=hidden" in ext.extra_compile_args
            assert any("-fvisibility=hidden" in f for f in setup_py.nvcc_flags(["90"]))


# ---------------------------------------------------------------- compilers and platforms


def test_apple_clang_is_detected_by_version_or_platform(setup_py):
    apple = "Apple clang version 15.0.0 (clang-1500.3.9.4)\nTarget: arm64-apple-darwin23.4.0\n"
    assert setup_py.is_apple_clang(apple, platform="linux")
    assert setup_py.is_apple_clang("", platform="darwin")
    assert not setup_py.is_apple_clang("cc (Debian 12.2.0-14) 12.2.0\n", platform="linux")
    assert not setup_py.is_apple_clang("Debian clang version 14.0.6\n", platform="linux")


def test_openmp_flags_gcc_and_apple(setup_py, tmp_path, monkeypatch):
    assert setup_py.openmp_flags(False, env={}) == (["-fopenmp"], ["-fopenmp"])
    # Apple clang: -Xpreprocessor -fopenmp with libomp's headers, -lomp from its lib
    prefix = tmp_path / "libomp"
    (prefix / "include").mkdir(parents=True)
    (prefix / "lib").mkdir()
    (prefix / "include" / "omp.h").write_text("")
    (prefix / "lib" / "libomp.dylib").write_text("")
    compile_, link = setup_py.openmp_flags(True, env={"MANAKA_LIBOMP": str(prefix)})
    assert compile_ == ["-Xpreprocessor", "-fopenmp", f"-I{prefix}/include"]
    assert link == [f"-L{prefix}/lib", "-lomp", f"-Wl,-rpath,{prefix}/lib"]
    # found through Homebrew when MANAKA_LIBOMP is unset, else a conda environment's
    assert setup_py.find_libomp({}, brew_prefix=lambda: str(prefix)) == (f"{prefix}/include", f"{prefix}/lib")
    assert setup_py.find_libomp({"CONDA_PREFIX": str(prefix)}, brew_prefix=lambda: None)[1] == f"{prefix}/lib"
    # none found: a clear exit saying what to install
    with pytest.raises(SystemExit, match="brew install libomp"):
        setup_py.openmp_flags(True, env={}, find_libomp=lambda env: None)
    with pytest.raises(SystemExit, match="MANAKA_LIBOMP"):
        setup_py.openmp_flags(False, env={"MANAKA_LIBOMP": str(tmp_path / "nothing")})


def test_arch_flags(setup_py, monkeypatch):
    monkeypatch.delenv("MANAKA_PORTABLE", raising=False)
    assert setup_py.arch_flags(False, "x86_64") == ["-march=native"]
    assert setup_py.arch_flags(True, "arm64") == ["-mcpu=native"]
    assert setup_py.arch_flags(True, "x86_64") == ["-march=native"]
    monkeypatch.setenv("MANAKA_PORTABLE", "1")
    assert setup_py.arch_flags(False, "x86_64") == [] and setup_py.arch_flags(True, "arm64") == []


def test_no_cuda_on_macos(setup_py, monkeypatch):
    monkeypatch.setattr(setup_py.sys, "platform", "darwin")
    config, line = setup_py.cuda_config(env={}, find_cuda=lambda: "/usr/local/cuda")
    assert config is None and "macOS has no CUDA" in line
    with pytest.raises(SystemExit, match="no CUDA on macOS"):
        setup_py.cuda_config(env={"MANAKA_CUDA": "1"}, find_cuda=lambda: "/usr/local/cuda")


def test_the_python_builds_rpath_is_dropped_from_the_link(setup_py):
    link = ["gcc", "-shared", "-L/opt/py/lib", "-Wl,-rpath,/opt/py/lib", "-Wl,-rpath=/x", "-Wl,-R/y", "-O2"]
    assert setup_py.without_rpath(link) == ["gcc", "-shared", "-L/opt/py/lib", "-O2"]
