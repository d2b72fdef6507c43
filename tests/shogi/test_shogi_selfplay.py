"""python -m manaka.shogi selfplay: engine games to HCPE, driven through real engine
processes (tests/helpers/fake_engine_selfplay.py, a tiny USI engine over cshogi with fault modes).

The records are checked against an independent replay with cshogi (the positions bit for
bit, the engine's move and score, the result by the rules); resuming, the split by game,
workers, illegal moves, resignations, dying and silent engines each have a test.
Fairy-Stockfish itself only where it is installed."""
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import fake_engine_selfplay
from shogi_reference import cshogi
from paths import HELPERS, ROOT

from manaka import shogi
from manaka.shogi import selfplay as sp
from manaka.shogi.game import Game, declaration_wins
from manaka.shogi.usi_client import EngineError, parse_score, score_to_eval

FAKE = [sys.executable, os.path.join(HELPERS, "fake_engine_selfplay.py")]
FSF = "/usr/games/fairy-stockfish"


def fake(*flags) -> str:
    return shlex.join(FAKE + [str(f) for f in flags])


def settings(engine=None, **kw) -> sp.Settings:
    base = dict(engine=engine or fake(), nodes=10, seed=7, random_plies=(2, 6), max_plies=120, timeout=20.0)
    base.update(kw)
    return sp.Settings(**base)


def run(out, games, st, **kw):
    played, lines = [], []
    stats = sp.selfplay(str(out), games, st, log=lines.append, on_game=played.append, **kw)
    return stats, played, lines


def read(path) -> np.ndarray:
    return np.fromfile(path, cshogi.HuffmanCodedPosAndEval)


def games_index(path):
    return [int(x) for x in Path(str(path) + ".games").read_text().split()]


def files_of(out):
    """The bytes of every output file (data, indices), for comparing two runs."""
    folder = Path(out).parent
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.endswith(".json")}


def expected_eval(words: str) -> int:
    kind, value = words.split()
    return score_to_eval(kind, value)


def check_game(game, st):
    """Replays `game` with cshogi from its moves: each record is the position before the
    engine's move bit for bit, the move and eval are the fake engine's, and the result
    follows from how the game ended by the rules."""
    assert game.error is None
    lo, hi = st.random_plies
    board = cshogi.Board()
    for m in game.moves[:game.opening_plies]:
        board.push_usi(m)
    assert game.opening_plies <= hi
    hcp = np.zeros(1, cshogi.HuffmanCodedPos)
    for r, rec in enumerate(game.records):
        board.to_hcp(hcp)
        assert rec["hcp"].tobytes() == hcp.tobytes(), (game.index, r)
        move, score = fake_engine_selfplay.choose(board)
        assert cshogi.move_to_usi(board.move_from_move16(int(rec["bestMove16"]))) == move
        assert game.moves[game.opening_plies + r] == move
        assert rec["eval"] == expected_eval(score)
        assert rec["gameResult"] == game.result
        board.push_usi(move)
    assert len(game.records) == len(game.moves) - game.opening_plies
    # the end, by the rules, from cshogi's board
    seen, history = {}, cshogi.Board()
    for m in game.moves:
        key = history.sfen().rsplit(" ", 1)[0]
        seen[key] = seen.get(key, 0) + 1
        history.push_usi(m)
    key = history.sfen().rsplit(" ", 1)[0]
    seen[key] = seen.get(key, 0) + 1
    if history.is_game_over():
        assert game.reason == "mate" and game.result == 1 + (1 - history.turn)
    elif seen[key] >= 4:
        assert game.reason in ("repetition", "perpetual check")
    else:
        assert len(game.moves) == st.max_plies and game.reason == "max plies" and game.result == 0
    return len(game.records)


def test_records_replay_to_the_engines_games(tmp_path):
    st = settings()
    out = tmp_path / "x.hcpe"
    stats, played, _ = run(out, 6, st)
    assert [g.index for g in played] == list(range(6))
    assert sum(check_game(g, st) for g in played) == stats["positions"] > 100
    assert any(g.reason == "mate" for g in played)  # the fake engine mates when it can
    # the file is the games' records in order, indexed by .games
    data = read(out)
    assert data.tobytes() == b"".join(g.records.tobytes() for g in played)
    assert games_index(out) == [len(g.records) for g in played]
    # manaka's own reader accepts every record (the move legal, the result in range)
    *_, status = shogi.decode(data.view(np.uint8).reshape(-1, 38), shogi.HCPE)
    assert not status.any()
    assert len(shogi.open_hcpe(str(out))) == len(data)


def test_resume_continues_to_the_same_games(tmp_path):
    st = settings()
    whole = tmp_path / "whole" / "x.hcpe"
    whole.parent.mkdir()
    run(whole, 6, st, held_out_out=None)
    parts = tmp_path / "parts" / "x.hcpe"
    parts.parent.mkdir()
    run(parts, 3, st)
    stats, played, lines = run(parts, 6, st)
    assert [g.index for g in played] == [3, 4, 5] and any("resuming after 3 games" in l for l in lines)
    assert files_of(parts) == files_of(whole)
    # a run cut during a game's write: records past the index, a line without its newline
    index = Path(str(parts) + ".games")
    counts = games_index(parts)
    index.write_text("".join(f"{n}\n" for n in counts[:-1]) + "12")
    with open(parts, "ab") as f:
        f.write(b"\x55" * 50)
    stats, played, lines = run(parts, 6, st)
    assert [g.index for g in played] == [5] and any("cutting" in l for l in lines)
    assert files_of(parts) == files_of(whole)
    # nothing more to do
    stats, played, lines = run(parts, 6, st)
    assert played == [] and files_of(parts) == files_of(whole) and any("nothing to play" in l for l in lines)
    # other settings are refused, the files untouched
    with pytest.raises(ValueError, match="nodes: 10 before, 11 now"):
        run(parts, 8, settings(nodes=11))
    assert files_of(parts) == files_of(whole)


def test_existing_files_are_not_overwritten(tmp_path):
    out = tmp_path / "mine.hcpe"
    out.write_bytes(b"\1" * 38)
    with pytest.raises(ValueError, match="not a selfplay output"):
        run(out, 2, settings())
    assert out.read_bytes() == b"\1" * 38
    index_only = tmp_path / "y.hcpe"
    run(index_only, 1, settings())
    Path(str(index_only) + ".games").write_text("1000\n")
    with pytest.raises(ValueError, match="do not belong together"):
        run(index_only, 2, settings())


def test_a_held_out_file_named_on_a_rerun_is_not_taken_over(tmp_path):
    # a rerun naming an existing HCPE file (no .games index: not this command's) as its
    # held-out file: it was cut to nothing as "a game not finished writing" and written into
    st = settings(held_out_fraction=0.5)
    out = tmp_path / "x.hcpe"
    run(out, 2, st)
    mine = tmp_path / "mine.hcpe"
    mine.write_bytes(b"\1" * 380)
    before = files_of(out)
    with pytest.raises(ValueError, match=r"mine\.hcpe exists and is not a selfplay output.*left alone"):
        run(out, 4, st, held_out_out=str(mine))
    assert mine.read_bytes() == b"\1" * 380 and files_of(out) == before


@pytest.mark.parametrize("suffix, role", [(".games", "--out's index"), (".selfplay.json", "--out's settings")])
def test_a_held_out_file_that_is_one_of_the_outs_files_is_refused(tmp_path, suffix, role):
    out = tmp_path / "x.hcpe"
    with pytest.raises(ValueError, match=f"the held-out file .*x.hcpe{re.escape(suffix)} is also {role}"):
        run(out, 2, settings(held_out_fraction=0.5), held_out_out=str(out) + suffix)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("which", ["out", "index", "held"])
def test_an_output_that_is_a_fifo_or_a_folder_is_refused_before_anything_is_written(tmp_path, which):
    # a FIFO: opening it to append blocked until a reader came (a hang), after the settings
    # file had been written beside it
    out, held = tmp_path / "x.hcpe", tmp_path / "h.hcpe"
    target = {"out": out, "index": Path(str(out) + ".games"), "held": held}[which]
    for make in (os.mkfifo, os.mkdir):
        make(target)
        with pytest.raises(ValueError, match=f"{re.escape(str(target))} is not a regular file.*nothing was written"):
            run(out, 2, settings(held_out_games=1), held_out_out=str(held))
        assert os.listdir(tmp_path) == [target.name]
        os.rmdir(target) if target.is_dir() else os.remove(target)


def test_a_second_run_on_the_same_files_is_refused_while_the_first_writes(tmp_path):
    # it cut the first run's game in progress as "not finished writing", then played the
    # same games again beside the first's (the command started twice: 2 x the games asked)
    import fcntl

    (tmp_path / "a").mkdir()
    out = tmp_path / "a" / "x.hcpe"
    run(out, 2, settings())
    before = files_of(out)
    with open(out, "ab") as other:  # the running first run's hold on its output
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ValueError, match=r"another selfplay run is writing .*x\.hcpe.*nothing was written"):
            run(out, 4, settings())
        (tmp_path / "new").mkdir()
        fresh = tmp_path / "new" / "y.hcpe"
        with open(fresh, "ab") as hold:  # another run's first game, not written yet
            fcntl.flock(hold.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            with pytest.raises(ValueError, match="another selfplay run"):
                run(fresh, 1, settings())
    assert files_of(out) == before
    run(out, 4, settings())  # once the first has ended, the run continues its files
    assert len(games_index(out)) == 4


def test_an_interrupted_append_leaves_no_game_the_index_does_not_count(tmp_path):
    # Ctrl-C between a game's records and its index line left the records in the data file,
    # uncounted, until a rerun cut them off (a reader of the file saw a game the index lacks)
    lines = []
    game = sp.GameFile(str(tmp_path / "x.hcpe"), lines.append)
    first, second = np.zeros(3, sp.HCPE_DTYPE), np.ones(5, sp.HCPE_DTYPE)
    game.append(first)

    class Interrupted:
        def __init__(self, real):
            self.real = real

        def write(self, text):
            raise KeyboardInterrupt

        def __getattr__(self, name):
            return getattr(self.real, name)

    game.index = Interrupted(game.index)
    with pytest.raises(KeyboardInterrupt):
        game.append(second)
    game.index = game.index.real
    game.close()
    assert (tmp_path / "x.hcpe").read_bytes() == first.tobytes()
    assert games_index(tmp_path / "x.hcpe") == [3]
    again = sp.GameFile(str(tmp_path / "x.hcpe"), lines.append)
    again.close()
    assert again.counts == [3] and lines == []  # nothing to cut off


def test_a_game_that_does_not_fit_on_the_disk_is_taken_back_and_the_file_named(tmp_path):
    """On a full disk the data file's buffered write failed again in the cleanup's flush, so
    the part of the game that fitted stayed in the file, uncounted, and the error said only
    "No space left on device". A file size limit of 1,000 bytes stands in for the full disk."""
    path = tmp_path / "x.hcpe"
    code = ("import resource, signal, sys; import numpy as np; from manaka.shogi import selfplay as sp\n"
            "game = sp.GameFile(sys.argv[1], print)\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))\n"
            "game.append(np.ones(100, sp.HCPE_DTYPE))\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"OSError: [Errno 27] cannot write {str(path)!r}: File too large"
    assert path.read_bytes() == b"" and games_index(path) == []


def test_a_rerun_without_the_split_cannot_replay_a_held_out_game_into_the_train_file(tmp_path):
    """Settings are replaced while --out holds no game, but only --out and the run's own
    held-out file were looked at: a run without a split, after one that had written its
    game 0 to the default held-out file, replayed game 0 into --out, trained on and held out."""
    out = tmp_path / "x.hcpe"
    run(out, 0, settings())  # settings without a split, no game
    run(out, 1, settings(held_out_games=5))  # no game in --out yet: its settings replace them
    assert games_index(tmp_path / "x-heldout.hcpe") != [] and games_index(out) == []
    with pytest.raises(ValueError, match=r"x\.hcpe holds games made with other settings \(held_out_games: 5 before, "
                                         r"None now\)"):
        run(out, 2, settings())
    assert games_index(out) == []


def test_a_held_out_file_that_cannot_be_opened_leaves_no_file(tmp_path):
    """--out's index and settings were written before the held-out file was opened, and were
    left behind when it could not be (only --out itself was removed)."""
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(NotADirectoryError):
        run(tmp_path / "x.hcpe", 1, settings(held_out_games=1), held_out_out=str(tmp_path / "file" / "y.hcpe"))
    assert os.listdir(tmp_path) == ["file"]


def test_settings_that_cannot_be_read_are_named(tmp_path):
    out = tmp_path / "x.hcpe"
    Path(str(out) + ".selfplay.json").write_bytes(b"\xa4\x00 not json")
    with pytest.raises(ValueError, match=r"x\.hcpe\.selfplay\.json cannot be read as this command's settings"):
        run(out, 2, settings())
    assert sorted(os.listdir(tmp_path)) == ["x.hcpe.selfplay.json"]


@pytest.mark.parametrize("split", [dict(held_out_games=2), dict(held_out_fraction=0.4)])
def test_split_by_game(tmp_path, split):
    st = settings(**split)
    out = tmp_path / "x.hcpe"
    stats, played, _ = run(out, 8, st)
    held_path = tmp_path / "x-heldout.hcpe"
    held = [g for g in played if sp.is_held_out(st, g.index)]
    train = [g for g in played if not sp.is_held_out(st, g.index)]
    assert held and train
    if "held_out_games" in split:
        assert [g.index for g in held] == [0, 1]
    assert read(out).tobytes() == b"".join(g.records.tobytes() for g in train)
    assert read(held_path).tobytes() == b"".join(g.records.tobytes() for g in held)
    assert games_index(out) == [len(g.records) for g in train]
    assert games_index(held_path) == [len(g.records) for g in held]
    assert stats["held_out_positions"] == sum(len(g.records) for g in held)
    # no position of a held-out game is a record of the train file (openings differ)
    train_codes = {r.tobytes() for r in read(out)["hcp"]}
    assert not any(r.tobytes() in train_codes for r in read(held_path)["hcp"][1:])
    # resuming with the split keeps it
    stats, played, _ = run(out, 10, st)
    assert [g.index for g in played] == [8, 9]
    assert len(games_index(out)) + len(games_index(held_path)) == 10


def test_workers_give_the_same_files(tmp_path):
    for workers in (1, 2, 3):
        out = tmp_path / f"w{workers}" / "x.hcpe"
        out.parent.mkdir()
        run(out, 7, settings(held_out_fraction=0.3), workers=workers)
    assert files_of(tmp_path / "w1" / "x.hcpe") == files_of(tmp_path / "w2" / "x.hcpe")
    assert files_of(tmp_path / "w1" / "x.hcpe") == files_of(tmp_path / "w3" / "x.hcpe")


def test_fresh_engine_makes_games_independent_of_the_process(tmp_path):
    # an engine whose answers depend on the games it played before: the files depend on
    # which process played which game, unless every game gets a fresh process
    def files(workers, fresh):
        out = tmp_path / f"w{workers}-{fresh}" / "x.hcpe"
        out.parent.mkdir(exist_ok=True)
        run(out, 4, settings(engine=fake("--stateful"), fresh_engine=fresh), workers=workers)
        return files_of(out)

    fresh = files(1, True)
    assert files(2, True) == fresh
    assert files(1, False) != fresh


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "manaka.shogi", "selfplay", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_a_killed_run_resumes_to_the_same_files(tmp_path):
    args = ["--engine", fake(), "--nodes", 5, "--games", 6, "--seed", 3, "--random-plies", "2-6",
            "--max-plies", 120, "--held-out-games", 1]
    clean = tmp_path / "clean" / "x.hcpe"
    clean.parent.mkdir()
    assert cli(*args, "--out", clean).returncode == 0
    out = tmp_path / "killed" / "x.hcpe"
    out.parent.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "manaka.shogi", "selfplay", *map(str, args), "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    index = Path(str(out) + ".games")
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if index.exists() and len(index.read_text().split()) >= 2:
            break
        time.sleep(0.01)
    proc.kill()  # SIGKILL: no clean-up runs
    proc.wait()
    assert len(index.read_text().split()) < 5, "the run ended before it could be killed"
    r = cli(*args, "--out", out)
    assert r.returncode == 0, r.stderr
    assert files_of(out) == files_of(clean)


def test_illegal_move_is_reported_and_not_written(tmp_path):
    out = tmp_path / "x.hcpe"
    r = cli("--engine", fake("--illegal-at", 3), "--nodes", 5, "--games", 3, "--out", out, "--max-plies", 60,
            "--random-plies", "2-4")
    assert r.returncode == 0, r.stderr
    assert "game 0: the engine played" in r.stderr and "which is not legal" in r.stderr
    assert "3 games (1 failed)" in r.stdout and "positions/s" in r.stdout and "games/s" in r.stdout
    counts = games_index(out)
    assert len(counts) == 3 and counts[0] == 0 and counts[1] > 0 and counts[2] > 0
    data = read(out)
    assert len(data) == sum(counts)
    board = cshogi.Board()
    for rec in data:  # every written move is legal where it was played
        board.set_hcp(rec["hcp"])
        assert board.is_legal(board.move_from_move16(int(rec["bestMove16"])))


@pytest.mark.parametrize("mode,records,loser", [("--resign-at", 1, "second"), ("--lose-score-at", 2, "second"),
                                                 ("--win-at", 1, "second")])
def test_resignation_and_declaration_end_the_game(tmp_path, mode, records, loser):
    st = settings(engine=fake(mode, 2), resign_score=3000)
    _, played, _ = run(tmp_path / "x.hcpe", 1, st)
    g = played[0]
    assert len(g.records) == records
    # the engine's second move was its own side's (it plays both): that side loses
    side_second = (g.opening_plies + 1) % 2
    assert g.result == 1 + (1 - side_second)
    assert g.reason == {"--resign-at": "resign", "--lose-score-at": "resign score", "--win-at": "wrong declaration"}[mode]
    if mode == "--lose-score-at":
        assert g.records["eval"][-1] == -5000


def test_a_dying_engine_stops_the_run_with_a_clear_error(tmp_path):
    out = tmp_path / "x.hcpe"
    with pytest.raises(EngineError, match=r"game 0 failed twice.*exit code 3.*crashing at go 3"):
        run(out, 3, settings(engine=fake("--crash-at", 3)))
    assert games_index(out) == [] and out.stat().st_size == 0
    r = cli("--engine", fake("--crash-at", 3), "--nodes", 5, "--games", 2, "--out", tmp_path / "c.hcpe")
    assert r.returncode == 1 and "exit code 3" in r.stderr and "rerun the same command to resume" in r.stderr
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]  # the command's prefix once, not "selfplay: selfplay: "
    assert last.startswith("python -m manaka.shogi selfplay: game 0 failed twice"), last


def test_an_engine_that_dies_once_is_restarted_and_the_game_replayed(tmp_path):
    clean = tmp_path / "clean" / "x.hcpe"
    clean.parent.mkdir()
    _, games, _ = run(clean, 4, settings())
    out = tmp_path / "crash" / "x.hcpe"
    out.parent.mkdir()
    # the first process dies in game 2 (one go per record here: the games end by mate or
    # length); its replacement counts its go commands afresh
    assert all(g.reason in ("mate", "max plies") for g in games[:2])
    crash = len(games[0].records) + len(games[1].records) + 3
    stats, played, lines = run(out, 4, settings(engine=fake("--crash-at", crash)))
    assert any("restarting the engine" in l for l in lines), lines
    assert files_of(out) == files_of(clean)


def test_a_silent_engine_times_out(tmp_path):
    with pytest.raises(EngineError, match=r"did not answer within 1 s while thinking"):
        run(tmp_path / "x.hcpe", 2, settings(engine=fake("--hang-at", 2), timeout=1.0))


def test_engine_start_problems(tmp_path):
    with pytest.raises(EngineError, match="cannot start the engine"):
        run(tmp_path / "a.hcpe", 1, settings(engine=str(tmp_path / "no-such-engine")))
    with pytest.raises(EngineError, match="has no option 'Foo'"):
        run(tmp_path / "b.hcpe", 1, settings(options={"Foo": "1"}))
    # UCI_Variant: sent only when offered (auto); never with variant=None
    run(tmp_path / "c.hcpe", 1, settings(engine=fake("--no-variant-option")))
    with pytest.raises(EngineError, match="UCI_Variant is None"):
        run(tmp_path / "d.hcpe", 1, settings(variant=None))


def test_bad_arguments(tmp_path):
    out = str(tmp_path / "x.hcpe")
    for kw, match in [(dict(held_out_fraction=1.5), "fraction"), (dict(random_plies=(5, 2)), "random plies"),
                      (dict(nodes=0), "nodes"), (dict(nodes=2**63), r"nodes must be <= 2\^63 - 1"),
                      (dict(max_plies=0), "max plies"),
                      (dict(held_out_games=1, held_out_fraction=0.1), "not both"),
                      # an engine given no time, or unbounded waits (nan): refused before it starts
                      (dict(timeout=0.0), "timeout must be a finite number of seconds > 0, got 0.0"),
                      (dict(timeout=float("nan")), "timeout must be a finite number of seconds > 0, got nan")]:
        with pytest.raises(ValueError, match=match):
            sp.selfplay(out, 1, settings(**kw), log=lambda line: None)
    with pytest.raises(ValueError, match="held-out file needs"):
        sp.selfplay(out, 1, settings(), held_out_out=out + ".held", log=lambda line: None)
    assert not os.path.exists(out)
    r = cli("--engine", fake(), "--nodes", 5, "--games", 1, "--out", out, "--random-plies", "9-3")
    assert r.returncode == 2 and "LO-HI" in r.stderr
    # every game whose opening reaches max plies ended before the engine moved: 0 records, exit 0
    with pytest.raises(ValueError, match="random plies 2-6 reach max plies 6: no ply would be left"):
        sp.selfplay(out, 1, settings(max_plies=6), log=lambda line: None)
    # an option with no name ("=3") was sent to the engine as '' and failed its games
    r = cli("--engine", fake(), "--nodes", 5, "--games", 1, "--out", out, "--option", "=3")
    assert r.returncode == 2 and "expected NAME=VALUE, got '=3'" in r.stderr
    assert not os.path.exists(out)


def test_scores():
    assert score_to_eval("cp", "35") == 35 and score_to_eval("cp", "-99999") == -32767
    assert score_to_eval("mate", "7") == 31993 and score_to_eval("mate", "+7") == 31993
    assert score_to_eval("mate", "-4") == -31996 and score_to_eval("mate", "0") == -32000
    assert score_to_eval("mate", "-0") == -32000
    assert score_to_eval("mate", "+") == 32000 and score_to_eval("mate", "-") == -32000
    assert parse_score("info depth 8 seldepth 9 multipv 1 score cp -47 upperbound nodes 5002 pv 8b9b") == -47
    assert parse_score("info depth 3 score mate -2 pv 5a4b") == -31998
    assert parse_score("info depth 3 multipv 2 score cp 80 pv 7g7f") is None  # not the best line
    assert parse_score("info string score cp 12") is None
    assert parse_score("info depth 1 nodes 5") is None and parse_score("info score") is None


def test_repetition_and_perpetual_check():
    # kings walking back and forth: a draw at the fourth occurrence
    game = Game("4k4/9/9/9/9/9/9/9/4K4 b - 1")
    cycle = ["5i5h", "5a5b", "5h5i", "5b5a"] * 3
    for i, m in enumerate(cycle):
        assert game.repetition() is None, i
        game.play(shogi.usi_to_move(m))
    assert game.repetition() == (None, "repetition")
    # Black's rook checks at every move: Black loses at the fourth occurrence
    game = Game("4k4/9/9/9/9/9/9/9/K7R b - 1")
    moves = ["1i1a"] + ["5a5b", "1a1b", "5b5a", "1b1a"] * 3
    for m in moves:
        assert game.repetition() is None
        game.play(shogi.usi_to_move(m))
    assert game.in_check() and game.repetition() == (1, "perpetual check")


def test_entering_king_declaration():
    # Black's king on 5b with ten pieces in White's camp: 2 rooks, 2 bishops (20 points),
    # 4 golds and 2 silvers (6), and 2 pawns in hand: 28 points
    sfen = "RRBB1GGGG/4K4/SS7/9/9/9/9/9/4k4 b 2P 1"
    assert declaration_wins(shogi.parse_sfen(sfen))
    assert not declaration_wins(shogi.parse_sfen(sfen.replace(" 2P ", " P ")))  # 27 points: Black needs 28
    assert not declaration_wins(shogi.parse_sfen(sfen.replace("SS7", "S8")))  # nine pieces
    # White needs 27
    white = "4K4/9/9/9/9/9/7ss/4k4/gggg1bbrr w p 1"
    assert declaration_wins(shogi.parse_sfen(white))
    assert not declaration_wins(shogi.parse_sfen(white.replace(" p ", " - ")))


@pytest.mark.skipif(not os.path.exists(FSF), reason="Fairy-Stockfish is not installed (/usr/games/fairy-stockfish)")
def test_fairy_stockfish(tmp_path):
    out = tmp_path / "f.hcpe"
    st = sp.Settings(engine=FSF, nodes=300, seed=1, random_plies=(2, 4), max_plies=40)
    stats, played, _ = run(out, 2, st, workers=2)
    assert stats["positions"] == len(read(out)) > 10
    hcp = np.zeros(1, cshogi.HuffmanCodedPos)
    for g in played:  # the records are the game's positions and moves, replayed by cshogi
        board = cshogi.Board()
        for i, m in enumerate(g.moves):
            if i >= g.opening_plies:
                rec = g.records[i - g.opening_plies]
                board.to_hcp(hcp)
                assert rec["hcp"].tobytes() == hcp.tobytes()
                assert cshogi.move_to_usi(board.move_from_move16(int(rec["bestMove16"]))) == m
            board.push_usi(m)
    assert read(out).tobytes() == b"".join(g.records.tobytes() for g in played)
    *_, status = shogi.decode(read(out).view(np.uint8).reshape(-1, 38), shogi.HCPE)
    assert not status.any()
    # a fresh engine per game: the same files for one and two workers
    for workers in (1, 2):
        path = tmp_path / f"fresh{workers}" / "f.hcpe"
        path.parent.mkdir()
        run(path, 3, sp.Settings(**{**st.__dict__, "fresh_engine": True}), workers=workers)
    assert files_of(tmp_path / "fresh1" / "f.hcpe") == files_of(tmp_path / "fresh2" / "f.hcpe")


def test_a_run_that_wrote_no_game_does_not_bind_its_settings(tmp_path):
    # an engine command with a typo fails before any game, but its settings were kept and
    # the corrected command refused ("holds games made with other settings"), though --out
    # held no game: only deleting the three files by hand let it run
    out = tmp_path / "x.hcpe"
    with pytest.raises(EngineError, match="cannot start the engine"):
        run(out, 2, settings(engine=str(tmp_path / "no-such-engine")))
    assert games_index(out) == [] and out.stat().st_size == 0
    stats, played, lines = run(out, 2, settings())
    assert len(played) == 2 and games_index(out) and any("holds no game yet" in l for l in lines), lines
    # once it holds games, other settings are refused again, the files untouched
    before = files_of(out)
    with pytest.raises(ValueError, match="holds games made with other settings"):
        run(out, 3, settings(engine=str(tmp_path / "no-such-engine")))
    assert files_of(out) == before
