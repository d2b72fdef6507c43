"""The default training recipe for shogi records (dlshogi HCPE, YaneuraOu PSV): the model
shapes, optimizer settings and value target that ``python -m manaka.train`` and
``manaka.fit`` use for record data, measured on held-out engine games
(bench/results/strength-*.md, docs/shogi.md "The default recipe").
"""
from __future__ import annotations

from typing import Any, Dict

# One place for the numbers; the reasons are in docs/shogi.md "The default recipe".
RECIPE: Dict[str, Any] = {
    # the move label encoding (manaka.shogi.MOVE_ENCODINGS): what the policy head's label
    # embedding can see of a move besides its dlshogi label; "-mover-supported" adds the
    # piece that moves and whether another of ours attacks its destination, read through
    # the move kind table (ModelConfig.move_kinds = 28)
    "moves": "capture-defended-check-escape-mover-supported",
    # model shapes (the token vocabulary is the encoding's; the move vocabulary the move encoding's);
    # pair_dim 4: four numbers per (piece, square) pair instead of one, for the value head
    "embed_dim": 32, "orders": 4, "pair_dim": 4, "hidden": (512,), "head_width": 64,
    # move classes of the move-pair table (ModelConfig.move_pairs): a scalar per (token of the
    # side to move, dlshogi label) added to each legal move's logit; 0: none
    "move_pairs": 2187,
    # the move-pair table's relative part (ModelConfig.board_*): shogi's 9 x 9 board and 28
    # kinds of board token (owner x 14 piece kinds), so that a scalar per (piece kind, its
    # square relative to the move's destination, the move's direction) is shared over the
    # board; all 0: none
    "board_width": 9, "board_height": 9, "board_kinds": 28,
    # MoveHidden's units (ModelConfig.move_hidden): a hidden layer per legal move over the
    # relative part's keys, a nonlinear function of what stands around the move; 0: none
    "move_hidden": 16,
    # the shared move embeddings (ModelConfig.move_shared): q against a row shared by every
    # move of a dlshogi label and one shared by every move of a class of the encoding, added
    # to each legal move's logit; 0: none
    "move_shared": 1,
    # MoveHidden's readout gated by the position (ModelConfig.move_hidden_gate): the units are
    # read with move_hidden_out + q move_hidden_gate; 0: out alone
    "move_hidden_gate": 0,
    # the value head's hidden layer (ModelConfig.value_hidden): z = w . relu(V x + b) + c;
    # 0: z linear in the trunk's output
    "value_hidden": 128,
    # 1: that hidden layer reads the power sums (ModelConfig.value_power_sums), not the trunk,
    # so the value never sees the pair table, which memorises the training positions'
    # evaluations; 0: it reads the trunk
    "value_power_sums": 1,
    # optimizer
    "batch_size": 512, "lr": 1e-3, "weight_decay": 1.0, "eps": 1e-8, "warmup": 20, "schedule": "cosine",
    # which pair-table rows a step updates (manaka.Trainer's pair_update)
    "pair_update": "dense",
    # which move-table rows a step updates (manaka.Trainer's move_update)
    "move_update": "dense",
    # value target: (1 - value) * result + value * sigmoid(eval / eval_scale)
    "value": "eval",
    # the evaluation's scale: "fit" to the training records' own results (shogi.eval_scale;
    # Fairy-Stockfish's games fit ~560, dlshogi's engine 756), or a number
    "eval_scale": "fit",
    # train on every record and its left-right mirror (open_hcpe / open_psv(mirror=True))
    "mirror": True,
    # keep the parameters of the best held-out evaluation (by held-out loss)
    "keep_best": True,
}

MODEL_KEYS = ("embed_dim", "orders", "pair_dim", "hidden", "head_width", "move_pairs", "board_width", "board_height",
              "board_kinds", "move_hidden", "move_shared", "move_hidden_gate", "value_hidden",
              "value_power_sums")


def recipe(**overrides) -> Dict[str, Any]:
    """The recipe with `overrides` (names of RECIPE; an unknown name is a KeyError naming it).
    value_hidden = 0 without value_power_sums also sets value_power_sums to 0 (the layer it
    names is gone); both given is ModelConfig's to check."""
    unknown = sorted(set(overrides) - set(RECIPE))
    if unknown:
        raise KeyError(f"shogi recipe: unknown setting(s) {unknown}; known: {sorted(RECIPE)}")
    out = dict(RECIPE)
    out.update(overrides)
    out["hidden"] = tuple(out["hidden"])
    if overrides.get("value_hidden") == 0 and "value_power_sums" not in overrides:
        out["value_power_sums"] = 0  # it reads the hidden layer value_hidden = 0 removed
    return out


def parse_setting(text: str):
    """'name=value' -> (name, value) with the value typed as RECIPE's (hidden: '256,256')."""
    name, sep, raw = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in RECIPE:
        raise ValueError(f"shogi recipe: expected NAME=VALUE with NAME one of {sorted(RECIPE)}, got {text!r}")
    old = RECIPE[name]
    raw = raw.strip()
    try:  # a value that is not of the setting's type is a ValueError naming the setting
        if name == "hidden":
            return name, tuple(int(h) for h in raw.split(",") if h.strip())
        if name == "value":  # "result", "eval" or a mixing weight
            return name, raw if raw in ("result", "eval") else float(raw)
        if name == "eval_scale":  # "fit" or a number
            return name, raw if raw == "fit" else float(raw)
        if isinstance(old, bool):
            if raw.lower() not in ("0", "1", "true", "false"):
                raise ValueError(f"shogi recipe: {name} must be true or false, got {raw!r}")
            return name, raw.lower() in ("1", "true")
        if isinstance(old, int):
            return name, int(raw)
        if isinstance(old, float):
            return name, float(raw)
    except ValueError as e:
        if str(e).startswith("shogi recipe:"):
            raise
        kind = {"hidden": "comma-separated ints", "value": "'result', 'eval' or a float",
                "eval_scale": "'fit' or a number"}.get(name, type(old).__name__)
        raise ValueError(f"shogi recipe: {name} must be {kind}, got {raw!r}") from None
    return name, raw


def trainer_settings(r: Dict[str, Any] = None) -> Dict[str, Any]:
    """The recipe's mk.Trainer keyword arguments (lr, weight_decay, eps, warmup_steps, schedule,
    pair_update, move_update)."""
    r = RECIPE if r is None else r
    return {"lr": r["lr"], "weight_decay": r["weight_decay"], "eps": r["eps"], "warmup_steps": r["warmup"],
            "schedule": r["schedule"], "pair_update": r["pair_update"], "move_update": r["move_update"]}


def model_config(r: Dict[str, Any] = None):
    """The recipe's mk.ModelConfig for shogi records (manaka's shogi vocabularies)."""
    from ..model import ModelConfig
    from .position import MOVE_KINDS, NUM_TOKENS, TOKENS_PER_SIDE, num_labels

    r = RECIPE if r is None else r
    shapes = {k: r[k] for k in MODEL_KEYS}
    if not shapes["move_pairs"]:  # the relative part, MoveHidden and the shared rows need its classes:
        shapes.update(board_width=0, board_height=0, board_kinds=0, move_hidden=0, move_shared=0,
                      move_hidden_gate=0)
    return ModelConfig(num_tokens=NUM_TOKENS, num_moves=num_labels(r["moves"]), tokens_per_side=TOKENS_PER_SIDE,
                       move_kinds=MOVE_KINDS.get(r["moves"], 0), **shapes)


def is_records(data) -> bool:
    """Shogi record files (open_hcpe / open_psv), or a Loader over them."""
    from .records import RecordFiles

    return isinstance(getattr(data, "dataset", data), RecordFiles)
