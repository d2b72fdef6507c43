"""manaka as a user installs it: a wheel built by pip from the source files (in pip's own
isolated build environment), installed into a fresh, plain venv outside the source tree
(pip resolves numpy, scipy-openblas32 and tqdm itself), then run from a neutral folder:
`python -m manaka.train --help`, `python -m manaka.bench --help` and a tiny training run.
This catches what an editable install or the source tree on sys.path hides: a subpackage
or file left out of the wheel, an import of something only the checkout has.

The CUDA backend is not built here (MANAKA_CUDA=0): its build is covered by .ci/run's
MANAKA_CUDA=1 install, and nvcc would take minutes."""
import os
import subprocess
import sys
import zipfile

import pytest

from paths import ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
from wheel_check import copy_sources  # noqa: E402  (the sources as a clean clone holds them)


def run(cmd, cwd, env, timeout=900):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    src, dist, venv, neutral = tmp / "src", tmp / "dist", tmp / "venv", tmp / "neutral"
    copy_sources(src)
    neutral.mkdir()
    # Nothing of this checkout or this interpreter's environment may leak into the venv.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(MANAKA_CUDA="0", PIP_DISABLE_PIP_VERSION_CHECK="1")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(src)], tmp, env)
    wheels = sorted(dist.glob("manaka-*.whl"))
    assert len(wheels) == 1, wheels
    run([sys.executable, "-m", "venv", str(venv)], tmp, env)  # a plain venv: no system site-packages
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", str(wheels[0])], tmp, env)
    return wheels[0], python, neutral, env


def test_the_wheel_holds_every_subpackage_and_the_core(installed):
    wheel = installed[0]
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("manaka/__init__.py", "manaka/train.py", "manaka/bench/__main__.py",
                   "manaka/shogi/__init__.py", "manaka/torch/__init__.py"):
        assert module in names, module
    assert any(n.startswith("manaka/_core.") and n.endswith(".so") for n in names)
    # The test hooks: installed for the gemm and policy-head benchmarks, outside _core.
    assert any(n.startswith("manaka/_testing.") and n.endswith(".so") for n in names)
    assert not any(n.startswith("manaka/_cuda.") for n in names)  # MANAKA_CUDA=0


def test_the_installed_hooks_load_and_the_core_holds_none(installed):
    _, python, neutral, env = installed
    out = run([python, "-c", "import sys, numpy as np, manaka; print('manaka._testing' in sys.modules); "
               "from manaka import _testing; a = np.eye(3, dtype=np.float32); "
               "print(bool((_testing.backend_gemm('cpu', a, a) == a).all())); "
               "print([n for n in dir(manaka._core) if n.startswith('backend_')])"], neutral, env)
    assert out.split() == ["False", "True", "[]"], out


def test_manaka_is_imported_from_the_venv_not_the_checkout(installed):
    _, python, neutral, env = installed
    out = run([python, "-c", "import manaka, sys; print(manaka.__file__); print(sys.prefix)"], neutral, env)
    where, prefix = out.split()[:2]
    assert where.startswith(prefix) and "site-packages" in where and not where.startswith(ROOT), out


def test_train_help(installed):
    _, python, neutral, env = installed
    out = run([python, "-m", "manaka.train", "--help"], neutral, env)
    assert out.startswith("usage: python -m manaka.train")
    for option in ("--data", "--steps", "--device", "--checkpoint", "--save"):
        assert option in out, option


def test_bench_help(installed):
    _, python, neutral, env = installed
    out = run([python, "-m", "manaka.bench", "--help"], neutral, env)
    assert out.startswith("usage: python -m manaka.bench SUITE")
    for suite in ("ops", "step", "step_torch", "gemm", "pipeline"):
        assert f"\n  {suite} " in out, suite


def test_a_tiny_training_run(installed):
    _, python, neutral, env = installed
    out = run([python, "-m", "manaka.train", "--synthetic", "2000", "--eval-positions", "256", "--steps", "3",
               "--batch-size", "64", "--preset", "small", "--device", "cpu", "--no-progress",
               "--save", "out/model.mk"], neutral, env, timeout=300)
    assert "model: cpu," in out and "done: step 3," in out
    assert "held-out (256 positions): loss" in out
    assert (neutral / "out" / "model.mk").stat().st_size > 0
    # The saved file loads in the installed package.
    out = run([python, "-c", "import manaka as mk; print(mk.Model.load('out/model.mk').config.embed_dim)"], neutral, env)
    assert out.split()[-1] == "32"
