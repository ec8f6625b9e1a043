"""The purge of the bus tables on a real PostgreSQL (issue 20): rows nobody will read again
go (commands that are over, past their retention; commands never answered, long past any
caller's wait; oversized events past theirs), live ones stay, and a daemon's bus does it on
its own every ``purge_interval_s``. Every wait is bounded (under a second)."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("psycopg2")


from corvid_actors.clock import RealClock  # noqa: E402
from corvid_actors.core.jsontypes import JsonObject  # noqa: E402
from corvid_actors.daemon.cluster_link import purge_policy  # noqa: E402
from corvid_actors.db.pg_bus import PgBus, Reply  # noqa: E402
from corvid_actors.db.pg_bus_purge import BusPurger, PurgePolicy, PurgeResult, purge_cutoffs  # noqa: E402
from corvid_actors.errors import ConfigError, StoreError  # noqa: E402
from corvid_actors.schema.sections import ClusterBusConfig  # noqa: E402
from tests.db.pg_bus_fixtures import sql  # noqa: E402

pytestmark = pytest.mark.postgres

WAIT_S = 1.0
#: finished rows go after 10 minutes, unanswered ones after an hour
POLICY = PurgePolicy(interval_s=3600.0, finished_retention_s=600.0, unanswered_retention_s=3600.0, batch=2)
EVENTS_RETENTION_S = 60.0


def _ignore(origin: str, command: JsonObject, reply: Reply) -> None:
    pass  # taken, never answered (as by a target that died mid-command)


def make_bus(url: str, policy: PurgePolicy | None = POLICY, *, daemon_id: str = "a",
             on_command: Any = _ignore, namespace: str | None = None) -> PgBus:
    return PgBus(url, daemon_id, clock=RealClock(), on_command=on_command, on_events=lambda o, e: None,
                 namespace=namespace or f"t{uuid.uuid4().hex[:10]}", event_retention_s=EVENTS_RETENTION_S,
                 purge=policy)


def command_row(conn: Any, state: str, age_s: float) -> str:
    row_id = uuid.uuid4().hex
    created = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=age_s)
    sql(conn, "INSERT INTO cluster_commands (id, origin, target, payload, state, result, created_at) "
              "VALUES (%s, 'x', 'gone', '{}', %s, NULL, %s)", row_id, state, created)
    return row_id


def event_row(conn: Any, age_s: float) -> int:
    created = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=age_s)
    return sql(conn, "INSERT INTO cluster_events (origin, body, created_at) VALUES ('x', '{}', %s) RETURNING id",
               created)[0][0]


def command_ids(conn: Any) -> set[str]:
    return {r[0] for r in sql(conn, "SELECT id FROM cluster_commands")}


def test_the_cutoffs_follow_the_policy() -> None:
    now = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    cut = purge_cutoffs(now, POLICY, EVENTS_RETENTION_S)
    assert cut.finished == datetime(2026, 11, 27, 11, 50)
    assert cut.unanswered == datetime(2026, 11, 27, 11, 0)
    assert cut.events == datetime(2026, 11, 27, 11, 59)
    assert cut.oldest_kept == cut.finished


def test_old_rows_that_nobody_will_read_go_and_the_others_stay(bus_url, admin) -> None:
    gone = {command_row(admin, state, 601) for state in ("done", "failed", "withdrawn", "abandoned")}
    gone |= {command_row(admin, state, 3601) for state in ("pending", "taken", "done")}
    kept = {command_row(admin, state, 599) for state in ("done", "failed", "abandoned", "pending")}
    kept |= {command_row(admin, state, 1800) for state in ("pending", "taken")}  # unanswered, within the hour
    old_event, young_event = event_row(admin, 61), event_row(admin, 30)
    bus = make_bus(bus_url)
    try:
        result = bus.purge()
        again = bus.purge()
    finally:
        bus.stop()

    assert command_ids(admin) == kept
    assert {r[0] for r in sql(admin, "SELECT id FROM cluster_events")} == {young_event} != {old_event}
    assert (result.commands, result.events) == (len(gone), 1)
    assert result.statements == 4 + 1  # batches of 2: 2, 2, 2, 1; then events 1
    assert (again.commands, again.events) == (0, 0)


def test_a_command_in_flight_survives_a_purge_and_its_result_arrives(bus_url, admin) -> None:
    replies: list[Reply] = []
    taken = threading.Event()

    def hold(origin: str, command: JsonObject, reply: Reply) -> None:
        replies.append(reply)
        taken.set()

    policy = PurgePolicy(interval_s=3600.0, finished_retention_s=0.0, unanswered_retention_s=3600.0, batch=100)
    namespace = f"t{uuid.uuid4().hex[:10]}"
    a = make_bus(bus_url, policy, namespace=namespace)
    b = make_bus(bus_url, policy, namespace=namespace, daemon_id="b", on_command=hold)
    a.start()
    b.start()
    try:
        command_id = a.forward("b", {"op": "list"})
        assert taken.wait(WAIT_S), "b did not take the command"
        assert a.purge().commands == 0  # taken, not answered yet, young: it stays
        replies[0].done({"ran": "list"})
        assert a.await_result(command_id, WAIT_S) == {"ran": "list"}
    finally:
        a.stop()
        b.stop()


def test_a_daemons_bus_purges_on_its_own_every_interval(bus_url, admin) -> None:
    stale = command_row(admin, "abandoned", 601)
    fresh = command_row(admin, "pending", 1)
    bus = make_bus(bus_url, PurgePolicy(interval_s=0.02, finished_retention_s=600.0,
                                        unanswered_retention_s=3600.0, batch=100))
    bus.start()
    try:
        assert bus.purger is not None
        deadline = time.monotonic() + WAIT_S
        # the pass counts what it deleted once its statement returns: a moment after the row is gone
        while (stale in command_ids(admin) or bus.purger.deleted < 1) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert command_ids(admin) == {fresh}
        stats = bus.purger.stats()  # what admin health shows
        assert stats["deleted_rows"] >= 1 and stats["passes"] >= 1 and stats["last_error"] is None
    finally:
        started = time.monotonic()
        bus.stop()
        assert time.monotonic() - started < WAIT_S  # the purger's wait is cut short


def test_the_purge_can_take_old_rows_through_the_created_at_index(bus_url, admin) -> None:
    indexes = {r[0] for r in sql(admin, "SELECT indexname FROM pg_indexes WHERE tablename = 'cluster_commands'")}
    assert "cluster_commands_created_at" in indexes
    with admin.cursor() as cur:  # on a table this small the planner prefers a scan: forbid it
        cur.execute("SET enable_seqscan = off")
        cur.execute("EXPLAIN SELECT id FROM cluster_commands WHERE created_at < now() ORDER BY created_at LIMIT 10")
        plan = "\n".join(r[0] for r in cur.fetchall())
        cur.execute("RESET enable_seqscan")
    assert "cluster_commands_created_at" in plan, plan


def test_a_retention_shorter_than_the_admin_timeout_is_refused() -> None:
    cfg = ClusterBusConfig(unanswered_retention_s=30.0)
    with pytest.raises(ConfigError, match=r"cluster.bus.unanswered_retention_s = 30 must be more than "
                                          r"daemon.admin_client_timeout_s = 30"):
        purge_policy(cfg, 30.0)
    assert purge_policy(ClusterBusConfig(), 30.0).unanswered_retention_s == 3600.0



def test_a_failed_purge_pass_is_reported_until_one_succeeds() -> None:
    seen_before_success: list[str | None] = []
    calls = 0

    def purge() -> PurgeResult:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise StoreError("the database is unreachable")
        if calls == 2:
            seen_before_success.append(purger.stats()["last_error"])
        return PurgeResult(commands=2, events=1, statements=1)

    purger = BusPurger(purge, clock=RealClock(), interval_s=0.01, name="test-purger")
    purger.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while purger.passes < 1 and time.monotonic() < deadline:
            time.sleep(0.002)
    finally:
        purger.stop()
    assert seen_before_success == ["the database is unreachable"]  # health showed the failure
    stats = purger.stats()
    assert stats["passes"] >= 1 and stats["deleted_rows"] >= 3 and stats["last_error"] is None
