"""python -m manaka.shogi convert: CSA / KIF game records to HCPE, read back by manaka."""
import numpy as np

from shogi_reference import c_position, cshogi

import cshogi.CSA  # noqa: E402
import cshogi.KIF  # noqa: E402

from manaka import shogi
from manaka.shogi import convert


def random_game(seed, plies):
    rng = np.random.default_rng(seed)
    board, moves = cshogi.Board(), []
    for _ in range(plies):
        legal = list(board.legal_moves)
        if not legal:
            break
        moves.append(legal[int(rng.integers(len(legal)))])
        board.push(moves[-1])
    return moves


def write_csa(path, moves, resign=True):
    e = cshogi.CSA.Exporter(str(path))
    board = cshogi.Board()
    e.info(board, ["black", "white"])
    for m in moves:
        e.move(m)
        board.push(m)
    if resign:
        e.endgame("%TORYO")
    e.close()


def test_convert_writes_every_position_of_every_game(tmp_path, capsys):
    seed = int(np.random.SeedSequence().entropy % 10_000)
    games = [random_game(seed + k, 20 + 7 * k) for k in range(3)]
    write_csa(tmp_path / "a.csa", games[0])
    write_csa(tmp_path / "b.csa", games[1])
    write_csa(tmp_path / "c.csa", games[2], resign=False)  # unfinished: result 0
    (tmp_path / "d.csa").write_text("this is not a game record\n")
    out = tmp_path / "out.hcpe"
    assert convert.main([str(out), str(tmp_path)]) == 0
    said = capsys.readouterr()
    assert f"wrote {sum(map(len, games))} positions of 3 games" in said.out, said
    records = np.fromfile(out, cshogi.HuffmanCodedPosAndEval)
    board, hand, side, move, _, result, status = shogi.decode(records.view(np.uint8).reshape(-1, 38), shogi.HCPE)
    assert not status.any()
    i = 0
    for k, game in enumerate(games):
        b = cshogi.Board()
        loser = len(game) % 2  # the side to move at the end resigned
        for m in game:
            cells, h, turn = c_position(b)
            assert bytes(board[i]) == cells and bytes(hand[i].reshape(-1)) == h and side[i] == turn
            assert move[i] == cshogi.move16(m)
            want = 0.5 if k == 2 else float(turn != loser)
            assert result[i] == want
            b.push(m)
            i += 1
    assert i == len(records)
    # the file trains: every recorded move is legal where it was played
    ds = shogi.open_hcpe(str(out))
    assert all(ds[j].target >= 0 for j in range(len(ds)))


def test_convert_refuses_other_files(tmp_path, capsys):
    (tmp_path / "x.txt").write_text("")
    assert convert.main([str(tmp_path / "o.hcpe"), str(tmp_path / "x.txt")]) == 2
    assert "not a .csa, .kif or .kifu file" in capsys.readouterr().err


def test_a_file_that_crashes_the_parser_is_isolated(monkeypatch):
    # A stand-in child that dies (abort) whenever its batch holds a file named "bad".
    crash = ("import json, os, sys; paths = json.load(sys.stdin)\n"
             "if any('bad' in p for p in paths): os.abort()\n"
             "print(json.dumps([{'file': p, 'games': []} for p in paths]))")
    monkeypatch.setattr(convert, "CHILD", [convert.sys.executable, "-c", crash])
    results, crashed = convert._parse_isolated(["a.csa", "bad.csa", "c.kif", "bad2.kif"])
    assert [r["file"] for r in results] == ["a.csa", "c.kif"] and crashed == ["bad.csa", "bad2.kif"]
