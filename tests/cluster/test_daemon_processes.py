"""Several real daemons (``corvid-actors serve`` subprocesses) on one PostgreSQL (issue 20):
each session owned by exactly one daemon (asserted from the database and from each
daemon's own view); ``kill -9`` of a daemon mid-turn moves its sessions to the others
within lease + sweep (the interrupted turn resumed there once, idle sessions given no
turn); ``admin drain`` hands every session over and the daemon exits 0.

Timings: heartbeat 0.2 s, lease 1 s, sweep every 0.2 s; every wait is bounded.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from corvid_actors.db.cluster import ClusterStore
from corvid_actors.db.store import Store
from tests.e2e.test_daemon import WAIT_S, Daemon

pytestmark = pytest.mark.postgres

CLUSTER_CONFIG = """
[cluster]
heartbeat_s = 0.2
lease_s = 1.0
sweep_interval_s = 0.2
sweep_jitter_s = 0.05
dead_daemon_grace_s = 2.0
"""
LEASE_S, SWEEP_S = 1.0, 0.25


def start_daemon(name: str, url: str, tmp: Path) -> Daemon:
    data_dir = tmp / name
    data_dir.mkdir()
    daemon = Daemon(data_dir, env={"CORVID_DB_URL": url, "CORVID_CLUSTER": "1", "CORVID_DAEMON_ID": name},
                    extra_config=CLUSTER_CONFIG, chunk_delay_s=0.05)
    return daemon.start()


def owners(url: str) -> dict[str, str | None]:
    store = Store(url)
    try:
        with store.transaction():
            L = store.m.SessionLease
            return {row.session_id: row.owner_id for row in L.select(L.session, L.owner)}
    finally:
        store.close()


def running_on(daemon: Daemon) -> set[str]:
    return {s["id"] for s in daemon.call("sessions") if s["here"]}


def wait_for(check: Any, what: str, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout_s}s: {what}")


@pytest.fixture
def cluster_of(pg_url: str, tmp_path: Path) -> Any:
    made: list[Daemon] = []

    def make(*names: str) -> list[Daemon]:
        out = [start_daemon(name, pg_url, tmp_path) for name in names]
        made.extend(out)
        return out

    yield make
    for daemon in made:
        daemon.kill()


def test_killed_daemon_sessions_move_and_a_drained_daemon_exits(cluster_of, pg_url):
    a, b, c = cluster_of("a", "b", "c")
    placed: dict[str, str] = {}
    for daemon, name in ((a, "a"), (b, "b"), (c, "c")):
        for i in range(2):
            started = daemon.call("start", agent=f"agent-{name}{i}", prompt="hello")
            placed[started["session"]] = name
    # each session is owned by exactly the daemon it was started on: the database says so...
    wait_for(lambda: owners(pg_url) == placed, "leases as placed")
    # ... and so does each daemon's own view
    for daemon, name in ((a, "a"), (b, "b"), (c, "c")):
        assert running_on(daemon) == {sid for sid, owner in placed.items() if owner == name}
        assert {s["id"]: s["owner"] for s in daemon.call("sessions")} == placed

    # sample ownership continuously: never a session without exactly one owner row
    samples: list[dict[str, str | None]] = []
    stop_sampling = threading.Event()

    def sample() -> None:
        while not stop_sampling.is_set():
            samples.append(owners(pg_url))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    a_sessions = {sid for sid, owner in placed.items() if owner == "a"}
    killed_at = time.monotonic()
    a.kill()  # SIGKILL mid-turn: the stub streams each reply over seconds
    moved = wait_for(lambda: a_sessions <= (running_on(b) | running_on(c)), "a's sessions run elsewhere",
                     timeout_s=LEASE_S + 10 * SWEEP_S + WAIT_S)
    failover_s = time.monotonic() - killed_at
    print(f"failover of {len(a_sessions)} sessions: {failover_s:.2f} s")
    assert moved and failover_s < LEASE_S + 8.0
    final = owners(pg_url)
    assert {final[sid] for sid in a_sessions} <= {"b", "c"}
    assert not (running_on(b) & running_on(c))  # no session runs on both

    # drain b: its sessions go to c, and b exits 0
    b_sessions = {sid for sid, owner in final.items() if owner == "b"}
    assert b.call("drain")["draining"] is True
    assert b.wait_exit(WAIT_S * 3) == 0
    wait_for(lambda: b_sessions <= running_on(c), "b's sessions run on c", timeout_s=LEASE_S + WAIT_S)
    stop_sampling.set()
    sampler.join(WAIT_S)
    assert all(set(s) == set(placed) for s in samples)  # one lease row each, all along
    assert owners(pg_url) == {sid: "c" for sid in placed}
