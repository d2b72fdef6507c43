"""A table of recipe variants from ``python -m manaka.bench strength --only manaka`` results
(their JSON files): the best held-out point of each run (by held-out loss, as keep_best
picks it) and the last, with the positions seen at each.

    python -m manaka.bench.strength_variants results/*.json > variants.md
"""
from __future__ import annotations

import json
import sys


def rows(paths):
    out = []
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        m = d.get("manaka")
        if not m or not m["curve"]:
            continue
        curve = m["curve"]
        best = min(curve, key=lambda p: p["policy_nll"] + p["value_bce"])
        top = max(curve, key=lambda p: p["top1"])
        out.append((path, d, m, best, top, curve[-1], None))
    return out


def main(argv=None) -> int:
    paths = list(sys.argv[1:] if argv is None else argv)
    print("| run | settings (besides the recipe at the time) | train / held-out positions | params | best point: seen, top-1, policy NLL, value BCE | highest top-1 (seen) | last point: seen, top-1, policy NLL, value BCE |")
    print("|---|---|---|---|---|---|---|")
    found = rows(paths)
    first = found[0][1]["recipe"] if found else {}
    for path, d, m, best, top, last, _ in found:
        name = path.rsplit("/", 1)[-1][:-len(".json")]
        name = name[len("strength-"):] if name.startswith("strength-") else name
        if "set" in d["config"]:
            settings = ", ".join(d["config"]["set"])
        else:  # results written before --set was recorded: the differences from the first file's recipe
            settings = ", ".join(f"{k}={v}" for k, v in d["recipe"].items() if first.get(k) != v)
        data = d.get("data") or {}
        sizes = (f"{data['train_positions']:,} / {data['held_positions']:,}" if data else
                 f"{d['config']['train'].rsplit('/', 1)[-1]} / {d['config']['held'].rsplit('/', 1)[-1]}")
        print(f"| {name} | {settings or '-'} | {sizes} | {m['parameters']:,} | {best['positions_seen']:,}, "
              f"{100 * best['top1']:.1f} %, {best['policy_nll']:.3f}, {best['value_bce']:.3f} | "
              f"{100 * top['top1']:.1f} % ({top['positions_seen']:,}) | {last['positions_seen']:,}, "
              f"{100 * last['top1']:.1f} %, {last['policy_nll']:.3f}, {last['value_bce']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
