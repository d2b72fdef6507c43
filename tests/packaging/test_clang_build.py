"""manaka built with clang and LLVM's libomp, the way setup.py builds it with Apple clang on
macOS (-Xpreprocessor -fopenmp, libomp's headers, -lomp: MANAKA_LIBOMP selects that path on
any platform), then imported and run: an op against NumPy, OpenMP threads, a training step.
This is the nearest check of the macOS build a Linux machine can make (docs/platforms.md);
skipped, saying why, without clang or libomp (Debian: apt-get install clang
libomp-dev). The build (about 40 C files) takes a minute or two."""
import glob
import os
import shutil
import subprocess
import sys

import pytest

from paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
from wheel_check import copy_sources  # noqa: E402  (the sources as a clean clone holds them)


def libomp():
    """(omp.h, libomp.so) of an LLVM OpenMP runtime installed here, or None."""
    headers = sorted(glob.glob("/usr/lib/llvm-*/lib/clang/*/include/omp.h")) + sorted(glob.glob("/usr/include/omp.h"))
    libs = sorted(glob.glob("/usr/lib/llvm-*/lib/libomp.so")) + sorted(glob.glob("/usr/lib/*/libomp.so.5"))
    headers = [h for h in headers if "gcc" not in h]
    return (headers[-1], libs[-1]) if headers and libs else None


@pytest.fixture(scope="module")
def clang_build(tmp_path_factory):
    clang = shutil.which("clang")
    if not clang:
        pytest.skip("clang is not installed (apt-get install clang libomp-dev)")
    found = libomp()
    if not found:
        pytest.skip("LLVM's libomp is not installed (apt-get install libomp-dev)")
    tmp = tmp_path_factory.mktemp("clang")
    # a prefix laid out as Homebrew's libomp is: include/omp.h, lib/libomp.*
    prefix = tmp / "libomp"
    (prefix / "include").mkdir(parents=True)
    (prefix / "lib").mkdir()
    os.symlink(found[0], prefix / "include" / "omp.h")
    os.symlink(found[1], prefix / "lib" / "libomp.so")
    src = tmp / "src"
    copy_sources(src)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CFLAGS", "LDFLAGS")}
    env.update(CC=clang, LDSHARED=f"{clang} -shared", MANAKA_LIBOMP=str(prefix), MANAKA_CUDA="0",
               MANAKA_PORTABLE="1")
    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-j", "2"], cwd=src, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return src, done.stdout + done.stderr, env


def test_every_c_file_compiles_with_clang_and_apple_style_openmp(clang_build):
    src, log, _ = clang_build
    compiles = [line for line in log.splitlines() if " -c " in line and line.split()[0].endswith("clang")]
    compiled = {line.split(" -c ")[1].split()[0] for line in compiles}
    want = {os.path.relpath(p, src) for p in glob.glob(str(src / "csrc" / "**" / "*.c"), recursive=True)
            if "/cuda/" not in p and "/python/cuda/" not in p}
    assert want <= compiled, sorted(want - compiled)
    for line in compiles:
        if "/python/testing/" in line:
            continue
        assert "-Xpreprocessor -fopenmp" in line and "-march=native" not in line, line
    # clang's one remark on this code: an `omp parallel for simd` loop (backend_cpu.c's fill)
    # it does not vectorise (-Wpass-failed: a missed optimisation, not a fault); any other
    # warning fails
    warnings = [line for line in log.splitlines() if "warning:" in line and "-Wpass-failed" not in line]
    assert not warnings, warnings[:10]


def test_the_clang_build_links_libomp_and_runs(clang_build):
    src, _, env = clang_build
    core = glob.glob(str(src / "manaka" / "_core.*.so"))[0]
    needed = subprocess.run(["readelf", "-d", core], capture_output=True, text=True).stdout
    assert "libomp.so" in needed and "libgomp" not in needed, needed
    code = """
import numpy as np, manaka as mk
mk.set_num_threads(2)
rng = np.random.default_rng(0)
h = rng.standard_normal((64, 16), dtype=np.float32); t = rng.standard_normal((50, 16), dtype=np.float32)
legal = rng.integers(0, 50, (64, 9)).astype(np.int32)
got = mk.ops.gather_dot(h, t, legal)
want = np.einsum('bw,blw->bl', h.astype(np.float64), t.astype(np.float64)[legal])
assert np.abs(got - want).max() < 1e-4, np.abs(got - want).max()
cfg = mk.ModelConfig(num_tokens=60, num_moves=50, tokens_per_side=8, embed_dim=8, orders=2, pair_dim=4,
                     hidden=(16,), head_width=12)
ds = mk.synthetic_dataset(cfg, 256, seed=1) if hasattr(mk, 'synthetic_dataset') else None
model = mk.Model(cfg, seed=0)
trainer = mk.Trainer(model, lr=1e-2)
from manaka.bench.step import seed_batch
batch = seed_batch(cfg, 32, 20)
first = trainer.step(batch).loss
for _ in range(5):
    last = trainer.step(batch).loss
assert last < first, (first, last)
print('ok', mk.get_num_threads(), first, last)
"""
    run_env = {**env, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", code], cwd=src, env=run_env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.startswith("ok 2"), done.stdout + done.stderr
