"""A loader's batch reaches the model as its producer packed and checked it (one batch type
and one crossing): no conversion, no copy, no second scan of its indices; and
every way a user can change such a batch makes it an ordinary batch again, converted and
checked in full. Model.batch_scans (the model's count of batches whose every entry it
checked) tells the two paths apart; the results must be identical either way."""
import threading
import time

import numpy as np
import pytest

import manaka as mk
import model_cases as cases

CFG = cases.config(num_tokens=40, num_moves=60, T=5)


def dataset(n=90, soft=False, seed=0, num_tokens=None, num_moves=None, cfg=CFG):
    """n valid positions for CFG (tokens below num_tokens, moves below num_moves)."""
    rng = np.random.default_rng(seed)
    V, M = num_tokens or cfg.num_tokens, num_moves or cfg.num_moves
    counts = rng.integers(1, 12, n)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    tokens = rng.integers(-1, V, (n, 2, cfg.tokens_per_side)).astype(np.int16)
    moves = np.concatenate([rng.choice(M, c, replace=False) for c in counts]).astype(np.int16)
    policy = None
    if soft:
        policy = np.concatenate([(w := rng.random(c) + 0.1) / w.sum() for c in counts]).astype(np.float32)
    return mk.Dataset.from_arrays(tokens=tokens, legal_offsets=offsets, legal_moves=moves,
                                  target=(rng.random(n) * counts).astype(np.int32),
                                  value=rng.choice([0.0, 0.5, 1.0], n).astype(np.float32),
                                  policy_target=policy, num_tokens=V, num_moves=M)


def scans(model):
    return model._core.batch_scans


def copied(b):
    """The same positions as an ordinary batch of the caller's own arrays."""
    return mk.Batch(b.tokens.copy(), b.legal.copy(), b.counts.copy(), b.target.copy(), b.value.copy(),
                    None if b.policy_target is None else b.policy_target.copy())


@pytest.mark.parametrize("soft", [False, True])
def test_loader_batches_are_not_scanned_again_and_train_exactly_as_copies(soft):
    ds = dataset(soft=soft)
    a, b = mk.Model(CFG, seed=1), mk.Model(CFG, seed=1)
    ta, tb = mk.Trainer(a, lr=1e-2), mk.Trainer(b, lr=1e-2)
    loader = mk.Loader(ds, batch_size=16, producers=2, seed=3)
    steps = 0
    for epoch in range(2):
        for batch in loader:
            assert batch.producer_checked == (CFG.num_tokens, CFG.num_moves)
            stats = ta.step(batch)
            want = tb.step(copied(batch))
            assert stats.loss == want.loss and stats.accuracy == want.accuracy
            steps += 1
    assert scans(a) == 0 and scans(b) == steps
    cases.assert_parameters_match(a, b)
    batch = next(iter(loader))
    for x, y in zip(a.forward(batch), a.forward(copied(batch))):
        np.testing.assert_array_equal(x, y)
    got, want = a.loss_and_grad(batch), a.loss_and_grad(copied(batch))
    assert got[0] == want[0]
    for name in got[1]:
        np.testing.assert_array_equal(got[1][name], want[1][name], err_msg=name)
    assert scans(a) == 2  # the two copies only


def test_fit_and_evaluate_scan_no_loader_batch():
    ds = dataset()
    model = mk.Model(CFG, seed=2)
    mk.fit(model, mk.Loader(ds, batch_size=16, seed=1), steps=8, trainer=mk.Trainer(model, lr=1e-2),
           progress=False, log=lambda line: None)
    before = scans(model)
    metrics = mk.evaluate(model, ds, batch_size=32)
    assert scans(model) == before == 0
    assert 0 <= metrics["accuracy"] <= 1


def test_loader_views_are_read_only_and_cannot_be_made_writable():
    loader = mk.Loader(dataset(soft=True), batch_size=16)
    batch = next(iter(loader))
    for name in ("tokens", "legal", "counts", "target", "value", "policy_target"):
        arr = getattr(batch, name)
        assert not arr.flags.writeable, name
        with pytest.raises(ValueError, match="read-only"):
            arr[...] = 0
        with pytest.raises(ValueError, match="cannot set WRITEABLE flag"):
            arr.flags.writeable = True
        with pytest.raises(ValueError, match="cannot set WRITEABLE flag"):
            arr.view().setflags(write=True)
    loader.close()


def test_a_replaced_field_is_converted_and_checked_in_full():
    model = mk.Model(CFG, seed=3)
    trainer = mk.Trainer(model, lr=1e-2)
    loader = mk.Loader(dataset(), batch_size=16, shuffle=False)
    it = iter(loader)
    batch = next(it)
    bad = batch.tokens.copy()
    bad[2, 1, 3] = CFG.num_tokens
    batch.tokens = bad
    snap = cases.snapshot(model, trainer)
    with pytest.raises(ValueError, match=r"Trainer.step: tokens\[2, 1, 3\] = 40 is out of range"):
        trainer.step(batch)
    cases.assert_unchanged(model, trainer, snap)
    assert scans(model) == 1
    batch = next(it)
    batch.value = batch.value.copy()  # a valid replacement: converted, scanned, used
    twin = mk.Trainer(mk.Model(CFG, seed=3), lr=1e-2)
    assert trainer.step(batch).loss == twin.step(copied(batch)).loss
    assert scans(model) == 2
    it.close()


def test_a_view_changed_in_place_is_not_the_producers_batch_any_more():
    """NumPy lets a user set .shape or .dtype of an array in place: the model must then read
    what the array now says, so the batch goes through the ordinary conversion (and here its
    refusals), never the slot as the producer described it."""
    model = mk.Model(CFG, seed=4)
    loader = mk.Loader(dataset(), batch_size=16, shuffle=False)
    it = iter(loader)
    batch = next(it)
    batch.counts.shape = (16, 1)
    with pytest.raises(ValueError, match="Model.forward: counts must have 1 dimension, got 2"):
        model.forward(batch)
    batch = next(it)
    batch.value.dtype = np.int32
    with pytest.raises(TypeError, match="Model.loss_and_grad: value must have dtype float32, got int32"):
        model.loss_and_grad(batch)
    batch = next(it)
    batch.legal.shape = (batch.legal.size,)
    with pytest.raises(ValueError, match="legal must have 2 dimensions, got 1"):
        mk.Trainer(model).step(batch)
    it.close()


def test_a_batch_kept_past_the_next_one_is_checked_again():
    model = mk.Model(CFG, seed=5)
    trainer = mk.Trainer(model, lr=1e-2)
    # two batches: nothing refills the first one's slot after it is released, so its stale
    # views still hold valid data (a third batch could be half packed into them: the full
    # check would then refuse it, which is the point, but not deterministically)
    loader = mk.Loader(dataset(), batch_size=45, shuffle=False, producers=1, prefetch=1)
    it = iter(loader)
    old = next(it)
    assert old.in_slot
    new = next(it)
    assert not old.in_slot and new.in_slot
    want = mk.Trainer(mk.Model(CFG, seed=5), lr=1e-2).step(copied(old)).loss
    assert trainer.step(old).loss == want  # released, so converted and scanned like any batch
    assert scans(model) == 1
    trainer.step(new)
    assert scans(model) == 1
    it.close()
    loader.close()


def test_the_producers_check_is_against_the_datasets_vocabularies_not_the_models():
    # tokens and moves below 30 and 50, a model of 40 and 60: the producer's check covers it
    ds = dataset(num_tokens=30, num_moves=50)
    model = mk.Model(CFG, seed=6)
    batch = next(iter(mk.Loader(ds, batch_size=90)))
    assert batch.producer_checked == (30, 50)
    model.forward(batch)
    assert scans(model) == 0
    # a model with fewer tokens than the dataset: checked in full, and refused
    small = mk.Model(cases.config(num_tokens=20, num_moves=60, T=5), seed=6)
    assert int(batch.tokens.max()) >= 20
    with pytest.raises(ValueError, match=r"Model.forward: tokens\[\d+, \d, \d\] = \d+ is out of range: must be -1 "
                                         r"\(empty\) or in \[0, num_tokens = 20\)"):
        small.forward(batch)
    assert scans(small) == 1


def test_data_changed_under_the_loader_is_not_vouched_for_and_the_model_refuses_it():
    """Dataset.from_arrays keeps an int16 tokens array as it is, and a caller may write it
    after validation (or a file may be rewritten under a memory map): the producer's check
    of the packed slot, not the dataset's validation, decides."""
    ds = dataset(n=16)
    raw = ds.tokens.base if ds.tokens.base is not None else ds.tokens
    assert raw.flags.writeable
    raw[5, 0, 1] = CFG.num_tokens + 3
    model = mk.Model(CFG, seed=7)
    batch = next(iter(mk.Loader(ds, batch_size=16, shuffle=False)))
    assert batch.producer_checked == (0, 0)
    with pytest.raises(ValueError, match=r"Trainer.step: tokens\[5, 0, 1\] = 43 is out of range"):
        mk.Trainer(model).step(batch)
    assert scans(model) == 1


def test_a_batch_made_of_a_loader_batchs_views_is_an_ordinary_batch():
    """Only the Batch the loader made reads its slot: a new Batch of the same views (read-only,
    int32, so not copied when built) is converted and checked where it is read."""
    model = mk.Model(CFG)
    loaded = next(iter(mk.Loader(dataset(), batch_size=6)))
    assert loaded.in_slot
    other = mk.Batch(loaded.tokens, loaded.legal, loaded.counts, loaded.target, loaded.value)
    assert other.tokens is loaded.tokens and other.producer_checked == (0, 0) and not other.in_slot
    for x, y in zip(model.forward(other), model.forward(loaded)):
        np.testing.assert_array_equal(x, y)
    assert scans(model) == 1


def test_the_loader_refuses_to_move_on_while_a_step_reads_its_batch():
    """Without the conversion's private copy, the step reads the loader's slot itself: a
    next() from another thread during the step would let a producer refill it under the
    step, unchecked. The slot is pinned for the call instead."""
    cfg = cases.config(num_tokens=40, num_moves=60, T=5, hidden=(256, 256), D=32, W=64, pair_dim=16)
    model = mk.Model(cfg, seed=8)
    trainer = mk.Trainer(model, lr=1e-3)
    ds = dataset(n=4096, cfg=cfg)
    loader = mk.Loader(ds, batch_size=2048, producers=1, prefetch=1)
    refused = []
    for _ in range(10):
        batch = next(iter(loader))
        started = threading.Event()

        def step():
            started.set()
            for _ in range(3):
                trainer.step(batch)

        worker = threading.Thread(target=step)
        worker.start()
        started.wait()
        time.sleep(0.02)  # into the step, which runs without the GIL
        if worker.is_alive():
            try:
                loader._core.next(mk.Batch)
            except RuntimeError as e:
                refused.append(str(e))
        worker.join()
        if refused:
            break
    assert refused and "a step in another thread is reading the current batch" in refused[0]
    assert scans(model) == 0
    loader.close()


def test_shogi_record_batches_are_checked_by_their_producers_against_the_encoder(tmp_path):
    """A row source (shogi records decoded by the producers) promises the encoder's
    vocabularies; the producer checks each packed batch against them, so a model of the
    shogi shapes reads it unscanned, with the same numbers as the same positions copied."""
    pytest.importorskip("cshogi")
    from shogi_reference import make_records

    from manaka import shogi

    _, hcpe, _ = make_records(64, 5)
    hcpe.tofile(tmp_path / "games.hcpe")
    records = shogi.open_hcpe(str(tmp_path / "games.hcpe"))
    cfg = cases.config(num_tokens=shogi.NUM_TOKENS, num_moves=shogi.NUM_LABELS, T=shogi.TOKENS_PER_SIDE)
    model = mk.Model(cfg, seed=9)
    n = 0
    for batch in mk.Loader(records, batch_size=16, shuffle=False):
        assert batch.producer_checked == (shogi.NUM_TOKENS, shogi.NUM_LABELS)
        got, want = model.loss_and_grad(batch), model.loss_and_grad(copied(batch))
        assert got[0] == want[0]
        n += 1
    assert n == 4 and scans(model) == 4  # the copies only


def test_a_pickled_or_copied_loader_batch_is_an_ordinary_batch():
    import copy
    import pickle

    model = mk.Model(CFG, seed=10)
    batch = next(iter(mk.Loader(dataset(soft=True), batch_size=16)))
    want = model.loss_and_grad(batch)[0]
    for other in (pickle.loads(pickle.dumps(batch)), copy.copy(batch), copy.deepcopy(batch)):
        assert other.producer_checked == (0, 0) and not other.in_slot
        for name in ("tokens", "legal", "counts", "target", "value", "policy_target"):
            np.testing.assert_array_equal(getattr(other, name), getattr(batch, name), err_msg=name)
        assert model.loss_and_grad(other)[0] == want
    assert scans(model) == 3


@pytest.mark.cuda  # tools/cuda_emu/run_gpu_tests.py runs it on the emulated device
def test_on_a_cuda_model_loader_batches_are_staged_without_a_host_scan():
    from manaka import cuda

    if not cuda.is_available():
        pytest.skip(f"no CUDA device: {cuda.why_unavailable()}")
    ds = dataset(soft=True)
    a, b = mk.Model(CFG, device="cuda", seed=11), mk.Model(CFG, device="cuda", seed=11)
    ta, tb = mk.Trainer(a, lr=1e-2), mk.Trainer(b, lr=1e-2)
    steps = 0
    for batch in mk.Loader(ds, batch_size=16, seed=2):
        assert ta.step(batch).as_dict() == tb.step(copied(batch)).as_dict()
        steps += 1
    assert scans(a) == 0 and scans(b) == steps
    cases.assert_parameters_match(a, b)
