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


def converted(out, inputs, capsys):
    """Converts `inputs` to `out` (it must succeed): (what it printed, the records decoded:
    board, hand, side, move, result), every record's decode status checked."""
    assert convert.main([str(out)] + [str(p) for p in inputs]) == 0
    said = capsys.readouterr()
    records = np.fromfile(out, cshogi.HuffmanCodedPosAndEval)
    board, hand, side, move, _, result, status = shogi.decode(records.view(np.uint8).reshape(-1, 38), shogi.HCPE)
    assert not status.any()
    return said, (board, hand, side, move, result)


def test_convert_writes_every_position_of_every_game(tmp_path, capsys):
    seed = int(np.random.SeedSequence().entropy % 10_000)
    games = [random_game(seed + k, 20 + 7 * k) for k in range(3)]
    write_csa(tmp_path / "a.csa", games[0])
    write_csa(tmp_path / "b.csa", games[1])
    write_csa(tmp_path / "c.csa", games[2], resign=False)  # unfinished: result 0
    (tmp_path / "d.csa").write_text("this is not a game record\n")
    out = tmp_path / "out.hcpe"
    said, (board, hand, side, move, result) = converted(out, [tmp_path], capsys)
    assert f"wrote {sum(map(len, games))} positions of 3 games" in said.out, said
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
    assert i == len(board)
    # the file trains: every recorded move is legal where it was played
    ds = shogi.open_hcpe(str(out))
    assert all(ds[j].target >= 0 for j in range(len(ds)))


def test_kif_files_convert_whatever_their_encoding(tmp_path, capsys):
    # cshogi's reader decodes .kif as cp932 and .kifu as UTF-8 by the name alone, so a UTF-8
    # .kif (what today's programs write) was an error and left out
    game = random_game(int(np.random.SeedSequence().entropy % 10_000), 25)
    exporter = cshogi.KIF.Exporter(str(tmp_path / "cshogi.kifu"))  # UTF-8, by its name
    exporter.header(["先手の名前", "後手の名前"])
    for m in game:
        exporter.move(m)
    exporter.end("resign")
    exporter.close()
    text = (tmp_path / "cshogi.kifu").read_text("utf-8")
    (tmp_path / "cshogi.kifu").unlink()
    for name, data in (("utf8.kif", text.encode("utf-8")), ("bom.kif", b"\xef\xbb\xbf" + text.encode("utf-8")),
                       ("sjis.kif", text.encode("cp932")), ("sjis.kifu", text.encode("cp932"))):
        (tmp_path / name).write_bytes(data)
        assert "先手の名前" in convert.kif_text(str(tmp_path / name))
    said, (board, hand, side, move, result) = converted(tmp_path / "out.hcpe", [tmp_path], capsys)
    assert f"wrote {4 * len(game)} positions of 4 games" in said.out, said
    assert len(board) == 4 * len(game)
    for k in range(4):  # each file is the same game, position by position, as cshogi plays it
        b = cshogi.Board()
        for j, m in enumerate(game):
            i = k * len(game) + j
            cells, h, turn = c_position(b)
            assert bytes(board[i]) == cells and bytes(hand[i].reshape(-1)) == h and move[i] == cshogi.move16(m)
            b.push(m)


def test_moves_after_a_games_end_are_not_converted(tmp_path, capsys):
    # cshogi's CSA parser keeps moves written after %TORYO: they were converted as positions
    # of the game, labelled with its result
    (tmp_path / "g.csa").write_text("V2.2\nN+a\nN-b\nPI\n+\n+7776FU,T1\n-3334FU\n%TORYO\n+2726FU\n-8384FU\n/\n"
                                    "V2.2\nPI\n+\n+2726FU\n'a comment: -8384FU\n-8384FU\n+2625FU\n%TORYO\n")
    assert convert.csa_moves_before_end(str(tmp_path / "g.csa")) == [2, 3]
    said, (board, hand, side, move, result) = converted(tmp_path / "out.hcpe", [tmp_path / "g.csa"], capsys)
    assert "wrote 5 positions of 2 games" in said.out, said
    assert "game 1 of 2: 2 move(s) written after the game's end (its %-line) are not part of it" in said.err, said
    i = 0
    for moves, loser in ((["7g7f", "3c3d"], 0), (["2g2f", "8c8d", "2f2e"], 1)):  # Black resigns the first game
        b = cshogi.Board()
        for usi in moves:
            cells, h, turn = c_position(b)
            assert bytes(board[i]) == cells and move[i] == cshogi.move16(b.move_from_usi(usi))
            assert result[i] == float(turn != loser)
            b.push_usi(usi)
            i += 1
    assert i == len(board)


def test_convert_refuses_other_files(tmp_path, capsys):
    (tmp_path / "x.txt").write_text("")
    assert convert.main([str(tmp_path / "o.hcpe"), str(tmp_path / "x.txt")]) == 2
    assert "not a .csa, .kif or .kifu file" in capsys.readouterr().err


def test_a_record_that_is_a_fifo_is_refused_before_anything_is_read(tmp_path, capsys):
    # the parser's child opened it and blocked: convert hung
    import os

    os.mkdir(tmp_path / "games")
    os.mkfifo(tmp_path / "games" / "a.csa")
    for arg in (tmp_path / "games", tmp_path / "games" / "a.csa"):
        assert convert.main([str(tmp_path / "o.hcpe"), str(arg)]) == 2
        err = capsys.readouterr().err
        assert f"the record {str(tmp_path / 'games' / 'a.csa')!r} is not a regular file" in err, err
    assert sorted(os.listdir(tmp_path)) == ["games"]


def test_a_file_that_crashes_the_parser_is_isolated(monkeypatch):
    # A stand-in child that dies (abort) whenever its batch holds a file named "bad".
    crash = ("import json, os, sys; paths = json.load(sys.stdin)\n"
             "if any('bad' in p for p in paths): os.abort()\n"
             "print(json.dumps([{'file': p, 'games': []} for p in paths]))")
    monkeypatch.setattr(convert, "CHILD", [convert.sys.executable, "-c", crash])
    results, crashed = convert._parse_isolated(["a.csa", "bad.csa", "c.kif", "bad2.kif"])
    assert [r["file"] for r in results] == ["a.csa", "c.kif"] and crashed == ["bad.csa", "bad2.kif"]


# ---------------------------------------------------------------- the output and the inputs

def two_games(tmp_path, seed=None):
    """a.csa and b.csa, one random game each; returns their paths."""
    seed = int(np.random.SeedSequence().entropy % 10_000) if seed is None else seed
    paths = []
    for k, name in enumerate(("a.csa", "b.csa")):
        write_csa(tmp_path / name, random_game(seed + k, 12 + 5 * k))
        paths.append(tmp_path / name)
    return paths


def run(capsys, *argv):
    code = convert.main([str(a) for a in argv])
    said = capsys.readouterr()
    return code, said.out, said.err


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name)


def test_a_forgotten_output_is_refused_and_the_record_kept(tmp_path, capsys):
    a, b = two_games(tmp_path)
    before = a.read_bytes()
    code, _, err = run(capsys, a, b)  # OUT forgotten: a.csa would be the output
    assert code != 0
    assert "named as a game record" in err and "OUT.hcpe RECORDS" in err and len(err.strip().splitlines()) == 1
    assert a.read_bytes() == before and leftovers(tmp_path) == []


def test_an_output_that_is_a_fifo_is_refused_before_anything_is_read(tmp_path, capsys):
    # checking whether the existing output was HCPE opened it to read: a FIFO blocked (a hang)
    import os
    import stat

    a, b = two_games(tmp_path)
    fifo = tmp_path / "o.hcpe"
    os.mkfifo(fifo)
    code, out, err = run(capsys, fifo, a, b, "--force")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"the output {str(fifo)!r} cannot be written: it is a FIFO" in err and "nothing was written" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and leftovers(tmp_path) == []


def test_an_output_that_is_an_input_is_refused(tmp_path, capsys):
    _, b = two_games(tmp_path)
    before = b.read_bytes()
    code, _, err = run(capsys, b, b)
    assert code != 0 and "is also an input" in err, err
    assert b.read_bytes() == before
    # the same file under another spelling, as an HCPE-named link to it, is still an input
    link = tmp_path / "b.hcpe"
    link.symlink_to(b)
    code, _, err = run(capsys, link, tmp_path / "." / "b.csa")
    assert code != 0 and "is also an input" in err, err
    assert b.read_bytes() == before


def test_an_existing_output_is_replaced_only_with_force_and_only_when_hcpe(tmp_path, capsys):
    a, b = two_games(tmp_path)
    out = tmp_path / "out.hcpe"
    assert run(capsys, out, a)[0] == 0
    first = out.read_bytes()
    assert len(first) == 38 * 12
    code, _, err = run(capsys, out, b)
    assert code != 0 and "exists" in err and "--force" in err, err
    assert out.read_bytes() == first
    code, said, _ = run(capsys, out, b, "--force")
    assert code == 0 and "wrote 17 positions" in said
    assert len(out.read_bytes()) == 38 * 17
    # an existing file that is not HCPE is never replaced, --force or not
    for content in (b"not hcpe\n", b"x" * 37 + b"\n"):  # 9 bytes; 38 bytes of text
        text = tmp_path / "notes.hcpe"
        text.write_bytes(content)
        code, _, err = run(capsys, text, a, "--force")
        assert code != 0 and "is not an HCPE file" in err, err
        assert text.read_bytes() == content
    assert leftovers(tmp_path) == []


def test_a_missing_input_is_an_error_naming_it(tmp_path, capsys):
    a, _ = two_games(tmp_path)
    out = tmp_path / "out.hcpe"
    code, _, err = run(capsys, out, a, tmp_path / "missing.csa")
    assert code != 0 and "missing.csa" in err and "does not exist" in err, err
    assert not out.exists() and leftovers(tmp_path) == []


def test_nothing_converted_fails_and_keeps_the_old_output(tmp_path, capsys):
    a, _ = two_games(tmp_path)
    (tmp_path / "junk.csa").write_text("this is not a game record\n")
    out = tmp_path / "out.hcpe"
    code, _, err = run(capsys, out, tmp_path / "junk.csa")
    assert code != 0 and "no position was converted" in err, err
    assert not out.exists()
    assert run(capsys, out, a)[0] == 0
    kept = out.read_bytes()
    code, _, err = run(capsys, out, tmp_path / "junk.csa", "--force")
    assert code != 0 and "no position was converted" in err
    assert out.read_bytes() == kept and leftovers(tmp_path) == []


def test_an_output_that_runs_out_of_room_fails_naming_it_and_is_not_written(tmp_path):
    """numpy's records.tofile(f) dropped the error of a buffered write under 4 KB: on a full
    disk convert said it wrote every position and left a short (or empty) file. A file size
    limit of 200 bytes stands in for the full disk here."""
    import os
    import subprocess
    import sys

    from paths import ROOT

    a, b = two_games(tmp_path)
    out = tmp_path / "out.hcpe"
    code = ("import resource, signal, sys; from manaka.shogi import convert\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))\n"
            "sys.exit(convert.main(sys.argv[1:]))\n")
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", code, str(out), str(a), str(b)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 2 and "wrote" not in done.stdout, done.stdout
    assert f"cannot write {str(out)!r}: File too large" in done.stderr, done.stderr
    assert not out.exists() and leftovers(tmp_path) == []


def test_ctrl_c_is_one_line_and_keeps_the_old_output(tmp_path, capsys, monkeypatch):
    """Ctrl-C while the records were parsed printed a KeyboardInterrupt traceback."""
    a, b = two_games(tmp_path)
    out = tmp_path / "out.hcpe"
    assert run(capsys, out, a)[0] == 0
    kept = out.read_bytes()

    def interrupted(paths):
        raise KeyboardInterrupt

    monkeypatch.setattr(convert, "_parse_isolated", interrupted)
    code, said, err = run(capsys, out, a, b, "--force")
    assert code == 130 and said == ""
    assert err == f"python -m manaka.shogi convert: interrupted; nothing was written ({out} is as it was)\n"
    assert out.read_bytes() == kept and leftovers(tmp_path) == []


def test_a_game_with_an_illegal_move_is_left_out_and_reported(tmp_path, capsys):
    seed = int(np.random.SeedSequence().entropy % 10_000)
    while True:
        good, bad = random_game(seed, 20), random_game(seed + 1, 30)
        board = cshogi.Board()
        for m in bad[:10]:
            board.push(m)
        # move 11 replays the first move of the game: illegal once its piece has left that
        # square for good (a game where it came back, or another piece took its place, is
        # drawn again)
        if not board.is_legal(bad[0]):
            break
        seed += 2
    write_csa(tmp_path / "good.csa", good)
    broken = bad[:10] + [bad[0]] + bad[11:]
    write_csa(tmp_path / "bad.csa", broken)
    both = tmp_path / "both.csa"  # one CSA file holding two games: the good one, then the broken one
    both.write_text((tmp_path / "good.csa").read_text() + "/\n" + (tmp_path / "bad.csa").read_text())
    out = tmp_path / "out.hcpe"
    code, said, err = run(capsys, out, both)
    assert code == 0
    assert f"{both}: game 2 of 2: move 11 " in err and "left out" in err, err
    assert f"wrote {len(good)} positions of 1 games" in said and "1 games left out" in said
    records = np.fromfile(out, cshogi.HuffmanCodedPosAndEval)
    assert len(records) == len(good)
    assert list(records["bestMove16"]) == [cshogi.move16(m) for m in good]


def csa_from_board(rows, move):
    """A CSA game from a board of CSA rows (rank 1 first, file 9 first, ' * ' for empty) and one move."""
    lines = ["V2.2"] + [f"P{r + 1}" + "".join(row) for r, row in enumerate(rows)] + ["+", move, "%TORYO", ""]
    return "\n".join(lines)


def test_a_game_from_a_position_that_is_not_legal_is_left_out_and_reported(tmp_path, capsys):
    # cshogi parses these boards and encoded them as records of another position (a third
    # king became a pawn in hand) or records the loader refuses, and the conversion said
    # they were written
    empty = [[" * "] * 9 for _ in range(9)]
    three_kings = [row[:] for row in empty]
    three_kings[0][4], three_kings[8][0], three_kings[8][4] = "-OU", "+OU", "+OU"
    pawn_on_rank_1 = [row[:] for row in empty]
    pawn_on_rank_1[0][0], pawn_on_rank_1[0][4], pawn_on_rank_1[8][4] = "+FU", "-OU", "+OU"
    (tmp_path / "kings.csa").write_text(csa_from_board(three_kings, "+5958OU"))
    (tmp_path / "pawn.csa").write_text(csa_from_board(pawn_on_rank_1, "+5958OU"))
    good = random_game(5, 16)
    write_csa(tmp_path / "good.csa", good)
    out = tmp_path / "out.hcpe"
    code, said, err = run(capsys, out, tmp_path / "kings.csa", tmp_path / "pawn.csa", tmp_path / "good.csa")
    assert code == 0, err
    assert "kings.csa: game 1 of 1: the starting position is not legal" in err and "one king" in err, err
    assert "pawn.csa: game 1 of 1: the starting position is not legal" in err and "never move" in err, err
    assert f"wrote {len(good)} positions of 1 games" in said and "2 games left out" in said, said
    records = np.fromfile(out, cshogi.HuffmanCodedPosAndEval)
    assert list(records["bestMove16"]) == [cshogi.move16(m) for m in good]
    # alone, nothing is converted: refused, nothing written
    code, _, err = run(capsys, tmp_path / "none.hcpe", tmp_path / "kings.csa")
    assert code != 0 and "no position was converted" in err and not (tmp_path / "none.hcpe").exists()
