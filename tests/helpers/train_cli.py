"""python -m manaka.train as the tests run it (a small model's options, this checkout's
manaka, a command that must fail in one line) and the log lines mk.fit prints."""
import os
import re
import subprocess
import sys

from paths import ROOT

# the model dimensions of a quick run
TINY = ["--embed-dim", "8", "--pair-dim", "2", "--hidden", "16", "--head-width", "16"]
CLI = [sys.executable, "-m", "manaka.train"]
# runs in a temporary folder (where the model is saved by default), importing this manaka
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
       "PYTHONUNBUFFERED": "1"}
# mk.fit's log line, without and with held-out figures (step, eval_loss, eval_acc captured)
LOG = re.compile(r"^\[[0-9hms.]+\] step=\d+ loss=[-\d.na]+ acc=[\d.na]+ lr=[\d.e+-]+ \| [\d.]+[kM]? pos/s \| "
                 r"q=\[\d+/\d+\] wait=[\d.]+% \| epoch [\d.]+ ETA \S+$")
EVAL_LOG = re.compile(r"^\[[0-9hms.]+\] step=(\d+) loss=[-\d.na]+ acc=[\d.na]+ eval_loss=([\d.]+) "
                      r"eval_acc=([\d.]+) lr=[\d.e+-]+ \| [\d.]+[kM]? pos/s \| q=\[\d+/\d+\] wait=[\d.]+% \| "
                      r"epoch [\d.]+ ETA \S+$")


def cli(args, cwd, timeout=300):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=ENV)


def one_line(out):
    """The one line of a run that must fail with exit status 2 and no traceback."""
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    return lines[0]
