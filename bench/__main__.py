"""``python -m bench [--quick] [--full] [--only NAME ...]``: run every benchmark, write bench/RESULTS.md.

Each benchmark runs in its own subprocess (``python -m bench.<name>``) so that memory and
thread counts start clean; the JSON each prints is collected (``bench/results.json``) and rendered
by :mod:`bench.report`. The analysis part of RESULTS.md (outside the markers) is kept. At the
end a summary table of every paired ratio (min / median / max, wall and CPU) is printed.

The whole run fits in about ten minutes on a 2-core machine: each benchmark's default sizes
are chosen for that, and ``SUITE_ARGS`` shortens the soak (a smoke run there, not judged)
and runs one round of the concurrent streams.
``--full`` runs every benchmark at its standalone default sizes instead (the soak then
churns 20,000 sessions per model server: hours). Larger sizes are opt-in per benchmark:
``python -m bench.scale --levels 100 1000 10000``, ``python -m bench.control --delays 1 0.2``,
``python -m bench.lifecycle --sessions 1000 10000``, ``python -m bench.streams --rates 10 25 50 100``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench._common import RESULT_MARKER, loadavg, machine
from bench._paired import table

BENCHMARKS = ("pace", "streaming", "messaging", "scale", "control", "simtime", "persistence", "sandbox", "soak", "lifecycle",
              "streams", "cluster", "failover", "send_burst")
#: extra arguments in a ``python -m bench`` run (not with ``--full``): the time budget
SUITE_ARGS: dict[str, list[str]] = {
    "soak": ["--sessions", "500", "--warm-up", "200", "--sample-every", "100"],
    # one round (standalone: two): each round opens 1,000 streams twice, ~45 s a side on a
    # slow machine, the biggest part of the run
    "streams": ["--trials", "1"],
    # 10,000 (~45 s a side, 14 runs) is opt-in; the 10,000 figure is extrapolated from these
    "lifecycle": ["--sessions", "1000", "5000", "--trials", "7"],
}
TIMEOUT_S = 3600
ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--full", action="store_true", help="each benchmark at its standalone default sizes (hours)")
    parser.add_argument("--only", nargs="*", choices=BENCHMARKS, help="run only these")
    parser.add_argument("--out", default=str(Path(__file__).with_name("RESULTS.md")))
    args = parser.parse_args(argv)
    from bench.report import write_results

    results: dict = {}
    raw = Path(args.out).with_name("results.json")
    if args.only and raw.exists():
        # a partial run keeps the other benchmarks' last figures (each says when it ran)
        results = {k: v for k, v in json.loads(raw.read_text()).items() if k in BENCHMARKS}
    started = time.monotonic()
    for name in args.only or BENCHMARKS:
        sized = [] if args.full else SUITE_ARGS.get(name, [])
        cmd = [sys.executable, "-m", f"bench.{name}"] + (["--quick"] if args.quick else []) + sized
        print(f"[bench] {name} … (load {loadavg()})", flush=True)
        t0 = time.monotonic()
        try:
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_MARKER)]
            if lines:
                results[name] = json.loads(lines[-1][len(RESULT_MARKER):])
            else:
                results[name] = {"name": name, "failed": True,
                                 "error": f"exit {done.returncode}: {done.stderr[-1500:]}"}
        except subprocess.TimeoutExpired:
            results[name] = {"name": name, "failed": True, "error": f"timed out after {TIMEOUT_S} s"}
        print(f"[bench] {name} done in {time.monotonic() - t0:.0f} s", flush=True)
        # the raw figures, kept after each benchmark so that a later failure loses nothing
        results[name]["run_at"] = machine()["date"]
        results[name]["quick"] = args.quick
        raw.write_text(json.dumps({n: results[n] for n in BENCHMARKS if n in results}, indent=1))
    ordered = {n: results[n] for n in BENCHMARKS if n in results}
    path = write_results(Path(args.out), ordered, machine(), quick=args.quick)
    print(f"[bench] wrote {path} after {time.monotonic() - started:.0f} s")
    comparisons = [{**c, "bench": n} for n, r in ordered.items() if not r.get("failed") for c in r.get("paired", [])]
    print("\nPaired ratios (B vs A per round; rate = B's units/s over A's, cost = B's time per unit over A's):")
    print(table(comparisons), flush=True)
    return 0 if not any(r.get("failed") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
