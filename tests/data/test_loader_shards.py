"""Loader(rank=, world_size=): disjoint shards covering each epoch, the same global order
whatever the number of ranks, equal batch counts per rank, bad arguments refused."""
from types import SimpleNamespace

import numpy as np
import pytest

import manaka as mk

SMALL = SimpleNamespace(num_tokens=200, num_moves=300, tokens_per_side=4, orders=2)


@pytest.fixture(scope="module")
def ds():
    return mk.Dataset.synthetic(int(np.random.default_rng().integers(300, 420)), SMALL,
                                seed=int(np.random.default_rng().integers(1 << 30)))


def batches(ds, epochs=(0,), rows=None, **kw):
    """{epoch: [dataset indices of each batch]} of one loader; `rows`: the arrays the
    batches are checked against (ds itself by default)."""
    rows = ds if rows is None else rows
    out = {}
    with mk.Loader(ds, producers=2, prefetch=3, **kw) as loader:
        for e in epochs:
            loader.set_epoch(e)
            out[e] = []
            for b in loader:
                idx = loader.last_indices.copy()
                # the batch holds the rows it says it holds
                assert np.array_equal(b.target, rows.target[idx])
                assert np.array_equal(b.tokens[:, 0, :], rows.tokens[idx, 0].astype(np.int32))
                out[e].append(idx)
    return out


def expected_shard(order, B, W, r, drop_last):
    """The documented split, written independently of the C code: global step k is
    order[k*W*B:(k+1)*W*B], rank r takes its r-th run of B; the short last step is split
    into floor/ceil shares in rank order (the first R % W ranks take one more)."""
    N = len(order)
    full = N // (W * B)
    runs = [order[k * W * B + r * B: k * W * B + (r + 1) * B] for k in range(full)]
    R = N - full * W * B
    if R and not drop_last:
        q, extra = divmod(R, W)
        start = full * W * B + r * q + min(r, extra)
        runs.append(order[start: start + q + (r < extra)])
    return runs


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
def test_shards_are_disjoint_cover_and_keep_the_global_order(ds, shuffle, drop_last):
    N, B, epochs = len(ds), 16, (0, 1, 3)
    seed = int(np.random.default_rng().integers(1 << 20))
    ref = batches(ds, epochs, batch_size=B, shuffle=shuffle, seed=seed)
    for e in epochs:  # the unsharded order of an epoch, every position once
        order = np.concatenate(ref[e])
        if not drop_last:
            assert np.array_equal(np.sort(order), np.arange(N))
    full_order = {e: np.concatenate(batches(ds, (e,), batch_size=B, shuffle=shuffle, seed=seed,
                                            drop_last=False)[e]) for e in epochs}
    assert len(set(map(bytes, (o.tobytes() for o in full_order.values())))) == (len(epochs) if shuffle else 1)
    for W in (1, 2, 3, 5):
        if 0 < N % (W * B) < W and not drop_last:
            continue  # refused: tested below
        shards = [batches(ds, epochs, batch_size=B, shuffle=shuffle, seed=seed, drop_last=drop_last,
                          rank=r, world_size=W) for r in range(W)]
        for e in epochs:
            counts = {len(s[e]) for s in shards}
            assert len(counts) == 1, f"W={W}: ranks have different batch counts {counts}"
            for r in range(W):
                got = shards[r][e]
                want = expected_shard(full_order[e], B, W, r, drop_last)
                assert len(got) == len(want)
                for g, w in zip(got, want):
                    assert np.array_equal(g, w)
            # concatenating the ranks' batch k in rank order, then k in order, is the global order
            joined = np.concatenate([shards[r][e][k] for k in range(len(shards[0][e])) for r in range(W)])
            covered = (N // (W * B)) * W * B if drop_last else N
            assert np.array_equal(joined, full_order[e][:covered])
            together = np.concatenate([np.concatenate(s[e]) for s in shards])
            assert len(np.unique(together)) == len(together) == covered  # disjoint and covering
        if W == 1:
            for e in epochs:
                assert all(np.array_equal(a, b) for a, b in zip(shards[0][e], ref[e] if not drop_last else
                                                                 batches(ds, (e,), batch_size=B, shuffle=shuffle,
                                                                         seed=seed, drop_last=True)[e]))


def test_resume_in_the_middle_of_a_sharded_epoch(ds):
    # ds has a random size: a last step shorter than the 3 ranks is refused without
    # drop_last (tested below), so only then is it dropped here
    kw = dict(batch_size=8, shuffle=True, seed=7, rank=1, world_size=3, producers=2,
              drop_last=0 < len(ds) % (8 * 3) < 3)
    with mk.Loader(ds, **kw) as loader:
        loader.set_epoch(2)
        whole = [loader.last_indices.copy() for _ in loader]
    with mk.Loader(ds, **kw) as loader:
        loader.set_epoch(2)
        it = iter(loader)
        first = []
        for _ in range(3):
            next(it)
            first.append(loader.last_indices.copy())
        state = loader.state_dict()
        assert state["world_size"] == 3
    with mk.Loader(ds, **{**kw, "rank": 0}) as other:  # the state is not the rank's own
        other.load_state_dict(state)
    with mk.Loader(ds, **kw) as loader:
        loader.load_state_dict(state)
        rest = [loader.last_indices.copy() for _ in loader]
    assert all(np.array_equal(a, b) for a, b in zip(first + rest, whole)) and len(first + rest) == len(whole)
    # 3 x 8 x 3 = 72 positions: not a step of 2 ranks of 8 (resuming on another number of
    # ranks: test_resume_on_another_number_of_ranks)
    two_ranks = {**kw, "world_size": 2, "drop_last": 0 < len(ds) % (8 * 2) < 2}  # the same rule for 2 ranks
    with mk.Loader(ds, **two_ranks) as two, pytest.raises(ValueError, match="world_size"):
        two.load_state_dict(state)


def test_shogi_record_files_shard_the_same_way(tmp_path):
    cshogi = pytest.importorskip("cshogi")
    from shogi_reference import random_positions

    from manaka import shogi
    n = 90
    hcpe = np.zeros(n, cshogi.HuffmanCodedPosAndEval)
    for i, board in enumerate(random_positions(n, int(np.random.default_rng().integers(1000)))):
        board.to_hcp(hcpe["hcp"][i])
        hcpe["bestMove16"][i] = cshogi.move16(list(board.legal_moves)[0])
        hcpe["gameResult"][i] = 1
    hcpe.tofile(tmp_path / "a.hcpe")
    data = shogi.open_hcpe(tmp_path / "a.hcpe")
    whole = data.to_dataset()
    order = np.concatenate(batches(data, rows=whole, batch_size=8, seed=3)[0])
    assert np.array_equal(np.sort(order), np.arange(n))
    shards = [batches(data, rows=whole, batch_size=8, seed=3, rank=r, world_size=4)[0] for r in range(4)]
    assert len({len(s) for s in shards}) == 1
    joined = np.concatenate([shards[r][k] for k in range(len(shards[0])) for r in range(4)])
    assert np.array_equal(joined, order)


def test_bad_rank_and_world_size(ds):
    for kw, kind, word in [(dict(world_size=0), ValueError, "world_size"),
                           (dict(world_size=-2), ValueError, "world_size"),
                           (dict(world_size=2.0), TypeError, "world_size"),
                           (dict(world_size=True), TypeError, "world_size"),
                           (dict(rank=2, world_size=2), ValueError, "rank"),
                           (dict(rank=-1, world_size=2), ValueError, "rank"),
                           (dict(rank="0", world_size=2), TypeError, "rank"),
                           (dict(rank=1), ValueError, "rank")]:
        with pytest.raises(kind, match=word):
            mk.Loader(ds, batch_size=8, **kw)


def test_a_last_step_shorter_than_the_ranks_is_refused_unless_dropped():
    data = mk.Dataset.synthetic(2 * 3 * 4 + 2, SMALL, seed=1)  # N % (W*B) = 2 < W = 3
    with pytest.raises(ValueError, match="drop_last"):
        mk.Loader(data, batch_size=4, rank=0, world_size=3)
    got = [batches(data, batch_size=4, seed=1, rank=r, world_size=3, drop_last=True)[0] for r in range(3)]
    assert [len(g) for g in got] == [2, 2, 2]
    data = mk.Dataset.synthetic(2 * 3 * 4 + 5, SMALL, seed=1)  # R = 5 >= 3: shares 2, 2, 1
    got = [batches(data, batch_size=4, seed=1, rank=r, world_size=3)[0] for r in range(3)]
    assert [len(g[-1]) for g in got] == [2, 2, 1] and [len(g) for g in got] == [3, 3, 3]


def test_resume_on_another_number_of_ranks(ds):
    """A state saved by 3 ranks of 8 resumes 2 ranks of 12 (or 1 of 24, or 4 of 6) at the
    same position of the epoch: the rest of the global order is the same; a position that
    is not a step of the new loader is refused, naming both."""
    kw = dict(shuffle=True, seed=11, drop_last=True)
    with mk.Loader(ds, batch_size=8, rank=0, world_size=3, producers=2, **kw) as loader:
        loader.set_epoch(1)
        it = iter(loader)
        for _ in range(2):
            next(it)
        state = loader.state_dict()  # 48 positions into epoch 1
    full = np.concatenate(batches(ds, (1,), batch_size=24, **{**kw, "drop_last": False})[1])
    for W, B in ((2, 12), (1, 24), (4, 6), (2, 4)):
        rest = []
        for r in range(W):
            with mk.Loader(ds, batch_size=B, rank=r, world_size=W, producers=2, **kw) as loader:
                loader.load_state_dict(state)
                assert (loader.epoch, loader.batch_index) == (1, 48 // (W * B))
                rest.append([loader.last_indices.copy() for _ in loader])
        joined = np.concatenate([rest[r][k] for k in range(len(rest[0])) for r in range(W)])
        covered = len(ds) // (W * B) * (W * B)
        assert np.array_equal(joined, full[48:covered]), (W, B)
    with mk.Loader(ds, batch_size=10, rank=0, world_size=2, **kw) as loader:
        with pytest.raises(ValueError, match=r"48 positions into epoch 1 .* world_size 2 x batch_size 10 = 20"):
            loader.load_state_dict(state)
