"""Validated once, in C: every rule of the model configuration and of the
trainer's hyperparameters is C's (csrc/core/model.c: mk_config_check_dim,
mk_config_check; csrc/core/trainer.c: mk_trainer_config_check, mk_trainer_*_code). The
bindings convert types and Python converts Python values, nothing more.

So each rule is reached here through the extension directly, bypassing manaka.ModelConfig
and manaka.Trainer, and must give the error the public API gives, word for word."""
import re

import numpy as np
import pytest

import manaka as mk
from manaka import _core

FIELDS = ("num_tokens", "num_moves", "tokens_per_side", "embed_dim", "orders", "pair_dim", "hidden", "head_width",
          "move_pairs", "board_width", "board_height", "board_kinds", "move_hidden", "move_shared", "move_hidden_gate",
          "move_kinds", "value_hidden", "value_power_sums")
BASE = dict(num_tokens=10, num_moves=12, tokens_per_side=4, embed_dim=4, orders=2, pair_dim=2, hidden=(4,),
            head_width=4, move_pairs=0, board_width=0, board_height=0, board_kinds=0, move_hidden=0, move_shared=0,
            move_hidden_gate=0, move_kinds=0, value_hidden=0, value_power_sums=0)
INTS = [f for f in FIELDS if f != "hidden"]
COUNTS = ("move_pairs", "board_width", "board_height", "board_kinds", "move_hidden", "move_shared",
          "move_hidden_gate", "move_kinds", "value_hidden", "value_power_sums")  # 0 is allowed
WIDTHS = [f for f in INTS if f not in COUNTS]


def error_of(call):
    """(type, message) of what `call` raises."""
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


def core_model(**cfg):
    """_core.Model straight from the fields: no ModelConfig, no Python check."""
    return _core.Model(*(cfg[f] for f in FIELDS))


# ---------------------------------------------------------------- the model configuration
@pytest.mark.parametrize("field", WIDTHS)
@pytest.mark.parametrize("value", [0, -3, -2**63])
def test_every_width_must_be_at_least_1_in_c(field, value):
    cfg = {**BASE, field: value}
    want = (ValueError, f"ModelConfig: {field} must be >= 1, got {value}")
    assert error_of(lambda: mk.ModelConfig(**cfg)) == want         # ModelConfig, when made
    assert error_of(lambda: _core.check_model_config(**cfg)) == want  # its check, called directly
    assert error_of(lambda: core_model(**cfg)) == want              # the model, without ModelConfig


@pytest.mark.parametrize("field", COUNTS)
@pytest.mark.parametrize("value", [-1, -2**63])
def test_every_count_must_be_at_least_0_in_c(field, value):
    cfg = {**BASE, field: value}
    want = (ValueError, f"ModelConfig: {field} must be >= 0, got {value}")
    assert error_of(lambda: mk.ModelConfig(**cfg)) == want
    assert error_of(lambda: _core.check_model_config(**cfg)) == want
    assert error_of(lambda: core_model(**cfg)) == want
    assert getattr(mk.ModelConfig(**{k: v for k, v in BASE.items() if k != field}), field) == 0  # the default


# the relative move pairs' board: tokens 10, so a 2 x 2 board holds at most 2 kinds
@pytest.mark.parametrize("change,message", [
    (dict(move_pairs=8, board_width=2, board_height=2), "board_width, board_height and board_kinds must be all 0 "
                                                        "(no relative move pairs) or all >= 1, got 2, 2, 0"),
    (dict(move_pairs=8, board_kinds=1), "board_width, board_height and board_kinds must be all 0 "
                                        "(no relative move pairs) or all >= 1, got 0, 0, 1"),
    (dict(board_width=2, board_height=2, board_kinds=1), "relative move pairs need move_pairs, a multiple of "
                                                         "board_width * board_height = 4, got move_pairs = 0"),
    (dict(move_pairs=6, board_width=2, board_height=2, board_kinds=1),
     "relative move pairs need move_pairs, a multiple of board_width * board_height = 4, got move_pairs = 6"),
    (dict(move_pairs=8, board_width=2, board_height=2, board_kinds=3),
     "board_kinds * board_width * board_height = 3 * 4 board tokens, more than num_tokens = 10"),
    (dict(move_pairs=2**30, board_width=1, board_height=1, board_kinds=10),
     "the relative move-pair table (board_kinds (2 board_width - 1) (2 board_height - 1) move_pairs / "
     "(board_width board_height) entries) is above 2^31 - 1"),
    (dict(move_pairs=8, board_width=2**31, board_height=1, board_kinds=1), "board_width = 2147483648 is above 2^31 - 1"),
    # MoveHidden reads the relative part's keys
    (dict(move_pairs=8, move_hidden=3), "move_hidden = 3 needs the relative move pairs (board_width, board_height, "
                                        "board_kinds >= 1)"),
    (dict(move_pairs=8, board_width=2, board_height=2, board_kinds=1, move_hidden=2**31),
     "move_hidden = 2147483648 is above 2^31 - 1"),
    (dict(move_pairs=8, board_width=2, board_height=2, board_kinds=1, move_hidden=2**28),
     "move_hidden = 268435456 makes MoveHidden's tables (18 relative entries and move_pairs = 8 classes, times "
     "move_hidden) above 2^31 - 1 values"),
    # the shared move embeddings: on or off, over classes that divide the moves
    (dict(move_pairs=4, move_shared=2), "move_shared must be 0 or 1, got 2"),
    (dict(move_shared=1), "move_shared = 1 needs move_pairs = C >= 1 classes with num_moves a multiple of C (a move "
                          "m is of class m % C and group m / C), got move_pairs = 0 and num_moves = 12"),
    (dict(move_pairs=5, move_shared=1), "move_shared = 1 needs move_pairs = C >= 1 classes with num_moves a multiple "
                                        "of C (a move m is of class m % C and group m / C), got move_pairs = 5 and "
                                        "num_moves = 12"),
    # MoveHidden's gated readout: on or off, over MoveHidden's units
    (dict(move_pairs=8, board_width=2, board_height=2, board_kinds=1, move_hidden=2, move_hidden_gate=2),
     "move_hidden_gate must be 0 or 1, got 2"),
    (dict(move_hidden_gate=1), "move_hidden_gate = 1 needs MoveHidden's units (move_hidden >= 1)"),
    # move kinds: F kinds of M / F moves, each a multiple of the move-pair classes
    (dict(move_kinds=5), "move_kinds = F needs num_moves = M a multiple of F, and M / F a multiple of the "
                         "move-pair classes C = move_pairs (a label l is move l % (M / F) of kind l / (M / F)), "
                         "got move_kinds = 5, num_moves = 12, move_pairs = 0"),
    (dict(move_kinds=3, move_pairs=3), "move_kinds = F needs num_moves = M a multiple of F, and M / F a multiple of "
                                       "the move-pair classes C = move_pairs (a label l is move l % (M / F) of kind "
                                       "l / (M / F)), got move_kinds = 3, num_moves = 12, move_pairs = 3"),
    (dict(value_hidden=2**31), "value_hidden = 2147483648 is above 2^31 - 1"),
    (dict(value_power_sums=2, value_hidden=3), "value_power_sums must be 0 or 1, got 2"),
    (dict(value_power_sums=1), "value_power_sums = 1 needs value_hidden >= 1 (the hidden layer that reads the "
                               "power sums)"),
])
def test_the_relative_board_is_checked_by_c_when_a_model_is_made(change, message):
    cfg = {**BASE, **change}
    config = mk.ModelConfig(**cfg)  # each field a count: accepted when made
    want = (ValueError, "ModelConfig: " + message)
    assert error_of(lambda: mk.Model(config)) == want
    assert error_of(lambda: core_model(**cfg)) == want


def test_a_relative_board_that_fits_makes_its_table():
    config = mk.ModelConfig(**{**BASE, "move_pairs": 12, "board_width": 2, "board_height": 3, "board_kinds": 1})
    model = mk.Model(config)
    assert model.shapes["move_pair_relative"] == (1 * 3 * 5, 2) == mk.model.expected_shapes(config)["move_pair_relative"]
    assert list(model.shapes)[-2:] == ["move_pair_table", "move_pair_relative"]
    assert not model.state_dict()["move_pair_relative"].any()  # starts at 0, like the table


def test_move_hidden_that_fits_makes_its_three_tensors_after_the_relative_part():
    config = mk.ModelConfig(**{**BASE, "move_pairs": 12, "board_width": 2, "board_height": 3, "board_kinds": 1,
                               "move_hidden": 5})
    model = mk.Model(config)
    want = {"move_hidden_relative": (1 * 3 * 5 * 2, 5), "move_hidden_class": (12, 5), "move_hidden_out": (1, 5)}
    assert list(model.shapes)[-3:] == list(want)
    for name, shape in want.items():
        assert model.shapes[name] == shape == mk.model.expected_shapes(config)[name]
    state = model.state_dict()
    assert not state["move_hidden_out"].any()  # the policy starts as without the layer
    for name in ("move_hidden_relative", "move_hidden_class"):  # uniform, std 0.02
        assert 0.01 < state[name].std() < 0.03 and np.abs(state[name]).max() <= 0.02 * 3 ** 0.5, name


def test_every_hidden_width_must_be_at_least_1_in_c():
    cfg = {**BASE, "hidden": (4, 0, 3)}
    want = (ValueError, "ModelConfig: hidden[1] must be >= 1, got 0")
    assert error_of(lambda: mk.ModelConfig(**cfg)) == want
    assert error_of(lambda: _core.check_model_config(**cfg)) == want
    assert error_of(lambda: core_model(**cfg)) == want
    # past the MK_MAX_HIDDEN widths the model holds, the rule still applies when made
    many = {**BASE, "hidden": (1,) * 20 + (0,)}
    assert error_of(lambda: mk.ModelConfig(**many)) == (ValueError, "ModelConfig: hidden[20] must be >= 1, got 0")


@pytest.mark.parametrize("change,message", [
    (dict(num_tokens=2**20 + 1), "num_tokens = 1048577 is above the supported 2^20"),
    (dict(tokens_per_side=1025), "tokens_per_side must be <= 1024, got 1025"),
    (dict(num_moves=2**31), "num_moves = 2147483648 is above 2^31 - 1"),
    (dict(embed_dim=2**31), "embed_dim = 2147483648 is above 2^31 - 1"),
    (dict(orders=2**31), "orders = 2147483648 is above 2^31 - 1"),
    (dict(pair_dim=2**31), "pair_dim = 2147483648 is above 2^31 - 1"),
    (dict(head_width=2**31), "head_width = 2147483648 is above 2^31 - 1"),
    (dict(move_pairs=2**31), "move_pairs = 2147483648 is above 2^31 - 1"),
    (dict(hidden=(4, 2**31)), "hidden[1] = 2147483648 is above 2^31 - 1"),
    (dict(hidden=(1,) * 17), "hidden has 17 layers; at most 16 are supported"),
    (dict(embed_dim=2**30), "2 * (orders * embed_dim + pair_dim) features (orders = 2, embed_dim = 1073741824, "
                            "pair_dim = 2) is above 2^31 - 1"),
    (dict(num_tokens=2**20, embed_dim=1, orders=1, pair_dim=2**29),  # mk_model_create's layout
     "too many parameters: pair_table [549756338176, 536870912] takes the model past 2^56 values"),
])
def test_the_supported_sizes_are_checked_by_c_when_a_model_is_made(change, message):
    """A size this build does not support is a valid ModelConfig (it describes a network)
    that no Model can be made from: mk_config_check, reached with or without ModelConfig."""
    cfg = {**BASE, **change}
    config = mk.ModelConfig(**cfg)  # accepted when made
    assert config.to_dict() == {**cfg, "hidden": list(cfg["hidden"])}
    want = (ValueError, "ModelConfig: " + message)
    assert error_of(lambda: mk.Model(config)) == want
    assert error_of(lambda: core_model(**cfg)) == want


@pytest.mark.parametrize("bad", [1.5, "3", None, True, np.bool_(True), np.float64(2.0), object()])
def test_a_width_that_is_not_an_int_is_a_type_error_naming_it(bad):
    for field in INTS:
        cfg = {**BASE, field: bad}
        got = [error_of(lambda: mk.ModelConfig(**cfg)), error_of(lambda: _core.check_model_config(**cfg)),
               error_of(lambda: core_model(**cfg))]
        for t, m in got:  # numpy's type names are qualified in C ("numpy.bool")
            assert t is TypeError and re.fullmatch(rf"ModelConfig: {field} must be an int, got (numpy\.)?"
                                                   rf"{type(bad).__name__}", m), got
    for hidden, name in ((bad, None), ((4, bad), "hidden[1]")):
        cfg = {**BASE, "hidden": hidden}
        for call in (lambda: mk.ModelConfig(**cfg), lambda: _core.check_model_config(**cfg),
                     lambda: core_model(**cfg)):
            t, m = error_of(call)
            if name is None and isinstance(bad, str):  # a str is a sequence: of str
                assert (t, m) == (TypeError, "ModelConfig: hidden[0] must be an int, got str")
            elif name is None:
                assert t is TypeError and m.startswith("ModelConfig: hidden must be a sequence of ints, got "), m
            else:
                assert t is TypeError and m.startswith(f"ModelConfig: {name} must be an int, got "), m


def test_numpy_integers_and_iterables_convert_to_python_ints():
    config = mk.ModelConfig(**{**BASE, "embed_dim": np.int64(6), "orders": np.uint8(3),
                               "hidden": (h for h in (np.int32(5), 7))})
    assert config.embed_dim == 6 and config.orders == 3 and config.hidden == (5, 7)
    assert type(config.embed_dim) is int and all(type(h) is int for h in config.hidden)
    assert _core.check_model_config(**{**BASE, "hidden": [np.int16(3)]}) == (10, 12, 4, 4, 2, 2, (3,), 4, 0, 0, 0, 0, 0, 0, 0,
                                                                         0, 0, 0)
    assert mk.Model(config).shapes["trunk.1.weight"] == (7, 5)


def test_a_value_outside_int64_is_worded_by_the_binding():
    """C cannot hold it: below, it breaks the rule of every width; above, a model cannot be
    made (every supported width is far below), but the config is valid (a model file of
    that config is refused by its tensors' shapes, tests/api/test_model_file.py)."""
    cfg = {**BASE, "embed_dim": -2**70}
    want = (ValueError, f"ModelConfig: embed_dim must be >= 1, got {-2**70}")
    assert error_of(lambda: mk.ModelConfig(**cfg)) == want == error_of(lambda: core_model(**cfg))
    cfg = {**BASE, "embed_dim": 2**70}
    assert mk.ModelConfig(**cfg).embed_dim == 2**70
    want = (ValueError, f"ModelConfig: embed_dim = {2**70} is above 2^31 - 1")
    assert error_of(lambda: mk.Model(mk.ModelConfig(**cfg))) == want == error_of(lambda: core_model(**cfg))


# ---------------------------------------------------------------- the trainer's hyperparameters
HYPER = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, warmup_steps=0, schedule="constant",
             total_steps=None, min_lr=0.0, value_weight=1.0)


def public(h):
    """The same hyperparameters as manaka.Trainer's arguments."""
    h = dict(h)
    h["betas"] = (h.pop("beta1"), h.pop("beta2"))
    return h


BAD_HYPER = [
    (dict(lr=-1.0), "Trainer: lr must be finite and >= 0, got -1"),
    (dict(lr=float("nan")), "Trainer: lr must be finite and >= 0, got nan"),
    (dict(lr=float("inf")), "Trainer: lr must be finite and >= 0, got inf"),
    (dict(beta1=1.0), "Trainer: betas[0] must be in [0, 1), got 1"),
    (dict(beta1=-0.1), "Trainer: betas[0] must be in [0, 1), got -0.1"),
    (dict(beta2=float("nan")), "Trainer: betas[1] must be in [0, 1), got nan"),
    (dict(eps=0.0), "Trainer: eps must be finite and > 0, got 0"),
    (dict(eps=float("inf")), "Trainer: eps must be finite and > 0, got inf"),
    (dict(weight_decay=-0.5), "Trainer: weight_decay must be finite and >= 0, got -0.5"),
    (dict(min_lr=float("-inf")), "Trainer: min_lr must be finite and >= 0, got -inf"),
    (dict(value_weight=float("nan")), "Trainer: value_weight must be finite and >= 0, got nan"),
    # finite as doubles but not as the float32 the step reads: the first step wrote inf or
    # NaN into every parameter (eps 0 in float32: 0 / 0 where a gradient is 0)
    (dict(lr=1e39), "Trainer: lr = 1e+39 is above the float32 range the step computes in (at most 3.40282e+38)"),
    (dict(eps=1e-300), "Trainer: eps = 1e-300 is below the smallest normal float32 (1.17549e-38), which the step "
                       "computes in: it would be 0 there, or a subnormal that a GPU flushes to 0"),
    (dict(eps=1e-40), "Trainer: eps = 1e-40 is below the smallest normal float32 (1.17549e-38), which the step "
                      "computes in: it would be 0 there, or a subnormal that a GPU flushes to 0"),
    (dict(weight_decay=1e300), "Trainer: weight_decay = 1e+300 is above the float32 range the step computes in "
                               "(at most 3.40282e+38)"),
    (dict(min_lr=1e39, schedule="cosine", total_steps=9), "Trainer: min_lr = 1e+39 is above the float32 range the "
                                                          "step computes in (at most 3.40282e+38)"),
    (dict(warmup_steps=-1), "Trainer: warmup_steps must be >= 0, got -1"),
    (dict(total_steps=-1), "Trainer: total_steps must be >= 0 (or None), got -1"),
    (dict(schedule="linear"), "Trainer: schedule must be 'constant' or 'cosine', got 'linear'"),
    (dict(schedule=None), "Trainer: schedule must be 'constant' or 'cosine', got 'None'"),
    (dict(schedule="cosine"), "Trainer: schedule='cosine' requires total_steps (the step where lr reaches min_lr)"),
    (dict(schedule="cosine", warmup_steps=5, total_steps=5),
     "Trainer: total_steps = 5 must be greater than warmup_steps = 5"),
]


@pytest.mark.parametrize("change,message", BAD_HYPER, ids=[m.split(":")[1][:40] for _, m in BAD_HYPER])
def test_every_hyperparameter_rule_is_c_s(change, message):
    model = mk.Model(mk.ModelConfig(**BASE))
    h = {**HYPER, **change}
    want = (ValueError, message)
    assert error_of(lambda: mk.Trainer(model, **public(h))) == want
    assert error_of(lambda: _core.Trainer(model._core, **h)) == want  # no Python in between
    # configure and load (load_state_dict) parse with the same check, and change nothing on refusal
    trainer = mk.Trainer(model, lr=0.5)
    assert error_of(lambda: trainer._core.configure(model._core, **h)) == want
    state = trainer.state_dict()
    state["hyperparameters"] = public(h)
    assert error_of(lambda: trainer.load_state_dict(state)) == want
    assert trainer.hyperparameters["lr"] == 0.5 and trainer.hyperparameters["schedule"] == "constant"


@pytest.mark.parametrize("name", ["lr", "betas[0]", "betas[1]", "eps", "weight_decay", "min_lr", "value_weight"])
@pytest.mark.parametrize("bad", ["0.5", None, True, [0.5]], ids=["str", "None", "bool", "list"])
def test_a_rate_that_is_not_a_real_number_is_named(name, bad):
    # float() took "0.5" and True, and refused None or a list without naming the argument
    model = mk.Model(mk.ModelConfig(**BASE))
    h = public(HYPER)
    if name.startswith("betas"):
        h["betas"] = (bad, 0.999) if name == "betas[0]" else (0.9, bad)
    else:
        h[name] = bad
    want = (TypeError, f"Trainer: {name} must be a real number, got {type(bad).__name__}")
    assert error_of(lambda: mk.Trainer(model, **h)) == want
    trainer = mk.Trainer(model, lr=0.5)
    state = trainer.state_dict()
    state["hyperparameters"] = h
    assert error_of(lambda: trainer.load_state_dict(state)) == want
    assert trainer.hyperparameters["lr"] == 0.5
    if name == "value_weight":
        import model_cases as cases
        batch = cases.batch(model.config, B=2, L=3, seed=0)
        assert error_of(lambda: model.loss_and_grad(batch, value_weight=bad)) == (
            TypeError, f"Model.loss_and_grad: value_weight must be a real number, got {type(bad).__name__}")
    # NumPy's reals are real numbers
    assert mk.Trainer(model, lr=np.float32(0.25), betas=np.array([0.5, 0.75])).hyperparameters["betas"] == (0.5, 0.75)


@pytest.mark.parametrize("bad", ["float16", "BF16", None, 16])
def test_pair_state_dtype_is_named_by_c(bad):
    model = mk.Model(mk.ModelConfig(**BASE))
    want = (ValueError, f"Trainer: pair_state_dtype must be 'float32' or 'bf16', got '{bad}'")
    assert error_of(lambda: mk.Trainer(model, pair_state_dtype=bad)) == want
    assert error_of(lambda: _core.Trainer(model._core, pair_state_dtype=bad, **HYPER)) == want
    trainer = mk.Trainer(model)
    state = trainer.state_dict()
    state["pair_state_dtype"] = bad
    assert error_of(lambda: trainer.load_state_dict(state)) == (
        ValueError, f"Trainer.load_state_dict: pair_state_dtype must be 'float32' or 'bf16', got '{bad}'")
    assert mk.Trainer(model, pair_state_dtype="bf16").pair_state_dtype == "bf16"


@pytest.mark.parametrize("name", ["warmup_steps", "total_steps"])
def test_step_counts_convert_in_the_binding(name):
    model = mk.Model(mk.ModelConfig(**BASE))
    for bad in (1.5, "3", True):
        want = (TypeError, f"Trainer: {name} must be an int, got {type(bad).__name__}")
        assert error_of(lambda: mk.Trainer(model, **{name: bad})) == want
        assert error_of(lambda: _core.Trainer(model._core, **{**HYPER, name: bad})) == want
    for big in (2**63, -2**64):
        assert error_of(lambda: mk.Trainer(model, **{name: big})) == (
            ValueError, f"Trainer: {name} = {big} does not fit in 64 bits")
    trainer = mk.Trainer(model, schedule="cosine", **{"warmup_steps": np.int64(2), "total_steps": np.uint16(9)})
    assert (trainer.hyperparameters["warmup_steps"], trainer.hyperparameters["total_steps"]) == (2, 9)
    assert mk.Trainer(model).hyperparameters["total_steps"] is None
    assert _core.Trainer(model._core, **{**HYPER, "total_steps": 0}).config()["total_steps"] == 0


def test_value_weight_has_one_rule_in_c_for_the_trainer_and_loss_and_grad():
    import model_cases as cases
    cfg = mk.ModelConfig(**BASE)
    model = mk.Model(cfg, seed=1)
    b = cases.batch(cfg, B=3, L=4)
    for bad, shown in ((-0.5, "-0.5"), (float("nan"), "nan"), (float("inf"), "inf")):
        want = (ValueError, f"Model.loss_and_grad: value_weight must be finite and >= 0, got {shown}")
        assert error_of(lambda: model.loss_and_grad(b, value_weight=bad)) == want
        assert error_of(lambda: model._core.loss_and_grad(b, bad)) == want  # no Python in between
        assert error_of(lambda: mk.Trainer(model, value_weight=bad)) == (
            ValueError, f"Trainer: value_weight must be finite and >= 0, got {shown}")
    # a refused call ran nothing: the gradients are those of the last good call
    model.loss_and_grad(b, value_weight=0.5)
    before = {n: model._core.read(n, True) for n in model.shapes}
    error_of(lambda: model._core.loss_and_grad(b, -1.0))
    assert all(np.array_equal(model._core.read(n, True), g) for n, g in before.items())


def test_a_trainer_state_of_another_shape_is_a_value_error_naming_the_part():
    # hyperparameters with a name too many or too few failed in Trainer._hyper() with a
    # TypeError about its own arguments; moments that are not dicts in sorted() or set()
    model = mk.Model(mk.ModelConfig(**BASE))
    trainer = mk.Trainer(model, lr=0.5)
    state = trainer.state_dict()
    names = "['lr', 'betas', 'eps', 'weight_decay', 'warmup_steps', 'schedule', 'total_steps', 'min_lr', 'value_weight']"
    h = state["hyperparameters"]
    for hyper, words in (({**h, "momentum": 0.9}, "missing [], unexpected ['momentum']"),
                         ({k: v for k, v in h.items() if k != "lr"}, "missing ['lr'], unexpected []")):
        assert error_of(lambda: trainer.load_state_dict({**state, "hyperparameters": hyper})) == (
            ValueError, f"Trainer.load_state_dict: hyperparameters must name {names}: {words}")
    for key, bad in (("exp_avg", [1, 2]), ("exp_avg_sq", None)):
        assert error_of(lambda: trainer.load_state_dict({**state, key: bad})) == (
            ValueError, f"Trainer.load_state_dict: {key} must be a dict {{name: array}}, got {type(bad).__name__}")
    assert trainer.hyperparameters["lr"] == 0.5


def test_step_count_is_checked_in_c_by_load_and_by_the_setter():
    model = mk.Model(mk.ModelConfig(**BASE))
    trainer = mk.Trainer(model)
    state = trainer.state_dict()
    for bad, want in ((-1, (ValueError, "step_count must be >= 0, got -1")),
                      (2**63, (ValueError, f"step_count = {2**63} does not fit in 64 bits")),
                      (1.5, (TypeError, "step_count must be an int, got float")),
                      (True, (TypeError, "step_count must be an int, got bool"))):
        assert error_of(lambda: trainer.load_state_dict({**state, "step_count": bad})) == (
            want[0], "Trainer.load_state_dict: " + want[1])
        assert error_of(lambda: setattr(trainer._core, "step_count", bad)) == (want[0], "Trainer: " + want[1])
        assert trainer.step_count == 0
    trainer.load_state_dict({**state, "step_count": np.int64(5)})
    trainer._core.step_count = np.uint8(7)
    assert trainer.step_count == 7


def test_the_seed_is_converted_once_by_the_binding():
    """Model's seed is the core's uint64_t: the binding refuses what it cannot hold (the
    parse format it used wrapped -1 to 2**64 - 1); Python checks nothing."""
    config = mk.ModelConfig(**BASE)
    for bad, want in ((-1, (ValueError, "Model: seed must be an int in [0, 2**64), got -1")),
                      (2**64, (ValueError, f"Model: seed must be an int in [0, 2**64), got {2**64}")),
                      (1.5, (TypeError, "Model: seed must be an int, got float")),
                      (True, (TypeError, "Model: seed must be an int, got bool"))):
        assert error_of(lambda: mk.Model(config, seed=bad)) == want
        assert error_of(lambda: _core.Model(*(BASE[f] for f in FIELDS), seed=bad)) == want
    top = mk.Model(config, seed=np.uint64(2**64 - 1))
    assert top.seed == 2**64 - 1 and type(top.seed) is int
    assert all(np.array_equal(a, b) for a, b in zip(top.state_dict().values(),
                                                    mk.Model(config, seed=2**64 - 1).state_dict().values()))


def test_move_hidden_gate_makes_its_tensor_last_and_at_zero():
    config = mk.ModelConfig(**{**BASE, "move_pairs": 4, "board_width": 2, "board_height": 2, "board_kinds": 1,
                               "move_hidden": 3, "move_shared": 1, "move_hidden_gate": 1})
    model = mk.Model(config)
    assert list(model.shapes)[-3:] == ["move_shared_class", "move_shared_group", "move_hidden_gate"]
    assert model.shapes["move_hidden_gate"] == (4, 3) == mk.model.expected_shapes(config)["move_hidden_gate"]
    assert not model.state_dict()["move_hidden_gate"].any()


def test_move_kinds_split_the_move_table_and_add_the_kind_table_last_at_zero():
    config = mk.ModelConfig(**{**BASE, "move_pairs": 2, "move_kinds": 3})
    model = mk.Model(config)
    assert model.shapes["move_table"] == (4, 4) and list(model.shapes)[-1] == "move_kind_table"
    assert model.shapes["move_kind_table"] == (6, 4) == mk.model.expected_shapes(config)["move_kind_table"]
    assert not model.state_dict()["move_kind_table"].any()
    assert list(model.shapes) == list(mk.model.expected_shapes(config))


def test_move_kinds_without_move_pairs_have_a_row_per_kind():
    config = mk.ModelConfig(**{**BASE, "move_kinds": 3})
    assert mk.Model(config).shapes["move_kind_table"] == (3, 4) == mk.model.expected_shapes(config)["move_kind_table"]


def test_value_hidden_makes_its_two_tensors_last():
    config = mk.ModelConfig(**{**BASE, "move_pairs": 2, "move_kinds": 3, "value_hidden": 5})
    model = mk.Model(config)
    assert list(model.shapes)[-3:] == ["move_kind_table", "value_hidden.weight", "value_hidden.bias"]
    assert model.shapes["value.weight"] == (1, 5) and model.shapes["value_hidden.weight"] == (5, 4)
    assert dict(model.shapes) == mk.model.expected_shapes(config)
    assert model.state_dict()["value_hidden.weight"].std() > 0 and not model.state_dict()["value_hidden.bias"].any()


def test_value_power_sums_makes_the_value_hidden_layer_read_the_power_sums():
    config = mk.ModelConfig(**{**BASE, "hidden": (6,), "value_hidden": 5, "value_power_sums": 1})
    model = mk.Model(config)
    # [Hv, 2 K D]: the power sums of both perspectives, not the trunk's 6 nor x_0's 2 (K D + P)
    assert model.shapes["value_hidden.weight"] == (5, 2 * 2 * 4)
    assert dict(model.shapes) == mk.model.expected_shapes(config)
    weight = model.state_dict()["value_hidden.weight"]
    assert weight.std() > 0 and np.abs(weight).max() <= np.sqrt(2.0 / 16) * np.sqrt(3) * (1 + 1e-6)  # He, fan-in 16
    assert mk.ModelConfig(**{**BASE, "value_hidden": 5}).to_dict()["value_power_sums"] == 0


def test_move_shared_makes_its_two_tensors_last_and_at_zero():
    config = mk.ModelConfig(**{**BASE, "move_pairs": 4, "move_shared": 1})
    model = mk.Model(config)
    want = {"move_shared_class": (4, 4), "move_shared_group": (3, 4)}
    assert list(model.shapes)[-2:] == list(want)
    for name, shape in want.items():
        assert model.shapes[name] == shape == mk.model.expected_shapes(config)[name]
        assert not model.state_dict()[name].any()
