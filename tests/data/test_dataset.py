"""Dataset: the on-disk format of docs/design.md §4, its validation rules, and synthetic data."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import manaka as mk
from model_cases import SMALL, arrays
from paths import HELPERS, ROOT



@pytest.fixture(scope="module")
def small():
    return mk.Dataset.synthetic(3000, SMALL, seed=0)


def test_round_trip(tmp_path):
    for soft in (False, True):
        a = arrays(soft=soft)
        ds = mk.Dataset.from_arrays(**a, meta={"note": "x"})
        path = ds.save(tmp_path / f"ds{soft}")
        back = mk.Dataset.open(path)
        assert len(back) == len(ds) == 6
        assert isinstance(back.tokens, np.memmap)  # memory-mapped, not loaded
        for name in ("tokens", "legal_offsets", "legal_moves", "target", "value", "policy_target"):
            x, y = getattr(ds, name), getattr(back, name)
            if x is None:
                assert y is None
            else:
                assert x.dtype == y.dtype and np.array_equal(x, y)
        assert back.tokens.dtype == np.int16 and back.legal_offsets.dtype == np.int64
        assert back.legal_moves.dtype == np.int16 and back.target.dtype == np.int32
        assert back.meta == {"version": 1, "num_tokens": 50, "num_moves": 40, "T": 4, "note": "x"}
        p = back[2]
        o = a["legal_offsets"]
        assert np.array_equal(p.legal_moves, a["legal_moves"][o[2]:o[3]])
        assert p.target == a["target"][2] and p.played_move == p.legal_moves[p.target]
        assert "Position(#2" in repr(p) and "legal moves" in repr(p)
        assert "6 positions" in repr(back)
        assert back[-1].index == 5
        with pytest.raises(IndexError):
            back[6]


def test_large_move_vocabulary_uses_int32():
    a = arrays()
    a["num_moves"] = 40000
    a["legal_moves"] = a["legal_moves"] + 39000
    ds = mk.Dataset.from_arrays(**a)
    assert ds.legal_moves.dtype == np.int32


def broken(**changes):
    a = arrays(soft=True)
    a.update(changes)
    return a


@pytest.mark.parametrize("change, file, words", [
    (lambda a: a.update(legal_offsets=a["legal_offsets"] + 1), "legal_offsets", "start at 0"),
    (lambda a: a["legal_offsets"].__setitem__(3, a["legal_offsets"][2]), "legal_offsets", "position 2: offsets must increase"),
    (lambda a: a.update(target=a["target"][:-1]), "target", "expected N = 6"),
    (lambda a: a.update(value=a["value"][:-1]), "value", "expected N = 6"),
    (lambda a: a.update(legal_offsets=a["legal_offsets"][:-1]), "legal_offsets", "N + 1"),
    (lambda a: a.update(legal_moves=a["legal_moves"][:-1], policy_target=a["policy_target"][:-1]), "legal_offsets", "ends at"),
    (lambda a: a["tokens"].__setitem__((4, 1, 2), 50), "tokens", "position 4: tokens[4, 1, 2] = 50 is out of range"),
    (lambda a: a["tokens"].__setitem__((1, 0, 0), -2), "tokens", "position 1"),
    (lambda a: a["legal_moves"].__setitem__(a["legal_offsets"][3], 40), "legal_moves", "position 3: legal move 40 at slot 0"),
    (lambda a: a["legal_moves"].__setitem__(0, -1), "legal_moves", "position 0"),
    (lambda a: a["target"].__setitem__(2, a["legal_offsets"][3] - a["legal_offsets"][2]), "target", "position 2: target"),
    (lambda a: a["target"].__setitem__(5, -1), "target", "position 5"),
    (lambda a: a["value"].__setitem__(3, np.nan), "value", "position 3: value nan"),
    (lambda a: a["value"].__setitem__(0, 1.5), "value", "position 0: value 1.5"),
    (lambda a: a["policy_target"].__setitem__(a["legal_offsets"][4], np.inf), "policy_target", "position 4"),
    (lambda a: a["policy_target"].__setitem__(a["legal_offsets"][1], 2.0), "policy_target", "position 1: soft targets sum to"),
    (lambda a: a.update(policy_target=a["policy_target"][:-1]), "policy_target", "entries but legal_moves"),
])
def test_every_rule_on_disk_and_in_memory(tmp_path, change, file, words):
    a = arrays(soft=True)
    a = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in a.items()}
    change(a)
    with pytest.raises(ValueError, match=f"from_arrays: {file}: .*{re.escape(words)}"):
        mk.Dataset.from_arrays(**a)
    # the same folder on disk: open() names the .npy file
    good = mk.Dataset.from_arrays(**arrays(soft=True)).save(tmp_path / "ds")
    for name in ("tokens", "legal_offsets", "legal_moves", "target", "value", "policy_target"):
        arr = a[name]
        dtype = np.load(os.path.join(good, name + ".npy"), mmap_mode="r").dtype
        np.save(os.path.join(good, name + ".npy"), np.asarray(arr).astype(dtype))
    with pytest.raises(ValueError) as e:
        mk.Dataset.open(good)
    assert f"{file}.npy" in str(e.value) and "Dataset.open(" in str(e.value)


def test_open_missing_truncated_and_bad_meta(tmp_path):
    path = mk.Dataset.from_arrays(**arrays()).save(tmp_path / "ds")
    os.rename(os.path.join(path, "target.npy"), os.path.join(path, "t.npy"))
    with pytest.raises(ValueError, match=r"target\.npy: missing"):
        mk.Dataset.open(path)
    os.rename(os.path.join(path, "t.npy"), os.path.join(path, "target.npy"))
    raw = open(os.path.join(path, "legal_moves.npy"), "rb").read()
    open(os.path.join(path, "legal_moves.npy"), "wb").write(raw[:-10])
    with pytest.raises(ValueError, match=r"legal_moves\.npy: cannot be read \(truncated"):
        mk.Dataset.open(path)
    open(os.path.join(path, "legal_moves.npy"), "wb").write(raw)
    mk.Dataset.open(path)
    meta_path = os.path.join(path, "meta.json")
    meta = json.load(open(meta_path))
    for bad, words in [("{", "not valid JSON"), (json.dumps({**meta, "version": 7}), "version 7"),
                       (json.dumps({k: v for k, v in meta.items() if k != "num_moves"}), "missing the key 'num_moves'"),
                       (json.dumps({**meta, "T": 5}), r"tokens\.npy: has shape"),
                       (json.dumps({**meta, "num_tokens": "many"}), "num_tokens must be a positive integer"),
                       (json.dumps([1]), "JSON object")]:
        open(meta_path, "w").write(bad)
        with pytest.raises(ValueError, match=words):
            mk.Dataset.open(path)
    os.remove(meta_path)
    with pytest.raises(ValueError, match=r"meta\.json: missing"):
        mk.Dataset.open(path)
    with pytest.raises(ValueError, match="not a directory"):
        mk.Dataset.open(tmp_path / "nowhere")


def test_wrong_dtype_on_disk_and_wide_values_in_memory(tmp_path):
    path = mk.Dataset.from_arrays(**arrays()).save(tmp_path / "ds")
    np.save(os.path.join(path, "value.npy"), np.zeros(6, np.float64))
    with pytest.raises(ValueError, match=r"value\.npy: has dtype float64"):
        mk.Dataset.open(path)
    a = arrays()
    a["tokens"] = a["tokens"] + 70000  # would wrap in int16
    with pytest.raises(ValueError, match="tokens holds .* does not fit int16"):
        mk.Dataset.from_arrays(**a)
    a = arrays()
    a["target"] = a["target"].astype(float)
    with pytest.raises(TypeError, match="target must have an integer dtype"):
        mk.Dataset.from_arrays(**a)


def test_validation_names_the_first_bad_position():
    """The check names the exact first bad position wherever it lies (37 and 15 of 50)."""
    from manaka import validate
    ds = mk.Dataset.from_arrays(**arrays(N=50))
    arrs = {k: getattr(ds, k) for k in validate.FILES}
    arrs["value"] = arrs["value"].copy()
    arrs["value"][37] = -0.5
    with pytest.raises(ValueError, match="position 37"):
        validate.check_values(arrs, ds.meta, validate.Rule("x", {}))
    arrs = {k: getattr(ds, k) for k in validate.FILES}
    arrs["legal_offsets"] = arrs["legal_offsets"].copy()
    arrs["legal_offsets"][16] = arrs["legal_offsets"][15]
    with pytest.raises(ValueError, match="position 15: offsets must increase"):
        validate.check_values(arrs, ds.meta, validate.Rule("x", {}))


def test_synthetic_shapes_and_labels(small):
    ds = small
    assert len(ds) == 3000 and ds.tokens.shape == (3000, 2, 8)
    assert ds.num_tokens == 300 and ds.num_moves == 500
    counts = np.diff(ds.legal_offsets)
    assert counts.min() >= 1 and counts.max() <= 500
    assert 80 < np.median(counts) < 100  # lognormal(ln 90, 0.6)
    for i in range(0, 3000, 97):
        p = ds[i]
        assert len(np.unique(p.legal_moves)) == len(p.legal_moves)  # distinct moves
    assert (ds.tokens == -1).any() and ((ds.tokens >= 0).sum(axis=2) >= 6).all()
    m = ds.meta
    assert m["chance_accuracy"] < m["teacher_accuracy_ceiling"] <= 1
    assert abs(m["teacher_accuracy_ceiling"] - m["teacher_expected_accuracy"]) < 0.05
    assert 0 < m["teacher_policy_loss_floor"] and 0 < m["teacher_value_loss_floor"] < np.log(2)
    assert ((ds.value > 0) & (ds.value < 1)).all()


def test_synthetic_is_seeded_and_shares_its_teacher():
    a = mk.Dataset.synthetic(200, SMALL, seed=3)
    b = mk.Dataset.synthetic(200, SMALL, seed=3)
    c = mk.Dataset.synthetic(200, SMALL, seed=4)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.target, b.target)
    assert not np.array_equal(a.tokens, c.tokens)
    from manaka import synthetic
    t1 = synthetic.teacher_parameters(SMALL)
    t2 = synthetic.teacher_parameters(SMALL)
    assert all(np.array_equal(t1[k], t2[k]) for k in t1)
    # the teacher's own forward pass reproduces the stored value labels
    ds = a
    idx = np.arange(20)
    counts = np.diff(ds.legal_offsets)[idx]
    legal = np.full((20, counts.max()), -1, np.int32)
    for r, i in enumerate(idx):
        legal[r, :counts[r]] = ds[i].legal_moves
    _, value = synthetic.teacher_forward(t1, SMALL.orders, ds.tokens[idx], legal, counts.astype(np.int32))
    np.testing.assert_allclose(value, ds.value[idx], rtol=1e-5)


@pytest.mark.parametrize("shape", ["default", "small"])
def test_synthetic_is_the_same_dataset_whatever_the_blas_threads(shape):
    """The teacher's products do not go through NumPy's BLAS, whose thread count
    (OMP_NUM_THREADS, read when NumPy loads) may change how a product rounds: on an AMD
    EPYC, 1 and 2 threads once made two datasets, and a checkpoint refused the other."""
    code = ("import sys; import manaka as mk; sys.path.insert(0, sys.argv[1]); from model_cases import SMALL; "
            "ds = mk.Dataset.synthetic(2000, SMALL if sys.argv[2] == 'small' else None, seed=5); "
            "print(ds.fingerprint)")
    prints = set()
    for threads in ("1", "2", "3"):
        env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads,
                   PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
        out = subprocess.run([sys.executable, "-c", code, HELPERS, shape], capture_output=True, text=True,
                             env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        prints.add(out.stdout.strip())
    assert len(prints) == 1, prints


def test_synthetic_soft_targets(tmp_path):
    ds = mk.Dataset.synthetic(300, SMALL, seed=1, soft_targets=True)
    sums = np.add.reduceat(ds.policy_target.astype(np.float64), ds.legal_offsets[:-1])
    np.testing.assert_allclose(sums, 1, atol=1e-5)
    back = mk.Dataset.open(ds.save(tmp_path / "soft"))
    assert back.meta["teacher_accuracy_ceiling"] == ds.meta["teacher_accuracy_ceiling"]
    assert "soft targets" in repr(back[0])


def test_dataset_arrays_are_read_only_and_offsets_private():
    a = arrays()
    offsets = a["legal_offsets"].astype(np.int64)
    ds = mk.Dataset.from_arrays(**{**a, "legal_offsets": offsets})
    offsets[3] = 10**9  # the caller's array changes later: the dataset (and its loader) is unaffected
    assert ds.legal_offsets[3] != 10**9
    with pytest.raises(ValueError):
        ds.legal_offsets[0] = 5
    with pytest.raises(ValueError):
        ds.tokens[0, 0, 0] = 1


def _files(path):
    return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path))}


def test_saving_over_the_folder_a_dataset_was_opened_from_keeps_it_whole(tmp_path):
    # its arrays are memory maps of the very files being replaced: np.save into them
    # truncated each file under its own map (an OSError, and the dataset was lost)
    path = mk.Dataset.from_arrays(**arrays(N=40, soft=True)).save(tmp_path / "ds")
    before = _files(path)
    opened = mk.Dataset.open(path)
    assert opened.save(path) == path
    assert _files(path) == before
    back = mk.Dataset.open(path)
    assert back.fingerprint == opened.fingerprint and back.policy_target is not None


def test_saving_to_a_file_is_refused_naming_it(tmp_path):
    # os.makedirs said only "[Errno 17] File exists: '...'"
    (tmp_path / "x.hcpe").write_bytes(b"mine")
    with pytest.raises(FileExistsError, match=r"Dataset.save: .*x\.hcpe' is a file, not a folder"):
        mk.Dataset.from_arrays(**arrays(N=4)).save(tmp_path / "x.hcpe")
    assert (tmp_path / "x.hcpe").read_bytes() == b"mine" and os.listdir(tmp_path) == ["x.hcpe"]


def test_saving_over_another_dataset_replaces_it_whole(tmp_path):
    # the old dataset's soft targets must not stay beside the new one's arrays (same legal
    # lists: Dataset.open would have read them as the new dataset's)
    hard, soft = arrays(N=6, seed=3), arrays(N=6, seed=3, soft=True)
    path = mk.Dataset.from_arrays(**soft).save(tmp_path / "ds")
    new = mk.Dataset.from_arrays(**{**hard, "value": np.full(6, 0.25)})
    new.save(path)
    back = mk.Dataset.open(path)
    assert back.policy_target is None and np.array_equal(back.value, np.full(6, 0.25, np.float32))
    assert sorted(os.listdir(path)) == sorted([n + ".npy" for n in ("tokens", "legal_offsets", "legal_moves",
                                                                     "target", "value")] + ["meta.json"])


def test_a_save_that_runs_out_of_room_fails_naming_the_file(tmp_path):
    """np.save's ndarray.tofile dropped the error of a buffered write under 4 KB: on a full
    disk Dataset.save returned and left a short legal_moves.npy, which Dataset.open then
    refused. A file size limit of 1,000 bytes stands in for the full disk here."""
    code = ("import resource, signal, sys; import manaka as mk; from model_cases import SMALL\n"
            "data = mk.Dataset.synthetic(10, SMALL, seed=0)\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))\n"
            "data.save(sys.argv[1])\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, HELPERS])}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ds")], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 1, done.stderr
    said = done.stderr.strip().splitlines()[-1]
    assert said == f"OSError: [Errno 27] cannot write {str(tmp_path / 'ds' / 'legal_moves.npy')!r}: File too large"
    assert os.listdir(tmp_path / "ds") == []


def test_a_save_that_fails_leaves_the_old_dataset_and_no_temporary(tmp_path):
    path = mk.Dataset.from_arrays(**arrays(N=6, soft=True)).save(tmp_path / "ds")
    before = _files(path)
    bad = mk.Dataset.from_arrays(**arrays(N=9, seed=5), meta={"note": object()})  # meta json cannot write
    with pytest.raises(TypeError, match="not JSON serializable"):
        bad.save(path)
    assert _files(path) == before
