"""An experiment: `python -m manaka.bench strength`'s manaka run with the pair table held at 0
(set to 0 after every step), i.e. the recipe's network without pair features, at equal
positions seen. It asked whether the pair table is what the value head memorises
(bench/results/strength-134k-value-power-sums.md).

    python bench/zero_pair_table.py TRAIN.hcpe HELD.hcpe SEED [zero|plain] [POSITIONS]

Prints the held-out curve (every 100 k positions, first 4,096 held-out positions) and the
figures on every held-out position; writes zeropair-<mode>-<seed>.json in the working folder."""
import json
import sys

import manaka as mk
from manaka.bench import strength


def main():
    train, held, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else "zero"
    positions = int(sys.argv[5]) if len(sys.argv) > 5 else 500_000
    if mode == "zero":
        step = mk.Trainer.step

        def step_then_zero(self, batch):
            out = step(self, batch)
            self.model.parameters()["pair_table"][...] = 0.0  # a live view on the CPU
            return out

        mk.Trainer.step = step_then_zero
    from manaka.shogi.recipe import recipe

    cfg = {"train": train, "held": held, "seconds": 0, "positions": positions, "every": 0,
           "every_positions": 100_000, "eval_positions": 4096, "settings": {}, "seed": seed,
           "rate_guess": 4000, "eval_scale": strength._eval_scale(train, recipe()), "save": ""}
    out = strength.train_manaka(cfg)
    for p in out["curve"]:
        print(mode, p["positions_seen"], "top-1 %.1f %%, policy NLL %.4f, value BCE %.4f"
              % (100 * p["top1"], p["policy_nll"], p["value_bce"]))
    f = out["final"]
    print("all held-out:", mode, "top-1 %.2f %%, top-5 %.2f %%, policy NLL %.4f, value BCE %.4f, value acc %.1f %%"
          % (100 * f["top1"], 100 * f["top5"], f["policy_nll"], f["value_bce"], 100 * f["value_accuracy"]))
    with open(f"zeropair-{mode}-{seed}.json", "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
