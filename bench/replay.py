"""Record and replay (issue 40): what the journal costs, how big it is, how fast a day replays.

1. **Journal cost on the streaming benchmark**: the runtime side of ``bench.streaming`` (one
   session streams N one-word chunks from the stub Ollama in its own process to a
   subscriber), once on a runtime with ``[journal]`` off and once with it on (content
   capture on), interleaved and paired (``bench._paired``). Goal: the journal costs ≤ 3 %
   (paired median of journal-on / journal-off tokens per second ≥ 0.97, CPU time per token;
   wall time beside it).
2. **Journal size per turn**: stored (compressed) bytes per session of the streaming
   trials (one turn of N chunks), and per user turn of a simulated day of chat sessions
   (short replies, tool calls with approvals, crashes with restarts).
3. **A day of 100 sessions replays in under 1 s**: the simulated day is recorded with the
   journal on, exported as one module (``export_test`` with the 100 session ids), and its
   ``replay_all`` is timed (median of K runs after one warm-up; wall and CPU).

    python -m bench.replay [--quick] [--tokens N] [--trials K] [--sessions S]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import cli, loadavg, machine, median, quiet_logs
from bench._paired import compare, interleave
from bench._runtime import create_sessions
from bench._stub_proc import StubProcess
from bench.streaming import WARMUP, RuntimeSide

GOAL_RATIO = 0.97
GOAL_DAY_S = 1.0


def journal_runtime(url: str, workdir: Path, *, journal: bool) -> Any:
    """``bench._runtime.real_runtime`` with ``[journal] enabled`` set as asked."""
    from corvid_actors.config import Config
    from corvid_actors.providers.ollama import OllamaProvider
    from corvid_actors.runtime import Runtime

    cfg = Config().replace(slots={"max_parallel": 4}, supervisor={"session_idle_timeout_s": 3600.0},
                           providers={"ollama_host": url}, journal={"enabled": journal})
    return Runtime(cfg, store_url=f"sqlite:///{workdir / 'corvid.db'}", providers={"ollama": OllamaProvider(url)},
                   workspace_dir=workdir / "ws")


def streaming_cost(n: int, trials: int) -> dict[str, Any]:
    from corvid_actors.db.journal import JournalStore

    load_before = loadavg()
    with StubProcess() as url, tempfile.TemporaryDirectory() as off_dir, tempfile.TemporaryDirectory() as on_dir:
        off = journal_runtime(url, Path(off_dir), journal=False)
        on = journal_runtime(url, Path(on_dir), journal=True)
        try:
            off_side = RuntimeSide(off, create_sessions(off, Path(off_dir), trials + WARMUP))
            on_sids = create_sessions(on, Path(on_dir), trials + WARMUP)
            on_side = RuntimeSide(on, on_sids)

            def between() -> None:
                off_side.cleanup()
                on_side.cleanup()

            rows = interleave({"journal_off": lambda: off_side.trial(n), "journal_on": lambda: on_side.trial(n)},
                              trials=trials, warmup=WARMUP, between=between)
            on.internals.journal.entries.flush()
            store = JournalStore(on.internals.store, writer=False)
            sizes = [store.size(sid) for sid in on_sids]
        finally:
            off.shutdown()
            on.shutdown()
    for name, trials_ in rows.items():
        assert all(t.units == n for t in trials_), f"{name} lost tokens: {[t.units for t in trials_]}"
    paired = compare(rows, "journal_off", "journal_on", kind="rate",
                     label="journal on / journal off, tokens/s (streaming)", goal=f"median ≥ {GOAL_RATIO}")
    return {"tokens_per_trial": n, "trials": trials, "load_before": load_before, "load_after": loadavg(),
            "paired": paired, "ratio_cpu": paired["cpu"]["median"], "ratio_wall": paired["wall"]["median"],
            "cost_cpu_pct": round((1 - paired["cpu"]["median"]) * 100, 2),
            "journal_bytes_per_streaming_turn": int(median([s for s in sizes if s])),
            "met": paired["cpu"]["median"] >= GOAL_RATIO}


def record_day(sessions: int, workdir: Path) -> tuple[Path, int, int]:
    """A simulated day of ``sessions`` chat sessions, journaled and exported as one module;
    (its path, user turns, journal bytes)."""
    from corvid_actors.db.journal import JournalStore
    from corvid_actors.testing import ScriptedProvider, SimClock, Turn, sim_runtime
    from corvid_actors.testing.replay import export_test

    rng = random.Random(40)
    clock = SimClock()
    provider = ScriptedProvider(clock)
    runtime = sim_runtime(clock, provider, config={"journal": {"enabled": True}},
                          loop_for_provider={"scripted": "direct"})
    try:
        agent = runtime.create_agent("daybot", permission_mode="default")

        def approve(sid: str, event: Any) -> None:
            if event.type == "approval_request":
                clock.call_later(2.0, lambda: runtime.resolve_approval(event.id, "allow", "ok"))

        runtime.subscribe_all(approve)
        plan: list[tuple[float, str, str]] = []
        ids = []
        turns = 0
        for i in range(sessions):
            sid = runtime.create_session(agent_id=agent.id, source="chat").id
            ids.append(sid)
            script: list[Any] = []
            if i % 10 == 0:
                script.append(Turn.tool_call("list_files", {"path": "."}, latency_s=1))
            if i % 25 == 0:
                script.append(Turn.crash("model server fell over", latency_s=1))
            script += [Turn.reply(f"Answer {k} for session {i}: all good.", deltas=6, latency_s=1.5,
                                  delta_interval_s=0.2) for k in range(4)]
            provider.for_session(sid, *script)
            first = rng.uniform(0, 86400 - 7200)
            plan.append((first, "start", sid))
            for k in range(2):
                plan.append((first + 600 * (k + 1), "send", sid))
            turns += 3
        for at, what, sid in sorted(plan):
            clock.advance_to(at)
            if what == "start":
                runtime.start_process(sid, "hello there")
            else:
                runtime.send_message(sid, "and then?")
        clock.advance_to(86400)
        runtime.internals.journal.entries.flush()
        store = JournalStore(runtime.internals.store, writer=False)
        size = sum(store.size(sid) for sid in ids)
        path = workdir / "test_day.py"
        export_test(runtime, ids, path)
    finally:
        runtime.shutdown()
        clock.close()
    return path, turns, size


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def day_replay(sessions: int, runs: int) -> dict[str, Any]:
    from corvid_actors.testing.replay import replay_all

    with tempfile.TemporaryDirectory() as tmp:
        path, turns, size = record_day(sessions, Path(tmp))
        spec = importlib.util.spec_from_file_location("exported_day", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        recordings, expected = module.RECORDINGS, module.EXPECTED_EVENTS
        module_bytes = path.stat().st_size
    load_before = loadavg()
    replay_all(recordings, expected_events=expected)  # warm-up
    walls, cpus = [], []
    for _ in range(runs):
        w0, c0 = time.perf_counter(), _cpu()
        replay_all(recordings, expected_events=expected)
        walls.append(time.perf_counter() - w0)
        cpus.append(_cpu() - c0)
    return {"sessions": sessions, "user_turns": turns, "runs": runs, "load_before": load_before,
            "load_after": loadavg(), "wall_s": [round(w, 3) for w in walls], "cpu_s": [round(c, 3) for c in cpus],
            "wall_s_median": round(median(walls), 3), "cpu_s_median": round(median(cpus), 3),
            "journal_bytes_per_user_turn": round(size / turns), "exported_module_bytes": module_bytes,
            "met": median(walls) < GOAL_DAY_S}


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    n = args.tokens or (5000 if args.quick else 30000)
    trials = args.trials or (3 if args.quick else 7)
    sessions = args.sessions or 100
    streaming = streaming_cost(n, trials)
    day = day_replay(sessions, 3 if args.quick else 5)
    return {
        "name": "replay", "machine": machine(), "streaming": streaming, "day": day,
        "goal": f"journal on ≥ {GOAL_RATIO:.0%} of journal off tokens/s (paired median, CPU per token); "
                f"a day of {sessions} sessions replays in < {GOAL_DAY_S} s",
        "met": streaming["met"] and day["met"],
        "command": ".venv/bin/python -m bench.replay",
    }


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, default=0)
    parser.add_argument("--trials", type=int, default=0)
    parser.add_argument("--sessions", type=int, default=0)


if __name__ == "__main__":
    cli(run, _flags)
