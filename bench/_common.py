"""Shared helpers: machine facts, load, memory and thread readings, percentiles, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

#: a line that starts the machine-readable result on a benchmark's stdout
RESULT_MARKER = "BENCH-RESULT "
#: the repository this bench/ belongs to
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pykka", "ollama", "anthropic", "peewee", "httpx", "freezegun")


def machine() -> dict[str, Any]:
    """nproc, RAM, Python, package versions, kernel, date."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {
        "nproc": os.cpu_count(),
        "ram_gib": round(_meminfo_kib("MemTotal") / 2**20, 1),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "kernel": platform.release(),
        "packages": versions,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _meminfo_kib(key: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def rss_bytes() -> int:
    """Resident set size of this process, from /proc."""
    return proc_status("self", "VmRSS") * 1024


def os_threads() -> int:
    """Threads of this process as the kernel counts them."""
    return proc_status("self", "Threads")


def proc_status(pid: int | str, key: str) -> int:
    """One number of ``/proc/<pid>/status`` (``"self"``: this process); kB for sizes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (NaN for fewer than two points)."""
    n = len(points)
    if n < 2:
        return float("nan")
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else float("nan")


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def now() -> float:
    """A monotonic reading in seconds (system-wide: comparable across processes)."""
    return time.monotonic()


class Sampler:
    """Samples RSS and thread counts on a background thread, keeping the peaks."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.peak_rss = 0
        self.peak_threads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, rss_bytes())
            self.peak_threads = max(self.peak_threads, os_threads())
            self._stop.wait(self.interval_s)


def cli(run: Callable[[argparse.Namespace], dict[str, Any]],
        configure: Callable[[argparse.ArgumentParser], None] | None = None) -> None:
    """Parse ``--quick`` (and the benchmark's own flags), run, print the JSON result."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    if configure is not None:
        configure(parser)
    args = parser.parse_args()
    result = run(args)
    result.setdefault("load_after", loadavg())
    print(RESULT_MARKER + json.dumps(result), flush=True)


def quiet_logs() -> None:
    """Benchmarks measure work, not log formatting: keep loguru to errors."""
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="ERROR")


def checkout_tree(ref: str, into: Path) -> str:
    """``ref``'s tree in ``into`` with this tree's bench/ on top (so an old commit is
    measured by today's benchmark code); returns the commit."""
    commit = subprocess.run(["git", "rev-parse", ref], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    shutil.rmtree(into / "bench", ignore_errors=True)
    shutil.copytree(ROOT / "bench", into / "bench", ignore=shutil.ignore_patterns("__pycache__", "results.json"))
    return commit


def md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A Markdown table's lines (and a blank line after it)."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out + [""]


def min_median_max(x: dict[str, float]) -> str:
    """``min / **median** / max`` of a spread."""
    return f"{x['min']:g} / **{x['median']:g}** / {x['max']:g}"
