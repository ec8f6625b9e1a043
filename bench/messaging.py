"""Benchmark 2 — actor messaging: the runtime's ask/tell paths vs raw Pykka vs autogen-core.

Every comparison is paired (``bench._paired``): one warm-up of each side, then interleaved
rounds, each side timed in wall and CPU time. autogen-core is never a project dependency,
so it runs in its own venv (``bench/.autogen-venv``, made on first use with the same Pykka
version): ``_autogen_probe`` measures autogen's ``send_message`` *and* a plain Pykka ask in
that one process, interleaved, so their ratio is paired too. The comparisons:
- ask round trip: a plain ``pykka.ThreadingActor`` echo vs the runtime's
  ``TrackedActor`` (the inbox that counts work for ``settle()``) vs a real
  ``Runtime.is_running()`` (an ask to the supervisor) vs autogen's ``send_message``;
- tell throughput: plain vs tracked actor;
- slot cycle: AcquireSlot → SlotAnswer → ReleaseSlot through the real ``SlotPool`` vs a
  plain Pykka ping-pong (two tells per cycle);
- event delivery: ``Lifeline.publish`` → ``EventBus`` → subscriber callback vs a plain
  Pykka actor calling the same callback.

    python -m bench.messaging [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

import pykka

from bench._common import cli, loadavg, machine, quiet_logs
from bench._paired import compare, interleave, summary
from corvid_actors.config import Config
from corvid_actors.runtime import Runtime

AUTOGEN_VERSION = "0.7.5"
AUTOGEN_VENV = Path(__file__).parent / ".autogen-venv"
TRIALS = 7
WARMUP = 1


class Echo(pykka.ThreadingActor):
    def on_receive(self, message: Any) -> Any:
        return message


class Counter(pykka.ThreadingActor):
    def __init__(self, done: threading.Event, total: int) -> None:
        super().__init__()
        self.n, self.total, self.done = 0, total, done

    def on_receive(self, message: Any) -> Any:
        self.n += 1
        if self.n == self.total:
            self.done.set()


def asks(ref: Any, k: int) -> int:
    for i in range(k):
        ref.ask(i)
    return k


def tells(make: Any, k: int) -> int:
    done = threading.Event()
    ref = make(done, k)
    for i in range(k):
        ref.tell(i)
    assert done.wait(60)
    ref.stop()
    return k


def ping_pong(k: int) -> int:
    class Pong(pykka.ThreadingActor):
        def on_receive(self, message: Any) -> None:
            message[0].tell((self.actor_ref, message[1]))

    class Ping(pykka.ThreadingActor):
        def __init__(self, pong: Any, done: threading.Event, total: int) -> None:
            super().__init__()
            self.pong, self.done, self.left = pong, done, total

        def on_receive(self, message: Any) -> None:
            self.left -= 1
            if self.left <= 0:
                self.done.set()
            else:
                self.pong.tell((self.actor_ref, message[1]))

    done = threading.Event()
    pong = Pong.start()
    ping = Ping.start(pong, done, k)
    pong.tell((ping, 0))
    assert done.wait(60)
    ping.stop()
    pong.stop()
    return k


class SlotCycles:
    """AcquireSlot → SlotAnswer → ReleaseSlot through a real ``SlotPool``."""

    def __init__(self) -> None:
        from corvid_actors.actors.base import ActivityTracker
        from corvid_actors.actors.slots import SlotPool
        from corvid_actors.actors.timers import Timers
        from corvid_actors.clock import RealClock
        from corvid_actors.schema.sections import SlotsConfig

        self.tracker, self.clock = ActivityTracker(), RealClock()
        self.timers = Timers(self.clock)
        self.pool = SlotPool.start(self.tracker, config=SlotsConfig(max_parallel=1, wait_timeout_s=300.0),
                                   timers=self.timers)

    def run(self, k: int) -> int:
        from corvid_actors.actors.base import TrackedActor
        from corvid_actors.actors.session import SlotAnswer
        from corvid_actors.actors.slots import AcquireSlot, ReleaseSlot

        pool = self.pool

        class Session(TrackedActor):
            def __init__(self, tracker: Any, done: threading.Event, total: int) -> None:
                super().__init__(tracker)
                self.done, self.left, self.request = done, total, 0

            def on_receive(self, message: Any) -> None:
                if isinstance(message, SlotAnswer) and message.granted:
                    pool.tell(ReleaseSlot("s"))
                    self.left -= 1
                    if self.left <= 0:
                        self.done.set()
                        return
                self.request += 1
                pool.tell(AcquireSlot("s", self.request, "m", 1, self.actor_ref))

        done = threading.Event()
        ref = Session.start(self.tracker, done, k)
        ref.tell("go")
        assert done.wait(60)
        ref.stop()
        return k

    def close(self) -> None:
        self.pool.stop()
        self.timers.close()
        self.clock.stop()


def deliveries(kind: str, k: int) -> int:
    """``k`` events to a callback: through ``Lifeline.publish`` → ``EventBus`` (runtime) or
    through a plain Pykka actor calling the same callback (plain)."""
    from corvid_actors.actors.base import ActivityTracker
    from corvid_actors.actors.events import EventBus, Subscribe
    from corvid_actors.actors.session_wiring import Lifeline
    from corvid_actors.events import ContentBlockDelta

    event = ContentBlockDelta(text="tok ")

    class PlainBus(pykka.ThreadingActor):
        def __init__(self, callback: Any) -> None:
            super().__init__()
            self.callback = callback

        def on_receive(self, message: Any) -> None:
            self.callback(message[0], message[1])

    done = threading.Event()
    count = [0]

    def callback(sid: str, ev: Any) -> None:
        count[0] += 1
        if count[0] == k:
            done.set()
    bus: pykka.ActorRef[Any]
    if kind == "runtime":
        bus = EventBus.start(ActivityTracker())
        bus.ask(Subscribe("s", callback))
        lifeline = Lifeline("s", bus, coalesce=False)  # one delivery per event, as the plain actor
        for _ in range(k):
            lifeline.publish(event)
    else:
        bus = PlainBus.start(callback)
        for _ in range(k):
            bus.tell(("s", event))
    assert done.wait(60)
    bus.stop()
    return k


def autogen(n: int, trials: int) -> dict[str, Any]:
    """Run ``_autogen_probe`` in a venv that has autogen-core and Pykka (made here on first use)."""
    python = os.environ.get("BENCH_AUTOGEN_PYTHON") or str(AUTOGEN_VENV / "bin" / "python")
    if not Path(python).exists():
        try:
            subprocess.run([sys.executable, "-m", "venv", str(AUTOGEN_VENV)], check=True, capture_output=True)
            subprocess.run([python, "-m", "pip", "install", "-q", f"autogen-core=={AUTOGEN_VERSION}",
                            f"pykka=={metadata.version('pykka')}"],
                           check=True, capture_output=True, text=True, timeout=600)
        except (subprocess.SubprocessError, OSError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            return {"available": False, "reason": f"could not install autogen-core: {str(detail)[-300:]}"}
    probe = Path(__file__).with_name("_autogen_probe.py")
    done = subprocess.run([python, str(probe), str(n), str(trials)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return {"available": False, "reason": f"autogen probe failed: {done.stderr[-300:]}"}
    return {"available": True, **json.loads(done.stdout.strip().splitlines()[-1])}


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    from corvid_actors.actors.base import ActivityTracker, TrackedActor

    n_ask, n_tell, n_cycle, n_event = (1000, 10000, 1000, 10000) if args.quick else (5000, 50000, 5000, 50000)
    trials = 3 if args.quick else TRIALS
    load_before = loadavg()

    class TrackedEcho(TrackedActor):
        def on_receive(self, message: Any) -> Any:
            return message

    class TrackedCounter(TrackedActor):
        def __init__(self, done: threading.Event, total: int) -> None:
            super().__init__(ActivityTracker())
            self.n, self.total, self.done = 0, total, done

        def on_receive(self, message: Any) -> Any:
            self.n += 1
            if self.n == self.total:
                self.done.set()

    paired: list[dict[str, Any]] = []
    sides: dict[str, dict[str, Any]] = {}
    plain, tracked = Echo.start(), TrackedEcho.start(ActivityTracker())
    with tempfile.TemporaryDirectory() as tmp:
        runtime = Runtime(Config(), store_url="sqlite:///:memory:", providers={}, workspace_dir=tmp)
        try:
            rows = interleave({"pykka_plain": lambda: asks(plain, n_ask),
                               "runtime_tracked_actor": lambda: asks(tracked, n_ask),
                               "runtime_supervisor_is_running": lambda: asks(_IsRunning(runtime), n_ask)},
                              trials=trials, warmup=WARMUP)
        finally:
            runtime.shutdown()
            plain.stop()
            tracked.stop()
    sides["ask"] = {k: summary(v) for k, v in rows.items()}
    paired += [compare(rows, "pykka_plain", "runtime_tracked_actor", kind="cost",
                       label="ask round trip: TrackedActor / plain Pykka (time per ask)"),
               compare(rows, "pykka_plain", "runtime_supervisor_is_running", kind="cost",
                       label="ask round trip: Runtime.is_running / plain Pykka ask (time per ask)")]
    rows = interleave({"pykka_plain": lambda: tells(lambda d, k: Counter.start(d, k), n_tell),
                       "runtime_tracked_actor": lambda: tells(lambda d, k: TrackedCounter.start(d, k), n_tell)},
                      trials=trials, warmup=WARMUP)
    sides["tell"] = {k: summary(v) for k, v in rows.items()}
    paired.append(compare(rows, "pykka_plain", "runtime_tracked_actor", kind="rate",
                          label="tell throughput: TrackedActor / plain Pykka (msg/s)"))
    cycles = SlotCycles()
    try:
        rows = interleave({"pykka_ping_pong": lambda: ping_pong(n_cycle),
                           "runtime_slot_cycle": lambda: cycles.run(n_cycle)}, trials=trials, warmup=WARMUP)
    finally:
        cycles.close()
    sides["cycle"] = {k: summary(v) for k, v in rows.items()}
    paired.append(compare(rows, "pykka_ping_pong", "runtime_slot_cycle", kind="rate",
                          label="slot request/grant/release / plain Pykka ping-pong (cycles/s)"))
    rows = interleave({"pykka_plain_actor": lambda: deliveries("plain", n_event),
                       "runtime_lifeline_bus": lambda: deliveries("runtime", n_event)}, trials=trials, warmup=WARMUP)
    sides["delivery"] = {k: summary(v) for k, v in rows.items()}
    paired.append(compare(rows, "pykka_plain_actor", "runtime_lifeline_bus", kind="rate",
                          label="event delivery: Lifeline → EventBus / plain Pykka actor (events/s)"))
    ag = autogen(n_ask, trials)
    if ag.get("available"):
        paired.append({**ag.pop("paired"), "label": "ask round trip: autogen-core send_message / plain Pykka ask "
                                                     "(time per ask, in autogen's venv)"})
    by_label = {c["label"]: c["wall"]["median"] for c in paired}
    return {
        "name": "messaging", "machine": machine(), "load_before": load_before, "trials": trials, "warmup": WARMUP,
        "sizes": {"asks": n_ask, "tells": n_tell, "cycles": n_cycle, "events": n_event},
        "sides": sides, "paired": paired, "autogen": ag, "ratios": by_label,
        "goal": "report ratios (no numeric goal)", "met": None,
        "command": ".venv/bin/python -m bench.messaging",
    }


class _IsRunning:
    """``Runtime.is_running`` (an ask to the supervisor) in the shape ``asks`` takes."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def ask(self, _message: Any) -> Any:
        return self.runtime.is_running("no-such-session")


if __name__ == "__main__":
    cli(run)
