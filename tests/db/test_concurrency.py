"""200 concurrent sessions writing to one SQLite file never see "database is locked".

One store is the daemon (all its actor threads share it); a second Store instance on the
same file is another process's connection (the CLI), writing at the same time with the
read-then-write transactions that race at the SQLite level (reset/take restart marks).
"""

from __future__ import annotations

from collections.abc import Callable

from corvid_actors.db.store import Store
from tests.db.conftest import run_together

SESSIONS = 200
MESSAGES_PER_SESSION = 20
READERS = 4
READS_PER_READER = 50
OTHER_PROCESS_ROUNDS = 25
def test_200_sessions_write_concurrently_with_a_second_connection(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    daemon, cli = Store(url), Store(url)
    try:
        sessions = [daemon.create_session(name=f"s{i}").id for i in range(SESSIONS)]
        cli_sessions: list[str] = []
        seen_counts: list[list[int]] = [[] for _ in range(READERS)]

        def writer(sid: str) -> Callable[[], None]:
            def run() -> None:
                for k in range(MESSAGES_PER_SESSION):
                    daemon.append_message(sid, "user" if k % 2 == 0 else "assistant", f"{sid}:{k}")
                daemon.add_session_usage(sid, cost_usd=0.01, turns=1)

            return run

        def reader(slot: int) -> Callable[[], None]:
            def run() -> None:
                watched = sessions[slot]
                for k in range(READS_PER_READER):
                    daemon.recent_messages(sessions[k % SESSIONS], 5)
                    seen_counts[slot].append(cli.count_messages(watched))

            return run

        def other_process() -> None:
            for k in range(OTHER_PROCESS_ROUNDS):
                session = cli.create_session(name=f"cli{k}", source="cli")
                cli_sessions.append(session.id)
                cli.append_message(session.id, "user", f"cli message {k}")
                cli.update_session(session.id, status="running")
                cli.reset_stale_sessions()
                cli.take_restart_pending()

        errors = run_together(
            [writer(sid) for sid in sessions]
            + [reader(slot) for slot in range(READERS)]
            + [other_process]
        )

        assert errors == []
        for sid in sessions:
            assert daemon.count_messages(sid) == MESSAGES_PER_SESSION
        assert [daemon.count_messages(sid) for sid in cli_sessions] == [1] * OTHER_PROCESS_ROUNDS
        M = daemon.m.SessionMessage
        assert M.select().count() == SESSIONS * MESSAGES_PER_SESSION + OTHER_PROCESS_ROUNDS
        # each session's messages are intact and in order
        sample = sessions[SESSIONS // 2]
        assert [c for _, c in daemon.recent_messages(sample, 100)] == [
            f"{sample}:{k}" for k in range(MESSAGES_PER_SESSION)]
        # another connection's reads only ever move forward (committed writes, no torn reads)
        for counts in seen_counts:
            assert counts == sorted(counts)
        assert all(daemon.get_session(sid).cumulative_turns == 1 for sid in sessions)
        assert cli.m.Session.select().where(cli.m.Session.status == "running").count() == 0
    finally:
        daemon.close()
        cli.close()


def test_usage_increments_from_two_connections_are_not_lost(tmp_path) -> None:
    # add_session_usage adds in SQL: concurrent turns never overwrite each other's totals.
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    one, two = Store(url), Store(url)
    try:
        sid = one.create_session().id
        threads_per_store, adds = 10, 20

        def adder(store: Store) -> Callable[[], None]:
            def run() -> None:
                for _ in range(adds):
                    store.add_session_usage(sid, cost_usd=0.5, turns=1)

            return run

        errors = run_together([adder(s) for s in (one, two) for _ in range(threads_per_store)])

        assert errors == []
        row = one.get_session(sid)
        assert row.cumulative_turns == 2 * threads_per_store * adds
        assert row.total_cost_usd == 0.5 * 2 * threads_per_store * adds
    finally:
        one.close()
        two.close()
