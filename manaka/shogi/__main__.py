"""``python -m manaka.shogi COMMAND ...``: convert (game records to HCPE), selfplay (engine
games to HCPE), usi (a model as a USI engine), heuristic (the heuristic player as a USI
engine), match (two USI engines against each other). ``python -m manaka.shogi COMMAND
--help`` for each one's options."""
import importlib
import sys

COMMANDS = {
    "convert": ("convert", "OUT.hcpe RECORDS...: CSA / KIF game records to HCPE"),
    "selfplay": ("selfplay", "--engine CMD --nodes N --games G --out OUT.hcpe: a USI engine's games to HCPE"),
    "usi": ("usi", "--model M [--search policy|value|puct]: a trained model as a USI engine"),
    "heuristic": ("heuristic", "[--seed S]: the heuristic player as a USI engine"),
    "match": ("match", "ENGINE_A ENGINE_B --games N: play two USI engines, W/D/L and Elo"),
}


def usage() -> str:
    return "usage: python -m manaka.shogi COMMAND ...\n\ncommands:\n" + "\n".join(
        f"  {name:<10} {line}" for name, (_, line) in COMMANDS.items())


def main(argv) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(usage(), file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    return importlib.import_module(f"manaka.shogi.{COMMANDS[argv[0]][0]}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
