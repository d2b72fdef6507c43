"""dlshogi's hcpe3 files (manaka.shogi.open_hcpe3): files written here with numpy in
dlshogi's dtypes (its documented HuffmanCodedPosAndEval3 / MoveInfo / MoveVisits, built on
cshogi's dtypeHcp, dtypeMove16, dtypeEval) from random games played with cshogi, with
random candidate lists and visit counts; manaka must decode them to cshogi's positions,
legal labels, played moves, soft targets (visits over the candidates' total) and values,
through ds[i], the Loader's producers and to_dataset; bad files name the file, record, game
and ply, or are skipped."""
import numpy as np
import pytest

from shogi_reference import cshogi, labels, tokens

import manaka as mk
from manaka import shogi

# dlshogi's dtypes (its hcpe3 tools), from cshogi's
GAME = np.dtype([("hcp", cshogi.dtypeHcp), ("moveNum", np.uint16), ("result", np.uint8), ("opponent", np.uint8)])
MOVE_INFO = np.dtype([("selectedMove16", cshogi.dtypeMove16), ("eval", cshogi.dtypeEval),
                      ("candidateNum", np.uint16)])
MOVE_VISITS = np.dtype([("move16", cshogi.dtypeMove16), ("visitNum", np.uint16)])


def play_games(n_games, seed, start_plies=0):
    """(file bytes, expected records, game byte ranges): random games; each position gets 0
    candidates (one in five: played through, not a record) or a few legal candidates with
    random visits. A record: dict(tokens, labels, target, policy, result, eval, game, ply)."""
    rng = np.random.default_rng(seed)
    chunks, records, spans = [], [], []
    at = 0
    for g in range(n_games):
        board = cshogi.Board()
        for _ in range(start_plies if g % 2 else 0):  # some games start away from the initial position
            moves = list(board.legal_moves)
            board.push(moves[int(rng.integers(len(moves)))])
        header = np.zeros(1, GAME)
        board.to_hcp(header["hcp"])
        outcome = int(rng.integers(0, 3))
        header["result"] = outcome | (int(rng.integers(0, 8)) << 2)  # the flag bits are not the result
        header["opponent"] = 0
        body, plies = [], 0
        for ply in range(int(rng.integers(1, 50))):
            moves = list(board.legal_moves)
            if not moves:
                break
            selected = moves[int(rng.integers(len(moves)))]
            info = np.zeros(1, MOVE_INFO)
            info["selectedMove16"] = cshogi.move16(selected)
            info["eval"] = int(rng.integers(-3000, 3000))
            if rng.random() < 0.2:
                cands = []
            else:
                k = int(rng.integers(1, min(len(moves), 8) + 1))
                cands = [moves[i] for i in rng.choice(len(moves), k, replace=False)]
            visits = np.zeros(len(cands), MOVE_VISITS)
            if cands:
                visits["move16"] = [cshogi.move16(m) for m in cands]
                visits["visitNum"] = rng.integers(0, 2000, len(cands))
                visits["visitNum"][0] += 1
                info["candidateNum"] = len(cands)
                lab = labels(board)
                total = float(visits["visitNum"].astype(np.float64).sum())
                policy = np.zeros(len(lab), np.float32)
                for m, v in zip(cands, visits["visitNum"]):
                    policy[np.searchsorted(lab, cshogi.dlshogi.make_move_label(m, board.turn))] = np.float32(v / total)
                win = 0.5 if outcome == 0 else float((outcome == 1) == (board.turn == cshogi.BLACK))
                records.append(dict(tokens=tokens(board), labels=lab, policy=policy, result=win,
                                    eval=int(info["eval"][0]), game=g, ply=ply, board=board.copy(),
                                    target=int(np.searchsorted(lab, cshogi.dlshogi.make_move_label(selected, board.turn)))))
            body.append(info.tobytes() + visits.tobytes())
            board.push(selected)
            plies += 1
        header["moveNum"] = plies
        game = header.tobytes() + b"".join(body)
        chunks.append(game)
        spans.append((at, at + len(game)))
        at += len(game)
    return b"".join(chunks), records, spans


@pytest.fixture(scope="module")
def games():
    return play_games(14, 41, start_plies=30)


def check_row(rec, tok, legal, target, value, policy):
    np.testing.assert_array_equal(tok, rec["tokens"])
    np.testing.assert_array_equal(legal, rec["labels"])
    assert target == rec["target"]
    assert value == rec["result"]
    np.testing.assert_array_equal(policy, rec["policy"])  # the same float32 rounding of visits / total


def test_records_equal_cshogi_games(tmp_path, games):
    data, records, _ = games
    (tmp_path / "a.hcpe3").write_bytes(data)
    ds = shogi.open_hcpe3(str(tmp_path / "a.hcpe3"))
    assert len(ds) == len(records) and ds.meta["skipped"] == 0
    for i, rec in enumerate(records):
        p = ds[i]
        check_row(rec, p.tokens, p.legal_moves, p.target, p.value, p.policy_target)
        assert ds.where(i) == (str(tmp_path / "a.hcpe3"), rec["game"], rec["ply"])
    whole = ds.to_dataset()
    assert whole.policy_target is not None and len(whole) == len(records)
    for i in range(0, len(records), 7):
        p = whole[i]
        check_row(records[i], p.tokens, p.legal_moves, p.target, p.value, p.policy_target)


def test_value_mixes_the_eval(tmp_path, games):
    data, records, _ = games
    (tmp_path / "a.hcpe3").write_bytes(data)
    ds = shogi.open_hcpe3(str(tmp_path / "a.hcpe3"), value=0.25)
    for i in range(0, len(records), 5):
        r = records[i]
        want = 0.75 * r["result"] + 0.25 / (1 + np.exp(-r["eval"] / 756))
        assert ds[i].value == pytest.approx(want, rel=1e-6)


def loader_rows(ds, producers=2):
    rows = {}
    with mk.Loader(ds, batch_size=16, producers=producers, shuffle=True, seed=3) as loader:
        for batch in loader:
            assert batch.policy_target is not None
            for r, i in enumerate(loader.last_indices):
                c = batch.counts[r]
                assert (batch.legal[r, c:] == -1).all() and (batch.policy_target[r, c:] == 0).all()
                rows[int(i)] = (batch.tokens[r].copy(), batch.legal[r, :c].copy(), int(batch.target[r]),
                                float(batch.value[r]), batch.policy_target[r, :c].copy())
        return rows, loader.stats


def test_loader_batches_carry_the_soft_targets(tmp_path, games):
    data, records, _ = games
    half = len(data) // 2
    # two files, each of whole games
    _, _, spans = games
    cut = max(e for s, e in spans if e <= half)
    (tmp_path / "a.hcpe3").write_bytes(data[:cut])
    (tmp_path / "b.hcpe3").write_bytes(data[cut:])
    ds = shogi.open_hcpe3(str(tmp_path / "*.hcpe3"))
    assert len(ds) == len(records)
    rows, stats = loader_rows(ds, producers=3)
    assert sorted(rows) == list(range(len(records))) and stats["skipped"] == 0
    for i, rec in enumerate(records):
        check_row(rec, *rows[i])


def test_training_steps_on_soft_targets(tmp_path, games):
    data, _, _ = games
    (tmp_path / "a.hcpe3").write_bytes(data)
    ds = shogi.open_hcpe3(str(tmp_path / "a.hcpe3"))
    model = mk.Model(mk.ModelConfig(num_tokens=ds.num_tokens, num_moves=ds.num_moves, tokens_per_side=40,
                                    embed_dim=8, pair_dim=2, hidden=(16,), head_width=16), seed=0)
    trainer = mk.Trainer(model, lr=1e-2)
    with mk.Loader(ds, batch_size=32, producers=1, shuffle=False) as loader:
        batch = next(iter(loader))
        first = trainer.step(batch).loss
        for _ in range(5):
            last = trainer.step(batch).loss
    assert np.isfinite(first) and last < first


def test_cli_trains_on_hcpe3(tmp_path, games, capsys, monkeypatch):
    from train_cli import TINY
    from manaka import train

    monkeypatch.chdir(tmp_path)  # the trained model is saved in the working folder

    data = tmp_path / "data"
    data.mkdir()
    (data / "games.hcpe3").write_bytes(games[0])
    assert train.main(["--data", str(data / "games.hcpe3"), "--steps", "3", "--no-progress", "--batch-size",
                       "16", "--device", "cpu", "--no-save", *TINY]) == 0
    out = capsys.readouterr().out
    assert f"Hcpe3Files({len(games[1]):,} records in 1 file(s)" in out
    # shogi records: the shogi preset's network (its move-pair table), as HCPE and PSV get
    # (hcpe3 got the shogi recipe's trainer settings but the small preset's network)
    assert "move_pairs=2187, board_width=9" in out and "batch 16" in out, out
    # a folder of hcpe3 files is one too; mixed with HCPE files it is refused in one line
    assert train.main(["--data", str(data), "--steps", "1", "--no-progress", "--batch-size", "16",
                       "--device", "cpu", "--no-save", *TINY]) == 0
    assert "Hcpe3Files(" in capsys.readouterr().out
    (data / "other.hcpe").write_bytes(b"")
    assert train.main(["--data", str(data), "--steps", "1", "--no-progress", *TINY]) == 2
    assert "holds hcpe3 (1) and other record files" in capsys.readouterr().err


def wide_games(n_games, plies, candidates, seed=0):
    """hcpe3 bytes of games whose every position lists `candidates` moves (126 bytes a
    record at 30: the file's bytes / 38 is over three times its records)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_games):
        board, body = cshogi.Board(), []
        header = np.zeros(1, GAME)
        board.to_hcp(header["hcp"])
        header["result"] = 1
        for _ in range(plies):
            moves = list(board.legal_moves)
            k = min(candidates, len(moves))
            info = np.zeros(1, MOVE_INFO)
            info["selectedMove16"], info["candidateNum"] = cshogi.move16(moves[0]), k
            visits = np.zeros(k, MOVE_VISITS)
            visits["move16"] = [cshogi.move16(m) for m in moves[:k]]
            visits["visitNum"] = rng.integers(1, 100, k)
            body.append(info.tobytes() + visits.tobytes())
            board.push(moves[0])
        header["moveNum"] = plies
        out.append(header.tobytes() + b"".join(body))
    return b"".join(out)


def test_a_checkpoint_of_a_run_on_games_with_many_candidates(tmp_path):
    # the records' identity sampled indices up to the file's bytes / 38: past the last record
    # of games with long candidate lists, an IndexError at fit's first checkpoint, after the
    # training, and nothing was saved
    from train_cli import TINY
    from manaka import train

    (tmp_path / "wide.hcpe3").write_bytes(wide_games(3, 20, 30))
    ds = shogi.open_hcpe3(str(tmp_path / "wide.hcpe3"))
    assert (tmp_path / "wide.hcpe3").stat().st_size // 38 > 3 * len(ds)
    assert ds.fingerprint.startswith(f"{len(ds)}-")
    run = ["--data", str(tmp_path / "wide.hcpe3"), "--checkpoint", str(tmp_path / "run.ckpt"), "--no-progress",
           "--batch-size", "16", "--device", "cpu", "--no-save", *TINY]
    assert train.main(["--steps", "2", *run]) == 0
    assert train.main(["--steps", "4", "--resume", *run]) == 0  # the identity it saved is its own again


def first_record_of_game(records, g):
    return next(i for i, r in enumerate(records) if r["game"] == g)


def info_offsets(data, spans):
    """Byte offset of each position's MoveInfo, per game: [(offset, candidateNum)]."""
    out = []
    for s, e in spans:
        at, game = s + GAME.itemsize, []
        n = int(np.frombuffer(data[s:s + GAME.itemsize], GAME)["moveNum"][0])
        for _ in range(n):
            info = np.frombuffer(data[at:at + MOVE_INFO.itemsize], MOVE_INFO)[0]
            game.append((at, int(info["candidateNum"])))
            at += MOVE_INFO.itemsize + MOVE_VISITS.itemsize * int(info["candidateNum"])
        out.append(game)
    return out


def test_a_game_cut_short(tmp_path, games):
    data, records, spans = games
    path = tmp_path / "x.hcpe3"
    path.write_bytes(data[:-3])
    last = len(spans) - 1
    with pytest.raises(ValueError, match=rf"x\.hcpe3: record \d+ \(game {last}, ply \d+\): .*cut short"):
        shogi.open_hcpe3(str(path))
    ds = shogi.open_hcpe3(str(path), on_bad="skip")
    kept = first_record_of_game(records, last)
    assert len(ds) == kept and ds.meta["skipped"] == len(records) - kept
    check_row(records[kept - 1], *[getattr(ds[kept - 1], f) for f in
                                   ("tokens", "legal_moves", "target", "value", "policy_target")])


def bad_file(data, spans, records, kind):
    """The file with record k spoiled by `kind`; returns (bytes, k, records left by skip)."""
    buf = bytearray(data)
    offsets = info_offsets(data, spans)
    k = len(records) // 2
    rec = records[k]
    at, n = offsets[rec["game"]][rec["ply"]]
    first_visit = at + MOVE_INFO.itemsize
    if kind == "zero_visits":
        for c in range(n):
            buf[first_visit + 4 * c + 2:first_visit + 4 * c + 4] = b"\0\0"
        left = [i for i in range(len(records)) if i != k]
    elif kind == "candidate_not_legal":
        buf[first_visit:first_visit + 2] = np.uint16(0).tobytes()  # 1a to 1a: never a move
        left = [i for i in range(len(records)) if i != k]
    else:  # the selected move not legal: this record and the rest of its game are spoiled
        buf[at:at + 2] = np.uint16(0).tobytes()
        left = [i for i, r in enumerate(records) if not (r["game"] == rec["game"] and r["ply"] >= rec["ply"])]
    return bytes(buf), k, left


@pytest.mark.parametrize("kind", ["zero_visits", "candidate_not_legal", "selected_not_legal"])
def test_bad_records_name_file_record_game_and_ply_or_are_skipped(tmp_path, games, kind):
    data, records, spans = games
    buf, k, left = bad_file(data, spans, records, kind)
    path = tmp_path / "x.hcpe3"
    path.write_bytes(buf)
    reason = {"zero_visits": "no visits", "candidate_not_legal": "candidate move is not legal",
              "selected_not_legal": "selected move is not legal"}[kind]
    rec = records[k]
    with pytest.raises(ValueError, match=rf"x\.hcpe3: record {k} \(game {rec['game']}, ply {rec['ply']}\): .*{reason}"):
        shogi.open_hcpe3(str(path))
    ds = shogi.open_hcpe3(str(path), on_bad="skip")
    assert len(ds) == len(left) and ds.meta["skipped"] == len(records) - len(left)
    rows, stats = loader_rows(ds)
    for j, i in enumerate(left):
        check_row(records[i], *rows[j])


def test_a_bad_start_or_result_spoils_the_game(tmp_path, games):
    data, records, spans = games
    buf = bytearray(data)
    g = 3
    buf[spans[g][0] + 34] = 3  # result 3: not a result
    path = tmp_path / "x.hcpe3"
    path.write_bytes(bytes(buf))
    with pytest.raises(ValueError, match=rf"record {first_record_of_game(records, g)} \(game 3, ply \d+\): .*result"):
        shogi.open_hcpe3(str(path))
    ds = shogi.open_hcpe3(str(path), on_bad="skip")
    assert len(ds) == sum(r["game"] != g for r in records)


def test_empty_and_missing(tmp_path):
    (tmp_path / "e.hcpe3").write_bytes(b"")
    with pytest.raises(ValueError, match="no usable hcpe3 record"):
        shogi.open_hcpe3(str(tmp_path / "e.hcpe3"))
    with pytest.raises(ValueError, match="neither a file"):
        shogi.open_hcpe3(str(tmp_path / "missing.hcpe3"))
    with pytest.raises(ValueError, match="on_bad"):
        shogi.open_hcpe3(str(tmp_path / "e.hcpe3"), on_bad="ignore")


def test_shogi_game_refusals_and_a_record_past_its_info(tmp_path, games):
    """_core.shogi_game checks its soft arrays, and a record past its file's info has no
    candidates (an error naming it, or with skip a row left out) rather than a read past the
    info array."""
    from manaka import _core

    data, records, _ = games
    (tmp_path / "a.hcpe3").write_bytes(data)
    ds = shogi.open_hcpe3(str(tmp_path / "a.hcpe3"))
    raw, info, hcpe = ds._raw[0], ds._info[0], ds._arrays[0]
    with pytest.raises(ValueError, match=r"soft must be a list of \(raw, info\) per HCPE file"):
        _core.shogi_game(shogi.PSV, 0.0, False, 0, [(raw, info)])
    with pytest.raises(ValueError, match="mirror is not supported with soft targets"):
        _core.shogi_game(shogi.HCPE, 0.0, True, 0, [(raw, info)])
    with pytest.raises(ValueError, match=r"soft\[0\] must be \(uint8 \[bytes\], int64 \[records\]\)"):
        _core.shogi_game(shogi.HCPE, 0.0, False, 0, [(raw, info.astype(np.int32))])
    with pytest.raises(ValueError, match=r"eval_weight must be in \[0, 1\]"):
        _core.shogi_game(shogi.HCPE, 1.5)

    class Short:
        def __init__(self, skip):
            game = _core.shogi_game(shogi.HCPE, 0.0, False, 0, [(raw, info[:-1].copy())])
            self._row_source = _core.GameRecords(game, [hcpe], ["a.hcpe3"], skip)

        def __len__(self):
            return len(self._row_source)

    last = len(records) - 1
    with pytest.raises(ValueError, match=rf"a\.hcpe3: record {last}: .*cut short"):
        with mk.Loader(Short(False), batch_size=len(records), producers=1) as loader:
            list(loader)
    with mk.Loader(Short(True), batch_size=len(records), producers=1) as loader:
        (batch,) = list(loader)
        assert len(batch.counts) == last and loader.stats["skipped"] == 1
