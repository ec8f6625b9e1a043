"""PostgreSQL fixtures for the cluster tests: the store tests' (a database per run, a fresh
schema per test; skipped locally when the server is unreachable, FAILED in CI)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from corvid_actors.db.store import Store
from corvid_actors.testing import (
    EventRecorder,
    ScriptedProvider,
    SimClock,
    real_monotonic,
    sim_runtime,
)
from corvid_actors.testing.tcp_proxy import TcpProxy
from tests.db.conftest import open_store, pg_database_url, pg_url  # noqa: F401 - fixtures

#: anything a daemon does on request, on a loaded machine (seconds)
WAIT_S = 10.0


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """``check()``'s first truthy value, polled every 20 ms for at most ``timeout_s`` real
    seconds (``real_monotonic``: a SimClock open in the process freezes ``time.monotonic``)."""
    deadline = real_monotonic() + timeout_s
    while real_monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout_s}s: {what}")


#: short simulated timings for two runtimes sharing one clock (heartbeat, lease, sweep)
SIM_CLUSTER = {"enabled": True, "heartbeat_s": 5.0, "lease_s": 15.0, "sweep_interval_s": 5.0,
               "sweep_jitter_s": 1.0, "dead_daemon_grace_s": 60.0}


@dataclass
class SimDaemon:
    """One runtime ("daemon") on the shared simulated clock: its scripted model, its events."""

    runtime: Any
    model: ScriptedProvider
    events: EventRecorder


@dataclass
class SimPair:
    """Daemon ``a`` reaches PostgreSQL through ``proxy`` (``proxy.partition()`` cuts it off);
    daemon ``b`` directly, or through ``b_proxy`` when asked. Both run on ``clock``."""

    clock: SimClock
    proxy: TcpProxy
    a: SimDaemon
    b: SimDaemon
    b_proxy: TcpProxy | None = None

    def store_outage(self) -> None:
        """The database is gone for both daemons (needs ``b_proxy``)."""
        assert self.b_proxy is not None
        self.proxy.partition()
        self.b_proxy.partition()

    def store_back(self) -> None:
        """... and back."""
        assert self.b_proxy is not None
        self.proxy.admit()
        self.b_proxy.admit()


@contextmanager
def sim_pair(url: str, *, supervisor: dict[str, Any] | None = None, b_store: Store | None = None,
             b_proxy: bool = False, cluster: dict[str, Any] | None = None,
             b_tracer_provider: Any = None) -> Iterator[SimPair]:
    """Two daemons on one simulated clock and one PostgreSQL at ``url`` (see
    :class:`SimPair`), shut down on exit. ``b_store``: b's store (default: its own on ``url``,
    through a proxy of its own with ``b_proxy``). ``cluster``: overrides of SIM_CLUSTER.
    ``b_tracer_provider``: the OpenTelemetry TracerProvider of b's spans."""
    clock = SimClock()
    proxy = TcpProxy("127.0.0.1", 5432).start()
    second = TcpProxy("127.0.0.1", 5432).start() if b_proxy else None
    made: list[Any] = []

    def daemon(name: str, store_args: dict[str, Any]) -> SimDaemon:
        model = ScriptedProvider(clock, default_reply=f"reply from {name}")
        config: dict[str, Any] = {"cluster": {**SIM_CLUSTER, **(cluster or {}), "daemon_id": name}}
        if supervisor:
            config["supervisor"] = supervisor
        runtime = sim_runtime(clock, model, config=config, **store_args)
        made.append(runtime)
        return SimDaemon(runtime, model, EventRecorder.attach(runtime))

    try:
        a = daemon("a", {"store_url": proxy.url(url)})
        b_url = second.url(url) if second is not None else url
        b = daemon("b", {**({"store": b_store} if b_store is not None else {"store_url": b_url}),
                         "tracer_provider": b_tracer_provider})
        yield SimPair(clock, proxy, a, b, second)
    finally:
        proxy.close()
        if second is not None:
            second.close()
        for runtime in reversed(made):
            runtime.shutdown()
        clock.close()
