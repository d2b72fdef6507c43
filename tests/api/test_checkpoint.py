"""Checkpoints (manaka/checkpoint.py): no pickle, checked reads, the converter, and the
resume checks of mk.fit and python -m manaka.train."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import manaka as mk
from manaka import checkpoint as ckpt
from fake_training import FakeModel, FakeTrainer
from model_cases import SMALL



def test_round_trip_keeps_every_value_and_dtype(tmp_path):
    state = {"step": 7, "model": {"w": np.arange(6, dtype=np.float32).reshape(2, 3)},
             "trainer": {"t": np.int64(3), "m": np.zeros(0, np.float32), "betas": (0.9, 0.999),
                         "counts": np.array([2**63 - 1], np.int64)},
             "history": [{"loss": float("nan"), "step": 1}, {"loss": 0.5, "step": 2}],
             "name": "run", "none": None, "flag": True}
    ckpt.save(tmp_path / "c.ckpt", state)
    back = ckpt.load(tmp_path / "c.ckpt")
    assert back["step"] == 7 and back["name"] == "run" and back["none"] is None and back["flag"] is True
    assert back["trainer"]["betas"] == [0.9, 0.999] and back["trainer"]["t"] == 3
    assert np.isnan(back["history"][0]["loss"]) and back["history"][1] == {"loss": 0.5, "step": 2}
    for a, b in ((state["model"]["w"], back["model"]["w"]), (state["trainer"]["counts"], back["trainer"]["counts"])):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    with pytest.raises(TypeError, match="cannot hold"):
        ckpt.save(tmp_path / "d.ckpt", {"f": open})


class _CreatesAFile:
    """Unpickling this calls open(path, 'w'): what a hostile checkpoint could do."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickle_checkpoint_is_refused_without_running_it(tmp_path):
    victim = tmp_path / "created-by-the-pickle"
    path = tmp_path / "old.ckpt"
    path.write_bytes(pickle.dumps({"format": "manaka-checkpoint", "version": 1, "x": _CreatesAFile(str(victim))},
                                  protocol=4))
    with pytest.raises(mk.CheckpointError, match="old.ckpt.*pickle.*--trust-pickle"):
        ckpt.load(path)
    # fit(resume=True) and the converter without its flag refuse it the same way
    ds = mk.Dataset.synthetic(100, SMALL, seed=0)
    model = FakeModel()
    with pytest.raises(mk.CheckpointError, match="pickle"):
        mk.fit(model, mk.Loader(ds, batch_size=32), steps=1, trainer=FakeTrainer(model),
               checkpoint=str(path), resume=True, progress=False, log=lambda s: None)
    out = subprocess.run([sys.executable, "-m", "manaka.checkpoint", "convert", str(path), str(tmp_path / "new")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--trust-pickle" in out.stderr and "Traceback" not in out.stderr
    assert not victim.exists() and not (tmp_path / "new").exists()


def test_the_converter_rewrites_a_trusted_old_checkpoint(tmp_path):
    old = {"format": "manaka-checkpoint", "version": 1, "step": 3, "model": {"w": np.ones(4, np.float32)},
           "history": [{"step": 3, "loss": 1.0}]}
    (tmp_path / "old.ckpt").write_bytes(pickle.dumps(old, protocol=pickle.HIGHEST_PROTOCOL))
    out = subprocess.run([sys.executable, "-m", "manaka.checkpoint", "convert", str(tmp_path / "old.ckpt"),
                          str(tmp_path / "new.ckpt"), "--trust-pickle"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    back = ckpt.load(tmp_path / "new.ckpt")
    assert back["step"] == 3 and np.array_equal(back["model"]["w"], old["model"]["w"])
    assert (tmp_path / "new.ckpt").read_bytes()[:8] == b"MANAKA\x00\x02"


def test_the_converter_says_a_current_checkpoint_needs_no_conversion(tmp_path):
    """A checkpoint of this format was asked for --trust-pickle, and with it failed as
    "cannot be unpickled: UnpicklingError: invalid load key, 'M'"."""
    ckpt.save(tmp_path / "c.ckpt", {"step": 1})
    for trust in ([], ["--trust-pickle"]):
        out = subprocess.run([sys.executable, "-m", "manaka.checkpoint", "convert", str(tmp_path / "c.ckpt"),
                              str(tmp_path / "new.ckpt"), *trust], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "is a manaka file of this format already, not a pickle: there is nothing " \
                                       "to convert" in out.stderr, out.stderr
    assert sorted(os.listdir(tmp_path)) == ["c.ckpt"]


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty", "header"])
def test_damaged_checkpoints_name_the_file(tmp_path, damage):
    path = tmp_path / "c.ckpt"
    ckpt.save(path, {"step": 1, "model": {"w": np.arange(100, dtype=np.float32)}})
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[:-30]
    elif damage == "flipped":
        data[-70] ^= 1
    elif damage == "empty":
        data = b""
    else:
        data[30] ^= 4
    path.write_bytes(bytes(data))
    with pytest.raises(mk.CheckpointError, match="c.ckpt") as info:
        ckpt.load(path)
    assert info.value.path == str(path)


CFG = dict(num_tokens=300, num_moves=500, tokens_per_side=8, orders=2, pair_dim=2, hidden=(16,), head_width=8)


def _run(ds, path, steps, embed_dim=8, resume=False, trainer_cls=mk.Trainer, move_pairs=0, board=(0, 0, 0),
         move_hidden=0):
    model = mk.Model(mk.ModelConfig(embed_dim=embed_dim, move_pairs=move_pairs, board_width=board[0],
                                    board_height=board[1], board_kinds=board[2], move_hidden=move_hidden, **CFG),
                     seed=0)
    trainer = trainer_cls(model, lr=1e-2)
    loader = mk.Loader(ds, batch_size=48, producers=2, seed=7)
    mk.fit(model, loader, steps=steps, trainer=trainer, checkpoint=str(path), resume=resume, progress=False,
           log=lambda s: None)
    return model, trainer


@pytest.fixture(scope="module")
def ds():
    return mk.Dataset.synthetic(300, SMALL, seed=0)


def test_resume_refuses_to_run_a_cosine_schedule_past_its_end(ds, tmp_path):
    """The checkpoint's schedule is restored: resumed to a later step than its cosine's end,
    the extra steps ran at lr 0 (python -m manaka.train --steps 60 --resume after --steps 30
    on shogi records) and changed nothing, while the run said it trained them."""
    path = tmp_path / "run.ckpt"
    cosine = lambda model, **_: mk.Trainer(model, lr=1e-2, warmup_steps=1, schedule="cosine", total_steps=4)
    _run(ds, path, 4, trainer_cls=cosine)
    before = path.read_bytes()
    with pytest.raises(mk.CheckpointMismatch, match=r"run.ckpt'?: holds a cosine schedule that ends at step 4 .* "
                                                    r"this run goes on to step 6: its steps past 4 would not train"):
        _run(ds, path, 6, trainer_cls=cosine, resume=True)
    assert path.read_bytes() == before
    _, trainer = _run(ds, path, 4, trainer_cls=cosine, resume=True)  # the same run, at its end
    assert trainer.step_count == 4


def test_resume_says_which_hyperparameters_the_checkpoint_replaced(ds, tmp_path):
    """The checkpoint's hyperparameters are restored over the trainer's: a run resumed with
    another --lr trained at the old one, its log line showing the new one, without a word."""
    path = tmp_path / "run.ckpt"
    _run(ds, path, 4)  # lr 1e-2, no warm-up

    def resumed(trainer_cls):
        model = mk.Model(mk.ModelConfig(embed_dim=8, **CFG), seed=0)
        lines = []
        mk.fit(model, mk.Loader(ds, batch_size=48, producers=2, seed=7), steps=6, trainer=trainer_cls(model),
               checkpoint=str(path), resume=True, progress=False, log=lines.append)
        return [line for line in lines if line.startswith("resumed with")]

    said = resumed(lambda model: mk.Trainer(model, lr=0.5, warmup_steps=3))
    assert said == ["resumed with the checkpoint's hyperparameters, not this run's: lr 0.01 (this run's: 0.5), "
                    "warmup_steps 0 (this run's: 3)"]
    assert resumed(lambda model: mk.Trainer(model, lr=1e-2)) == []  # the same run (total_steps unread: constant)


def test_resume_refuses_another_model_another_dataset_or_fewer_steps(ds, tmp_path):
    path = tmp_path / "deep" / "er" / "run.ckpt"  # the folder is created
    _run(ds, path, 4)
    before = path.read_bytes()
    with pytest.raises(mk.CheckpointMismatch, match=r"run.ckpt.*embed_dim=8.*this run's model has .*embed_dim=6"):
        _run(ds, path, 6, embed_dim=6, resume=True)
    other = mk.Dataset.synthetic(300, SMALL, seed=1)
    with pytest.raises(mk.CheckpointMismatch, match="another dataset") as refused:
        _run(other, path, 6, resume=True)
    # in-memory datasets are said to be, not "at None"
    assert "None" not in str(refused.value) and str(refused.value).count("300 positions in memory") == 2, refused.value
    with pytest.raises(mk.CheckpointMismatch, match="at step 4, beyond the end of this run \\(step 3\\)"):
        _run(ds, path, 3, resume=True)
    assert path.read_bytes() == before
    model, trainer = _run(ds, path, 6, resume=True)  # the same run continues
    assert trainer.step_count == 6


@pytest.mark.parametrize("C, board, D", [(5, (0, 0, 0), 0), (8, (2, 2, 3), 0), (8, (2, 2, 3), 4)],
                         ids=["table", "relative", "move_hidden"])
def test_a_move_pair_table_resumes_and_old_checkpoints_without_the_field_still_resume(ds, tmp_path, C, board, D):
    path = tmp_path / "pairs.ckpt"
    _, straight = _run(ds, tmp_path / "straight.ckpt", 6, move_pairs=C, board=board, move_hidden=D)
    _run(ds, path, 3, move_pairs=C, board=board, move_hidden=D)
    saved = ckpt.load(path)
    assert saved["model_config"]["move_pairs"] == C and saved["model"]["move_pair_table"].shape == (300, C)
    assert saved["model_config"]["board_kinds"] == board[2] and saved["model_config"]["move_hidden"] == D
    trained = ["move_pair_table"] + (["move_pair_relative"] if board[2] else []) + (["move_hidden_out"] if D else [])
    for name in trained:  # trained: no longer their initial 0
        assert np.abs(saved["model"][name]).max() > 0, name
    with pytest.raises(mk.CheckpointMismatch, match=f"move_pairs={C}.*this run's model has .*move_pairs=0"):
        _run(ds, path, 6, resume=True)
    if D:
        with pytest.raises(mk.CheckpointMismatch, match=f"move_hidden={D}.*this run's model has .*move_hidden=0"):
            _run(ds, path, 6, resume=True, move_pairs=C, board=board)
    model, trainer = _run(ds, path, 6, resume=True, move_pairs=C, board=board, move_hidden=D)
    assert trainer.step_count == 6
    for name, arr in straight.model.state_dict().items():  # 3 + 3 steps are the 6 steps of one run
        np.testing.assert_array_equal(model.state_dict()[name], arr, err_msg=name)

    # a checkpoint written before ModelConfig had move_pairs holds a config without the key
    old = tmp_path / "old.ckpt"
    _run(ds, old, 2)
    state = ckpt.load(old)
    for key in ("move_pairs", "board_width", "board_height", "board_kinds", "move_hidden", "move_shared",
                "move_hidden_gate"):
        del state["model_config"][key]
    ckpt.save(old, state)
    _, trainer = _run(ds, old, 4, resume=True)
    assert trainer.step_count == 4


def test_a_failed_resume_changes_nothing(ds, tmp_path):
    path = tmp_path / "run.ckpt"
    _run(ds, path, 2)

    class Refusing(mk.Trainer):
        def load_state_dict(self, state):
            raise ValueError("refused")

    model = mk.Model(mk.ModelConfig(embed_dim=8, **CFG), seed=3)
    before = model.state_dict()
    trainer = Refusing(model, lr=1e-2)
    with pytest.raises(mk.CheckpointMismatch, match="cannot be restored.*trainer.*refused"):
        mk.fit(model, mk.Loader(ds, batch_size=48, seed=7), steps=4, trainer=trainer, checkpoint=str(path),
               resume=True, progress=False, log=lambda s: None)
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before) and trainer.step_count == 0


def test_cli_prints_one_line_for_a_checkpoint_of_another_run(tmp_path):
    base = [sys.executable, "-m", "manaka.train", "--steps", "2", "--synthetic", "600", "--eval-positions", "0",
            "--batch-size", "64", "--device", "cpu", "--no-progress", "--checkpoint", str(tmp_path / "c.ckpt"),
            "--pair-dim", "2", "--hidden", "16", "--head-width", "16"]
    first = subprocess.run(base + ["--embed-dim", "8", "--save", str(tmp_path / "new" / "m.manaka")],
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "new" / "m.manaka").exists()
    out = subprocess.run(base + ["--embed-dim", "6", "--resume"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "embed_dim=8" in lines[0] and "embed_dim=6" in lines[0], out.stderr


def test_a_checkpoint_with_the_wrong_structure_is_a_checkpoint_error(ds, tmp_path):
    path = tmp_path / "odd.ckpt"
    for state, message in (({"step": 1}, "missing"), ({"step": -1, "model": {}, "trainer": {}, "loader": {}}, "invalid step"),
                           ({"step": 0, "model": {}, "trainer": {}, "loader": {}, "history": 3}, "history")):
        ckpt.save(path, state)
        model = FakeModel()
        with pytest.raises(mk.CheckpointError, match=message):
            mk.fit(model, mk.Loader(ds, batch_size=32), steps=1, trainer=FakeTrainer(model),
                   checkpoint=str(path), resume=True, progress=False, log=lambda s: None)


def _rewrite_header(path, change):
    """Applies `change` to the JSON header of a container file, keeping it well-formed
    (length, header checksum, padding): what a crafted file looks like."""
    import json
    import struct
    import zlib

    raw = path.read_bytes()
    length = struct.unpack("<Q", raw[8:16])[0]
    header = json.loads(raw[24:24 + length])
    data = raw[(24 + length + 63) // 64 * 64:]
    change(header)
    text = json.dumps(header).encode()
    start = (24 + len(text) + 63) // 64 * 64
    path.write_bytes(raw[:8] + struct.pack("<QI4x", len(text), zlib.crc32(text)) + text
                     + bytes(start - 24 - len(text)) + data)


def _nested(depth):
    x = []
    for _ in range(depth):
        x = [x]
    return x


def _crafted(tmp_path, base):
    """Three crafted checkpoints made from the sound checkpoint `base`."""
    state = ckpt.load(base)
    deep = tmp_path / "deep.ckpt"
    ckpt.save(deep, {**state, "extra": "here"})
    _rewrite_header(deep, lambda h: h["meta"]["state"].__setitem__("extra", _nested(600)))
    zero = tmp_path / "zero.ckpt"
    ckpt.save(zero, {**state, "extra": np.zeros((0, 3), np.float32)})

    def huge(h):
        for entry in h["tensors"]:
            if entry["name"] == "extra":
                entry["shape"] = [0, 2**62]
    _rewrite_header(zero, huge)
    epoch = tmp_path / "epoch.ckpt"
    ckpt.save(epoch, {**state, "loader": {**state["loader"], "epoch": 2**63}})
    return deep, zero, epoch


def test_crafted_checkpoints_are_checkpoint_errors_naming_the_file(ds, tmp_path):
    base = tmp_path / "base.ckpt"
    _run(ds, base, 2)
    deep, zero, epoch = _crafted(tmp_path, base)
    with pytest.raises(mk.CheckpointError, match=r"deep.ckpt.*nests deeper than 64 levels"):
        ckpt.load(deep)
    with pytest.raises(mk.CheckpointError, match=r"zero.ckpt.*tensor 'extra' has shape \[0, 4611686018427387904\]"):
        ckpt.load(zero)
    with pytest.raises(mk.CheckpointError, match=r"epoch.ckpt.*cannot be restored.*\(loader\).*epoch"):
        _run(ds, epoch, 4, resume=True)
    with pytest.raises(ValueError, match="nests deeper"):  # and none is written
        ckpt.save(tmp_path / "w.ckpt", {"step": 1, "x": _nested(100)})
    # a model file's container is read by the same checks
    path = tmp_path / "m.manaka"
    mk.Model(mk.ModelConfig(embed_dim=8, **CFG), seed=0).save(path)
    _rewrite_header(path, lambda h: h["tensors"].append({"name": "x", "dtype": "<f4", "shape": [0, 2**62],
                                                         "offset": h["data_bytes"], "nbytes": 0}))
    with pytest.raises(mk.ModelFileError, match=r"m.manaka.*tensor 'x' has shape"):
        mk.Model.load(path)


def test_a_loader_epoch_beyond_the_core_is_a_value_error(ds):
    loader = mk.Loader(ds, batch_size=32)
    loader.epoch = 2**63
    with pytest.raises(ValueError, match=r"Loader: epoch must be in 0..2\*\*62, got 9223372036854775808"):
        next(iter(loader))
    with pytest.raises(ValueError, match="out of range"):
        loader.load_state_dict({"epoch": 2**63, "batch_index": 0})


def test_cli_resume_of_a_crafted_checkpoint_is_one_line(tmp_path):
    base = [sys.executable, "-m", "manaka.train", "--steps", "3", "--synthetic", "600", "--eval-positions", "0",
            "--batch-size", "64", "--device", "cpu", "--no-progress", "--no-save", "--embed-dim", "8",
            "--pair-dim", "2", "--hidden", "16", "--head-width", "16"]
    first = subprocess.run(base[:4] + ["2"] + base[5:] + ["--checkpoint", str(tmp_path / "base.ckpt")],
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    for path, words in zip(_crafted(tmp_path, tmp_path / "base.ckpt"), ("nests deeper", "has shape", "epoch")):
        out = subprocess.run(base + ["--checkpoint", str(path), "--resume"], capture_output=True, text=True,
                             timeout=300)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and "Traceback" not in out.stderr and len(lines) == 1, out.stderr[-3000:]
        assert str(path) in lines[0] and words in lines[0], lines[0]


def test_the_converter_replaces_an_existing_file_only_with_force(tmp_path):
    old = {"format": "manaka-checkpoint", "version": 1, "step": 3, "model": {"w": np.ones(4, np.float32)}}
    (tmp_path / "old.ckpt").write_bytes(pickle.dumps(old, protocol=pickle.HIGHEST_PROTOCOL))
    ckpt.save(tmp_path / "other.ckpt", {"step": 9, "model": {"w": np.zeros(2, np.float32)}})  # another run's
    before = {n: (tmp_path / n).read_bytes() for n in ("old.ckpt", "other.ckpt")}
    for new in ("other.ckpt", "old.ckpt"):
        out = subprocess.run([sys.executable, "-m", "manaka.checkpoint", "convert", str(tmp_path / "old.ckpt"),
                              str(tmp_path / new), "--trust-pickle"], capture_output=True, text=True, timeout=60)
        last = out.stderr.strip().splitlines()[-1]
        assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
        assert last.startswith("python -m manaka.checkpoint: ") and new in last and "--force" in last, out.stderr
    with pytest.raises(FileExistsError, match="other.ckpt.*overwrite=True"):
        ckpt.convert(tmp_path / "old.ckpt", tmp_path / "other.ckpt", trust_pickle=True)
    assert {n: (tmp_path / n).read_bytes() for n in ("old.ckpt", "other.ckpt")} == before
    assert sorted(os.listdir(tmp_path)) == ["old.ckpt", "other.ckpt"]
    out = subprocess.run([sys.executable, "-m", "manaka.checkpoint", "convert", str(tmp_path / "old.ckpt"),
                          str(tmp_path / "old.ckpt"), "--trust-pickle", "--force"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert ckpt.load(tmp_path / "old.ckpt")["step"] == 3  # converted in place


def test_the_converter_runs_without_runpys_warning_and_mk_checkpoint_still_works():
    """`import manaka` leaves manaka.checkpoint unimported, so python -m manaka.checkpoint does
    not make runpy warn that the module "found in sys.modules ... may result in unpredictable
    behaviour" (it did on every run); mk.checkpoint is imported when first named."""
    out = subprocess.run([sys.executable, "-m", "manaka.checkpoint", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stderr == "" and "convert" in out.stdout, out.stderr
    probe = ("import sys, manaka as mk; assert 'manaka.checkpoint' not in sys.modules; "
             "assert mk.checkpoint.load is sys.modules['manaka.checkpoint'].load; print('ok')")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
