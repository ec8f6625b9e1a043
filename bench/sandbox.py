"""Benchmark 7 — the OS sandbox's cost per ``run_command``: the tool with and without it.

The same ``run_command`` handler (``sh -c``, output drained, protected files scanned and
masked when sandboxed) runs ``true`` and ``ls`` in a small project (a few hundred files, a
``.env``, a ``.git``), ``RUNS`` times each, alternating plain and sandboxed so both see
the same load. Reported: wall-time p50/p99 per call and the p50 the sandbox adds.

    python -m bench.sandbox [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from pathlib import Path
from typing import Any

from bench._common import cli, loadavg, machine, now, percentile, quiet_logs

RUNS = 300
COMMANDS = ("true", "ls")
GOAL_ADDED_P50_MS = 15.0
FILES = 300


def _project(root: Path) -> Path:
    (root / ".git").mkdir()
    (root / ".env").write_text("SECRET=1\n")
    for i in range(FILES):
        sub = root / f"pkg{i % 10}"
        sub.mkdir(exist_ok=True)
        (sub / f"mod{i}.py").write_text("x = 1\n")
    return root


def _call_later(delay: float, fn):  # real time: the tool's deadline
    timer = threading.Timer(delay, fn)
    timer.daemon = True
    timer.start()
    return timer.cancel


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    from corvid_actors.tools.base import ToolContext
    from corvid_actors.tools.coding import coding_tools
    from corvid_actors.tools.env import safe_env
    from corvid_actors.tools.sandbox import Sandbox, SandboxSettings

    runs = 60 if args.quick else RUNS
    handler = {t.name: t for t in coding_tools()}["run_command"].handler
    sandbox = Sandbox()
    if not sandbox.active:
        raise SystemExit(f"no working sandbox here: {sandbox.status.reason}")
    load_before = loadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        project = _project(Path(tmp))
        contexts = {
            "plain": ToolContext(project_dir=project, env=safe_env({}), call_later=_call_later),
            "sandbox": ToolContext(project_dir=project, env=safe_env({}), call_later=_call_later,
                                   sandbox=sandbox),
        }
        if sandbox._cgroup_root is not None:
            # as root the process limit is a pids cgroup; what joining it costs, apart
            contexts["sandbox_no_cgroup"] = ToolContext(
                project_dir=project, env=safe_env({}), call_later=_call_later,
                sandbox=Sandbox(SandboxSettings(pids_cgroup_roots=())))
        for command in COMMANDS:
            times: dict[str, list[float]] = {kind: [] for kind in contexts}
            for i in range(runs + 5):
                for kind, ctx in contexts.items():
                    t0 = now()
                    result = handler({"command": command}, ctx)
                    elapsed = (now() - t0) * 1000
                    assert not result.is_error, result.output
                    if i >= 5:  # warm-up: page cache, the first bwrap exec
                        times[kind].append(elapsed)
            row = {"command": command, "runs": runs}
            for kind, values in times.items():
                row[kind] = {"p50": round(percentile(values, 50), 2), "p99": round(percentile(values, 99), 2)}
            row["added_p50_ms"] = round(row["sandbox"]["p50"] - row["plain"]["p50"], 2)
            rows.append(row)
    floor = _namespace_floor(sandbox.status.binary, runs)
    worst = max(r["added_p50_ms"] for r in rows)
    return {
        "name": "sandbox", "machine": machine(), "load_before": load_before, "rows": rows,
        "files_in_project": FILES, "bwrap": sandbox.status.binary, "floor": floor,
        "cgroup": sandbox._cgroup_root is not None,
        "goal": f"≤ {GOAL_ADDED_P50_MS:g} ms added at p50", "met": worst <= GOAL_ADDED_P50_MS,
        "command": ".venv/bin/python -m bench.sandbox",
    }


def _namespace_floor(bwrap: str, runs: int) -> dict[str, float]:
    """p50 of ``/bin/true`` bare and under the least bwrap can do (a user and a mount
    namespace): the part of the cost that is the kernel's, on this machine, at this load."""
    import subprocess

    argv = {"bare": ["/bin/true"], "bwrap_minimal": [bwrap, "--ro-bind", "/", "/", "/bin/true"]}
    times: dict[str, list[float]] = {k: [] for k in argv}
    for _ in range(runs):
        for kind, command in argv.items():
            t0 = now()
            subprocess.run(command, check=True)
            times[kind].append((now() - t0) * 1000)
    return {k: round(percentile(v, 50), 2) for k, v in times.items()}


if __name__ == "__main__":
    cli(run)
