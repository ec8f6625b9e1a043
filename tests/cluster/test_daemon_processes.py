"""Several real daemons (``corvid-actors serve`` subprocesses) on one PostgreSQL (issue 20):
each session owned by exactly one daemon (asserted from the database and from each
daemon's own view); ``kill -9`` of a daemon while every one of its turns is mid-stream
(observed, not timed) moves its sessions to the others within lease + sweep (the interrupted turn resumed there once, idle sessions given no
turn); ``admin drain`` hands every session over and the daemon exits 0.

Timings: heartbeat 0.2 s, lease 1 s, sweep every 0.2 s; every wait is bounded.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from corvid_actors.daemon.render import show_sessions
from corvid_actors.db.store import Store
from tests.cluster.conftest import wait_for
from tests.e2e.test_daemon import WAIT_S, Daemon, Follower

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
#: sessions placed across the three daemons (issue 20: 60)
SESSIONS = 60
#: a reply streamed in 100 pieces 0.05 s apart: a turn lasts ~5 s (a daemon about to be
#: killed mid-turn streams slower still: KILLED_CHUNK_DELAY_S)
CHUNK_DELAY_S = 0.05
#: a test that only needs a session with a reply gets it at once
FAST_CHUNK_DELAY_S = 0.0


def reply_of(name: str, words: int = 100, end: str = "") -> str:
    """Daemon ``name``'s stub reply: its own words, so a reply says who streamed it."""
    return " ".join(f"{name}word{i}" for i in range(words)) + end


def launch_daemon(name: str, url: str, tmp: Path, config: str = CLUSTER_CONFIG, *,
                  chunk_delay_s: float = CHUNK_DELAY_S, reply: Callable[[str], str] = reply_of) -> Daemon:
    """A ``serve`` process started (:meth:`Daemon.ready` waits for it)."""
    data_dir = tmp / name
    data_dir.mkdir()
    daemon = Daemon(data_dir, env={"CORVID_DB_URL": url, "CORVID_CLUSTER": "1", "CORVID_DAEMON_ID": name},
                    extra_config=config, chunk_delay_s=chunk_delay_s, reply=reply(name))
    return daemon.launch()


def owners(url: str) -> dict[str, str | None]:
    store = Store(url)
    try:
        with store.transaction():
            L = store.m.SessionLease
            return {row.session_id: row.owner_id for row in L.select(L.session, L.owner)}
    finally:
        store.close()


def conversations(url: str, sids: set[str], *, complete: bool = False) -> dict[str, list[tuple[str, str]]] | None:
    """Each session's user and assistant messages (role, content), oldest first; with
    ``complete``, None until every one of them has an assistant reply."""
    store = Store(url)
    try:
        out = {sid: [(m.role, m.content) for m in store.messages(sid) if m.role in ("user", "assistant")]
               for sid in sids}
    finally:
        store.close()
    if complete and not all(any(role == "assistant" for role, _ in messages) for messages in out.values()):
        return None
    return out


def stored_turns(url: str, sid: str, killed_at: datetime) -> str:
    """What the store holds for ``sid``, for an assertion message: each user and assistant
    row (its first and last word, its timestamp relative to ``killed_at`` and the lease
    epoch of the incarnation that wrote it), and the lease's epoch and owner now."""
    store = Store(url)
    try:
        with store.transaction():
            M, L = store.m.SessionMessage, store.m.SessionLease
            rows = list(M.select(M.role, M.content, M.timestamp, M.writer_epoch)
                        .where(M.session == sid).order_by(M.id))
            lease = L.get_or_none(L.session == sid)
    finally:
        store.close()
    lines = [f"session {sid}: lease epoch {lease.epoch if lease else None}, owner "
             f"{lease.owner_id if lease else None}; killed at {killed_at.isoformat()}"]
    for row in rows:
        words = row.content.split()
        lines.append(f"  {row.role} {words[:1]}..{words[-1:]} ({len(words)} words), "
                     f"{(row.timestamp - killed_at).total_seconds():+.3f} s after the kill, "
                     f"writer_epoch {row.writer_epoch}")
    return "\n".join(lines)


def daemon_rows(url: str, placed: dict[str, str | None]) -> str:
    """For an assertion message: how many sessions each daemon got, and each daemon's row
    (a daemon declared gone meanwhile, or registered again, shows in its state and start)."""
    from collections import Counter

    store = Store(url)
    try:
        with store.transaction():
            D = store.m.Daemon
            rows = [f"  {d.id}: {d.state}, started {d.started_at}, heartbeat {d.heartbeat_at}"
                    for d in D.select().order_by(D.id)]
    finally:
        store.close()
    return f"placed {dict(Counter(placed.values()))}; daemons:\n" + "\n".join(rows)


def running_on(daemon: Daemon) -> set[str]:
    return {s["id"] for s in daemon.call("sessions") if s["here"]}




@pytest.fixture
def cluster_of(pg_url: str, tmp_path: Path) -> Any:
    made: list[Daemon] = []

    def make(*names: str, config: str = CLUSTER_CONFIG, chunk_delays: dict[str, float] | None = None,
             **daemon_args: Any) -> list[Daemon]:
        """``chunk_delays``: a stub chunk delay of its own for some of the daemons, by name."""
        # started together, then waited for: placement ties go to the smallest id, not the first up
        out = [launch_daemon(name, pg_url, tmp_path, config, **daemon_args,
                             **({"chunk_delay_s": chunk_delays[name]} if name in (chunk_delays or {}) else {}))
               for name in names]
        made.extend(out)
        return [daemon.ready() for daemon in out]

    yield make
    for daemon in made:
        daemon.kill()


#: the stub's whole reply, 100 words without a full stop (~5 s streamed): the agents are
#: chat agents (issue 35), so it is the turn's one answer — a task agent's long text-only
#: reply would be nudged ("wrote but didn't act") into a second model call and reply
KILL_WORDS = 100
#: the killed daemon's stub streams its 100 words over ~50 s: each of its turns is still
#: mid-stream when it is killed, however long the 60 starts took. (With its reply streamed
#: in ~5 s, the starts took ~16 s under two CPU burners, and the turns of the sessions
#: started first had ended and been stored — by a, as they should — before the kill.)
KILLED_CHUNK_DELAY_S = 0.5


def mid_stream(follower: Follower, url: str, sids: set[str], name: str) -> bool:
    """Whether every one of ``sids`` is mid-turn on daemon ``name``: the follower heard a
    piece of its reply, not the last one, and the store holds no reply of it yet."""
    def streamed(sid: str) -> list[str]:
        return [e["text"] for e in follower.events(sid, "content_block_delta")]

    last = f"{name}word{KILL_WORDS - 1}"
    if not all(streamed(sid) and not any(last in text for text in streamed(sid)) for sid in sids):
        return False
    stored = conversations(url, sids)
    return stored is not None and not any(role == "assistant" for messages in stored.values()
                                          for role, _ in messages)


def test_killed_daemon_sessions_move_and_a_drained_daemon_exits(cluster_of, pg_url):
    a, b, c = cluster_of("a", "b", "c", chunk_delays={"a": KILLED_CHUNK_DELAY_S})
    on_a = Follower(a)  # every session's events as a streams them
    first_start = time.monotonic()
    sids = [a.call("start", agent=f"agent-{i % 3}", prompt="hello", kind="chat")["session"]
            for i in range(SESSIONS)]
    placed = owners(pg_url)
    # every start asked of a went to the least-loaded live daemon: a third each
    assert set(placed) == set(sids)
    assert sorted(placed.values()) == sorted(["a", "b", "c"] * (SESSIONS // 3)), daemon_rows(pg_url, placed)
    # each session is owned by exactly one daemon: the database says so...
    # ... and so does each daemon's own view
    for daemon, name in ((a, "a"), (b, "b"), (c, "c")):
        assert running_on(daemon) == {sid for sid, owner in placed.items() if owner == name}
        assert {s["id"]: s["owner"] for s in daemon.call("sessions")} == placed

    # sample ownership continuously: never a session without exactly one owner row
    samples: list[dict[str, str | None]] = []
    on_both: list[set[str]] = []  # sessions b and c both said they ran, sampled together
    stop_sampling, b_leaving = threading.Event(), threading.Event()

    def sample() -> None:
        while not stop_sampling.is_set():
            samples.append(owners(pg_url))
            if not b_leaving.is_set():
                on_both.append(running_on(b) & running_on(c))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    a_sessions = {sid for sid, owner in placed.items() if owner == "a"}
    started_s = time.monotonic() - first_start
    # SIGKILL mid-turn: every one of a's turns has streamed part of its reply and stored none
    wait_for(lambda: mid_stream(on_a, pg_url, a_sessions, "a"), "every turn on a mid-stream")
    killed_at, killed_wall = time.monotonic(), datetime.now(UTC).replace(tzinfo=None)
    a.kill()
    on_a.close()
    moved = wait_for(lambda: a_sessions <= (running_on(b) | running_on(c)), "a's sessions run elsewhere",
                     timeout_s=LEASE_S + 10 * SWEEP_S + WAIT_S)
    failover_s = time.monotonic() - killed_at
    print(f"failover of {len(a_sessions)} sessions: {failover_s:.2f} s")
    assert moved and failover_s < LEASE_S + 8.0
    final = owners(pg_url)
    assert {final[sid] for sid in a_sessions} <= {"b", "c"}
    assert not (running_on(b) & running_on(c))  # no session runs on both
    # every interrupted turn is answered once, by its new owner; every acknowledged
    # message is there (the prompt, once); nothing a streamed before it died was kept
    answered = wait_for(lambda: conversations(pg_url, a_sessions, complete=True), "a's turns answered elsewhere",
                        timeout_s=WAIT_S * 2)
    wrong = [sid for sid, messages in answered.items()
             if [content for role, content in messages if role == "user"] != ["hello"]
             or [content.split()[0] for role, content in messages if role == "assistant"] not in (["bword0"], ["cword0"])
             or messages[-1][1].split()[-1][1:] != f"word{KILL_WORDS - 1}"]
    assert not wrong, f"{len(wrong)} of {len(answered)} (starts took {started_s:.2f} s):\n" + "\n".join(
        stored_turns(pg_url, sid, killed_wall) for sid in wrong[:5])

    # drain b: its sessions go to c, and b exits 0
    b_sessions = {sid for sid, owner in final.items() if owner == "b"}
    b_leaving.set()
    assert b.call("drain")["draining"] is True
    assert b.wait_exit(WAIT_S * 3) == 0
    wait_for(lambda: b_sessions <= running_on(c), "b's sessions run on c", timeout_s=LEASE_S + WAIT_S)
    stop_sampling.set()
    sampler.join(WAIT_S)
    assert all(set(s) == set(placed) for s in samples)  # one lease row each, all along
    assert on_both and not any(on_both)  # never running on two daemons at once
    assert owners(pg_url) == {sid: "c" for sid in placed}
    assert conversations(pg_url, a_sessions) == answered  # answered once: nothing since


def test_commands_and_events_cross_daemons(cluster_of, pg_url):
    a, b = cluster_of("a", "b")
    follower = Follower(a)  # a follows every session, b's included
    try:
        first = a.call("start", agent="chatty", prompt="hello")["session"]
        wait_for(lambda: owners(pg_url).get(first) == "a", "the first on a")
        health = a.call("health")
        assert health["cluster"]["daemon_id"] == "a" and health["cluster"]["live_daemons"] == ["a", "b"]
        version = health["daemon"]["version"]
        assert health["cluster"]["daemon_versions"] == {"a": version, "b": version}
        assert health["cluster"]["bus"] == "ok" and health["cluster"]["owned_sessions"] == 1
        assert health["cluster"]["leases_valid"] is True and health["cluster"]["problems"] == []
        assert health["cluster"]["bus_purge"]["last_error"] is None  # its counters are there
        listing = io.StringIO()
        show_sessions(a.call("sessions"), listing)
        assert "OWNER" in listing.getvalue() and first[:8] in listing.getvalue()
        # placed on the least-loaded live daemon: b has none, so b runs it, though asked of a
        second = a.call("start", agent="careful", prompt="please list the files")["session"]
        assert owners(pg_url)[second] == "b"
        assert second in running_on(b) and second not in running_on(a)

        # b's events reach a's follower; b's approval is resolved through a
        [asked] = follower.wait(lambda: follower.events(second, "approval_request"))
        # `admin session` on a: b, the owner, answers with its live facts (in a turn, its approval)
        detail = a.call("session", session=second[:8])
        assert (detail["owner"], detail["answered_by"], detail["here"]) == ("b", "b", True)
        assert detail["in_turn"] is True and [x["id"] for x in detail["approvals"]] == [asked["id"]]
        assert "owner_unreachable" not in detail
        assert a.call("approve", approval=asked["id"])["behavior"] == "allow"
        follower.wait(lambda: [e for e in follower.events(second, "tool_status") if e["state"] == "completed"])

        # a message and a stop for b's session, sent to a, run on b
        assert a.call("send", session=second[:8], text="and now?")["delivered"] is True
        assert "and now?" in [m["content"] for m in b.call("session", session=second)["messages"]]
        stopped = a.call("stop", session=second)
        assert stopped["was_running"] is True
        follower.wait(lambda: follower.events(second, "session_stopped"))
        wait_for(lambda: second not in running_on(b), "stopped on b")
        assert owners(pg_url)[second] is None  # its lease ended with it
    finally:
        follower.close()


def test_admin_session_falls_back_to_the_database_when_the_owner_does_not_answer(cluster_of, pg_url):
    import os
    import signal

    from corvid_actors.daemon.render import show_session

    # leases long enough that the paused owner still holds its session while b asks it
    a, b = cluster_of("a", "b", config=CLUSTER_CONFIG.replace("lease_s = 1.0", "lease_s = 5.0").replace(
        "dead_daemon_grace_s = 2.0", "dead_daemon_grace_s = 10.0") + "[cluster.bus]\nowner_query_timeout_s = 0.3\n",
        chunk_delay_s=FAST_CHUNK_DELAY_S)  # a's reply need not take seconds
    sid = a.call("start", agent="chatty", prompt="hello")["session"]  # placed on a (the tie)
    wait_for(lambda: b.call("session", session=sid)["messages"][-1]["role"] == "assistant", "a replied")
    assert b.call("session", session=sid)["answered_by"] == "a"

    os.kill(a.pid, signal.SIGSTOP)  # a holds the lease but answers nothing
    try:
        started = time.monotonic()
        detail = b.call("session", session=sid)
        waited = time.monotonic() - started
    finally:
        os.kill(a.pid, signal.SIGCONT)
    assert (detail["owner"], detail["answered_by"], detail["here"], detail["in_turn"]) == ("a", "database", False, None)
    assert "the owner, daemon a, did not answer" in detail["owner_unreachable"]
    assert [m["content"] for m in detail["messages"]][0] == "hello"  # the stored facts are there
    assert 0.3 <= waited < 0.3 + WAIT_S
    shown = io.StringIO()
    show_session(detail, shown)
    assert shown.getvalue().startswith("note: the owner, daemon a, did not answer")
    # a is back: it answers again
    assert b.call("session", session=sid)["answered_by"] == "a"


def test_a_command_waiting_for_a_silent_owner_does_not_hold_the_other_commands(cluster_of, pg_url):
    import os
    import signal

    a, b = cluster_of("a", "b", config=CLUSTER_CONFIG.replace("lease_s = 1.0", "lease_s = 5.0").replace(
        "dead_daemon_grace_s = 2.0", "dead_daemon_grace_s = 10.0"), chunk_delay_s=FAST_CHUNK_DELAY_S)
    sid = a.call("start", agent="patient", prompt="hello")["session"]  # placed on a (the tie)
    wait_for(lambda: b.call("session", session=sid)["messages"][-1]["role"] == "assistant", "a replied")

    forwarded: dict[str, Any] = {}

    def send_through_b() -> None:
        try:
            forwarded["result"] = b.call("send", session=sid, text="are you there?")
        except Exception as exc:  # noqa: BLE001 - asserted below
            forwarded["error"] = exc

    os.kill(a.pid, signal.SIGSTOP)  # a holds the lease and answers nothing
    try:
        sender = threading.Thread(target=send_through_b, daemon=True)
        sender.start()
        time.sleep(0.3)  # the send is forwarded and waits for a
        assert sender.is_alive()
        started = time.monotonic()
        listed = b.call("sessions")  # b's admin is not held by the waiting send
        assert time.monotonic() - started < 2.0
        assert {s["id"]: s["owner"] for s in listed}[sid] == "a"
    finally:
        os.kill(a.pid, signal.SIGCONT)
    sender.join(WAIT_S)
    assert not sender.is_alive() and "error" not in forwarded, forwarded  # a answered once it woke
    wait_for(lambda: any(m["content"] == "are you there?" for m in b.call("session", session=sid)["messages"]),
             "the message reached a's session")


def test_a_daemon_stopped_past_its_lease_is_fenced_when_it_wakes(cluster_of, pg_url):
    import os
    import signal

    a, b = cluster_of("a", "b")
    watchers = {"a": Follower(a), "b": Follower(b)}  # every session's events, on each daemon
    try:
        sid = a.call("start", agent="chatty", prompt="a long story")["session"]  # placed on a (the tie)
        assert owners(pg_url)[sid] == "a"
        watchers["b"].wait(lambda: [e for e in watchers["b"].events(sid, "content_block_delta")
                                    if "aword" in e["text"]])  # a streams (b hears it through the database)
        os.kill(a.pid, signal.SIGSTOP)  # paused mid-turn, past its lease
        try:
            wait_for(lambda: owners(pg_url).get(sid) == "b" and sid in running_on(b), "b took the session over",
                     timeout_s=LEASE_S + WAIT_S)
        finally:
            os.kill(a.pid, signal.SIGCONT)
        # a wakes: its heartbeat finds the lease gone, and it stops its stale incarnation
        wait_for(lambda: sid not in running_on(a), "a stopped its stale incarnation", timeout_s=WAIT_S)
        time.sleep(LEASE_S)  # whatever a would still have said, it has said by now
        for name, watcher in watchers.items():
            with watcher._cond:
                items = [i for i in watcher.items if i.get("session_id") == sid]
            types = [i["event"]["type"] for i in items]
            # the last session_started is b's (a follower may have joined after a's)
            started = [k for k, t in enumerate(types) if t == "session_started"]
            assert started, (name, types)
            after = items[started[-1]:]
            stale = [i for i in after if "aword" in json_text(i["event"])]
            assert not stale, f"{name} heard a's stale incarnation after b's session_started: {stale[:3]}"
        # nothing a streamed was stored: its writes were refused
        store = Store(pg_url)
        try:
            assert not [m for m in store.messages(sid) if m.role == "assistant" and "aword" in m.content]
        finally:
            store.close()
    finally:
        for watcher in watchers.values():
            watcher.close()


def json_text(event: dict[str, Any]) -> str:
    import json

    return json.dumps(event)
