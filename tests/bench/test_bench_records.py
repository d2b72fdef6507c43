"""The step benchmarks on real positions (--records): batches opened from shogi records with
the seed configuration's dlshogi labels, padded to one width, and a run of `bench step
--pair-update ... --records` end to end (it once crashed before timing anything)."""
import json
import subprocess
import sys
import types

import numpy as np
import pytest

pytest.importorskip("cshogi")

import manaka as mk  # noqa: E402
from manaka import _core  # noqa: E402
from manaka.shogi.records import HCPE  # noqa: E402
from manaka.bench import pair_update  # noqa: E402
from manaka.bench.step import SEED  # noqa: E402
from paths import ROOT  # noqa: E402
from shogi_reference import make_records  # noqa: E402


@pytest.fixture(scope="module")
def hcpe(tmp_path_factory):
    path = tmp_path_factory.mktemp("records") / "games.hcpe"
    _, records, _ = make_records(80, seed=3)
    records.tofile(path)
    return path


def test_record_batches_are_the_records_in_the_seed_vocabulary(hcpe):
    batches = pair_update.record_batches(str(hcpe), 8, 3)
    assert len(batches) == 3 and all(len(b) == 8 for b in batches)
    records = np.fromfile(hcpe, np.uint8).reshape(-1, 38)
    want = _core.shogi_rows(HCPE, records, 0.0)[0].astype(np.int32)  # the producers' row function
    tokens = {bytes(np.sort(t.ravel())) for t in want}
    for b in batches:
        assert b.tokens.max() < SEED["num_tokens"] and b.tokens.min() >= -1
        counts = b.counts
        assert all(b.legal[i, :counts[i]].max() < SEED["num_moves"] for i in range(len(b)))
        # each position is one of the file's, whatever the shuffle
        assert all(bytes(np.sort(b.tokens[i].ravel())) in tokens for i in range(len(b)))
        assert 0 < pair_update.named_rows(b) < SEED["num_tokens"] * (SEED["num_tokens"] + 1) // 2


def test_record_batches_refuse_what_is_not_records(tmp_path):
    (tmp_path / "x.txt").write_text("not records")
    with pytest.raises(SystemExit, match="--records"):
        pair_update.record_batches(str(tmp_path / "x.txt"), 8, 1)


def test_padded_batches_keep_their_positions(hcpe):
    from manaka.bench.step_torch import padded, step_batches

    b = pair_update.record_batches(str(hcpe), 8, 1)[0]
    p = padded(b, b.max_legal + 5)
    assert p.max_legal == b.max_legal + 5
    np.testing.assert_array_equal(p.legal[:, :b.max_legal], b.legal)
    assert (p.legal[:, b.max_legal:] == -1).all()
    for name in ("tokens", "counts", "target", "value"):
        np.testing.assert_array_equal(getattr(p, name), getattr(b, name))
    with pytest.raises(SystemExit, match="--max-legal"):
        padded(b, b.max_legal - 1)
    cfg = mk.ModelConfig(**SEED)
    args = types.SimpleNamespace(records=str(hcpe), batches=None, batch=8, max_legal=600)
    batches, source = step_batches(cfg, args)
    assert len(batches) == 8 and all(x.max_legal == 600 for x in batches) and "pair rows" in source
    args = types.SimpleNamespace(records=None, batches=None, batch=8, max_legal=600)
    batches, source = step_batches(cfg, args)
    assert len(batches) == 1 and "seed batch" in source


def bench_step(option, hcpe, tmp_path):
    """`python -m manaka.bench step --<option> dense,sparse` on two batches of 8 of the records:
    its results file, after a successful run."""
    out = subprocess.run([sys.executable, "-m", "manaka.bench", "step", f"--{option}", "dense,sparse", "--records",
                          str(hcpe), "--batch", "8", "--pair-batches", "2", "--runs", "1", "--warmup", "0",
                          "--threads", "1", "--out", str(tmp_path), "--tag", "t"],
                         capture_output=True, text=True, timeout=900, env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return json.loads((tmp_path / f"step-{option}-t.json").read_text())


def test_bench_step_pair_update_on_records_runs(hcpe, tmp_path):
    results = bench_step("pair-update", hcpe, tmp_path)
    assert results["source"] == f"records {hcpe}"
    assert 0 < results["named_rows_share"] < 1


def test_bench_step_move_update_runs_the_recipe_on_records(hcpe, tmp_path):
    from manaka.shogi.recipe import RECIPE, model_config

    results = bench_step("move-update", hcpe, tmp_path)
    assert results["config"]["num_moves"] == model_config().num_moves
    # the share is of the recipe's labels: the batches' distinct labels over the table's rows
    batches = pair_update.record_batches(str(hcpe), 8, 2, moves=RECIPE["moves"])
    cfg = model_config()
    rows = cfg.num_moves // max(cfg.move_kinds, 1)  # the move table's rows: a label's move
    want = np.mean([pair_update.named_moves(b, rows) for b in batches]) / rows
    assert results["named_rows_share"] == pytest.approx(want)
    assert set(results) >= {"dense", "sparse"}
    missing = subprocess.run([sys.executable, "-m", "manaka.bench", "step", "--move-update", "dense,sparse"],
                             capture_output=True, text=True, timeout=300, env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"})
    assert missing.returncode != 0 and "--move-update needs --records" in missing.stderr
