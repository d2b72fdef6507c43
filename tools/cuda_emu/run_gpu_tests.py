"""Runs the GPU tests, every test marked `cuda` (pyproject.toml registers the marker), against
manaka._cuda built on the CPU emulator: the real binding, kernels and runtime wrapper, with
host memory standing in for device memory.

    python tools/cuda_emu/run_gpu_tests.py [pytest arguments]

With no file or folder among the arguments it runs the test files, in any folder of tests/,
that use the marker; `-m cuda` is always added, so a new GPU test needs only the marker, not a
line here. MANAKA_CUDA_EMULATED=1 tells those tests to skip what is too big to emulate."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def marked_files():
    """The test files that mention the marker: only a shortcut, so that pytest need not
    import every test module (torch's included) to find them; `-m cuda` still selects the
    tests themselves."""
    found = []
    for folder, subfolders, names in os.walk(os.path.join(ROOT, "tests")):
        subfolders.sort()
        for name in sorted(names):
            if name.startswith("test_") and name.endswith(".py"):
                with open(os.path.join(folder, name)) as f:
                    if "pytest.mark.cuda" in f.read():
                        found.append(os.path.join(folder, name))
    return found


def main(argv):
    sys.path.insert(0, HERE)
    import emulated

    emulated.install()
    import pytest

    args = list(argv)
    # pytest's own options that take a value are written --opt=value or -k expr: a
    # bare word after such a flag is its value, not a path.
    paths = [a for i, a in enumerate(args)
             if not a.startswith("-") and not (i and args[i - 1] in ("-k", "-m", "-p", "-o", "--junitxml"))]
    if not paths:
        args += marked_files()
    return pytest.main(["-q", "-p", "no:cacheprovider", "-rs", "-m", "cuda", "--rootdir", ROOT,
                        "-c", os.path.join(ROOT, "pyproject.toml"), *args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
