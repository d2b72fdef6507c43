"""Runs one benchmark suite: ``python -m manaka.bench {ops,step,pipeline} [options]``."""
import importlib
import sys

from . import SUITES


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SUITES:
        print(f"usage: python -m manaka.bench {{{','.join(SUITES)}}} [--help]", file=sys.stderr)
        return 2
    suite = importlib.import_module(f"manaka.bench.{argv[0]}")
    return suite.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
