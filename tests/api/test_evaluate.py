"""mk.evaluate's figures (loss, top-1 / top-5, value BCE, value accuracy on decisive positions)
and the chance / frequency baselines, against NumPy references computed position by position
from mk.Model.forward's outputs; the errors for data without a usable position or that does
not fit the model; and `python -m manaka.evaluate` in a real subprocess on a tiny model and
HCPE files written by cshogi."""
import json
import math
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

import manaka as mk
from manaka.evaluate import baselines, label_frequencies

from paths import ROOT

VALUES = np.array([0.0, 0.5, 1.0, 0.25, 0.9])  # results, and mixed targets (all decisive but 0.5)


def random_dataset(rng, n=150, V=13, M=40, T=5, max_legal=12, soft=False):
    """Positions with empty token slots, 1..max_legal legal moves, every kind of value target."""
    tokens = rng.integers(0, V, (n, 2, T))
    tokens[rng.random(tokens.shape) < 0.3] = -1
    counts = rng.integers(1, max_legal + 1, n)
    counts[:3] = [1, max_legal, 2]
    moves = [rng.choice(M, c, replace=False) for c in counts]
    target = (rng.random(n) * counts).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    policy = None
    if soft:
        w = rng.random(offsets[-1]) ** 2
        policy = w / np.repeat(np.add.reduceat(w, offsets[:-1]), counts)
    return mk.Dataset.from_arrays(tokens=tokens, legal_offsets=offsets, legal_moves=np.concatenate(moves),
                                  target=target, value=rng.choice(VALUES, n), policy_target=policy,
                                  num_tokens=V, num_moves=M)


def positions(ds):
    """[(tokens, legal, target, value, soft targets or None)] from the dataset's arrays."""
    off = ds.legal_offsets
    return [(ds.tokens[i], np.asarray(ds.legal_moves[off[i]:off[i + 1]]), int(ds.target[i]), float(ds.value[i]),
             None if ds.policy_target is None else np.asarray(ds.policy_target[off[i]:off[i + 1]], np.float64))
            for i in range(len(ds))]


def model_outputs(model, rows):
    """mk.Model.forward over all the positions as one padded batch: [logits row], values."""
    L = max(len(r[1]) for r in rows)
    legal = np.full((len(rows), L), -1)
    for i, r in enumerate(rows):
        legal[i, :len(r[1])] = r[1]
    batch = mk.Batch(np.stack([r[0] for r in rows]), legal, np.array([len(r[1]) for r in rows]),
                     np.array([r[2] for r in rows]), np.array([r[3] for r in rows]))
    logits, value = model.forward(batch)
    return [logits[i, :len(r[1])].astype(np.float64) for i, r in enumerate(rows)], value.astype(np.float64)


def reference(rows, scores, log_probs, value_pred, value_weight, value_hit=None):
    """The figures of manaka/evaluate/metrics.py, one position at a time: `scores[i]` ranks
    the legal moves (stable sort: ties to the earlier slot), `log_probs[i]` prices them,
    `value_pred[i]` is the value probability; `value_hit(i)` overrides the value hit."""
    policy, top1, top5, bce, decisive, hits = [], [], [], [], 0, 0.0
    for i, (_, legal, t, z, soft) in enumerate(rows):
        order = list(np.argsort(-scores[i], kind="stable"))
        top1.append(order[0] == t)
        top5.append(t in order[:5])
        policy.append(-log_probs[i][t] if soft is None else -(soft * log_probs[i]).sum())
        v = min(max(value_pred[i], 1e-7), 1 - 1e-7)
        bce.append(-(z * math.log(v) + (1 - z) * math.log(1 - v)))
        if z != 0.5:
            decisive += 1
            hits += value_hit(i) if value_hit else float((v > 0.5 and z > 0.5) or (v < 0.5 and z < 0.5))
    n = len(rows)
    return {"loss": (sum(policy) + value_weight * sum(bce)) / n, "policy_loss": sum(policy) / n,
            "value_loss": sum(bce) / n, "accuracy": sum(top1) / n, "top5_accuracy": sum(top5) / n,
            "value_accuracy": hits / decisive if decisive else float("nan"), "positions": n, "decisive": decisive}


def log_softmax(x):
    return x - x.max() - math.log(np.exp(x - x.max()).sum())


def model_reference(model, ds, value_weight=1.0):
    rows = positions(ds)
    logits, values = model_outputs(model, rows)
    return reference(rows, logits, [log_softmax(z) for z in logits], values, value_weight)


def baseline_reference(ds, source, value_weight=1.0):
    rows, counted = positions(ds), positions(source)
    played = Counter(int(r[1][r[2]]) for r in counted)
    mean = sum(r[3] for r in counted) / len(counted)
    n = [len(r[1]) for r in rows]
    chance = reference(rows, [np.zeros(k) for k in n], [np.full(k, -math.log(k)) for k in n], [0.5] * len(rows),
                       value_weight, value_hit=lambda i: 0.5)
    # the uniform pick's accuracies are expectations, not the stable sort's first slot
    chance["accuracy"] = sum(1 / k for k in n) / len(n)
    chance["top5_accuracy"] = sum(min(k, 5) / k for k in n) / len(n)
    seen = [np.array([played[int(m)] for m in r[1]], np.float64) for r in rows]
    frequency = reference(rows, seen, [np.log((s + 1) / (s + 1).sum()) for s in seen], [mean] * len(rows),
                          value_weight)
    return {"chance": chance, "frequency": frequency}


def assert_figures(got, want):
    """Equal keys and values; rel 1e-6: the model's float32 outputs differ in their last bits
    between batch sizes; the sums are float64 in both."""
    assert set(got) == set(want)
    for key, w in want.items():
        if isinstance(w, float) and math.isnan(w):
            assert math.isnan(got[key]), key
        else:
            assert got[key] == pytest.approx(w, rel=1e-6, abs=1e-12), key


def tiny_config(ds, hidden=(9,)):
    return mk.ModelConfig(num_tokens=ds.num_tokens, num_moves=ds.num_moves, tokens_per_side=ds.tokens_per_side,
                          embed_dim=4, orders=2, pair_dim=3, hidden=hidden, head_width=5)


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_evaluate_equals_numpy_reference(rng, soft):
    ds = random_dataset(rng, soft=soft)
    model = mk.Model(tiny_config(ds), seed=int(rng.integers(100)))
    want = model_reference(model, ds, value_weight=0.7)
    for batch_size in (1, 32, 1024):  # partial last batches, one batch
        assert_figures(mk.evaluate(model, ds, batch_size=batch_size, value_weight=0.7), want)
    # a Loader is read one epoch from its position; the order does not change the means
    with mk.Loader(ds, batch_size=16, shuffle=True, seed=3) as loader:
        got = mk.evaluate(model, loader, value_weight=0.7)
    assert_figures(got, want)


def test_ties_rank_the_earlier_slot_first():
    # every logit equal (all parameters 0): the first slot is the top-1, the first five the top-5
    ds = mk.Dataset.from_arrays(tokens=np.zeros((3, 2, 2), np.int64), legal_offsets=[0, 7, 14, 21],
                                legal_moves=np.tile(np.arange(7), 3), target=[0, 4, 5], value=[1.0, 0.0, 0.5],
                                num_tokens=3, num_moves=7)
    model = mk.Model(tiny_config(ds, hidden=()))
    model.load_state_dict({k: np.zeros_like(v) for k, v in model.state_dict().items()})
    got = mk.evaluate(model, ds)
    assert got["accuracy"] == pytest.approx(1 / 3) and got["top5_accuracy"] == pytest.approx(2 / 3)
    # a value of exactly 0.5 is on neither side: wrong on both decisive positions
    assert got["value_accuracy"] == 0.0 and got["decisive"] == 2
    assert got["value_loss"] == pytest.approx(math.log(2)) and got["policy_loss"] == pytest.approx(math.log(7))


def test_baselines_equal_numpy_reference(rng):
    ds = random_dataset(rng, n=120, max_legal=20)
    train = random_dataset(rng, n=400, max_legal=20)
    # counted on the evaluated data itself, and on other (training) data
    assert_figures_nested(baselines(ds, batch_size=50, value_weight=0.5), baseline_reference(ds, ds, 0.5))
    freq = label_frequencies(train, batch_size=64)
    assert freq.positions == 400 and freq.moves.sum() == 400
    assert freq.value_mean == pytest.approx(float(np.mean(train.value)))
    assert_figures_nested(baselines(ds, freq, batch_size=1024, value_weight=0.5), baseline_reference(ds, train, 0.5))
    chance = baselines(ds)["chance"]
    assert chance["value_loss"] == pytest.approx(0.6931471805599453) and chance["value_accuracy"] == 0.5


def assert_figures_nested(got, want):
    assert set(got) == set(want)
    for name in want:
        assert_figures(got[name], want[name])


def test_a_frequency_source_with_fewer_moves(rng):
    # moves that the frequency data never saw (ids beyond its table) count 0
    ds = random_dataset(rng, n=60, M=40)
    small = random_dataset(rng, n=80, M=10, max_legal=8)
    freq = label_frequencies(small)
    assert len(freq.moves) <= 10
    assert_figures_nested(baselines(ds, freq), baseline_reference(ds, small))


# ---------------------------------------------------------------- errors

def test_no_usable_record_is_an_error_naming_the_data(tmp_path):
    cshogi = pytest.importorskip("cshogi", reason="cshogi (the test extra) writes the records")  # noqa: F841
    from shogi_reference import make_records
    from manaka import shogi

    _, hcpe, _ = make_records(20, 5)
    hcpe["gameResult"] = 9  # every record bad: a result out of range
    hcpe.tofile(tmp_path / "bad.hcpe")
    data = shogi.open_hcpe(str(tmp_path / "bad.hcpe"), on_bad="skip")
    model = mk.Model(tiny_config(data))
    message = r"no position to evaluate in '.*bad\.hcpe': all 20 record\(s\) read were bad and skipped"
    with pytest.raises(ValueError, match=message):
        mk.evaluate(model, data, batch_size=8)
    with pytest.raises(ValueError, match=message):
        label_frequencies(data)
    with pytest.raises(ValueError, match="bad.hcpe: record 0: the game result is out of range"):
        mk.evaluate(model, shogi.open_hcpe(str(tmp_path / "bad.hcpe")))


def test_a_value_weight_that_is_no_weight_is_refused(rng):
    data = random_dataset(rng, n=20)
    model = mk.Model(tiny_config(data))
    for bad, error, words in ((float("nan"), ValueError, "must be finite and >= 0, got nan"),
                              (-0.5, ValueError, "must be finite and >= 0, got -0.5"),
                              (float("inf"), ValueError, "must be finite and >= 0, got inf"),
                              ("1", TypeError, "must be a real number, got str"),
                              (None, TypeError, "must be a real number, got NoneType")):
        with pytest.raises(error, match=f"^evaluate: value_weight {words}"):
            mk.evaluate(model, data, value_weight=bad)
        with pytest.raises(error, match=f"^baselines: value_weight {words}"):
            baselines(data, value_weight=bad)


def test_a_model_that_is_no_model_is_a_type_error(rng, tmp_path):
    # a path (the command takes one) was an AttributeError: 'str' object has no attribute 'config'
    data = random_dataset(rng, n=20)
    mk.Model(tiny_config(data)).save(tmp_path / "m.manaka")
    for bad, name in ((str(tmp_path / "m.manaka"), "str"), (None, "NoneType")):
        with pytest.raises(TypeError, match=f"^evaluate: model must be a manaka.Model .*got {name}$"):
            mk.evaluate(bad, data)


def test_data_that_does_not_fit_the_model(rng):
    ds = random_dataset(rng, V=13, M=40, T=5)
    for change in ({"num_tokens": 12}, {"num_moves": 39}, {"tokens_per_side": 6}):
        cfg = mk.ModelConfig(**{**tiny_config(ds).to_dict(), "hidden": (9,), **change})
        message = r"the data .* \(num_tokens=13, num_moves=40, T=5\) does not fit the model"
        with pytest.raises(ValueError, match=message):
            mk.evaluate(mk.Model(cfg), ds)
    bigger = mk.ModelConfig(**{**tiny_config(ds).to_dict(), "hidden": (9,), "num_tokens": 20, "num_moves": 50})
    assert mk.evaluate(mk.Model(bigger), ds)["positions"] == len(ds)  # larger vocabularies read it


# ---------------------------------------------------------------- the command

def run(*args, cwd):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "manaka.evaluate", *map(str, args)], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def shogi_files(tmp_path_factory):
    pytest.importorskip("cshogi", reason="cshogi (the test extra) writes the records")
    from shogi_reference import make_records
    from manaka import shogi

    folder = tmp_path_factory.mktemp("evaluate_cli")
    _, hcpe, _ = make_records(300, 41)
    hcpe[:200].tofile(folder / "train.hcpe")
    hcpe[200:].tofile(folder / "held.hcpe")
    ds = shogi.open_hcpe(str(folder / "held.hcpe"))
    cfg = mk.ModelConfig(num_tokens=ds.num_tokens, num_moves=ds.num_moves, tokens_per_side=ds.tokens_per_side,
                         embed_dim=4, orders=2, pair_dim=1, hidden=(8,), head_width=4)
    mk.Model(cfg, seed=4).save(folder / "tiny.manaka")
    return folder


def test_command_prints_the_api_figures(shogi_files):
    from manaka import shogi

    folder = shogi_files
    model = mk.Model.load(folder / "tiny.manaka")
    held = shogi.open_hcpe(str(folder / "held.hcpe"))
    done = run("tiny.manaka", "held.hcpe", "--json", "--batch-size", "33", cwd=folder)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    want_model = model_reference(model, held.to_dataset())
    figures = {"model": want_model, **baseline_reference(held.to_dataset(), held.to_dataset())}
    for name in ("model", "chance", "frequency"):
        assert_figures({k: (float("nan") if v is None else v) for k, v in out[name].items()}, figures[name])
    assert out["frequencies_from"] == "data" and out["frequency_positions"] == 100
    assert out["model_file"] == "tiny.manaka" and out["data_path"] == "held.hcpe"

    done = run("tiny.manaka", "held.hcpe", "--train", "train.hcpe", "--value", "eval", cwd=folder)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    held_eval = shogi.open_hcpe(str(folder / "held.hcpe"), value="eval")
    api = mk.evaluate(model, held_eval)
    base = baselines(held_eval, label_frequencies(shogi.open_hcpe(str(folder / "train.hcpe"), value="eval")))
    row = {line.split()[0]: line for line in lines if line.split()[:1] in (["model"], ["chance"], ["frequency"])}
    assert row["model"].split()[1:] == [f"{api['loss']:.4f}", f"{api['policy_loss']:.4f}", f"{api['accuracy']:.2%}",
                                        f"{api['top5_accuracy']:.2%}", f"{api['value_loss']:.4f}",
                                        f"{api['value_accuracy']:.2%}"], done.stdout
    f = base["frequency"]
    assert row["frequency"].split()[1:5] == [f"{f['loss']:.4f}", f"{f['policy_loss']:.4f}", f"{f['accuracy']:.2%}",
                                             f"{f['top5_accuracy']:.2%}"], done.stdout
    assert row["chance"].split()[6] == "0.6931"  # value BCE of the constant 0.5 ("chance (uniform)" is two words)
    assert "200 positions of --train train.hcpe; value" in done.stdout
    assert f"{api['positions']:,} positions, {api['decisive']:,} decisive" in done.stdout
    # --train taking in DATA's file: the frequency baseline has seen its answers, and says so as
    # when it is counted on DATA itself (it was shown as if counted on other games)
    done = run("tiny.manaka", "held.hcpe", "--train", "*.hcpe", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert "positions of --train *.hcpe (it shares files with DATA, whose answers it has seen: an optimistic " \
           "bound)" in done.stdout, done.stdout


def test_command_reads_the_eval_with_the_scale_given(shogi_files):
    from manaka import shogi

    folder = shogi_files
    model = mk.Model.load(folder / "tiny.manaka")
    done = run("tiny.manaka", "held.hcpe", "--value", "eval", "--eval-scale", "300", "--json", cwd=folder)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)["model"]
    want = mk.evaluate(model, shogi.open_hcpe(str(folder / "held.hcpe"), value="eval", eval_scale=300))
    dlshogi = mk.evaluate(model, shogi.open_hcpe(str(folder / "held.hcpe"), value="eval"))
    assert got["value_loss"] == pytest.approx(want["value_loss"], rel=1e-6)
    assert abs(want["value_loss"] - dlshogi["value_loss"]) > 1e-4  # the scale changes the targets


@pytest.mark.parametrize("args, message", [
    (("missing.manaka", "held.hcpe"), "No such file or directory: 'missing.manaka'"),
    (("held.hcpe", "held.hcpe"), "'held.hcpe': is not a manaka file"),
    (("tiny.manaka", "nothing.hcpe"), "nothing.hcpe"),
    (("tiny.manaka", "notes.txt"), "DATA notes.txt: a file of an unknown kind (.txt); DATA takes a dataset folder"),
    (("tiny.manaka", "missing_folder"), "DATA missing_folder: no such file or folder"),
    (("tiny.manaka", "games/*.hcpe"), "DATA games/*.hcpe: no file matches this glob"),
    (("tiny.manaka", "held.hcpe", "--train", "bad.hcpe"), "bad.hcpe: record 0: the game result is out of range"),
    (("tiny.manaka", "bad.hcpe", "--on-bad", "skip"), "no position to evaluate in"),
    (("tiny.manaka", "synthetic"), "does not fit the model"),
    (("tiny.manaka", "synthetic", "--value", "eval"), "--value eval applies to shogi records"),
    # a weight that made every loss NaN, or the loss below the policy loss
    (("tiny.manaka", "held.hcpe", "--value-weight", "nan"), "evaluate: value_weight must be finite and >= 0, got nan"),
    (("tiny.manaka", "held.hcpe", "--value-weight", "-1"), "evaluate: value_weight must be finite and >= 0, got -1"),
    # a model of other data beside shogi records: named, not the encoding's lookup alone
    (("other.manaka", "held.hcpe"), "MODEL other.manaka beside the shogi records DATA held.hcpe: the model "
                                    "(num_tokens=3, tokens_per_side=2) cannot read shogi positions"),
    (("t30.manaka", "held.hcpe"), "MODEL t30.manaka beside the shogi records DATA held.hcpe: the model "
                                  "(num_tokens=2344, tokens_per_side=30) cannot read shogi positions"),
])
def test_command_bad_inputs_are_one_line(shogi_files, args, message):
    folder = shogi_files
    (folder / "notes.txt").write_text("not data")
    if not (folder / "bad.hcpe").exists():
        bad = np.fromfile(folder / "held.hcpe", np.uint8).reshape(-1, 38)[:10].copy()
        bad[:, 36] = 9  # gameResult out of range in every record (byte 36 of the 38)
        bad.tofile(folder / "bad.hcpe")
        cfg = mk.ModelConfig(num_tokens=3, num_moves=7, tokens_per_side=2, embed_dim=2, orders=1, pair_dim=1,
                             hidden=(), head_width=2)
        mk.Dataset.synthetic(20, cfg).save(str(folder / "synthetic"))
        mk.Model(cfg).save(folder / "other.manaka")
        mk.Model(mk.ModelConfig(num_tokens=2344, num_moves=2187, tokens_per_side=30, embed_dim=2, orders=1,
                                pair_dim=1, hidden=(), head_width=2)).save(folder / "t30.manaka")
    done = run(*args, cwd=folder)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and done.stdout == "", (args, done.stdout, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("python -m manaka.evaluate: ") and message in lines[0], lines


def test_command_refuses_an_empty_train_path(shogi_files):
    """Before, --train "" counted the frequency baseline on DATA itself, as if not given."""
    done = run("tiny.manaka", "held.hcpe", "--train", "", cwd=shogi_files)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.splitlines()[-1] == ("python -m manaka.evaluate: error: argument --train: an empty path "
                                            "(an unset shell variable?)"), done.stderr


def test_command_ctrl_c_is_one_line(shogi_files, monkeypatch, capsys):
    """Ctrl-C while the model was evaluated printed a KeyboardInterrupt traceback."""
    from manaka.evaluate import __main__ as command

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "evaluate", interrupted)
    assert command.main([str(shogi_files / "tiny.manaka"), str(shogi_files / "held.hcpe")]) == 130
    said = capsys.readouterr()
    assert said.out == "" and said.err == "python -m manaka.evaluate: interrupted; nothing was evaluated\n"
