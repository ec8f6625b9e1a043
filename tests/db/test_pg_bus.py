"""PgBus on a real PostgreSQL: two buses on one database stand for two daemons.

Each test gets a fresh schema (``pg_url``) migrated by a Store, and a random channel
namespace (NOTIFY channels are per database, shared by every test of the run). Every wait
is bounded (under a second) and wakes on the condition, not on a timer.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("psycopg2")

import psycopg2  # noqa: E402 - after the skip

from corvid_actors.clock import Cancellable, RealClock  # noqa: E402
from corvid_actors.core.jsontypes import JsonObject  # noqa: E402
from corvid_actors.db.pg_bus import CommandFailed, CommandTimeout, PgBus, Reply  # noqa: E402
from corvid_actors.db.pg_bus_wire import MAX_NOTIFY_PAYLOAD_BYTES  # noqa: E402
from corvid_actors.errors import NotFoundError, RuntimeStoppedError  # noqa: E402
from tests.db.pg_bus_fixtures import sql  # noqa: E402

pytestmark = pytest.mark.postgres

#: the longest any single wait of these tests may take
WAIT_S = 1.0
#: reconnect backoff in tests: fast, but still paced
BACKOFF_S = (0.02, 0.1)


class Daemon:
    """A bus plus what reached it: commands handled, events received, health changes."""

    def __init__(self, url: str, daemon_id: str, namespace: str, *, answer: bool = True,
                 connect: Callable[..., Any] | None = None, clock: RealClock | None = None,
                 handle: Callable[[PgBus, Reply], None] | None = None) -> None:
        self.id = daemon_id
        self.handle = handle
        self.answer = answer
        self.cond = threading.Condition()
        self.commands: list[JsonObject] = []
        self.replies: list[Reply] = []
        self.events: list[tuple[str, JsonObject]] = []
        self.health: list[str | None] = []
        self.bus = PgBus(url, daemon_id, clock=clock or RealClock(), on_command=self._on_command,
                         on_events=self._on_events, namespace=namespace,
                         reconnect_backoff_s=BACKOFF_S, connect=connect)
        self.bus.listener.add_listener(self._on_health)

    def _on_command(self, origin: str, command: JsonObject, reply: Reply) -> None:
        with self.cond:
            self.commands.append(command)
            self.replies.append(reply)
            self.cond.notify_all()
        if self.handle is not None:
            self.handle(self.bus, reply)
            return
        if command.get("fail"):
            raise ValueError(f"cannot {command['op']}")
        if self.answer:
            reply.done({"ran": command["op"], "on": self.id, "from": origin})

    def _on_events(self, origin: str, events: list[JsonObject]) -> None:
        with self.cond:
            self.events += [(origin, e) for e in events]
            self.cond.notify_all()

    def _on_health(self, reason: str | None) -> None:
        with self.cond:
            self.health.append(reason)
            self.cond.notify_all()

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = WAIT_S) -> None:
        with self.cond:
            assert self.cond.wait_for(predicate, timeout), f"{self.id}: timed out waiting for {what}"


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def daemons(bus_url: str, namespace: str) -> Iterator[Callable[..., Daemon]]:
    """Makes started daemons; stops every one after the test."""
    made: list[Daemon] = []

    def make(daemon_id: str, *, reachable: bool = True, **kwargs: Any) -> Daemon:
        daemon = Daemon(bus_url, daemon_id, namespace, **kwargs)
        made.append(daemon)
        daemon.bus.start()
        if not reachable:
            return daemon
        assert daemon.bus.status == "ok", daemon.bus.unavailable_reason
        assert daemon.health == [None]  # "not started" -> listening
        daemon.health.clear()
        return daemon

    yield make
    for daemon in made:
        daemon.bus.stop()


def terminate(admin: Any, pid: int | None) -> None:
    assert pid is not None
    assert sql(admin, "SELECT pg_terminate_backend(%s)", pid) == [(True,)]


class BackoffClock(RealClock):
    """Real time, except that the listener's first backoff waits return at once (recorded)
    and the later ones last until cancelled: the backoff is read without waiting it out."""

    def __init__(self, recorded: int) -> None:
        super().__init__()
        self.recorded = recorded
        self.waits: list[float] = []
        self.cond = threading.Condition()

    def wait(self, delay_s: float, cancel: Cancellable | None = None) -> bool:
        with self.cond:
            self.waits.append(delay_s)
            self.cond.notify_all()
            if len(self.waits) <= self.recorded:
                return True
        return super().wait(3600, cancel)


class Gate:
    """A connect function that refuses while closed: a server the daemon cannot reach."""

    def __init__(self) -> None:
        self.open = True

    def __call__(self, url: str, **params: Any) -> Any:
        if not self.open:
            raise psycopg2.OperationalError("connection refused (test gate closed)")
        return psycopg2.connect(url, **params)


# --- commands -------------------------------------------------------------------------------

def test_a_forwarded_command_runs_once_on_its_target_and_its_result_reaches_the_caller(
        daemons, admin, namespace) -> None:
    a, b = daemons("a"), daemons("b")

    first = a.bus.forward("b", {"op": "list"})
    # the same command announced twice more: the take is exactly once
    for _ in range(2):
        sql(admin, "SELECT pg_notify(%s, %s)", f"{namespace}_cmd_b", first)
    assert a.bus.await_result(first, WAIT_S) == {"ran": "list", "on": "b", "from": "a"}
    second = a.bus.forward("b", {"op": "stop"})  # handled after the duplicates: they are done
    assert a.bus.await_result(second, WAIT_S) == {"ran": "stop", "on": "b", "from": "a"}

    assert b.commands == [{"op": "list"}, {"op": "stop"}]
    assert a.commands == []
    assert sql(admin, "SELECT count(*) FROM cluster_commands") == [(0,)]  # collected rows are deleted
    with pytest.raises(NotFoundError, match="collected already"):
        a.bus.await_result(first, WAIT_S)


def test_a_failing_command_raises_its_failure_at_the_caller(daemons) -> None:
    a, _b = daemons("a"), daemons("b")

    command_id = a.bus.forward("b", {"op": "start", "fail": True})

    with pytest.raises(CommandFailed, match="failed on daemon b: ValueError: cannot start"):
        a.bus.await_result(command_id, WAIT_S)


def test_a_command_sent_while_the_target_was_disconnected_runs_after_it_reconnects(
        daemons, admin) -> None:
    gate = Gate()
    a, b = daemons("a"), daemons("b", connect=gate)
    gate.open = False
    terminate(admin, b.bus.listener.pid)
    b.wait_for("degraded", lambda: len(b.health) == 1)
    assert b.bus.status == "degraded" and "lost" in (b.bus.unavailable_reason or "")

    command_id = a.bus.forward("b", {"op": "approve"})  # its NOTIFY finds nobody listening
    gate.open = True

    assert a.bus.await_result(command_id, WAIT_S) == {"ran": "approve", "on": "b", "from": "a"}
    b.wait_for("back", lambda: len(b.health) == 2)  # swept (and answered) before it says so
    assert b.commands == [{"op": "approve"}] and b.bus.available


def test_a_target_that_never_answers_times_out_the_caller(daemons, admin) -> None:
    a, b = daemons("a"), daemons("b", answer=False)
    command_id = a.bus.forward("b", {"op": "send"})
    b.wait_for("the command", lambda: len(b.commands) == 1)

    started = time.monotonic()
    with pytest.raises(CommandTimeout, match="took command .* but gave no result within 0.3s") as caught:
        a.bus.await_result(command_id, 0.3)
    assert 0.3 <= time.monotonic() - started < WAIT_S
    assert caught.value.taken
    b.replies[0].done("too late")  # the abandoned command's row goes with its late answer
    assert sql(admin, "SELECT count(*) FROM cluster_commands") == [(0,)]


def test_a_command_nobody_takes_is_withdrawn_when_the_caller_gives_up(daemons, admin) -> None:
    a = daemons("a")
    command_id = a.bus.forward("gone", {"op": "stop"})

    with pytest.raises(CommandTimeout, match="did not take .* withdrawn and will not run") as caught:
        a.bus.await_result(command_id, 0.2)

    assert not caught.value.taken
    assert sql(admin, "SELECT count(*) FROM cluster_commands") == [(0,)]


# --- events ---------------------------------------------------------------------------------

def test_events_published_by_one_daemon_arrive_at_another_in_order_and_not_back(daemons) -> None:
    a, b = daemons("a"), daemons("b")
    sent = [{"session_id": f"s{i % 3}", "type": "content_block_delta", "n": i, "text": "x" * (i % 200)}
            for i in range(600)]

    notifications = sum(a.bus.publish_events(sent[i:i + 100]) for i in range(0, 600, 100))
    b.wait_for("600 events", lambda: len(b.events) == 600)
    b.bus.publish_events([{"session_id": "s9", "type": "marker"}])
    a.wait_for("b's marker", lambda: len(a.events) == 1)

    assert notifications > 6  # batches of 100 events of up to 200 characters were split
    assert [e for _, e in b.events] == sent and {origin for origin, _ in b.events} == {"a"}
    assert a.events == [("b", {"session_id": "s9", "type": "marker"})]  # none of its own
    assert b.bus.missed_notifications == 0


def test_a_large_event_arrives_intact_between_its_neighbours(daemons, admin) -> None:
    a, b = daemons("a"), daemons("b")
    big = {"session_id": "s1", "type": "tool_result", "text": 'ünïcode "quoted"\n\\ \u0000 ' * 2000}
    assert len(str(big).encode()) > MAX_NOTIFY_PAYLOAD_BYTES

    a.bus.publish_events([{"session_id": "s1", "n": 1}, big, {"session_id": "s1", "n": 2}])

    b.wait_for("three events", lambda: len(b.events) == 3)
    assert [e for _, e in b.events] == [{"session_id": "s1", "n": 1}, big, {"session_id": "s1", "n": 2}]
    assert sql(admin, "SELECT count(*) FROM cluster_events") == [(1,)]  # kept for its retention


def test_a_receiver_counts_the_notifications_it_missed_while_disconnected(daemons, admin) -> None:
    gate = Gate()
    a, b = daemons("a"), daemons("b", connect=gate)
    a.bus.publish_events([{"n": 0}])
    b.wait_for("the first event", lambda: len(b.events) == 1)
    gate.open = False
    terminate(admin, b.bus.listener.pid)
    b.wait_for("degraded", lambda: len(b.health) == 1)

    a.bus.publish_events([{"n": 1}])
    a.bus.publish_events([{"n": 2}])
    gate.open = True
    b.wait_for("reconnected", lambda: len(b.health) == 2 and b.health[1] is None)
    a.bus.publish_events([{"n": 3}])

    b.wait_for("the last event", lambda: len(b.events) == 2)
    assert [e for _, e in b.events] == [{"n": 0}, {"n": 3}]
    assert b.bus.missed_notifications == 2


# --- lifecycle ------------------------------------------------------------------------------

def test_stop_returns_at_once_and_leaves_no_thread(daemons, admin) -> None:
    a = daemons("a")
    a.bus.forward("a", {"op": "list"})  # the sending connection is open too
    pid = a.bus.listener.pid

    started = time.monotonic()
    a.bus.stop()

    assert time.monotonic() - started < WAIT_S  # woken through its self-pipe, not a timer
    assert not [t for t in threading.enumerate() if t.name.startswith("corvid-pgbus-")]
    assert a.bus.status == "stopped" and a.bus.unavailable_reason == "stopped"
    # the server process ends shortly after the client closed its connection
    deadline = time.monotonic() + WAIT_S
    while sql(admin, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", pid) != [(0,)]:
        assert time.monotonic() < deadline, "the listener's connection is still open"
        time.sleep(0.01)


def test_an_unreachable_server_is_retried_with_a_growing_backoff_that_stop_cuts_short(daemons) -> None:
    gate, clock = Gate(), BackoffClock(recorded=5)
    gate.open = False
    a = daemons("a", reachable=False, connect=gate, clock=clock)

    assert a.bus.status == "degraded"  # start() returned after the first attempt failed
    assert "could not be opened" in (a.bus.unavailable_reason or "")
    with clock.cond:
        assert clock.cond.wait_for(lambda: len(clock.waits) == 6, WAIT_S)
    assert clock.waits == [0.02, 0.04, 0.08, 0.1, 0.1, 0.1]  # BACKOFF_S = (0.02, 0.1)
    started = time.monotonic()
    a.bus.stop()  # the listener is in a one-hour backoff wait
    assert time.monotonic() - started < WAIT_S
    assert not [t for t in threading.enumerate() if t.name.startswith("corvid-pgbus-")]


def test_stop_wakes_a_caller_waiting_for_a_result(daemons) -> None:
    a, b = daemons("a"), daemons("b", answer=False)
    command_id = a.bus.forward("b", {"op": "send"})
    b.wait_for("the command", lambda: len(b.commands) == 1)
    raised: list[BaseException] = []

    def wait() -> None:
        try:
            a.bus.await_result(command_id, 30.0)
        except BaseException as exc:
            raised.append(exc)

    caller = threading.Thread(target=wait)
    caller.start()
    deadline = time.monotonic() + WAIT_S
    while command_id not in a.bus._waiters:  # the caller is parked in its wait
        assert time.monotonic() < deadline
        time.sleep(0.005)
    a.bus.stop()
    caller.join(WAIT_S)

    assert not caller.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], RuntimeStoppedError)


def test_await_result_refuses_to_run_on_the_listener_thread(daemons) -> None:
    seen: list[BaseException] = []

    def await_inside(bus: PgBus, reply: Reply) -> None:
        try:
            bus.await_result(bus.forward("a", {"op": "list"}), WAIT_S)
        except RuntimeError as exc:
            seen.append(exc)
        reply.done("ok")

    a, _b = daemons("a"), daemons("b", handle=await_inside)
    assert a.bus.await_result(a.bus.forward("b", {"op": "nested"}), WAIT_S) == "ok"
    assert len(seen) == 1 and "listener thread" in str(seen[0])


def test_a_cut_connection_is_reconnected_and_the_bus_resumes(daemons, admin) -> None:
    a, b = daemons("a"), daemons("b")
    old_pid = b.bus.listener.pid

    terminate(admin, old_pid)

    b.wait_for("degraded, then back", lambda: len(b.health) == 2 and b.health[1] is None)
    assert b.health[0] is not None and "was lost" in b.health[0]
    assert b.bus.listener.pid not in (None, old_pid)
    command_id = a.bus.forward("b", {"op": "list"})
    assert a.bus.await_result(command_id, WAIT_S) == {"ran": "list", "on": "b", "from": "a"}
    a.bus.publish_events([{"session_id": "s1", "n": 1}])
    b.wait_for("the event", lambda: len(b.events) == 1)


def test_a_cut_sending_connection_is_reopened_for_a_forward(daemons, admin) -> None:
    a, b = daemons("a"), daemons("b")
    a.bus.await_result(a.bus.forward("b", {"op": "list"}), WAIT_S)
    senders = sql(admin, "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND pid <> ALL(%s) "
                  "AND datname = current_database()",
                  [a.bus.listener.pid, b.bus.listener.pid])
    for (pid,) in senders:
        terminate(admin, pid)

    command_id = a.bus.forward("b", {"op": "stop"})  # replayed once on a fresh connection

    assert a.bus.await_result(command_id, WAIT_S) == {"ran": "stop", "on": "b", "from": "a"}
