"""Runs one benchmark suite: ``python -m manaka.bench SUITE [options]``."""
import importlib
import sys

from . import SUITES
from .timing import DEFAULT_OUT


def usage() -> str:
    width = max(map(len, SUITES))
    lines = ["usage: python -m manaka.bench SUITE [options]   (python -m manaka.bench SUITE --help: its options)",
             "", "suites:"]
    lines += [f"  {name:<{width}}  {line}" for name, line in SUITES.items()]
    lines += ["", f"Every suite writes <suite>-<tag>.json and .md into --out DIR (default ./{DEFAULT_OUT},",
              "or $MANAKA_BENCH_DIR); pass --out bench/results to replace the committed results."]
    return "\n".join(lines)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not argv or argv[0] not in SUITES:
        if argv:
            print(f"python -m manaka.bench: unknown suite {argv[0]!r}\n", file=sys.stderr)
        print(usage(), file=sys.stderr)
        return 2
    bad = _unwritable_out(argv[1:])
    if bad:
        print(f"python -m manaka.bench {argv[0]}: {bad}", file=sys.stderr)
        return 2
    suite = importlib.import_module(f"manaka.bench.{argv[0]}")
    return suite.main(argv[1:])


def _unwritable_out(args) -> str:
    """Why the results folder (--out DIR, --out=DIR, else $MANAKA_BENCH_DIR) cannot hold the
    results, or "": found before the suite runs, not when its end writes them (a file
    there failed with a traceback once the measurements were made, losing them)."""
    import os

    out, where = os.environ.get("MANAKA_BENCH_DIR") or None, "MANAKA_BENCH_DIR="
    for i, a in enumerate(args):
        if a == "--out" and i + 1 < len(args):
            out, where = args[i + 1], "--out "
        elif a.startswith("--out="):
            out, where = a[len("--out="):], "--out "
    if not out:
        return ""
    folder = os.path.abspath(out)
    while not os.path.exists(folder):  # the folders to be created: the nearest that exists
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        return f"{where}{out}: {folder} is a file, not a folder for the results"
    return ""


if __name__ == "__main__":
    sys.exit(main())
