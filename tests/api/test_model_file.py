"""The file container of models and checkpoints (manaka/model_file.py), atomic writes
(manaka/atomic_file.py) and Model.load's checks before it allocates."""
import json
import os
import re
import signal
import stat
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

import manaka as mk
from manaka import atomic_file, model_file
import model_cases as cases


def test_round_trip_of_every_dtype(tmp_path):
    rng = np.random.default_rng(1)
    tensors = {"f4": rng.standard_normal((3, 5)).astype(np.float32), "f8": rng.standard_normal(7),
               "i8": rng.integers(-2**62, 2**62, 4), "i4": rng.integers(-9, 9, (2, 2, 2)).astype(np.int32),
               "u1": rng.integers(0, 255, 65).astype(np.uint8), "u8": np.array([2**64 - 1], np.uint64),
               "empty": np.zeros((0, 4), np.float32), ">f4": np.arange(3, dtype=">f4")}
    path = tmp_path / "t.bin"
    model_file.write(path, "test", {"x": [1, "a"]}, tensors.items())
    meta, back = model_file.read(path, "test")
    assert meta == {"x": [1, "a"]} and list(back) == list(tensors)
    for name, arr in tensors.items():
        assert back[name].shape == arr.shape and np.array_equal(back[name], arr), name
    with pytest.raises(TypeError, match="complex"):
        model_file.write(path, "test", {}, [("c", np.zeros(2, np.complex64))])


def test_save_creates_missing_folders_and_names_a_blocked_one(tmp_path):
    model = mk.Model(cases.config(), seed=2)
    path = tmp_path / "a" / "b" / "m.manaka"
    model.save(path)
    cases.assert_parameters_match(mk.Model.load(path), model)
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(OSError, match="cannot create the folder .*file"):
        model.save(tmp_path / "file" / "m.manaka")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="a folder no file can be made in: Linux's /proc")
def test_a_folder_no_file_can_be_made_in_is_named_before_and_at_the_write():
    """os.access says root may write /proc: unwritable said "" and a run's final save failed
    naming our temporary ('/proc/.m.manaka.tmp-123.0'), not the path asked for."""
    from manaka.atomic_file import unwritable

    assert unwritable("/proc/m.manaka") == "the folder /proc is not writable"
    with pytest.raises(FileNotFoundError, match=r"cannot write '/proc/m.manaka': cannot create a file in '/proc'"):
        mk.Model(cases.config(), seed=2).save("/proc/m.manaka")


def test_an_empty_or_bytes_path(tmp_path, monkeypatch):
    # "": abspath("") is the working folder, so the temporary went to its parent and the
    # error named neither; a bytes path failed in the temporaries' search (a str pattern)
    model = mk.Model(cases.config(), seed=2)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    with pytest.raises(FileNotFoundError, match="cannot write '': the path is empty"):
        model.save("")
    model.save(os.fsencode(tmp_path / "work" / "b.manaka"))
    cases.assert_parameters_match(mk.Model.load(tmp_path / "work" / "b.manaka"), model)
    assert sorted(os.listdir(tmp_path)) == ["work"] and os.listdir(tmp_path / "work") == ["b.manaka"]


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    path = tmp_path / "m.manaka"
    dead = tmp_path / f".m.manaka.tmp-{_dead_pid()}"
    old_style = tmp_path / f".m.manaka.tmp{_dead_pid()}"
    alive = tmp_path / f".m.manaka.tmp-{os.getppid()}"  # a live writer's file is not touched
    other = tmp_path / f".other.tmp-{_dead_pid()}"      # nor another destination's
    for p in (dead, old_style, alive, other):
        p.write_bytes(b"x" * 100)
    mk.Model(cases.config()).save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, alive.name, other.name])


def test_threads_saving_one_path_at_once_each_write_a_whole_file(tmp_path):
    # they shared the temporary .m.manaka.tmp-<pid>: each truncated and wrote the other's,
    # renames failed with FileNotFoundError, and a file of both could replace the good one
    import threading

    path, failures = tmp_path / "m.manaka", []
    models = [mk.Model(cases.config(), seed=s) for s in (1, 2)]

    def save_often(model):
        for _ in range(25):
            try:
                model.save(path)
            except Exception as e:  # noqa: BLE001 - every failure is the finding
                failures.append(repr(e))
    threads = [threading.Thread(target=save_often, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    back = mk.Model.load(path)  # one of the two, whole (its CRC checked)
    assert any(all(np.array_equal(v, m.state_dict()[k]) for k, v in back.state_dict().items()) for m in models)
    assert os.listdir(tmp_path) == ["m.manaka"]
    stale = tmp_path / f".m.manaka.tmp-{_dead_pid()}.7"  # a dead writer's numbered temporary: removed
    stale.write_bytes(b"x")
    models[0].save(path)
    assert os.listdir(tmp_path) == ["m.manaka"]


def test_a_path_ending_with_a_separator_is_refused_before_writing(tmp_path):
    # abspath dropped the separator: the file was written as "new" and its rename onto
    # "new/" failed with "Not a directory" (after a whole training run, for --save)
    from manaka.atomic_file import unwritable

    target = str(tmp_path / "new") + os.sep
    assert "names a folder" in unwritable(target)
    with pytest.raises(IsADirectoryError, match="ends with a path separator, which names a folder"):
        mk.Model(cases.config()).save(target)
    assert os.listdir(tmp_path) == []
    (tmp_path / "new").mkdir()  # an existing folder: refused as before, by its kind
    with pytest.raises(IsADirectoryError):
        mk.Model(cases.config()).save(target)


def test_kill_9_during_a_write_leaves_a_temporary_the_next_write_removes(tmp_path):
    path = tmp_path / "c.ckpt"
    code = ("import os, sys; from manaka.atomic_file import atomic_write\n"
            "with atomic_write(sys.argv[1]) as f:\n"
            "    f.write(b'x' * 4096); f.flush(); os.kill(os.getpid(), 9)\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], timeout=60)
    assert out.returncode == -9
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".c.ckpt.tmp-")
    from manaka import checkpoint
    checkpoint.save(path, {"step": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["c.ckpt"]


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="a file size limit (POSIX)")
def test_a_write_that_runs_out_of_room_names_the_file_and_leaves_nothing(tmp_path):
    """A full disk, a quota or a size limit failed with "[Errno 28] No space left on device"
    alone: which of a run's files could not be written went unsaid. Here a size limit of
    4 KB stands in for a full disk (the write's error, EFBIG, carries no file name either)."""
    path = tmp_path / "m.manaka"
    code = ("import resource, signal, sys; import manaka as mk\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
            "mk.Model(mk.ModelConfig(num_tokens=300, num_moves=500, tokens_per_side=8, embed_dim=8, orders=2,\n"
            "                        pair_dim=2, hidden=(8,), head_width=4)).save(sys.argv[1])\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert f"cannot write {str(path)!r}: File too large" in out.stderr.splitlines()[-1], out.stderr
    assert list(tmp_path.iterdir()) == []


def _craft(path, header: dict, data: bytes = b"", version=2):
    raw = json.dumps(header).encode()
    if version == 2:
        prefix = model_file.MAGIC + struct.pack("<QI4x", len(raw), zlib.crc32(raw))
    else:
        prefix = model_file.MAGIC_V1 + struct.pack("<Q", len(raw))
    start = (len(prefix) + len(raw) + 63) // 64 * 64
    path.write_bytes(prefix + raw + bytes(start - len(prefix) - len(raw)) + data)


def test_a_small_crafted_file_is_refused_before_anything_is_allocated(tmp_path, monkeypatch):
    """A file of a few hundred bytes claiming a huge model must not build it."""
    built = []
    monkeypatch.setattr(mk.Model, "__init__", lambda self, *a, **k: built.append(a))
    huge = cases.config(num_tokens=30000, D=1 << 20).to_dict()
    path = tmp_path / "m.manaka"
    _craft(path, {"kind": "model", "meta": {"config": huge, "seed": 0},
                  "tensors": [{"name": "embedding", "dtype": "<f4", "shape": [1], "offset": 0, "nbytes": 4}],
                  "data_bytes": 64, "crc32": zlib.crc32(bytes(64))}, bytes(64))
    assert path.stat().st_size <= 640
    with pytest.raises(mk.ModelFileError, match="m.manaka.*do not match its config"):
        mk.Model.load(path)
    # tensors that claim more than the file holds are refused from the header alone
    _craft(path, {"kind": "model", "meta": {"config": huge, "seed": 0},
                  "tensors": [{"name": "embedding", "dtype": "<f4", "shape": [30000, 1 << 20], "offset": 0,
                               "nbytes": 30000 << 22}], "data_bytes": 30000 << 22, "crc32": 0})
    with pytest.raises(mk.ModelFileError, match="truncated: expected"):
        mk.Model.load(path)
    assert built == []


def test_version_1_files_are_still_read(tmp_path):
    model = mk.Model(cases.config(hidden=()), seed=5)
    entries, data, offset = [], b"", 0
    for name, arr in model.state_dict().items():
        raw = arr.astype("<f4").tobytes()
        raw += bytes((-len(raw)) % 64)
        entries.append({"name": name, "shape": list(arr.shape), "offset": offset, "nbytes": arr.nbytes})
        offset += len(raw)
        data += raw
    path = tmp_path / "v1.manaka"
    _craft(path, {"kind": "model", "meta": {"config": model.config.to_dict(), "seed": 5}, "tensors": entries,
                  "data_bytes": offset, "crc32": zlib.crc32(data)}, data, version=1)
    cases.assert_parameters_match(mk.Model.load(path), model)


@pytest.mark.parametrize("meta, message", [
    ({"config": {"num_tokens": 3}}, "config in the file is invalid"),
    ({"config": [1, 2]}, "config in the file is invalid"),
    ({"config": {**cases.config().to_dict(), "hidden": "12"}}, "config in the file is invalid"),
    ({"config": {**cases.config().to_dict(), "embed_dim": 2**70}}, "its config .* needs"),
    ({"config": cases.config().to_dict(), "seed": -1}, "seed must be"),
    ({"config": cases.config().to_dict(), "seed": 1.5}, "seed must be"),
])
def test_bad_configs_are_model_file_errors(tmp_path, meta, message):
    path = tmp_path / "m.manaka"
    model_file.write(path, "model", meta, mk.Model(cases.config()).state_dict().items())
    with pytest.raises(mk.ModelFileError, match=message) as info:
        mk.Model.load(path)
    assert info.value.path == str(path) and isinstance(info.value, ValueError)


def test_a_checkpoint_is_not_a_model(tmp_path):
    from manaka import checkpoint
    checkpoint.save(tmp_path / "c.ckpt", {"step": 1})
    with pytest.raises(mk.ModelFileError, match="holds a 'checkpoint', not a 'model'"):
        mk.Model.load(tmp_path / "c.ckpt")


def test_a_move_pair_table_round_trips_and_files_without_the_field_load_without_it(tmp_path):
    rng = np.random.default_rng(4)
    model = mk.Model(cases.config(move_pairs=4), seed=6)
    state = model.state_dict()
    state["move_pair_table"] = rng.normal(0, 0.5, state["move_pair_table"].shape).astype(np.float32)
    model.load_state_dict(state)
    model.save(tmp_path / "m.manaka")
    back = mk.Model.load(tmp_path / "m.manaka")
    assert back.config == model.config and back.config.move_pairs == 4
    cases.assert_parameters_match(back, model)
    b = cases.batch(model.config, seed=2)
    np.testing.assert_array_equal(back.forward(b)[0], model.forward(b)[0])

    # a file written before ModelConfig had move_pairs: no such key, no such tensor
    old = mk.Model(cases.config(), seed=7)
    meta = {"config": {k: v for k, v in old.config.to_dict().items() if k != "move_pairs"}, "seed": 7}
    model_file.write(tmp_path / "old.manaka", "model", meta, old.state_dict().items())
    loaded = mk.Model.load(tmp_path / "old.manaka")
    assert loaded.config.move_pairs == 0 and loaded.config == old.config and "move_pair_table" not in loaded.shapes
    cases.assert_parameters_match(loaded, old)

    # a config asking for the table without the tensor, or the tensor without the config
    model_file.write(tmp_path / "bad.manaka", "model", {"config": model.config.to_dict(), "seed": 0},
                     old.state_dict().items())
    with pytest.raises(mk.ModelFileError, match="missing.*move_pair_table"):
        mk.Model.load(tmp_path / "bad.manaka")
    model_file.write(tmp_path / "bad2.manaka", "model", meta, model.state_dict().items())
    with pytest.raises(mk.ModelFileError, match="move_pair_table"):
        mk.Model.load(tmp_path / "bad2.manaka")


def test_expected_shapes_match_the_built_model():
    from manaka.model import expected_shapes
    for cfg in (cases.config(), cases.config(hidden=()), cases.config(hidden=(3, 4, 5), orders=1),
                cases.config(move_pairs=3)):
        assert list(expected_shapes(cfg).items()) == list(mk.Model(cfg).shapes.items())


@pytest.mark.parametrize("T", [2000, 2**63, 2**80])
def test_a_config_the_core_refuses_is_a_model_file_error(tmp_path, T):
    """tokens_per_side is in no tensor's shape: the core's own bound (or an overflow) must
    still come out as ModelFileError (found by the fuzz harness)."""
    path = tmp_path / "m.manaka"
    model = mk.Model(cases.config())
    model_file.write(path, "model", {"config": {**model.config.to_dict(), "tokens_per_side": T}, "seed": 0},
                     model.state_dict().items())
    with pytest.raises(mk.ModelFileError, match="m.manaka.*cannot be built"):
        mk.Model.load(path)
    with pytest.raises(ValueError, match="policy_head"):
        mk.Model.load(path, policy_head="both")


def test_a_fifo_or_a_device_is_refused_without_waiting(tmp_path):
    # open() of a FIFO blocks until a writer comes: Model.load (and usi --model) hung
    fifo = tmp_path / "m.manaka"
    os.mkfifo(fifo)
    code = ("import sys, manaka as mk\nfrom manaka import checkpoint\n"
            "for load in (mk.Model.load, checkpoint.load):\n"
            "    for path in sys.argv[1:]:\n"
            "        try:\n"
            "            load(path)\n"
            "        except mk.FileFormatError as e:\n"
            "            print(type(e).__name__, e)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code, str(fifo), "/dev/zero"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"ModelFileError {str(fifo)!r}: is not a regular file (a FIFO, socket or device)",
        "ModelFileError '/dev/zero': is not a regular file (a FIFO, socket or device)",
        f"CheckpointError {str(fifo)!r}: is not a regular file (a FIFO, socket or device)",
        "CheckpointError '/dev/zero': is not a regular file (a FIFO, socket or device)"], done.stdout


def test_a_fifo_or_a_device_is_never_replaced_by_a_write(tmp_path):
    # os.replace put the new file in a special file's place: Model.save("/dev/null"), run as
    # root, replaced the device node with a regular file (every later `> /dev/null` wrote there)
    fifo = tmp_path / "m.manaka"
    os.mkfifo(fifo)
    model = mk.Model(cases.config())
    with pytest.raises(FileExistsError, match=f"cannot write {re.escape(repr(str(fifo)))}: it is a FIFO, "
                                              "not a regular file, and is never replaced"):
        model.save(fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.listdir(tmp_path) == ["m.manaka"]
    # refused up front too, by the check commands make before long work (train --save, match --json)
    assert atomic_file.unwritable(fifo) == "it is a FIFO, not a regular file (it is never replaced)"
    assert atomic_file.unwritable("/dev/null") == "it is a device, not a regular file (it is never replaced)"
    assert atomic_file.unwritable(tmp_path / "new.manaka") == ""


def test_a_write_through_a_symbolic_link_replaces_its_target_and_keeps_the_link(tmp_path):
    # os.replace put the new file in the link's place: the link's target, which whoever made
    # the link reads, kept the old model
    (tmp_path / "runs").mkdir()
    target, link = tmp_path / "runs" / "m.manaka", tmp_path / "latest.manaka"
    mk.Model(cases.config(), seed=1).save(target)
    os.symlink(os.path.join("runs", "m.manaka"), link)
    model = mk.Model(cases.config(), seed=2)
    model.save(link)
    assert os.path.islink(link) and os.readlink(link) == os.path.join("runs", "m.manaka")
    loaded = mk.Model.load(target)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(loaded.state_dict()[name], value)
    assert sorted(os.listdir(tmp_path / "runs")) == ["m.manaka"]  # no temporary left beside it
    # a link to a device is refused as the device is
    os.symlink("/dev/null", tmp_path / "null.manaka")
    with pytest.raises(FileExistsError, match="cannot write '/dev/null': it is a device"):
        model.save(tmp_path / "null.manaka")
    assert atomic_file.unwritable(tmp_path / "null.manaka") == "it is a device, not a regular file (it is never replaced)"
    # a loop of links reaches no file: refused, the links left as they were
    os.symlink("loop-b", tmp_path / "loop-a")
    os.symlink("loop-a", tmp_path / "loop-b")
    with pytest.raises(OSError, match="cannot write .*loop-a.*: Too many levels of symbolic links"):
        model.save(tmp_path / "loop-a")
    assert os.path.islink(tmp_path / "loop-a") and os.path.islink(tmp_path / "loop-b")
    assert atomic_file.unwritable(tmp_path / "loop-a") == "its symbolic links never reach a file (a loop)"


def test_a_model_with_a_non_finite_parameter_is_not_saved(tmp_path):
    # save wrote it (over a good file) and Model.load then refused the file: the good model lost
    path = tmp_path / "m.manaka"
    model = mk.Model(cases.config())
    model.save(path)
    before = path.read_bytes()
    for value in (np.nan, np.inf):
        model.parameters()["move_table"][1, 0] = value
        with pytest.raises(ValueError, match=f"^Model.save: move_table holds a non-finite value, which Model.load "
                                             f"refuses: nothing was written to {re.escape(repr(path))}"):
            model.save(path)
        assert path.read_bytes() == before and os.listdir(tmp_path) == ["m.manaka"]
    mk.Model.load(path)
