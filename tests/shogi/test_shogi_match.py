"""python -m manaka.shogi match: games between USI engines (fake Python engines over cshogi
here), adjudication, W/D/L and the Elo interval."""
import json
import math
import os
import random
import subprocess
import sys
import time

import numpy as np
import pytest

cshogi = pytest.importorskip("cshogi")

from manaka.shogi import elo  # noqa: E402
from manaka.shogi.game import Game  # noqa: E402
from manaka.shogi.match import (Clock, Player, adjudicate, go_args_problem, random_opening, run_match, summary,  # noqa: E402
                                 tally)
from manaka.shogi.position import move_to_usi, usi_to_move  # noqa: E402

from paths import HELPERS, ROOT  # noqa: E402

FAKE = os.path.join(HELPERS, "fake_engine_match.py")


def fake(mode, seed=0):
    return Player(f"{sys.executable} {FAKE} {mode} {seed}", f"fake-{mode}")


# ------------------------------------------------------------------ how a game ends

def test_mate_repetition_and_perpetual_check():
    assert adjudicate(Game("4k4/9/9/9/9/9/4p4/4g4/4K4 b - 1")) == (0.0, "mate")   # Black mated
    # kings shuffling: the fourth occurrence of the start is a draw, not the third
    g = Game("4k4/9/9/9/9/9/9/9/4K4 b - 1")
    for i, m in enumerate(["5i5h", "5a5b", "5h5i", "5b5a"] * 3):
        assert adjudicate(g) is None, i
        g.play(usi_to_move(m))
    assert adjudicate(g) == (0.5, "repetition")
    # Black's rook checks with every move: Black loses
    g = Game("4k4/9/9/9/4R4/9/9/9/K8 w - 1")
    for m in ["5a4a", "5e4e", "4a5a", "4e5e"] * 3:
        assert adjudicate(g) is None
        g.play(usi_to_move(m))
    assert adjudicate(g) == (0.0, "perpetual check")
    # the same seen from the other side: White checks with every move and loses
    g = Game("k8/9/9/9/4r4/9/9/9/4K4 b - 1")
    for m in ["5i4i", "5e4e", "4i5i", "4e5e"] * 3:
        g.play(usi_to_move(m))
    assert adjudicate(g) == (1.0, "perpetual check")


def test_random_opening_is_legal_and_seeded():
    a = random_opening(random.Random(3), 12)
    assert a == random_opening(random.Random(3), 12) and len(a) == 12
    board = cshogi.Board()
    for m in a:
        assert move_to_usi(m) in {cshogi.move_to_usi(x) for x in board.legal_moves}
        board.push_usi(move_to_usi(m))


# ------------------------------------------------------------------ the Elo interval

def test_elo_point_and_interval_formulas():
    assert elo.elo_from_score(0.5) == 0.0
    assert elo.elo_from_score(0.75) == pytest.approx(-400 * math.log10(1 / 0.75 - 1))
    # no draws: Wilson's interval for a binomial proportion
    w, l, z = 14, 6, elo.Z95
    n, p = w + l, w / (w + l)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert elo.score_interval(w, 0, l) == pytest.approx((centre - half, centre + half))
    # many games: the normal approximation with the per-game (trinomial) variance
    w, d, l = 6000, 2000, 2000
    n, s = w + d + l, (w + d / 2) / (w + d + l)
    sd = math.sqrt((w * (1 - s) ** 2 + d * (0.5 - s) ** 2 + l * s ** 2) / n / n)
    low, high = elo.score_interval(w, d, l)
    assert low == pytest.approx(s - z * sd, abs=2e-4) and high == pytest.approx(s + z * sd, abs=2e-4)
    # all wins: Elo +inf, a finite lower bound n / (n + z^2)
    e, lo, hi = elo.elo_interval(20, 0, 0)
    assert e == math.inf and hi == math.inf and lo == pytest.approx(elo.elo_from_score(20 / (20 + z * z)))
    # only draws: Elo 0 with an interval of nonzero width (the draw ratio is shrunk)
    e, lo, hi = elo.elo_interval(0, 20, 0)
    assert e == 0.0 and lo == pytest.approx(-hi) and 20 < hi < 200
    with pytest.raises(ValueError):
        elo.score_interval(-1, 0, 3)


def test_elo_interval_covers_the_truth_95_percent():
    rng = np.random.default_rng(1)
    for p_win, p_draw in ((0.5, 0.2), (0.3, 0.5), (0.8, 0.1)):
        truth = p_win + p_draw / 2
        counts = rng.multinomial(40, [p_win, p_draw, 1 - p_win - p_draw], size=3000)
        inside = [lo <= truth <= hi for lo, hi in (elo.score_interval(*c) for c in counts)]
        assert 0.92 <= np.mean(inside) <= 0.985, (p_win, p_draw, np.mean(inside))


# ------------------------------------------------------------------ matches of fake engines

def test_resigner_loses_every_game_exactly():
    records = run_match(fake("random"), fake("resign"), 4, Clock(byoyomi=1000), openings=(2, 6), report=None)
    assert tally(records) == (4, 0, 0)
    assert [r.black for r in records] == ["A", "B", "A", "B"]
    assert all(r.reason == "resign" for r in records)
    # the resigner (B) resigns at its first move: right after the opening when it is to move then
    for r in records:
        resigner_to_move = (r.opening % 2 == 0) == (r.black == "B")
        assert r.plies == r.opening + (0 if resigner_to_move else 1)
    s = summary(fake("random"), fake("resign"), records)
    assert s["elo"] == math.inf and 0 < s["elo_low"] < s["elo_high"] == math.inf
    # the same opening for both colours of a pair
    assert records[0].moves[:records[0].opening] == records[1].moves[:records[1].opening]


def test_illegal_move_loses():
    records = run_match(fake("illegal"), fake("random"), 2, Clock(byoyomi=1000), openings=(0, 0), report=None)
    assert tally(records) == (0, 0, 2)
    assert {r.reason for r in records} == {"illegal move 5e5d"}


def test_timeout_and_crash_lose_and_the_engine_is_restarted():
    clock = Clock(byoyomi=300, grace=100)
    records = run_match(fake("hang"), fake("random"), 2, clock, openings=(0, 0), report=None)
    assert tally(records) == (0, 0, 2) and {r.reason for r in records} == {"timeout"}
    records = run_match(fake("slow"), fake("random"), 2, clock, openings=(0, 0), report=None)
    assert tally(records) == (0, 0, 2) and {r.reason for r in records} == {"timeout"}
    records = run_match(fake("win"), fake("random"), 2, clock, openings=(0, 0), report=None)
    assert tally(records) == (0, 0, 2) and {r.reason for r in records} == {"false declaration"}
    # a crash with time to spare (a process's exit can take longer than 0.4 s on a loaded machine)
    records = run_match(fake("random"), fake("crash"), 2, Clock(byoyomi=5000), openings=(0, 0), report=None)
    assert tally(records) == (2, 0, 0) and {r.reason for r in records} == {"engine died"}


def test_an_engine_that_floods_its_output_times_out():
    # lines kept coming faster than the deadline was checked: the runner read them forever
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "manaka.shogi", "match", f"{sys.executable} {FAKE} flood", f"{sys.executable} {FAKE} random",
           "--games", "2", "--byoyomi", "300", "--grace", "100", "--openings", "0"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "2 games, +0 =0 -2" in done.stdout and "endings: timeout 2" in done.stdout, done.stdout
    handshake = (f"from manaka.shogi.usi_client import UsiEngine\n"
                 f"UsiEngine({[sys.executable, FAKE, 'flood-usi']!r}, timeout=1, start_timeout=1)")
    done = subprocess.run([sys.executable, "-c", handshake], capture_output=True, text=True, timeout=30, cwd=ROOT,
                          env=env)
    assert done.returncode != 0 and "did not answer within 1 s while waiting for usiok" in done.stderr, done.stderr


def test_a_flooding_engine_is_read_into_a_bounded_queue_and_its_reader_ends_at_close():
    # the queue of read lines was unbounded: a flooding engine grew it by ~1 GB over a 60 s
    # move timeout, and a bounded queue must not keep its reader waiting once nobody reads
    from manaka.shogi import usi_client
    engine = usi_client.UsiEngine([sys.executable, FAKE, "flood"], timeout=1, start_timeout=30)
    engine._send("position startpos")
    engine._send("go nodes 1")
    deadline = time.monotonic() + 20
    while engine._lines.qsize() < usi_client.MAX_QUEUED and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # more than enough time for thousands more lines
    assert engine._lines.qsize() == usi_client.MAX_QUEUED
    engine.close()
    engine._reader.join(10)
    assert not engine._reader.is_alive() and engine.proc.poll() is not None


def test_an_engine_whose_child_keeps_its_pipes_open_times_out():
    # a wrapper script's engine that hangs: kill() ends the script, not the engine, which
    # keeps the pipes open; closing them waited for it (for ever)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    handshake = (f"from manaka.shogi.usi_client import UsiEngine\n"
                 f"UsiEngine({[sys.executable, FAKE, 'wrapper']!r}, timeout=1, start_timeout=1)")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", handshake], capture_output=True, text=True, timeout=30, cwd=ROOT,
                          env=env)
    assert done.returncode != 0 and "did not answer within 1 s while waiting for readyok" in done.stderr, done.stderr
    assert time.monotonic() - started < 15, "close() waited for the engine's child (it lives 20 s)"
    # and the child is killed with it (its process group), not left running
    child = int(done.stderr.split("child ")[1].split()[0])
    deadline = time.monotonic() + 10
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(child), "the wrapper's child outlived the engine"


def _running(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie has)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return False


def test_an_engine_whose_output_has_no_line_end_times_out_in_bounded_memory():
    # the reader made one line of all the output (cat /dev/zero as an engine: gigabytes a
    # second); under an address-space limit 1 GB over the start, a MemoryError in the reader
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    handshake = ("import resource\n"
                 "from manaka.shogi.usi_client import UsiEngine\n"
                 "vm = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024\n"
                 "resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))\n"
                 f"UsiEngine({[sys.executable, FAKE, 'no-newline']!r}, timeout=3, start_timeout=3)")
    done = subprocess.run([sys.executable, "-c", handshake], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=env)
    assert "did not answer within 3 s while waiting for usiok" in done.stderr, done.stderr[-2000:]
    assert "MemoryError" not in done.stderr and done.stderr.count("Traceback") == 1, done.stderr[-2000:]
    assert len(done.stderr.splitlines()[-1]) < 2000  # the engine's stderr tail is cut too


def test_a_bad_engine_command_or_option_is_a_usage_error():
    # an empty command and unbalanced quotes were a ValueError traceback at the first game;
    # --option-a NAME (no =) set the option to the empty string, silently
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    good = f"{sys.executable} {FAKE} random"
    for argv, said in (([" ", good], "ENGINE_A is an empty command"),
                       ([good, "python 'engine"], "ENGINE_B \"python 'engine\": No closing quotation"),
                       ([good, good, "--option-a", "Threads"], "--option-a expects NAME=VALUE, got 'Threads'"),
                       ([good, good, "--option-b", "=4"], "--option-b expects NAME=VALUE, got '=4'"),
                       # go arguments were sent as given: "go nodes -5", or "go infinite", which
                       # only ends at --move-timeout since a match never sends stop
                       ([good, good, "--go-a", "nodes -5"],
                        "--go-a 'nodes -5' needs nodes >= 1 (and below 2^63), got -5"),
                       ([good, good, "--go-b", "infinite"], "--go-b 'infinite' has 'infinite' where a limit is "
                        "expected (one of nodes, depth, movetime, mate, byoyomi, btime, wtime, binc, winc)"),
                       # a path under a file was found only when the match's end wrote its games
                       ([good, good, "--json", f"{FAKE}/m.json"],
                        f"--json {FAKE}/m.json cannot be written: {FAKE} is a file, not a folder"),
                       # "" read as no --json: the games were played and none written
                       ([good, good, "--json", ""], "argument --json: an empty path (an unset shell variable?)")):
        done = subprocess.run([sys.executable, "-m", "manaka.shogi", "match", *argv, "--games", "2"],
                              capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.splitlines()[-1] == f"python -m manaka.shogi match: error: {said}", done.stderr


@pytest.mark.parametrize("text,problem", [
    ("", "is empty: give a limit, e.g. 'nodes 100'"),
    ("nodes", "needs an integer after nodes, got None"),
    ("nodes 1e3", "needs an integer after nodes, got '1e3'"),
    ("nodes 0", "needs nodes >= 1 (and below 2^63), got 0"),
    (f"nodes {2**63}", f"needs nodes >= 1 (and below 2^63), got {2**63}"),
    ("nodes 100 nodes 5", "gives nodes twice"),
    ("ponder nodes 5", "has 'ponder' where a limit is expected"),
    ("binc 100 winc 100", "bounds no search (give one of nodes, depth, movetime, mate, byoyomi, btime, wtime)"),
    ("nodes 100", None), ("depth 3 movetime 500", None), ("btime 0 wtime 0 byoyomi 1000", None),
    (f"nodes {2**63 - 1}", None)])
def test_go_arguments_are_checked(text, problem):
    got = go_args_problem(text)
    assert got == problem if problem is None else got.startswith(problem), got


def test_random_games_end_by_the_rules(tmp_path):
    records = run_match(fake("random", 1), fake("random", 2), 2, Clock(nodes=1), openings=(0, 4), max_plies=60,
                        report=None)
    for r in records:
        board = cshogi.Board()
        for m in r.moves:
            assert m in {cshogi.move_to_usi(x) for x in board.legal_moves}
            board.push_usi(m)
        if r.reason == "max plies":
            assert r.plies == 60 and r.result == 0.5
        elif r.reason == "mate":
            assert board.is_game_over()


def test_match_command_line(tmp_path):
    out = tmp_path / "m.json"
    cmd = [sys.executable, "-m", "manaka.shogi", "match", f"{sys.executable} {FAKE} random", f"{sys.executable} {FAKE} resign",
           "--games", "2", "--byoyomi", "500", "--openings", "1-3", "--name-a", "R", "--name-b", "Q", "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    # two wins: the lower bound is the score 2 / (2 + z^2) = 0.342, -113 Elo
    assert "R vs Q: 2 games, +2 =0 -0 (score 1.000), Elo inf [-113, inf]" in done.stdout
    data = json.loads(out.read_text())
    assert data["summary"]["wins"] == 2 and data["summary"]["elo"] == "inf" and len(data["games"]) == 2
    bad = subprocess.run(cmd[:6] + ["--games", "0"], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert bad.returncode == 2 and "--games must be >= 1" in bad.stderr
    # limits an engine would be sent as they are, or that end every game at once
    for option, value, words in (("--nodes", "-5", ">= 1"), ("--byoyomi", "-1", ">= 0"), ("--time", "-1", ">= 0"),
                                 ("--inc", "-3", ">= 0"), ("--grace", "-1", ">= 0"), ("--max-plies", "0", ">= 1"),
                                 ("--seed", "-1", ">= 0"), ("--move-timeout", "0", "> 0"),
                                 ("--move-timeout", "nan", "> 0"), ("--openings", "a-b", "LOW-HIGH"),
                                 ("--openings", "-1", "LOW-HIGH")):
        bad = subprocess.run(cmd[:6] + [option, value], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
        assert bad.returncode == 2 and option in bad.stderr and words in bad.stderr, bad.stderr
    # an existing --json file (this run's) or a folder is refused before any game is played
    before = out.read_bytes()
    for path in (out, tmp_path):
        again = subprocess.run(cmd[:-1] + [str(path)], capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
        assert again.returncode == 2 and f"--json {path}" in again.stderr and again.stdout == "", again
    assert out.read_bytes() == before
    forced = subprocess.run(cmd + ["--force"], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert forced.returncode == 0 and json.loads(out.read_text())["summary"]["wins"] == 2, forced.stderr


def test_openings_that_reach_max_plies_are_refused(capsys):
    # such a game ends a draw at the opening's end, before either engine moves: counted, it
    # pulled every score towards 0.5 with no engine having played
    with pytest.raises(ValueError, match="max_plies=8"):
        run_match(fake("random"), fake("random"), 2, Clock(nodes=1), openings=(2, 8), max_plies=8, report=None)
    from manaka.shogi import match
    for argv in (["--max-plies", "8"], ["--openings", "2-9", "--max-plies", "9"]):
        with pytest.raises(SystemExit) as e:
            match.main(["a", "b", "--games", "2", "--nodes", "1", *argv])
        assert e.value.code == 2 and "--max-plies" in capsys.readouterr().err


def test_a_json_file_that_cannot_be_written_after_the_games_is_one_line(tmp_path, monkeypatch, capsys):
    from manaka.shogi import match

    def full_disk(path):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(match, "atomic_write", full_disk)
    out = tmp_path / "m.json"
    code = match.main([fake("random").command, fake("resign").command, "--games", "2", "--byoyomi", "500",
                       "--openings", "1", "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 1 and not out.exists()
    assert "2 games, +2 =0 -0" in captured.out  # the result was printed before the write
    assert f"--json {out} could not be written" in captured.err and "No space left" in captured.err


@pytest.mark.parametrize("stop, code", [(KeyboardInterrupt, 130), ("engine", 1)])
def test_games_played_before_a_ctrl_c_or_an_engine_failure_are_summarised_and_written(tmp_path, monkeypatch,
                                                                                        capsys, stop, code):
    # they were lost: a KeyboardInterrupt traceback, or "match: ..." and exit 1, no summary, no --json
    from manaka.shogi import match
    from manaka.shogi.usi_client import EngineError

    real, calls = match.play_game, []

    def third_game_stops(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt if stop is KeyboardInterrupt else EngineError("usi: cannot start the engine 'x'")
        return real(*args)
    monkeypatch.setattr(match, "play_game", third_game_stops)
    out = tmp_path / "m.json"
    got = match.main([fake("random").command, fake("resign").command, "--games", "6", "--byoyomi", "500",
                      "--openings", "1", "--json", str(out)])
    captured = capsys.readouterr()
    assert got == code
    assert "stopped after 2 of 6 games" in captured.err and ("interrupted" if code == 130 else "cannot start") in captured.err
    assert "2 games, +2 =0 -0" in captured.out
    data = json.loads(out.read_text())
    assert data["summary"]["games"] == 2 and len(data["games"]) == 2


def test_clocks_of_centuries_play_and_clocks_past_64_bits_are_refused(capsys):
    # a wait of 2^62 ms overflowed time_t in the queue's timeout: an OverflowError traceback
    # at the first move; a main time near 2^63 grew past what an engine reads by the increments
    for clock in (Clock(time=2**62, byoyomi=2**62), Clock(time=2**63 - 1, inc=2**63 - 1), Clock(nodes=1, move_timeout=1e16)):
        records = run_match(fake("random"), fake("random", 1), 2, clock, openings=(0, 2), max_plies=8, report=None)
        assert [r.reason for r in records] == ["max plies", "max plies"], records
    from manaka.shogi import match
    for option in ("--time", "--byoyomi", "--inc", "--nodes", "--grace"):
        with pytest.raises(SystemExit) as e:
            match.main(["a", "b", option, str(2**63)])
        assert e.value.code == 2 and f"{option} must be <= 2^63 - 1, got {2**63}" in capsys.readouterr().err
