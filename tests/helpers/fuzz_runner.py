"""Runs fuzz cases in child processes so that a crash or a hang is counted and named, not
fatal to the run (tests/robustness/test_api_fuzz.py, tests/robustness/test_model_file_fuzz.py).

The child appends one JSON line when a case starts ({"case", "name", "start": true}) and
one when it ends ({"case", "name", "result"}) and flushes each: when the child dies, the
last started case without a result is the one that crashed it; when no line comes for
`case_timeout` seconds, the child is killed and that case counted as a hang. The parent
then starts a new child at the next case.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time


def _read(report):
    if not os.path.exists(report):
        return []
    with open(report) as f:
        lines = f.read().splitlines()
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut by the crash
            pass
    return out


def child_env():
    """The environment for a child: it imports the manaka this process imported (a child
    started as `python tests/robustness/x.py` has that folder first on its path, and would otherwise find
    whatever manaka is installed)."""
    import manaka
    root = os.path.dirname(os.path.dirname(os.path.abspath(manaka.__file__)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p])}


def run(argv_for, cases: int, case_timeout: float = 60.0, env=None):
    """Runs `cases` cases; `argv_for(first, count, report)` is the child's command line for
    cases first .. first + count - 1, writing its lines to `report`.

    Returns (tally {outcome: count}, failures [(case, name, outcome)]) where an outcome is a
    child's result string, "crash (...)" or "hang (...)"."""
    tally, failures, done = {}, [], 0
    with tempfile.TemporaryDirectory(prefix="fuzz-report-") as tmp:
        report = os.path.join(tmp, "report.jsonl")
        while done < cases:
            if os.path.exists(report):
                os.remove(report)
            err = open(os.path.join(tmp, "stderr"), "w+")
            proc = subprocess.Popen(argv_for(done, cases - done, report), stdout=subprocess.DEVNULL,
                                    stderr=err, env=env or child_env(), start_new_session=True)
            seen, last_progress, hung = 0, time.monotonic(), False
            while proc.poll() is None:
                time.sleep(0.05)
                n = len(_read(report))
                if n != seen:
                    seen, last_progress = n, time.monotonic()
                elif time.monotonic() - last_progress > case_timeout:
                    os.killpg(proc.pid, signal.SIGKILL)  # the child's whole session: its threads too
                    proc.wait()
                    hung = True
            lines = _read(report)
            finished = [r for r in lines if "result" in r]
            for r in finished:
                tally[r["result"]] = tally.get(r["result"], 0) + 1
                if r.get("failure"):
                    failures.append((r["case"], r.get("name"), r["result"] + (f" ({r['detail']})" if r.get("detail") else "")))
            done += len(finished)
            started = [r for r in lines if r.get("start")]
            if proc.returncode != 0 or (started and len(started) > len(finished)):
                name = started[-1].get("name") if len(started) > len(finished) else None
                if hung:
                    outcome = f"hang (no result in {case_timeout:g} s)"
                else:
                    err.seek(0)
                    tail = [line for line in err.read().splitlines() if line.strip()][-1:]
                    outcome = f"crash (exit {proc.returncode}): {tail}"
                tally[outcome] = tally.get(outcome, 0) + 1
                failures.append((done, name, outcome))
                done += 1
            err.close()
    return tally, failures


def child_argv(script: str, *args) -> list:
    return [sys.executable, script, *map(str, args)]
