"""Timing and reporting rules shared by every benchmark suite (docs/design.md §5).

A time is the median of N runs after warm-up, reported with min and max; a run that
raised is an error, never a time. Results are written, with a description of the
machine, as JSON and Markdown into the folder the user names (--out), by default
./bench_results: the committed bench/results/ is replaced only when named.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional

from ..atomic_file import atomic_write


@dataclass
class Timing:
    name: str
    median_ms: float
    min_ms: float
    max_ms: float
    runs: int
    extra: Dict[str, object] = field(default_factory=dict)

    def row(self, baseline: Optional["Timing"] = None) -> str:
        ratio = f"{baseline.median_ms / self.median_ms:8.1f}x" if baseline else " " * 9
        extra = "  ".join(f"{k}={v}" for k, v in self.extra.items())
        return (f"{self.name:<44} {self.median_ms:10.3f} {self.min_ms:10.3f} {self.max_ms:10.3f}"
                f" {ratio}  {extra}")

    def count_positions(self, positions: int) -> "Timing":
        """Adds the rate `positions` per call make at the median time (extra "pos/s")."""
        self.extra["pos/s"] = f"{positions / self.median_ms * 1e3:,.0f}"
        return self


HEADER = f"{'what':<44} {'median ms':>10} {'min ms':>10} {'max ms':>10} {'speed-up':>9}"


def use_threads(suite: str, n: int) -> None:
    """mk.set_num_threads(n) for a suite's --threads: a count manaka refuses (negative, or
    more than it can start) ends the run in one line, not a traceback."""
    import manaka as mk

    try:
        mk.set_num_threads(n)
    except (ValueError, TypeError) as e:
        raise SystemExit(f"python -m manaka.bench {suite}: --threads: {e}") from None


def measure(name: str, fn: Callable[[], object], runs: int = 10, warmup: int = 2,
            sync: Callable[[], None] = lambda: None, **extra) -> Timing:
    """Median/min/max wall time of `fn()` over `runs` calls after `warmup` calls.

    `sync` is called after each call (e.g. a device synchronise) so the time is complete."""
    t = measure_interleaved({name: fn}, runs=runs, warmup=warmup, sync=sync)[name]
    t.extra.update(extra)
    return t


def measure_interleaved(fns: Dict[str, Callable[[], object]], runs: int = 10, warmup: int = 2,
                        sync: Callable[[], None] = lambda: None) -> Dict[str, Timing]:
    """`measure` for several functions compared with each other: each round times every
    function once, in an order that reverses every round (A B, B A, ...), so load from other
    processes and clock changes fall on all of them alike instead of on whichever ran last."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
            sync()
    times: Dict[str, List[float]] = {name: [] for name in names}
    for r in range(runs):
        for name in (names if r % 2 == 0 else names[::-1]):
            start = time.perf_counter()
            fns[name]()
            sync()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: Timing(name, statistics.median(t), min(t), max(t), runs) for name, t in times.items()}


def phase_ms(trainer, batch, steps: int, phases=("forward", "backward", "optimizer")) -> Dict[str, float]:
    """Mean milliseconds per step of each of the trainer's phases over `steps` profiled
    steps on `batch` (the C trainer's counters; profiling synchronises between phases)."""
    trainer.profile(True)
    for _ in range(steps):
        trainer.step(batch)
    t = trainer.phase_times()
    trainer.profile(False)
    return {k: t[k] / t["steps"] * 1e3 for k in phases}


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def machine() -> Dict[str, object]:
    """A description of the machine a result was measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        info["memory_gib"] = round(mem / 2**30, 1)
    except (ValueError, OSError):
        pass
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        if gpu.returncode == 0 and gpu.stdout.strip():
            info["gpu"] = gpu.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


# Relative to the working directory. Not bench/results: a plain run must not overwrite
# the committed measurements (they are replaced on purpose, with --out bench/results).
DEFAULT_OUT = "bench_results"
OUT_HELP = f"results folder (default ./{DEFAULT_OUT} or $MANAKA_BENCH_DIR; bench/results holds the committed ones)"


def note_resources(lines: List[str], results: Dict[str, object], why_noisy: str) -> None:
    """Appends the peak RSS and the load average to a suite's report: on a shared machine
    other processes inflate every time, so a reader must see how busy the machine was."""
    lines.append(f"  peak RSS {peak_rss_mb():,.0f} MB")
    load = os.getloadavg()
    results["load_average"] = load
    lines.append(f"  load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores"
                 f" ({why_noisy})")


def write_results(suite: str, tag: str, payload: Dict[str, object], lines: List[str],
                  out_dir: Optional[str] = None) -> str:
    """Writes <out_dir>/<suite>-<tag>.json and .md; returns the JSON path. out_dir defaults
    to $MANAKA_BENCH_DIR, then ./bench_results."""
    out_dir = out_dir or os.environ.get("MANAKA_BENCH_DIR") or DEFAULT_OUT
    os.makedirs(out_dir, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    payload = {"suite": suite, "measured_at": stamp, "machine": machine(), **payload}
    base = os.path.join(out_dir, f"{suite}-{tag}")
    # both texts are made before either file is touched, and each file is replaced whole
    # (atomic_write): a payload json cannot write, or a Ctrl-C, leaves the earlier results
    # as they were, never a truncated file
    text = json.dumps(payload, indent=2, default=lambda o: asdict(o) if hasattr(o, "__dataclass_fields__") else str(o))
    md = (f"# manaka.bench {suite} ({tag}), {stamp}\n\n"
          + "Machine: " + ", ".join(f"{k}: {v}" for k, v in payload["machine"].items()) + "\n\n"
          + "```\n" + "\n".join(lines) + "\n```\n")
    with atomic_write(base + ".json") as f:
        f.write(text.encode())
    with atomic_write(base + ".md") as f:
        f.write(md.encode())
    return base + ".json"
