"""``python -m manaka.shogi convert OUT.hcpe RECORDS...``: see manaka/shogi/convert.py."""
import sys

from .convert import main

if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] != ["convert"]:
        print("usage: python -m manaka.shogi convert OUT.hcpe RECORDS...", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(argv[1:]))
