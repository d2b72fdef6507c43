"""The Loader over a row source of a game that is not shogi: manaka._testing.toy_game, a
trivial game whose row function lives in another extension, handed as a capsule to
_core.GameRecords (the generic record-file source, csrc/data/record_source.c), whose rows
reach manaka._core.Loader through the row source capsule. Every batch is checked against
the records decoded in NumPy: which records, which variant, soft targets, left-out bad
records and the error naming a bad record's file."""
import gc

import numpy as np
import pytest

import manaka as mk
from manaka import _core

_testing = pytest.importorskip("manaka._testing")

T, K = 2, 6
WIDTH = _testing.TOY_RECORD_BYTES  # tokens [2T], n, ids [K], target, value, weights [K]
REASONS = {1: "no legal move", 2: "too many legal moves", 3: "the target is not a legal move",
           4: "the soft weights sum to 0"}


def toy_records(n, seed, bad=()):
    """n valid records (distinct legal ids, some zero weights but never all), then the
    records listed in `bad` spoilt with code 1, 2, 3 or 4."""
    rng = np.random.default_rng(seed)
    r = np.zeros((n, WIDTH), np.uint8)
    r[:, :2 * T] = rng.integers(0, 256, (n, 2 * T))
    counts = rng.integers(1, K + 1, n)
    r[:, 2 * T] = counts
    for i, c in enumerate(counts):
        r[i, 2 * T + 1:2 * T + 1 + K] = rng.choice(256, K, replace=False)
        r[i, 2 * T + 1 + K] = rng.integers(0, c)
        w = rng.integers(0, 5, K)
        w[rng.integers(0, c)] += 1
        r[i, 2 * T + 3 + K:] = w
    r[:, 2 * T + 2 + K] = rng.integers(0, 256, n)
    for i, code in bad:
        if code == 1:
            r[i, 2 * T] = 0
        elif code == 2:
            r[i, 2 * T] = K + 1
        elif code == 3:
            r[i, 2 * T + 1 + K] = r[i, 2 * T]
        else:
            r[i, 2 * T + 3 + K:] = 0
    return r


def reference_row(rec, variant, soft):
    """The NumPy decoding of one record: (tokens [2, T], legal, target, value, policy) or
    the bad record's code."""
    n, t = int(rec[2 * T]), int(rec[2 * T + 1 + K])
    ids, w = rec[2 * T + 1:2 * T + 1 + K][:n].astype(np.int32), rec[2 * T + 3 + K:][:n].astype(np.float32)
    if n == 0:
        return 1
    if n > K:
        return 2
    if t >= n:
        return 3
    if soft and w.sum() == 0:
        return 4
    if variant:
        ids, w, t = ids[::-1], w[::-1], n - 1 - t
    return (rec[:2 * T].astype(np.int32).reshape(2, T), ids, t, np.float32(rec[2 * T + 2 + K]) / np.float32(255),
            w / np.float32(w.sum()) if soft else None)


class ToyDataset:
    """What mk.Loader takes as record files: an object with a `_row_source`."""

    def __init__(self, files, names, skip=False, variants=1, soft=False):
        self.files, self.names, self.variants, self.soft = files, names, variants, soft
        self._row_source = _core.GameRecords(_testing.toy_game(variants, soft), files, names, skip)
        self.starts = np.cumsum([0] + [len(f) for f in files])

    def __len__(self):
        return len(self._row_source)

    def row(self, i):
        """(file, index, variant) of row i, by NumPy."""
        R = int(self.starts[-1])
        v, r = divmod(i, R)
        f = int(np.searchsorted(self.starts, r, side="right")) - 1
        return f, r - int(self.starts[f]), v


def check_batch(ds, batch, positions):
    L = batch.legal.shape[1]
    assert L == max(batch.counts)  # padded to the batch's own longest list
    for b, p in enumerate(positions):
        f, i, v = ds.row(int(p))
        tokens, legal, target, value, policy = reference_row(ds.files[f][i], v, ds.soft)
        c = len(legal)
        assert batch.counts[b] == c
        np.testing.assert_array_equal(batch.tokens[b], tokens)
        np.testing.assert_array_equal(batch.legal[b, :c], legal)
        assert (batch.legal[b, c:] == -1).all()
        assert batch.target[b] == target and batch.value[b] == value
        if ds.soft:
            np.testing.assert_array_equal(batch.policy_target[b, :c], policy)
            assert (batch.policy_target[b, c:] == 0).all()
        else:
            assert batch.policy_target is None


@pytest.mark.parametrize("variants,soft,producers", [(1, False, 1), (2, False, 3), (2, True, 2)])
def test_toy_rows_match_numpy(tmp_path, variants, soft, producers):
    a, b = toy_records(37, 1), toy_records(20, 2)
    path = tmp_path / "b.toy"
    path.write_bytes(b.tobytes() + b"\x07" * 5)  # a cut-short record at the end is not one
    mapped, size = _core.map_records(str(path), WIDTH)
    assert size == b.nbytes + 5 and mapped.shape == b.shape and not mapped.flags.writeable
    np.testing.assert_array_equal(mapped, b)
    ds = ToyDataset([a, mapped, np.zeros((0, WIDTH), np.uint8)], ["a.toy", str(path), "empty.toy"],
                    variants=variants, soft=soft)
    N = 57 * variants
    assert len(ds) == N
    for row in (0, 36, 37, 56, N - 1):
        assert ds._row_source.locate(row) == ds.row(row)
    loader = mk.Loader(ds, batch_size=8, producers=producers, shuffle=True, seed=3)
    seen = []
    for batch in loader:
        check_batch(ds, batch, loader.last_indices)
        seen += list(loader.last_indices)
    loader.close()
    assert sorted(seen) == list(range(N)) and seen != list(range(N))  # each row once, shuffled
    assert loader.stats["skipped"] == 0


def test_bad_records_are_left_out_or_named(tmp_path):
    bad = [(3, 1), (10, 2), (11, 3), (20, 4)]
    a = toy_records(30, 5, bad)
    ds = ToyDataset([toy_records(4, 6), a], ["first.toy", "second.toy"], skip=True, variants=2, soft=True)
    loader = mk.Loader(ds, batch_size=5, producers=2, shuffle=True, seed=0)
    seen = []
    for batch in loader:
        check_batch(ds, batch, loader.last_indices)
        seen += list(loader.last_indices)
    loader.close()
    spoilt = {4 + i + 34 * v for i, _ in bad for v in (0, 1)}
    assert sorted(seen) == sorted(set(range(68)) - spoilt)
    assert loader.stats["skipped"] == len(spoilt)

    # Unshuffled, without skip: the first bad row's batch is an error naming its file and record.
    for variant in (0, 1):
        ds = ToyDataset([toy_records(4, 6), a], ["first.toy", "second.toy"], variants=2, soft=True)
        loader = mk.Loader(ds, batch_size=5, producers=1, shuffle=False)
        it = iter(loader)
        if variant:  # start at the batch holding row 34 + 4 + 3 (record 3's reversed row)
            loader.batch_index = (34 + 4 + 3) // 5
            it = iter(loader)
        with pytest.raises(ValueError) as e:
            for _ in it:
                pass
        note = " (reversed)" if variant else ""
        assert str(e.value) == (f"toy: second.toy: record 3{note}: {REASONS[1]} "
                                "(on_bad='skip' leaves such records out)")
        loader.close()


def test_the_loader_keeps_the_source_alive():
    ds = ToyDataset([toy_records(25, 7)], ["a.toy"])
    keep = ToyDataset([ds.files[0]], ["a.toy"])  # the same rows, for the reference
    loader = mk.Loader(ds, batch_size=4, producers=2, shuffle=False)
    loader.dataset = None
    del ds
    gc.collect()
    n = 0
    for batch in loader:
        check_batch(keep, batch, loader.last_indices)
        n += len(batch.counts)
    loader.close()
    assert n == 25


def test_a_row_source_attribute_must_be_a_capsule():
    class Fake:
        _row_source_capsule = "not a capsule"

    class Holder:
        _row_source = Fake()

    with pytest.raises(TypeError, match=r"Loader: Fake\._row_source_capsule must be a manaka\.row_source capsule, got str"):
        mk.Loader(Holder(), batch_size=4)


def test_record_files_arguments_are_checked():
    game = _testing.toy_game()
    with pytest.raises(ValueError, match=r"GameRecords: files\[0\] must be a C-contiguous uint8 \[n, 19\] array"):
        _core.GameRecords(game, [np.zeros((3, 18), np.uint8)], ["a"], False)
    with pytest.raises(ValueError, match="GameRecords: files and names must be equal, non-empty lists"):
        _core.GameRecords(game, [], [], False)
    with pytest.raises(TypeError, match="GameRecords: game must be a manaka.record_game capsule, got str"):
        _core.GameRecords("toy", [np.zeros((3, 19), np.uint8)], ["a"], False)
    with pytest.raises(RuntimeError, match="GameRecords: not initialised"):
        _core.GameRecords.__new__(_core.GameRecords)._row_source_capsule
    with pytest.raises(IndexError, match="GameRecords: row 6 is out of range for 6 rows"):
        _core.GameRecords(_testing.toy_game(2), [np.zeros((3, 19), np.uint8)], ["a"], False).locate(6)
    with pytest.raises(ValueError, match="map_records: record_bytes must be in"):
        _core.map_records(__file__, 0)
    with pytest.raises(OSError):
        _core.map_records("/nonexistent/records.toy", WIDTH)
    with pytest.raises(ValueError, match="map_records: .* is not a regular file"):
        _core.map_records("/tmp", WIDTH)
