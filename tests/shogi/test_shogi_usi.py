"""python -m manaka.shogi usi / heuristic: the USI engines driven through a real subprocess
(a tiny model saved to a temporary file); every bestmove checked legal with cshogi."""
import contextlib
import os
import queue
import subprocess
import sys
import threading
import time

import pytest

cshogi = pytest.importorskip("cshogi")

import manaka as mk  # noqa: E402
from manaka import shogi  # noqa: E402

from shogi_reference import random_positions  # noqa: E402
from paths import ROOT  # noqa: E402

MANY_MOVES = "R8/2K1S1SSk/4B4/9/9/9/9/9/1L1L1L3 b RBGSNLP3g3n17p 1"   # 593 legal moves
MATED = "4k4/9/9/9/9/9/4p4/4g4/4K4 b - 1"                              # Black is mated
ONE_MOVE = "k8/9/9/9/9/9/9/1r7/K1r6 b - 1"                          # in check: only 9i8h
MATE_IN_ONE = "4k4/9/4P4/9/9/9/9/9/4K4 b G 1"                        # G*5b mates


class EngineProcess:
    """The test's client: the engine's raw lines, each read with a deadline."""

    def __init__(self, argv):
        env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                     env=env, cwd=ROOT)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_for(self, first_word, timeout):
        """The lines up to and including the first that starts with `first_word`."""
        deadline, got = time.monotonic() + timeout, []
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no answer in time (waiting for {first_word}; got {got})") from None
            assert line is not None, f"the engine exited (waiting for {first_word}; got {got})"
            got.append(line)
            if line.split()[:1] == [first_word]:
                return got

    def start(self):
        self.send("usi")
        self.wait_for("usiok", 60)
        self.ready()

    def ready(self):
        self.send("isready")
        self.wait_for("readyok", 60)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send("quit")
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("usi") / "tiny.manaka"
    cfg = mk.ModelConfig(num_tokens=shogi.NUM_TOKENS, num_moves=shogi.NUM_LABELS, embed_dim=4, orders=2,
                         pair_dim=1, hidden=(8,), head_width=4)
    mk.Model(cfg, seed=3).save(str(path))
    return str(path)


def engine(model_file, *args):
    e = EngineProcess([sys.executable, "-m", "manaka.shogi", "usi", "--model", model_file, "--threads", "1", *args])
    return e


@contextlib.contextmanager
def started_engine(model_file, *args):
    """An engine past `usi`; after the body, `isready` is answered and `quit` ends it with
    exit code 0."""
    e = engine(model_file, *args)
    try:
        e.start()
        yield e
        e.ready()
    finally:
        e.close()
    assert e.proc.returncode == 0


def bestmove(e, go="go nodes 16", timeout=60.0):
    e.send(go)
    lines = e.wait_for("bestmove", timeout)
    return lines[-1].split()[1], lines


def legal_usi(sfen):
    return {cshogi.move_to_usi(m) for m in cshogi.Board(sfen).legal_moves}


def test_positions_for_the_tests_are_what_they_say():
    assert len(legal_usi(MANY_MOVES)) == 593
    assert cshogi.Board(MATED).is_game_over()
    assert len(legal_usi(ONE_MOVE)) == 1
    board = cshogi.Board(MATE_IN_ONE)
    assert cshogi.move_to_usi(board.mate_move_in_1ply()) == "G*5b"


def test_protocol_conversation(model_file):
    e = engine(model_file)
    try:
        e.send("usi")
        lines = e.wait_for("usiok", 60)
        assert lines[0] == "id name manaka (puct)" and lines[1] == "id author manaka"
        options = [l for l in lines if l.startswith("option name")]
        assert "option name Search type combo default puct var policy var value var puct" in options
        assert any(l.startswith("option name MarginMs type spin") for l in options)
        e.send("setoption name USI_Hash value 256")     # the GUI's own: accepted silently
        e.send("setoption name BatchSize value 8")
        e.ready()
        e.send("usinewgame")
        e.send("position startpos moves 7g7f 3c3d")
        move, lines = bestmove(e, "go btime 1000 wtime 1000 byoyomi 200")
        assert move in legal_usi("lnsgkgsnl/1r5b1/pp1pppppp/2p6/9/2P6/PP1PPPPPP/1B5R1/LNSGKGSNL b - 3")
        assert any(l.startswith("info depth") and " pv " in l for l in lines)
        assert not any("info string" in l for l in lines)
        e.send("gameover win")
        e.ready()
    finally:
        e.close()
    assert e.proc.returncode == 0


@pytest.mark.parametrize("search", ["policy", "value", "puct"])
def test_bestmove_always_legal(model_file, search):
    e = engine(model_file, "--search", search)
    try:
        e.start()
        sfens = [b.sfen() for b in random_positions(25, seed=hash(search) % 1000)] + [MANY_MOVES, ONE_MOVE]
        for sfen in sfens:
            e.send(f"position sfen {sfen}")
            move, lines = bestmove(e)
            assert move in legal_usi(sfen), (search, sfen, lines)
            assert not any("info string" in l for l in lines), lines
        # the same through moves from the start position
        board = cshogi.Board()
        played = []
        for _ in range(12):
            e.send("position startpos" + (" moves " + " ".join(played) if played else ""))
            move, _ = bestmove(e)
            assert move in {cshogi.move_to_usi(m) for m in board.legal_moves}
            board.push_usi(move)
            played.append(move)
            if board.is_game_over():
                break
        # mated: resign; a mate in one is found by the searches that look ahead
        e.send(f"position sfen {MATED}")
        assert bestmove(e)[0] == "resign"
        e.send(f"position sfen {MATE_IN_ONE}")
        move = bestmove(e, "go nodes 64")[0]
        if search != "policy":
            assert move == "G*5b"
    finally:
        e.close()


def test_stop_during_infinite_and_quit(model_file):
    e = engine(model_file)
    try:
        e.start()
        e.send("position startpos")
        e.send("go infinite")
        with pytest.raises(TimeoutError):
            e.wait_for("bestmove", 1.0)  # infinite: no bestmove before stop
        sent = time.monotonic()
        e.send("stop")
        lines = e.wait_for("bestmove", 10.0)
        assert time.monotonic() - sent < 1.0, "stop was not answered promptly"
        assert lines[-1].split()[1] in legal_usi(shogi.STARTING_SFEN)
        # ponder, then ponderhit: answered within the clock given with go ponder
        e.send("position startpos moves 7g7f")
        e.send("go ponder btime 0 wtime 0 byoyomi 300")
        with pytest.raises(TimeoutError):
            e.wait_for("bestmove", 0.5)
        sent = time.monotonic()
        e.send("ponderhit")
        e.wait_for("bestmove", 10.0)
        assert time.monotonic() - sent < 1.5
        # quit while thinking: the process exits
        e.send("go infinite")
        e.send("quit")
        assert e.proc.wait(10) == 0
    finally:
        e.close()


def test_byoyomi_is_respected(model_file):
    e = engine(model_file, "--search", "puct")
    try:
        e.start()
        for go, limit_ms in (("go btime 0 wtime 0 byoyomi 100", 100), ("go btime 2000 wtime 2000 byoyomi 0", 50),
                             ("go movetime 150", 150), ("go btime 30000 wtime 100 winc 100 binc 100", 850)):
            e.send("position startpos moves 2g2f")  # White to move: wtime counts
            sent = time.monotonic()
            move, lines = bestmove(e, go)
            wall = (time.monotonic() - sent) * 1000
            reported = [int(l.split(" time ")[1].split()[0]) for l in lines if l.startswith("info depth")]
            assert reported and reported[-1] <= limit_ms, (go, lines)  # the engine's own clock
            assert wall <= limit_ms + 700, (go, wall)  # pipes and a loaded machine: some slack
            assert move in legal_usi("lnsgkgsnl/1r5b1/ppppppppp/9/9/7P1/PPPPPPP1P/1B5R1/LNSGKGSNL w - 2")
    finally:
        e.close()


def test_malformed_commands_are_ignored_with_an_info_string(model_file):
    e = engine(model_file)
    try:
        e.start()
        bad = ["fly me to the moon", "setoption name Nope value 1",
               "setoption name Search value minimax", "setoption name BatchSize value 0", "setoption Search",
               "position sfen not/a/board b - 1", "position startpos moves 7g7f 7g7f", "position startpos moves xyz",
               "position", "position sfen " + MATED.replace("4K4", "9")]
        for line in bad:
            e.send(line)
            e.send("isready")
            lines = e.wait_for("readyok", 30)
            assert any(l.startswith("info string ignored") for l in lines), (line, lines)
        # the refused move is named as it was sent, not as the C core's move16
        e.send("position startpos moves 7g7f 3c3d 7g7f")
        e.send("isready")
        assert any(l.startswith("info string ignored position: move 3 (7g7f):") for l in e.wait_for("readyok", 30))
        # a refused position leaves no position to play: resign rather than play an old one
        e.send("position startpos")
        e.send("position startpos moves 5a5b")
        assert bestmove(e)[0] == "resign"
        e.send("position startpos")
        assert bestmove(e)[0] in legal_usi(shogi.STARTING_SFEN)
        # a GUI waits for bestmove after any go: a malformed one is said and still answered
        for go in ("go nodes many", "go byoyomi -5", "go btime 1000 wtime"):
            e.send("position startpos moves 7g7f")
            move, lines = bestmove(e, go)
            assert any(l.startswith("info string go:") and "instead" in l for l in lines), (go, lines)
            assert not any(l.startswith("info string go: go:") for l in lines), lines  # "go:" said once
            assert move in legal_usi(cshogi_sfen_after(["7g7f"])), (go, move)
    finally:
        e.close()
    assert e.proc.returncode == 0


def test_a_model_file_that_cannot_be_read_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "not-a-model.manaka"
    bad.write_bytes(b"\x00" * 100)
    for path in (bad, tmp_path / "missing.manaka"):
        done = subprocess.run([sys.executable, "-m", "manaka.shogi", "usi", "--model", str(path)],
                              input="usi\nquit\n", capture_output=True, text=True, timeout=60)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and done.stdout == "", done
        assert len(lines) == 1 and lines[0].startswith("python -m manaka.shogi usi: ") and path.name in lines[0], lines


@pytest.mark.parametrize("fields, what", [
    (dict(num_tokens=50, num_moves=60, tokens_per_side=4), "tokens_per_side=4"),          # another game's model
    (dict(num_tokens=shogi.NUM_TOKENS, num_moves=shogi.NUM_LABELS, tokens_per_side=30), "tokens_per_side=30"),
    (dict(num_tokens=100, num_moves=shogi.NUM_LABELS), "num_tokens=100"),                  # shogi's tokens out of range
    (dict(num_tokens=shogi.NUM_TOKENS, num_moves=shogi.NUM_LABELS + 1), "num_moves=2188"),  # no encoding's labels
])
def test_a_model_that_cannot_play_shogi_is_refused_at_start(tmp_path, fields, what):
    # refused before "usiok", in one line naming the file: not a traceback, and not a
    # "bestmove resign" at the first go (its first forward pass would refuse the positions)
    path = tmp_path / "other.manaka"
    mk.Model(mk.ModelConfig(**{"tokens_per_side": 40, **fields}, embed_dim=2, orders=1, pair_dim=1, hidden=(),
                            head_width=2)).save(str(path))
    done = subprocess.run([sys.executable, "-m", "manaka.shogi", "usi", "--model", str(path), "--threads", "1"],
                          input="usi\nisready\nposition startpos\ngo nodes 4\nquit\n", capture_output=True,
                          text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and done.stdout == "", done
    assert len(lines) == 1 and lines[0].startswith("python -m manaka.shogi usi: "), lines
    assert path.name in lines[0] and what in lines[0] and "not a shogi model" in lines[0], lines


def test_a_thread_count_the_core_refuses_is_a_usage_error(model_file):
    done = subprocess.run([sys.executable, "-m", "manaka.shogi", "usi", "--model", model_file, "--threads", "5000"],
                          input="usi\nquit\n", capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done
    assert "--threads: set_num_threads: n must be at most 4096" in done.stderr


def cshogi_sfen_after(moves):
    board = cshogi.Board()
    for m in moves:
        board.push_usi(m)
    return board.sfen()


def test_heuristic_engine_mates_captures_and_is_legal():
    e = EngineProcess([sys.executable, "-m", "manaka.shogi", "heuristic", "--seed", "4"])
    try:
        e.start()
        e.send(f"position sfen {MATE_IN_ONE}")
        assert bestmove(e, "go byoyomi 100")[0] == "G*5b"
        # the rook can be taken by the pawn or the gold: the cheapest capturer takes it
        e.send("position sfen 4k4/9/9/9/4r4/3GP4/9/9/4K4 b - 1")
        assert bestmove(e, "go byoyomi 100")[0] == "5f5e"
        for board in random_positions(30, seed=8):
            e.send(f"position sfen {board.sfen()}")
            move = bestmove(e, "go byoyomi 100")[0]
            assert move in {cshogi.move_to_usi(m) for m in board.legal_moves}
            mate = board.mate_move_in_1ply()
            if mate:
                board.push_usi(move)
                assert board.is_game_over(), "the heuristic missed a mate in one"
        e.send(f"position sfen {MATED}")
        assert bestmove(e, "go byoyomi 100")[0] == "resign"
    finally:
        e.close()


def test_a_go_number_too_large_for_the_clock_is_refused_and_answered(model_file):
    # 10^400 ms overflowed think_time's float division (OverflowError: the engine exited)
    with started_engine(model_file) as e:
        for go in ("go btime " + "1" + "0" * 400 + " wtime 1000", "go nodes " + str(2 ** 63)):
            e.send("position startpos")
            move, lines = bestmove(e, go)
            assert any(l.startswith("info string go:") and "2^63-1" in l and "instead" in l for l in lines), lines
            assert move in legal_usi(shogi.STARTING_SFEN), (go, lines)
        e.send("position startpos")
        assert bestmove(e, "go btime " + str(2 ** 63 - 1) + " wtime 0 nodes 8")[0] in legal_usi(shogi.STARTING_SFEN)


@pytest.mark.parametrize("between", ["position startpos moves 7g7f 3c3d", "usinewgame"])
def test_ponderhit_after_a_position_sent_during_the_ponder(model_file, between):
    # the command clears the engine's game (refused during the search, or a new game); the
    # ponderhit used to read that game's side to move (AttributeError: the engine exited)
    with started_engine(model_file) as e:
        e.send("position startpos moves 7g7f")
        e.send("go ponder btime 0 wtime 0 byoyomi 100")
        e.send(between)
        e.send("ponderhit")
        lines = e.wait_for("bestmove", 10.0)
        assert lines[-1].split()[1] in legal_usi(cshogi_sfen_after(["7g7f"])), lines


@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_a_line_the_locale_cannot_decode_is_ignored_not_fatal(model_file, encoding):
    # a GUI's Shift-JIS option name (テスト) under a UTF-8 or ASCII locale: a
    # UnicodeDecodeError ended the engine, and an echo the locale cannot write would too
    sjis = "setoption name テスト value 1".encode("shift_jis")
    utf8 = "setoption name テスト value 2".encode("utf-8")
    done = subprocess.run([sys.executable, "-m", "manaka.shogi", "usi", "--model", model_file, "--threads", "1"],
                          input=b"usi\n" + sjis + b"\n" + utf8 + b"\nisready\nposition startpos\ngo nodes 4\n",
                          capture_output=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "PYTHONIOENCODING": encoding,
                               "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    lines = done.stdout.decode(encoding).splitlines()
    assert sum(l.startswith("info string ignored setoption: no option") for l in lines) == 2, lines
    assert "readyok" in lines and lines[-1].split()[1] in legal_usi(shogi.STARTING_SFEN), lines


def test_go_infinite_ends_its_search_at_the_node_limit(model_file):
    # the tree of go infinite grew without bound (out of memory in a long analysis); the
    # search now ends at NodeLimit, and bestmove still waits for stop
    e = engine(model_file)
    try:
        e.send("usi")
        assert "option name NodeLimit type spin default 1000000 min 1 max 100000000" in e.wait_for("usiok", 60)
        e.send("setoption name NodeLimit value 200")
        e.ready()
        e.send("position startpos")
        e.send("go infinite")
        time.sleep(3.0)  # the tiny model makes far more than 200 playouts in 3 s
        e.send("stop")
        lines = e.wait_for("bestmove", 10.0)
        nodes = [int(l.split(" nodes ")[1].split()[0]) for l in lines if l.startswith("info depth")]
        assert nodes and nodes[-1] == 200, lines
        assert lines[-1].split()[1] in legal_usi(shogi.STARTING_SFEN)
    finally:
        e.close()


def test_input_with_no_line_end_is_read_in_bounded_memory(model_file):
    # a 400 MB line (cat /dev/zero | engine, without end): read whole, it ended the engine
    # with a MemoryError under an address-space limit 640 MB over none (the engine uses ~280)
    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (640 << 20, resource.RLIM_INFINITY))

    proc = subprocess.Popen([sys.executable, "-m", "manaka.shogi", "usi", "--model", model_file, "--threads", "1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                            # ASan reserves terabytes of shadow address space at start, which
                            # the limit forbids: under tools/sanitize.sh the run checks the
                            # answers only, and the plain suite checks the memory bound
                            preexec_fn=None if os.environ.get("MANAKA_SANITIZER") else limit,
                            env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})

    def feed():
        try:
            chunk = b"x" * (1 << 20)
            for _ in range(400):
                proc.stdin.write(chunk)
            proc.stdin.write(b"\nisready\nposition startpos\ngo nodes 4\n")
            proc.stdin.close()
        except OSError:  # the engine died
            pass

    threading.Thread(target=feed, daemon=True).start()
    out = proc.stdout.read()  # to the engine's exit (stderr: a traceback at most)
    err = proc.stderr.read()
    proc.wait(60)
    lines = out.decode().splitlines()
    assert proc.returncode == 0 and b"Traceback" not in err, err[-2000:]
    assert lines[0].startswith("info string ignored unknown command: overlong line"), lines
    assert "readyok" in lines and lines[-1].split()[1] in legal_usi(shogi.STARTING_SFEN), lines


@pytest.mark.parametrize("size", ["0", "4097", "1000000"])
def test_a_batch_size_outside_the_options_range_is_a_usage_error(model_file, size):
    # --batch-size 1000000 was taken: a batch ends after that many playouts or collisions,
    # whatever the clock, so a 0.5 s byoyomi was answered after 10 s
    done = subprocess.run([sys.executable, "-m", "manaka.shogi", "usi", "--model", model_file, "--batch-size", size],
                          input="usi\nquit\n", capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done
    assert done.stderr.splitlines()[-1].endswith(f"--batch-size must be in [1, 4096], got {size}"), done.stderr


def spawned_engine(model_file) -> subprocess.Popen:
    """The engine on one thread as a process with text pipes (the caller closes them)."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "manaka.shogi", "usi", "--model", model_file, "--threads", "1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)


@pytest.mark.parametrize("after", [["isready"], ["position startpos", "go infinite", "WAIT", "stop"]])
def test_a_reader_that_closes_the_output_ends_the_engine_quietly(model_file, after):
    # a GUI that died (or ``| head``): the engine's next write fails; it must end with exit
    # code 0, not a BrokenPipeError traceback from the main or the search thread
    proc = spawned_engine(model_file)
    try:
        proc.stdin.write("usi\n")
        proc.stdin.flush()
        for line in proc.stdout:
            if line.startswith("usiok"):
                break
        proc.stdout.close()
        for line in after:
            if line == "WAIT":
                time.sleep(1.5)  # the search's info lines (one a second) meet the closed pipe
                continue
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
        assert proc.wait(60) == 0
        err = proc.stderr.read()
        assert "Traceback" not in err and "BrokenPipe" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stderr.close()


def test_a_mate_search_is_answered_checkmate_notimplemented(model_file):
    # a tsume request waits for ``checkmate``: it was answered "bestmove" after an info
    # string and 1 s of ordinary thought, which such a caller never reads
    with started_engine(model_file) as e:
        e.send("position sfen " + MATE_IN_ONE)
        for go in ("go mate 1000", "go mate infinite"):
            e.send(go)
            lines = e.wait_for("checkmate", 30)
            assert lines == ["checkmate notimplemented"], lines
        assert bestmove(e)[0] == "G*5b"  # an ordinary go after it


def test_ctrl_c_ends_the_engine_like_quit_without_a_traceback(model_file):
    import signal

    proc = spawned_engine(model_file)
    try:
        proc.stdin.write("usi\nposition startpos\ngo infinite\n")
        proc.stdin.flush()
        for line in proc.stdout:
            if line.startswith("info depth"):  # searching
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "Traceback" not in err, err
        assert out.splitlines()[-1].split()[0] == "bestmove"  # the search it stopped still answered
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
