"""manaka.shogi.recipe: the default recipe for shogi records, its settings parsed and
checked, and python -m manaka.train choosing it for record data (shapes, value target,
mirror, optimizer settings, keep-best)."""
import numpy as np
import pytest

from shogi_reference import make_records

from manaka import train
import manaka as mk
from manaka import shogi
from manaka.shogi import recipe


def test_recipe_overrides_and_parsing():
    r = recipe.recipe(pair_dim=2, hidden=[8, 8])
    assert r["pair_dim"] == 2 and r["hidden"] == (8, 8) and r["lr"] == recipe.RECIPE["lr"]
    with pytest.raises(KeyError, match="nope"):
        recipe.recipe(nope=1)
    # the value head reads the power sums through its hidden layer: without the layer, not
    # the power sums either, unless asked (then the model refuses the pair)
    assert recipe.RECIPE["value_hidden"] >= 1 and recipe.RECIPE["value_power_sums"] == 1
    assert recipe.recipe(value_hidden=0)["value_power_sums"] == 0
    assert recipe.recipe(value_hidden=64)["value_power_sums"] == 1
    with pytest.raises(ValueError, match="value_power_sums = 1 needs value_hidden >= 1"):
        mk.Model(recipe.model_config(recipe.recipe(value_hidden=0, value_power_sums=1, moves="dlshogi")))
    assert recipe.parse_setting("hidden=256,128") == ("hidden", (256, 128))
    assert recipe.parse_setting("mirror=true") == ("mirror", True)
    assert recipe.parse_setting("value=eval") == ("value", "eval")
    assert recipe.parse_setting("value=0.25") == ("value", 0.25)
    assert recipe.parse_setting("batch-size=64") == ("batch_size", 64)
    for bad in ("nope=1", "lr", "mirror=maybe"):
        with pytest.raises(ValueError):
            recipe.parse_setting(bad)
    # a value not of the setting's type names the setting (int() and float() did not)
    for text, message in (("move_pairs=x", "move_pairs must be int, got 'x'"), ("lr=fast", "lr must be float"),
                          ("hidden=8,a", "hidden must be comma-separated ints"),
                          ("value=half", "value must be 'result', 'eval' or a float"),
                          ("value_hidden=1.5", "value_hidden must be int, got '1.5'")):
        with pytest.raises(ValueError, match=f"^shogi recipe: {message}"):
            recipe.parse_setting(text)
    cfg = recipe.model_config()
    assert (cfg.embed_dim, cfg.pair_dim, cfg.hidden, cfg.head_width, cfg.move_pairs) == (
        recipe.RECIPE["embed_dim"], recipe.RECIPE["pair_dim"], tuple(recipe.RECIPE["hidden"]), recipe.RECIPE["head_width"],
        recipe.RECIPE["move_pairs"])


def test_cli_uses_the_recipe_for_records(tmp_path, capsys):
    _, hcpe, _ = make_records(200, 33)
    hcpe[:160].tofile(tmp_path / "train.hcpe")
    hcpe[160:].tofile(tmp_path / "held.hcpe")
    R = recipe.RECIPE
    assert train.main(["--data", str(tmp_path / "train.hcpe"), "--eval-data", str(tmp_path / "held.hcpe"),
                       "--steps", "24", "--eval-every", "12", "--log-every", "12", "--no-progress", "--device", "cpu",
                       "--batch-size", "32", "--threads", "1", "--no-save"]) == 0
    out = capsys.readouterr().out
    mirrors = ", and their left-right mirrors" if R["mirror"] else ""
    scale = ""
    if R["eval_scale"] == "fit":  # the recipe's scale, fitted to the training records (random ones here)
        from manaka.shogi.eval_scale import fit_eval_scale
        fitted = fit_eval_scale([hcpe[:160].view(np.uint8).reshape(160, -1)], shogi.HCPE, "train.hcpe")
        scale = f", eval_scale={fitted:g}"
        assert f"value target: {R['value']!r} with sigmoid(eval / {fitted:g}), the scale fitted" in out, out
    assert (f"data: shogi.RecordFiles(160 HCPE records in 1 file(s), value={R['value']!r}{scale}, on_bad='raise', "
            f"38 bytes/position{mirrors})") in out, out
    assert (f"embed_dim={R['embed_dim']}, orders={R['orders']}, pair_dim={R['pair_dim']}, "
            f"hidden={tuple(R['hidden'])}, head_width={R['head_width']}, move_pairs={R['move_pairs']}, "
            f"board_width={R['board_width']}, board_height={R['board_height']}, board_kinds={R['board_kinds']}, "
            f"move_hidden={R['move_hidden']}, move_shared={R['move_shared']}, "
            f"move_hidden_gate={R['move_hidden_gate']}, move_kinds={shogi.MOVE_KINDS.get(R['moves'], 0)}, "
            f"value_hidden={R['value_hidden']}, value_power_sums={R['value_power_sums']})") in out, out
    assert f"pair_update={R['pair_update']!r}, move_update={R['move_update']!r})" in out, out
    assert (f"lr={R['lr']:g}, betas=(0.9, 0.999), eps={R['eps']:g}, weight_decay={R['weight_decay']:g}, "
            f"warmup_steps={R['warmup']}, schedule={R['schedule']!r}") in out, out
    assert "held-out (40 positions)" in out


def test_a_time_limit_alone_runs_a_cosine_recipe_at_a_constant_rate_and_says_so(tmp_path, capsys, monkeypatch):
    _, hcpe, _ = make_records(120, 34)
    hcpe.tofile(tmp_path / "train.hcpe")
    monkeypatch.setitem(train.RECIPES["shogi"], "schedule", "cosine")
    base = ["--data", str(tmp_path / "train.hcpe"), "--time-limit", "1", "--no-progress", "--device", "cpu",
            "--batch-size", "32", "--threads", "1", "--no-save", "--eval-positions", "0"]
    assert train.main(base) == 0
    out = capsys.readouterr().out
    assert "schedule: constant (the recipe's cosine decays to a last step" in out and "schedule='constant'" in out, out
    # asked for by name, the schedule is not changed behind the user's back
    assert train.main(base + ["--schedule", "cosine"]) != 0
    err = capsys.readouterr()
    assert "--schedule cosine decays to the last step" in err.out + err.err


def test_the_relative_part_follows_the_move_pair_table():
    from manaka.shogi import recipe as R
    cfg = R.model_config()
    assert (cfg.board_width, cfg.board_height, cfg.board_kinds) == (9, 9, 28) and cfg.move_pairs == 2187
    # 28 kinds (owner x 14) of board token on 81 squares come first in shogi's vocabulary
    assert cfg.board_kinds * cfg.board_width * cfg.board_height == 2268 <= cfg.num_tokens
    off = R.model_config(R.recipe(move_pairs=0))
    assert (off.move_pairs, off.board_width, off.board_height, off.board_kinds, off.move_hidden,
            off.move_shared) == (0, 0, 0, 0, 0, 0)
    assert R.model_config(R.recipe(move_hidden=16)).move_hidden == 16
    # the shared rows are keyed by the move-pair classes: 120 classes of the encoding per dlshogi
    # label, times the 28 kinds of the kind table (the piece that moves, supported or not)
    assert cfg.move_shared == R.RECIPE["move_shared"] and cfg.num_moves == 120 * 28 * cfg.move_pairs
    assert cfg.move_kinds == 28 and R.model_config(R.recipe(moves="capture-defended-check-escape")).move_kinds == 0
