"""Real daemons (``corvid-actors serve`` subprocesses) on one PostgreSQL under faults
(issue 36): a database outage longer than the lease moves no session; a daemon woken
after its leases were taken stops its old sessions before it answers; a daemon running
when another release applies a breaking migration stops taking new work.

Timings as tests/cluster/test_daemon_processes.py: heartbeat 0.2 s, lease 1 s."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corvid_actors.db.store import Store
from corvid_actors.testing.tcp_proxy import TcpProxy
from tests.cluster.conftest import wait_for
from tests.cluster.test_daemon_processes import (
    CLUSTER_CONFIG,
    LEASE_S,
    conversations,
    launch_daemon,
    owners,
    reply_of,
    running_on,
)
from tests.e2e.test_daemon import WAIT_S, Daemon

pytestmark = pytest.mark.postgres

#: the sweeps wait one heartbeat plus this after the store is back (loaded machine: generous)
OUTAGE_CONFIG = CLUSTER_CONFIG + "outage_grace_s = 2.0\n"
#: a reply of 30 words streamed 0.1 s apart: each turn lasts ~3 s, so the cut lands mid-turn
WORDS, SLOW_CHUNK_S = 30, 0.1
SESSIONS = 6


def epochs(url: str) -> dict[str, int]:
    store = Store(url)
    try:
        with store.transaction():
            L = store.m.SessionLease
            return {row.session_id: row.epoch for row in L.select(L.session, L.epoch)}
    finally:
        store.close()


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Any]:
    made: list[Daemon] = []

    def make(url: str, *names: str, config: str = CLUSTER_CONFIG, **args: Any) -> list[Daemon]:
        out = [launch_daemon(name, url, tmp_path, config, **args) for name in names]
        made.extend(out)
        return [daemon.ready() for daemon in out]

    yield make
    for daemon in made:
        daemon.kill()


def test_a_store_outage_longer_than_the_lease_moves_no_session(daemons, pg_url):
    with TcpProxy("127.0.0.1", 5432) as proxy:  # the database, as both daemons reach it
        a, b = daemons(proxy.url(pg_url), "a", "b", config=OUTAGE_CONFIG, chunk_delay_s=SLOW_CHUNK_S,
                       reply=lambda name: reply_of(name, WORDS, "."))
        sids = {a.call("start", agent=f"agent-{i}", prompt="hello")["session"] for i in range(SESSIONS)}
        placed = owners(pg_url)
        assert sorted(placed.values()) == sorted(["a", "b"] * (SESSIONS // 2))  # half each
        wait_for(lambda: running_on(a) | running_on(b) == sids, "every session runs")
        proxy.partition()  # mid-turn: the database is gone for both, three leases long
        time.sleep(3 * LEASE_S)
        proxy.admit()
        answered = wait_for(lambda: conversations(pg_url, sids, complete=True), "every turn answered",
                            timeout_s=WAIT_S * 3)
        assert owners(pg_url) == placed  # no owner changed ...
        assert set(epochs(pg_url).values()) == {1}  # ... nor was any session claimed again
        assert running_on(a) == {sid for sid in sids if placed[sid] == "a"}
        assert running_on(b) == {sid for sid in sids if placed[sid] == "b"}
        for sid, messages in answered.items():  # each turn answered once, by its owner: none aborted
            assert [content for role, content in messages if role == "user"] == ["hello"], sid
            [reply] = [content for role, content in messages if role == "assistant"]
            assert reply == reply_of(placed[sid], WORDS, "."), sid


def test_a_woken_daemon_answers_without_the_sessions_taken_from_it(daemons, pg_url):
    a, b = daemons(pg_url, "a", "b", chunk_delay_s=SLOW_CHUNK_S, reply=lambda name: reply_of(name, WORDS, "."))
    sid = a.call("start", agent="storyteller", prompt="a long story")["session"]  # placed on a (the tie)
    assert owners(pg_url)[sid] == "a" and sid in running_on(a)
    os.kill(a.pid, signal.SIGSTOP)  # mid-turn, past its lease
    try:
        wait_for(lambda: owners(pg_url).get(sid) == "b" and sid in running_on(b), "b took the session over",
                 timeout_s=LEASE_S + WAIT_S)
    finally:
        os.kill(a.pid, signal.SIGCONT)
    # a's first answers: it renewed (and found the session gone) before answering
    listed = {s["id"]: s for s in a.call("sessions")}
    assert (listed[sid]["here"], listed[sid]["owner"]) == (False, "b")
    assert a.call("session", session=sid)["answered_by"] == "b"
    wait_for(lambda: any("claimed by another daemon" in line for line in a.lines), "a logged the loss")
    # the turn is answered once, by b; nothing a streamed was stored
    answered = wait_for(lambda: conversations(pg_url, {sid}, complete=True), "b answered", timeout_s=WAIT_S * 2)
    assert [content for role, content in answered[sid] if role == "assistant"] == [reply_of("b", WORDS, ".")]


def test_a_running_daemon_takes_no_new_work_on_a_schema_it_cannot_run_with(daemons, pg_url):
    from corvid_actors.daemon.client import AdminRequestFailed
    from corvid_actors.db.migrations import MIGRATIONS
    from tests.db.test_running_schema import _breaking_notes_table, upgrade

    [a] = daemons(pg_url, "a", chunk_delay_s=0.0)
    first = a.call("start", agent="before", prompt="hello")["session"]
    wait_for(lambda: conversations(pg_url, {first}, complete=True), "a answered")
    assert a.call("health")["accepting_new_work"] is True

    upgrade(pg_url, _breaking_notes_table, release="next")  # another release's first daemon, as it opens it
    health = wait_for(lambda: (h := a.call("health"))["accepting_new_work"] is False and h, "a noticed",
                      timeout_s=WAIT_S)
    assert health["status"] == "degraded" and health["store"]["schema_refused"]
    assert any("is breaking" in r and "takes no new work" in r for r in health["reasons"]), health["reasons"]
    with pytest.raises(AdminRequestFailed, match="takes no new work") as refused:
        a.call("start", agent="after", prompt="hello")
    assert refused.value.code == "unavailable"
    assert [s["id"] for s in a.call("sessions")] == [first]  # nothing was created
    # what runs here goes on: the session it had still answers
    assert a.call("send", session=first, text="still there?")["delivered"] is True
    newer = Store(pg_url, migrations=[*MIGRATIONS, _breaking_notes_table], release="next")  # the new release's view
    try:
        assert newer.m.Daemon.get_by_id("a").state == "draining"  # nobody places a session on it
        wait_for(lambda: [m.role for m in newer.messages(first)][-1:] == ["assistant"]
                 and "still there?" in [m.content for m in newer.messages(first)], "the second answer")
    finally:
        newer.close()


def test_a_daemon_cut_off_from_the_database_lists_what_runs_here_as_the_local_view(daemons, pg_url, capsys):
    from corvid_actors.daemon.client import AdminRequestFailed

    with TcpProxy("127.0.0.1", 5432) as proxy:  # the database, as a reaches it
        [a] = daemons(proxy.url(pg_url), "a", chunk_delay_s=SLOW_CHUNK_S, reply=lambda name: reply_of(name, WORDS, "."))
        sid = a.call("start", agent="storyteller", prompt="a long story")["session"]
        wait_for(lambda: sid in running_on(a), "the session runs on a")
        proxy.partition()
        local = a.call("sessions")
        assert local["view"] == "local" and local["warning"]["code"] == "unavailable", local
        assert local["warning"]["message"].startswith("store unavailable")
        assert [(s["id"], s["status"], s["here"], s["owner"]) for s in local["sessions"]] == [(sid, "running", True, "a")]
        code, shown, _ = a.cli(capsys, "admin", "sessions")
        assert code == 0 and shown.startswith("LOCAL VIEW [unavailable]: store unavailable") and sid[:8] in shown
        # what needs the store fails with the same code, whichever command found it down
        for cmd, args in (("session", {"session": sid}), ("start", {"agent": "another", "prompt": "hello"}),
                          ("send", {"session": sid, "text": "still there?"})):
            with pytest.raises(AdminRequestFailed) as refused:
                a.call(cmd, **args)
            assert refused.value.code == "unavailable", (cmd, refused.value)
        # past its lease, the list says the sessions may have been taken over meanwhile
        time.sleep(LEASE_S * 1.5)
        later = a.call("sessions")
        assert [s["id"] for s in later["sessions"]] == [sid]
        assert "another daemon may have taken" in later["warning"]["message"]
        proxy.admit()
        wait_for(lambda: isinstance(listed := a.call("sessions"), list) and [s["id"] for s in listed] == [sid],
                 "the stored list again", timeout_s=WAIT_S)
