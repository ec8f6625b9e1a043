"""Benchmark 2 — actor messaging: the runtime's ask/tell paths vs raw Pykka vs autogen-core.

Side by side, in one process (autogen-core in its own venv, see ``_autogen_probe``):
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
import threading
from pathlib import Path
from typing import Any

import pykka

from bench._common import cli, loadavg, machine, median, now, quiet_logs

AUTOGEN_VERSION = "0.7.5"
AUTOGEN_VENV = Path(__file__).parent / ".autogen-venv"
REPEATS = 3


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


def _rate(fn: Any, n: int) -> float:
    """Median over REPEATS of n / seconds."""
    rates = []
    for _ in range(REPEATS):
        t0 = now()
        fn(n)
        rates.append(n / (now() - t0))
    return median(rates)


def ask_rtt_us(ref: pykka.ActorRef[Any], n: int) -> float:
    return 1e6 / _rate(lambda k: [ref.ask(i) for i in range(k)], n)


def tell_rate(make: Any, n: int) -> float:
    def go(k: int) -> None:
        done = threading.Event()
        ref = make(done, k)
        for i in range(k):
            ref.tell(i)
        assert done.wait(60)
        ref.stop()
    return _rate(go, n)


def plain_ping_pong_rate(n: int) -> float:
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

    def go(k: int) -> None:
        done = threading.Event()
        pong = Pong.start()
        ping = Ping.start(pong, done, k)
        pong.tell((ping, 0))
        assert done.wait(60)
        ping.stop()
        pong.stop()
    return _rate(go, n)


def slot_cycle_rate(n: int) -> float:
    from corvid_actors.actors.base import ActivityTracker, TrackedActor
    from corvid_actors.actors.session import SlotAnswer
    from corvid_actors.actors.slots import AcquireSlot, ReleaseSlot, SlotPool
    from corvid_actors.actors.timers import Timers
    from corvid_actors.clock import RealClock
    from corvid_actors.config_sections import SlotsConfig

    tracker, clock = ActivityTracker(), RealClock()
    timers = Timers.start(tracker, clock)
    pool = SlotPool.start(tracker, config=SlotsConfig(max_parallel=1, wait_timeout_s=300.0), timers=timers)

    class Session(TrackedActor):
        def __init__(self, done: threading.Event, total: int) -> None:
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

    def go(k: int) -> None:
        done = threading.Event()
        ref = Session.start(done, k)
        ref.tell("go")
        assert done.wait(60)
        ref.stop()
    try:
        return _rate(go, n)
    finally:
        pool.stop()
        timers.stop()
        clock.stop()


def delivery_rates(n: int) -> tuple[float, float]:
    from corvid_actors.actors.base import ActivityTracker
    from corvid_actors.actors.events import EventBus, Subscribe
    from corvid_actors.actors.session import Lifeline
    from corvid_actors.events import ContentBlockDelta

    event = ContentBlockDelta(text="tok ")

    class PlainBus(pykka.ThreadingActor):
        def __init__(self, callback: Any) -> None:
            super().__init__()
            self.callback = callback

        def on_receive(self, message: Any) -> None:
            self.callback(message[0], message[1])

    def run(kind: str, k: int) -> None:
        done = threading.Event()
        count = [0]

        def callback(sid: str, ev: Any) -> None:
            count[0] += 1
            if count[0] == k:
                done.set()
        if kind == "runtime":
            bus = EventBus.start(ActivityTracker())
            bus.ask(Subscribe("s", callback))
            lifeline = Lifeline("s", bus)
            for _ in range(k):
                lifeline.publish(event)
        else:
            bus = PlainBus.start(callback)
            for _ in range(k):
                bus.tell(("s", event))
        assert done.wait(60)
        bus.stop()
    return _rate(lambda k: run("runtime", k), n), _rate(lambda k: run("plain", k), n)


def autogen(n: int) -> dict[str, Any]:
    """Run ``_autogen_probe`` in a venv that has autogen-core (made here on first use)."""
    python = os.environ.get("BENCH_AUTOGEN_PYTHON") or str(AUTOGEN_VENV / "bin" / "python")
    if not Path(python).exists():
        try:
            subprocess.run([sys.executable, "-m", "venv", str(AUTOGEN_VENV)], check=True, capture_output=True)
            subprocess.run([python, "-m", "pip", "install", "-q", f"autogen-core=={AUTOGEN_VERSION}"],
                           check=True, capture_output=True, text=True, timeout=600)
        except (subprocess.SubprocessError, OSError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            return {"available": False, "reason": f"could not install autogen-core: {str(detail)[-300:]}"}
    probe = Path(__file__).with_name("_autogen_probe.py")
    done = subprocess.run([python, str(probe), str(n)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return {"available": False, "reason": f"autogen probe failed: {done.stderr[-300:]}"}
    return {"available": True, **json.loads(done.stdout.strip().splitlines()[-1])}


def run(args: argparse.Namespace) -> dict[str, Any]:
    quiet_logs()
    from corvid_actors.actors.base import ActivityTracker, TrackedActor

    asks, tells, cycles, events = (2000, 20000, 2000, 20000) if args.quick else (10000, 100000, 10000, 100000)
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

    plain, tracked = Echo.start(), TrackedEcho.start(ActivityTracker())
    rtt = {"pykka_plain": ask_rtt_us(plain, asks), "runtime_tracked_actor": ask_rtt_us(tracked, asks)}
    plain.stop()
    tracked.stop()
    rtt["runtime_supervisor_is_running"] = _runtime_ask_us(asks)
    tell = {"pykka_plain": tell_rate(lambda d, k: Counter.start(d, k), tells),
            "runtime_tracked_actor": tell_rate(lambda d, k: TrackedCounter.start(d, k), tells)}
    cycle = {"pykka_ping_pong": plain_ping_pong_rate(cycles), "runtime_slot_cycle": slot_cycle_rate(cycles)}
    runtime_delivery, plain_delivery = delivery_rates(events)
    delivery = {"pykka_plain_actor": plain_delivery, "runtime_lifeline_bus": runtime_delivery}
    ag = autogen(asks)
    if ag.get("available"):
        rtt["autogen_send_message"] = ag["send_message_rtt_us"]
    r = lambda d: {k: round(v, 1) for k, v in d.items()}  # noqa: E731
    return {
        "name": "messaging", "machine": machine(), "load_before": load_before,
        "ask_rtt_us": r(rtt), "tell_per_s": r(tell), "cycles_per_s": r(cycle), "events_per_s": r(delivery),
        "autogen": ag,
        "ratios": {
            "tracked_ask_vs_plain": round(rtt["runtime_tracked_actor"] / rtt["pykka_plain"], 2),
            "supervisor_ask_vs_plain": round(rtt["runtime_supervisor_is_running"] / rtt["pykka_plain"], 2),
            "tracked_tell_rate_vs_plain": round(tell["runtime_tracked_actor"] / tell["pykka_plain"], 2),
            "slot_cycle_vs_ping_pong": round(cycle["runtime_slot_cycle"] / cycle["pykka_ping_pong"], 2),
            "bus_delivery_vs_plain": round(runtime_delivery / plain_delivery, 2),
            **({"autogen_send_vs_pykka_ask": round(ag["send_message_rtt_us"] / rtt["pykka_plain"], 1)}
               if ag.get("available") else {}),
        },
        "goal": "report ratios (no numeric goal)", "met": None,
        "command": ".venv/bin/python -m bench.messaging",
    }


def _runtime_ask_us(n: int) -> float:
    import tempfile

    from corvid_actors.config import Config
    from corvid_actors.runtime import Runtime

    with tempfile.TemporaryDirectory() as tmp:
        runtime = Runtime(Config(), store_url="sqlite:///:memory:", providers={}, workspace_dir=tmp)
        try:
            def go(k: int) -> None:
                for _ in range(k):
                    runtime.is_running("no-such-session")
            return 1e6 / _rate(go, n)
        finally:
            runtime.shutdown()


if __name__ == "__main__":
    cli(run)
