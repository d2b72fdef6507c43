"""python -m manaka.bench strength: its figures recomputed with NumPy from each model's own
outputs (manaka through mk.Loader, the ResNet from cshogi's features and legal moves), the
metrics against a sort-based reference, the baselines on hand-made positions, and the
split by game."""
import json
import math
import os

import numpy as np
import pytest

cshogi = pytest.importorskip("cshogi")
from cshogi.dlshogi import make_move_label  # noqa: E402

import manaka as mk  # noqa: E402
from manaka import shogi  # noqa: E402
from manaka.bench import strength, strength_baselines as sb, strength_split  # noqa: E402


def random_games(path, games, seed, max_plies=40):
    """HCPE games of random legal moves (each game's result random) and the .games file."""
    rng = np.random.default_rng(seed)
    rows, counts = [], []
    for _ in range(games):
        board = cshogi.Board()
        result = int(rng.integers(0, 3))
        n = 0
        for _ in range(int(rng.integers(10, max_plies))):
            moves = list(board.legal_moves)
            if not moves:
                break
            move = moves[int(rng.integers(len(moves)))]
            rec = np.zeros(1, cshogi.HuffmanCodedPosAndEval)
            board.to_hcp(rec["hcp"][0])
            rec["bestMove16"] = cshogi.move16(move)
            rec["eval"] = int(rng.integers(-2000, 2000))
            rec["gameResult"] = result
            rows.append(rec)
            board.push(move)
            n += 1
        counts.append(n)
    np.concatenate(rows).tofile(path)
    with open(str(path) + ".games", "w") as f:
        f.write("".join(f"{c}\n" for c in counts))
    return counts


def ref_metrics(logits, counts, target, value, result):
    """Top-k by a stable descending sort of each row's legal slots; BCE; decisive accuracy."""
    top1 = top5 = 0
    for row, n in enumerate(counts):
        order = np.argsort(-logits[row, :n], kind="stable")
        rank = int(np.nonzero(order == target[row])[0][0])
        top1 += rank == 0
        top5 += rank < 5
    nll = np.mean([np.log(np.exp(logits[r, :n] - logits[r, :n].max()).sum()) + logits[r, :n].max()
                   - logits[r, target[r]] for r, n in enumerate(counts)])
    p = np.clip(value, 1e-7, 1 - 1e-7)
    bce = -(result * np.log(p) + (1 - result) * np.log(1 - p))
    d = result != 0.5
    return {"top1": top1 / len(counts), "top5": top5 / len(counts), "policy_nll": nll, "value_bce": bce.mean(),
            "value_accuracy": ((p > 0.5) == (result > 0.5))[d].mean()}


def test_metrics_against_a_sort(tmp_path):
    rng = np.random.default_rng(np.random.SeedSequence().entropy)
    B, L = 300, 17
    counts = rng.integers(1, L + 1, B).astype(np.int32)
    logits = rng.integers(-3, 4, (B, L)).astype(np.float64)  # many ties
    logits[np.arange(L)[None, :] >= counts[:, None]] = 99.0  # padding must be ignored
    target = (rng.random(B) * counts).astype(np.int32)
    value = rng.random(B)
    value[:5] = [0.0, 1.0, 0.5, 1e-12, 1 - 1e-12]
    result = rng.choice([0.0, 0.5, 1.0], B)
    got = strength.finish(strength.metrics(logits, counts, target, value, result))
    want = ref_metrics(logits, counts, target, value, result)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-12), k


def test_split_by_game(tmp_path):
    src = tmp_path / "g.hcpe"
    counts = random_games(src, 23, seed=1)
    with open(src, "ab") as f:  # a game being written: bytes beyond the listed games
        f.write(bytes(38 * 3))
    assert strength_split.main([str(src), "--out", str(tmp_path / "s"), "--every", "5"]) == 0
    recs = np.fromfile(src, np.uint8)[:38 * sum(counts)].reshape(-1, 38)
    starts = np.concatenate([[0], np.cumsum(counts)])
    held = [recs[starts[g]:starts[g + 1]] for g in range(23) if g % 5 == 4]
    train = [recs[starts[g]:starts[g + 1]] for g in range(23) if g % 5 != 4]
    assert np.array_equal(np.fromfile(tmp_path / "s" / "held.hcpe", np.uint8).reshape(-1, 38), np.concatenate(held))
    assert np.array_equal(np.fromfile(tmp_path / "s" / "train.hcpe", np.uint8).reshape(-1, 38), np.concatenate(train))
    with open(tmp_path / "s" / "held.hcpe.games") as f:
        assert [int(x) for x in f.read().split()] == [len(h) for h in held]
    (tmp_path / "bad.hcpe").write_bytes(bytes(38))
    assert strength_split.main([str(tmp_path / "bad.hcpe"), "--out", str(tmp_path / "t")]) == 2  # no .games


def scores_of(sfen, frequency=None):
    board = cshogi.Board(sfen)
    moves = list(board.legal_moves)
    labels = np.array(sorted(make_move_label(m, board.turn) for m in moves), np.int32)
    freq = np.zeros(27 * 81) if frequency is None else frequency
    scores = sb.heuristic_scores(board, labels, freq)
    by_label = {make_move_label(m, board.turn): cshogi.move_to_usi(m) for m in moves}
    return by_label[int(labels[np.argmax(scores)])], scores, labels, by_label


def test_heuristic_on_hand_made_positions():
    # Mate in one (a gold drop in front of the king, supported by the pawn) beats every
    # capture, even the pawn taking a rook.
    mate = "4k4/9/4P4/9/4r4/4P4/9/9/4K4 b G 1"
    best, *_ = scores_of(mate)
    assert best == "G*5b"
    # No mate: the most valuable capture (the rook, not the pawn) by the cheapest capturer
    # (the pawn, not the gold).
    cap = "4k4/9/9/9/4r4/4P3p/3G5/9/4K4 b - 1"
    best, *_ = scores_of(cap)
    assert best == "5f5e"
    cap2 = "4k4/9/9/9/3pr4/3GP4/9/9/4K4 b - 1"
    best, scores, labels, by_label = scores_of(cap2)
    assert best == "5f5e"  # pawn takes rook; the gold taking the pawn or the rook ranks lower
    order = [by_label[int(labels[i])] for i in np.argsort(-scores, kind="stable")]
    assert order.index("6f5e") < order.index("6f6e")  # gold takes rook before gold takes pawn
    # Neither: the most frequent label among the legal moves.
    quiet = cshogi.STARTING_SFEN
    board = cshogi.Board(quiet)
    freq = np.zeros(27 * 81)
    pick = list(board.legal_moves)[7]
    freq[make_move_label(pick, board.turn)] = 5.0
    best, *_ = scores_of(quiet, freq)
    assert best == cshogi.move_to_usi(pick)


def test_material_and_slope():
    assert sb.material(cshogi.Board()) == 0.0
    board = cshogi.Board("4k4/9/9/9/4r4/4P4/9/9/4K4 b 2P 1")  # black: pawn + 2 in hand; white: rook
    assert sb.material(board) == 3 * 1 - 10
    board = cshogi.Board("4k4/9/9/9/4r4/4P4/9/9/4K4 w 2P 1")
    assert sb.material(board) == 10 - 3
    rng = np.random.default_rng(0)
    m = rng.normal(0, 5, 2000)
    r = (rng.random(2000) < 1 / (1 + np.exp(-0.3 * m))).astype(float)
    a = sb.fit_material_slope(m, r)
    p = 1 / (1 + np.exp(-a * m))
    assert abs(((p - r) * m).mean()) < 1e-9 and 0.2 < a < 0.4  # the BCE's gradient vanishes there


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    pytest.importorskip("torch")
    d = tmp_path_factory.mktemp("strength")
    random_games(d / "train.hcpe", 40, seed=2)
    random_games(d / "held.hcpe", 8, seed=3)
    rc = strength.main([str(d / "train.hcpe"), str(d / "held.hcpe"), "--quick", "--time", "3",
                        "--out", str(d), "--save", str(d / "models"), "--tag", "t"])
    assert rc == 0
    with open(d / "strength-t.json") as f:
        return d, json.load(f)


def held_records(d):
    recs = np.fromfile(d / "held.hcpe", cshogi.HuffmanCodedPosAndEval)
    results, boards = [], []
    for r in recs:
        b = cshogi.Board()
        b.set_hcp(r["hcp"])
        g = int(r["gameResult"])
        results.append(0.5 if g == 0 else float((g == 1) == (b.turn == 0)))
        boards.append(b)
    return recs, np.array(results), boards


def test_manaka_row_recomputed_from_its_outputs(quick_run):
    d, out = quick_run
    model = mk.Model.load(str(d / "models" / "manaka.model"))
    data = shogi.open_hcpe(str(d / "held.hcpe"), value="result", moves=shogi.moves_of(model.config.num_moves))
    parts = []
    for batch in mk.Loader(data, batch_size=64, producers=1, shuffle=False):
        logits, value = model.forward(batch)
        parts.append(ref_metrics(np.asarray(logits, np.float64), batch.counts, batch.target,
                                 np.asarray(value, np.float64), batch.value.astype(np.float64)) | {"n": len(batch)})
    n = sum(p["n"] for p in parts)
    row = out["rows"]["manaka"]
    assert row["positions"] == n == len(data)
    for k in ("top1", "top5", "policy_nll", "value_bce"):
        assert row[k] == pytest.approx(sum(p[k] * p["n"] for p in parts) / n, rel=1e-6, abs=1e-9), k
    assert out["manaka"]["curve"] and out["manaka"]["positions_seen"] > 0


def test_resnet_row_recomputed_from_its_outputs(quick_run):
    torch = pytest.importorskip("torch")
    from cshogi.dlshogi import FEATURES1_NUM, FEATURES2_NUM, make_input_features
    from manaka.bench.strength_resnet import ResNet

    d, out = quick_run
    net = ResNet(out["config"]["blocks"], out["config"]["channels"])
    net.load_state_dict(torch.load(d / "models" / "resnet.pt"))
    net.eval()
    recs, results, boards = held_records(d)
    logits, values, counts, targets = [], [], [], []
    for rec, b in zip(recs, boards):
        f1 = np.zeros((FEATURES1_NUM, 9, 9), np.float32)
        f2 = np.zeros((FEATURES2_NUM, 9, 9), np.float32)
        make_input_features(b, f1, f2)
        with torch.no_grad():
            pol, z = net(torch.from_numpy(np.concatenate([f1, f2])[None]))
        labels = sorted(make_move_label(m, b.turn) for m in b.legal_moves)
        played = make_move_label(b.move_from_move16(int(rec["bestMove16"])), b.turn)
        logits.append(pol[0].numpy().astype(np.float64)[labels])
        values.append(float(torch.sigmoid(z[0])))
        counts.append(len(labels))
        targets.append(labels.index(played))
    L = max(counts)
    padded = np.array([np.pad(x, (0, L - len(x))) for x in logits])
    want = ref_metrics(padded, np.array(counts), np.array(targets), np.array(values), results)
    row = out["rows"]["resnet"]
    for k in ("top1", "top5", "policy_nll", "value_bce", "value_accuracy"):
        assert row[k] == pytest.approx(want[k], rel=1e-4, abs=1e-6), k


def test_baseline_rows_recomputed(quick_run):
    d, out = quick_run
    recs, results, boards = held_records(d)
    counts = np.array([len(list(b.legal_moves)) for b in boards], np.float64)
    ch = out["rows"]["chance"]
    assert ch["top1"] == pytest.approx((1 / counts).mean()) and ch["value_bce"] == pytest.approx(math.log(2))
    assert ch["top5"] == pytest.approx((np.minimum(5, counts) / counts).mean())
    train = np.fromfile(d / "train.hcpe", cshogi.HuffmanCodedPosAndEval)
    freq = np.zeros(27 * 81)
    for r in train:
        b = cshogi.Board()
        b.set_hcp(r["hcp"])
        freq[make_move_label(b.move_from_move16(int(r["bestMove16"])), b.turn)] += 1
    hits = 0
    for rec, b in zip(recs, boards):
        labels = sorted(make_move_label(m, b.turn) for m in b.legal_moves)
        played = labels.index(make_move_label(b.move_from_move16(int(rec["bestMove16"])), b.turn))
        hits += int(np.argmax(freq[labels])) == played
    assert out["rows"]["frequency"]["top1"] == pytest.approx(hits / len(recs))
    assert 0 <= out["rows"]["heuristic"]["top1"] <= 1


def test_report_lists_every_row(quick_run):
    d, out = quick_run
    text = (d / "strength-t.md").read_text()
    for row in ("chance", "frequency", "heuristic", "manaka", "resnet"):
        assert f"\n{row} " in text
    assert "manaka curve" in text and "resnet curve" in text and "load average" in text


def test_a_schedule_that_ends_before_the_time_budget_is_reported(tmp_path):
    """--rate-guess sizes the cosine schedule for --time; a faster machine ends it early and
    trains the rest at min_lr: the report says when, and which rate guess fits."""
    random_games(tmp_path / "train.hcpe", 20, seed=5)
    random_games(tmp_path / "held.hcpe", 4, seed=6)
    # 6 s at 1,800 positions/s is 21 steps of 512, one past the warm-up
    assert strength.main([str(tmp_path / "train.hcpe"), str(tmp_path / "held.hcpe"), "--quick", "--time", "6",
                          "--rate-guess", "1800", "--only", "manaka", "--out", str(tmp_path), "--tag", "s"]) == 0
    out = json.loads((tmp_path / "strength-s.json").read_text())["manaka"]
    assert out["total_steps"] == 21
    if out["steps"] > 21:  # a machine slower than 3.5 steps/s ends inside the schedule
        assert out["schedule_end"]["steps"] == 21 and out["schedule_end"]["seconds"] < out["seconds"]
        text = (tmp_path / "strength-s.md").read_text()
        assert "note: the cosine schedule (total_steps 21 from --rate-guess 1800) ended at" in text
    else:
        assert "schedule_end" not in out


def test_bad_arguments(tmp_path, capsys):
    assert strength.main([str(tmp_path / "none.hcpe"), str(tmp_path / "none.hcpe")]) == 2
    assert "no such file" in capsys.readouterr().err
    random_games(tmp_path / "a.hcpe", 3, seed=4)
    assert strength.main([str(tmp_path / "a.hcpe"), str(tmp_path / "a.hcpe"), "--set", "nope=1",
                          "--only", "baselines"]) == 2
    assert "nope" in capsys.readouterr().err
    # a negative cadence looped forever in Budget.due (a hang), a NaN --time never ran out, a
    # negative --time or --positions reported an untrained model (rc 0), a negative
    # --eval-positions and --resnet-batch 0 failed inside a worker, --save FILE in a traceback
    (tmp_path / "file").write_bytes(b"")
    for args, message in ((["--eval-every", "-1"], "--eval-every must be a finite number >= 0, got -1.0"),
                          (["--eval-every-positions", "-5"], "--eval-every-positions must be a finite number >= 0"),
                          (["--time", "nan"], "--time must be a finite number >= 0, got nan"),
                          (["--time", "-5"], "--time must be a finite number >= 0, got -5.0"),
                          (["--positions", "-4"], "--positions must be a finite number >= 0, got -4"),
                          (["--eval-positions", "-3"], "--eval-positions must be a finite number >= 0"),
                          (["--resnet-batch", "0"], "--resnet-batch must be >= 1, got 0"),
                          (["--rate-guess", "nan"], "--rate-guess must be a finite number > 0, got nan"),
                          (["--save", str(tmp_path / "file")], "is a file, not a folder"),
                          (["--time", "0"], "strength: give --time or --positions")):  # said "strength: strength:"
        assert strength.main([str(tmp_path / "a.hcpe"), str(tmp_path / "a.hcpe"), "--only", "manaka", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("strength: ") and message in err and "strength: strength" not in err, (args, err)
        assert len(err.splitlines()) == 1, (args, err)


def test_mirror_records(tmp_path):
    from manaka.bench import strength_mirror as sm

    assert sm.mirror_sfen("lnsgkgsnl/1r5b1/ppppppppp/9/9/9/PPPPPPPPP/1B5R1/LNSGKGSNL b - 1") == \
        "lnsgkgsnl/1b5r1/ppppppppp/9/9/9/PPPPPPPPP/1R5B1/LNSGKGSNL b - 1"
    assert sm.mirror_sfen("4k4/+P8/9/9/9/9/9/9/4K4 w 2Pr 5") == "4k4/8+P/9/9/9/9/9/9/4K4 w 2Pr 5"
    assert sm.mirror_usi("7g7f") == "3g3f" and sm.mirror_usi("P*5e") == "P*5e" and sm.mirror_usi("2b8h+") == "8b2h+"
    src = tmp_path / "g.hcpe"
    random_games(src, 6, seed=5)
    recs = np.fromfile(src, np.uint8).reshape(-1, 38)
    mirrored = sm.mirror_records(recs)
    a = recs.view(cshogi.HuffmanCodedPosAndEval).reshape(-1)
    b = mirrored.view(cshogi.HuffmanCodedPosAndEval).reshape(-1)
    for x, y in zip(a, b):
        bx, by = cshogi.Board(), cshogi.Board()
        bx.set_hcp(x["hcp"])
        by.set_hcp(y["hcp"])
        # the mirrored board, square by square: file f holds what file 10 - f held
        px, py = np.array(bx.pieces).reshape(9, 9), np.array(by.pieces).reshape(9, 9)  # [file, rank]
        assert np.array_equal(px[::-1], py) and bx.pieces_in_hand == by.pieces_in_hand and bx.turn == by.turn
        mx = cshogi.move_to_usi(bx.move_from_move16(int(x["bestMove16"])))
        assert cshogi.move_to_usi(by.move_from_move16(int(y["bestMove16"]))) == sm.mirror_usi(mx)
        assert x["eval"] == y["eval"] and x["gameResult"] == y["gameResult"]
    assert np.array_equal(sm.mirror_records(mirrored), recs)  # an involution
    # manaka's producers read the mirrored records: the legal-move counts are the originals'
    from manaka.bench.strength import Table
    (tmp_path / "m.hcpe").write_bytes(mirrored.tobytes())
    assert np.array_equal(Table(str(tmp_path / "m.hcpe")).counts, Table(str(src)).counts)
