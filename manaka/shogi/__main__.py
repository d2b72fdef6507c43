"""``python -m manaka.shogi convert|selfplay ...``: manaka/shogi/convert.py, manaka/shogi/selfplay.py."""
import sys

USAGE = """usage: python -m manaka.shogi convert OUT.hcpe RECORDS... [--force]
       python -m manaka.shogi selfplay --engine CMD --nodes N --games G --out OUT.hcpe [options]
(python -m manaka.shogi COMMAND --help for a command's options)"""

if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] == ["convert"]:
        from .convert import main
    elif argv[:1] == ["selfplay"]:
        from .selfplay import main
    else:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(argv[1:]))
