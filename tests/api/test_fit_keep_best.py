"""mk.fit(keep_best=...): the model ends with the parameters of the lowest held-out loss, the
log says which step it kept, the checkpoint still holds the last step; on by default for
shogi records with eval_data (the shogi recipe), off otherwise."""

import numpy as np
import pytest

import manaka as mk
from model_cases import SMALL, SMALL_MODEL as CFG



@pytest.fixture(scope="module")
def data():
    # A tiny training set and a high learning rate: the held-out loss turns up early.
    return mk.Dataset.synthetic(96, SMALL, seed=1), mk.Dataset.synthetic(200, SMALL, seed=7)


def run(data, keep_best, steps=60, **kw):
    train, held = data
    model = mk.Model(CFG, seed=3)
    trainer = mk.Trainer(model, lr=0.05)
    lines = []
    history = mk.fit(model, mk.Loader(train, batch_size=32, producers=1, seed=0), steps=steps, trainer=trainer,
                     eval_data=held, eval_every=3, progress=False, log=lines.append, keep_best=keep_best, **kw)
    return model, history, lines


def test_keeps_the_lowest_held_out_loss(data, tmp_path):
    model, history, lines = run(data, True, checkpoint=str(tmp_path / "c.ckpt"))
    steps, losses = history.series("eval_loss")
    best = int(np.argmin(losses))
    assert best < len(losses) - 1, "the run must overfit for this test to mean anything"
    assert history.kept["step"] == steps[best] and history.kept["eval_loss"] == losses[best]
    assert mk.evaluate(model, data[1])["loss"] == pytest.approx(losses[best], rel=1e-6)
    assert any(f"keep_best: the model holds step {int(steps[best])}'s parameters" in line for line in lines)
    # the same run without keep_best ends at the last step's (higher) held-out loss
    last_model, last_history, last_lines = run(data, False)
    assert last_history.kept is None and not any("keep_best" in line for line in last_lines)
    assert mk.evaluate(last_model, data[1])["loss"] == pytest.approx(losses[-1], rel=1e-6)
    assert losses[-1] > losses[best]
    # the checkpoint holds the last step (to resume exactly), not the kept one
    from manaka import checkpoint as ckpt
    state = ckpt.load(str(tmp_path / "c.ckpt"))
    assert state["step"] == 60
    for name, value in last_model.state_dict().items():
        np.testing.assert_array_equal(state["model"][name], value)


def test_keep_best_needs_eval_data(data):
    with pytest.raises(ValueError, match="keep_best needs eval_data"):
        mk.fit(mk.Model(CFG), mk.Loader(data[0], batch_size=32), steps=1, keep_best=True, progress=False)


def test_default_off_for_datasets_on_for_shogi_records(data, tmp_path):
    _, history, _ = run(data, None, steps=9)
    assert history.kept is None
    cshogi = pytest.importorskip("cshogi")
    from manaka import shogi
    from manaka.shogi.recipe import RECIPE, trainer_settings

    rng = np.random.default_rng(0)
    recs = np.zeros(120, cshogi.HuffmanCodedPosAndEval)
    board = cshogi.Board()
    for i in range(len(recs)):
        moves = list(board.legal_moves)
        if not moves or i % 30 == 0:
            board.reset()
            moves = list(board.legal_moves)
        move = moves[int(rng.integers(len(moves)))]
        board.to_hcp(recs["hcp"][i])
        recs["bestMove16"][i] = cshogi.move16(move)
        recs["gameResult"][i] = 1
        board.push(move)
    recs[:90].tofile(tmp_path / "t.hcpe")
    recs[90:].tofile(tmp_path / "h.hcpe")
    cfg = mk.ModelConfig(num_tokens=shogi.NUM_TOKENS, num_moves=shogi.NUM_LABELS, tokens_per_side=40,
                         embed_dim=8, orders=2, pair_dim=2, hidden=(16,), head_width=8)
    model = mk.Model(cfg, seed=0)
    loader = mk.Loader(shogi.open_hcpe(str(tmp_path / "t.hcpe")), batch_size=30, producers=1)
    lines = []
    history = mk.fit(model, loader, steps=4, eval_data=shogi.open_hcpe(str(tmp_path / "h.hcpe")), eval_every=2,
                     progress=False, log=lines.append)
    assert history.kept is not None and bool(RECIPE["keep_best"])
    # 4 steps end inside the warm-up: a cosine recipe runs at the constant rate, and says so
    note = "schedule: constant (the shogi recipe's cosine decays to a last step, which 4 steps do not pass"
    assert any(line.startswith(note) for line in lines) == (RECIPE["schedule"] == "cosine"), lines
    # the default trainer of record data is the recipe's (here in its warm-up: step 4)
    s = trainer_settings()
    assert history.last["lr"] == pytest.approx(s["lr"] * min(1.0, 4 / max(s["warmup_steps"], 1)), rel=1e-6)
