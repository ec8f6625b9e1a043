"""No message refused while a session moves (issue 36 item 2), through real daemon
processes on PostgreSQL: a steady stream of ``admin send`` through every live daemon while
one daemon drains, and while one is killed (``kill -9``). Every send is acknowledged (no
error reply), and every acknowledged message is answered exactly once: counted in the
store, one user row per message and one assistant reply per user row.

A daemon that has exited refuses the connection (``NoDaemon``: nothing was accepted);
the stream then sends that message through another daemon — what any client of a
departed daemon does. Timings as in ``test_daemon_processes`` (lease 1 s); every wait is
bounded.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from corvid_actors.daemon.client import NoDaemon
from corvid_actors.db.store import Store
from tests.cluster.conftest import wait_for
from tests.cluster.test_daemon_processes import (
    CLUSTER_CONFIG,
    WAIT_S,
    launch_daemon,
    owners,
    reply_of,
)
from tests.e2e.test_daemon import Daemon

pytestmark = pytest.mark.postgres

#: an owner that does not answer a notice costs a send this long, not an error
CONFIG = CLUSTER_CONFIG + "\n[cluster.bus]\nowner_query_timeout_s = 0.3\n"
SESSIONS = 9
#: a reply of 30 words streamed a word every 0.01 s: a turn lasts ~0.3 s, so a drain or a
#: kill finds turns in flight and messages queued behind them. Under 300 characters and
#: ending a sentence: a task agent's one reply (a longer text-only one is nudged into a
#: second model call and reply)
CHUNK_DELAY_S = 0.01
REPLY_WORDS = 30
#: each stream thread's pause between two sends (each session gets a message about every
#: second: its turns keep up, on a loaded machine too)
PAUSE_S = 0.25


@dataclass
class Stream:
    """One thread per daemon sending numbered messages to the sessions in turn."""

    daemons: dict[str, Daemon]
    sids: list[str]
    acknowledged: dict[str, list[str]] = field(default_factory=dict)  # sid -> texts
    replies: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (via, reply)
    errors: list[str] = field(default_factory=list)
    rerouted: int = 0
    _gone: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Stream:
        for name in self.daemons:
            thread = threading.Thread(target=self._run, args=(name,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(WAIT_S * 2)
        assert not any(thread.is_alive() for thread in self._threads)

    def retire(self, name: str) -> None:
        """``name`` is about to die: its thread ends its send in flight and stops."""
        with self._lock:
            self._gone.add(name)
        self._threads[list(self.daemons).index(name)].join(WAIT_S * 2)

    def _run(self, via: str) -> None:
        for k in itertools.count():
            if self._stop.is_set() or via in self._gone:
                return
            sid = self.sids[k % len(self.sids)]
            text = f"{via}-{k}"
            self._send(via, sid, text)
            time.sleep(PAUSE_S)

    def _send(self, via: str, sid: str, text: str) -> None:
        first = via
        for name in [via, *[n for n in self.daemons if n != via]]:
            with self._lock:
                if name in self._gone and name != first:
                    continue
            try:
                reply = self.daemons[name].call("send", session=sid, text=text)
            except NoDaemon:  # exited: it accepted nothing; another daemon takes the message
                with self._lock:
                    self._gone.add(name)
                    self.rerouted += 1
                continue
            except Exception as exc:  # noqa: BLE001 - every error is a failure of the test
                with self._lock:
                    self.errors.append(f"{text} to {sid[:8]} via {name}: {exc!r}")
                return
            with self._lock:
                self.acknowledged.setdefault(sid, []).append(text)
                self.replies.append((name, reply))
            return
        with self._lock:
            self.errors.append(f"{text}: no daemon left")


def conversations(url: str, sids: list[str]) -> dict[str, list[tuple[str, str]]]:
    store = Store(url)
    try:
        return {sid: [(m.role, m.content) for m in store.messages(sid) if m.role in ("user", "assistant")]
                for sid in sids}
    finally:
        store.close()


def all_answered(url: str, stream: Stream) -> dict[str, list[tuple[str, str]]] | None:
    """The conversations once every acknowledged message is stored and each user row has
    its reply (as many assistant rows as user rows, the last row a reply), else None."""
    rows = conversations(url, stream.sids)
    for sid, messages in rows.items():
        users = [c for r, c in messages if r == "user"]
        if not set(stream.acknowledged.get(sid, [])) <= set(users):
            return None
        if len(users) != sum(r == "assistant" for r, _ in messages) or messages[-1][0] != "assistant":
            return None
    return rows


def diagnosis(url: str, stream: Stream) -> str:
    """For an assertion message: per session, its owner, what is held for it, the
    acknowledged messages not stored, and its user and assistant rows."""
    from corvid_actors.db.held import HeldMessages

    rows = conversations(url, stream.sids)
    store = Store(url)
    try:
        held = HeldMessages(store).pending(stream.sids)
    finally:
        store.close()
    who = owners(url)
    lines = []
    for sid, messages in rows.items():
        users = [c for r, c in messages if r == "user"]
        missing = [t for t in stream.acknowledged.get(sid, []) if t not in users]
        lines.append(f"{sid[:8]} owner {who.get(sid)} held {held.get(sid, 0)} missing {missing} users {len(users)} "
                     f"replies {sum(r == 'assistant' for r, _ in messages)} last {messages[-1][0] if messages else None}: "
                     + " ".join(c if r == "user" else "R" for r, c in messages[-12:]))
    return "\n".join(lines)


def answered(url: str, stream: Stream) -> dict[str, list[tuple[str, str]]]:
    try:
        rows: dict[str, list[tuple[str, str]]] = wait_for(lambda: all_answered(url, stream),
                                                          "every acknowledged message answered", timeout_s=WAIT_S * 6)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(url, stream)}") from None
    return rows


def assert_each_answered_once(rows: dict[str, list[tuple[str, str]]], stream: Stream) -> None:
    for sid, messages in rows.items():
        users = Counter(c for r, c in messages if r == "user")
        sent = stream.acknowledged.get(sid, [])
        assert {t: users[t] for t in sent} == dict.fromkeys(sent, 1), (sid, messages)  # stored once each
        assert sum(users.values()) == len(sent) + 1  # and nothing else but the first prompt
        assert sum(r == "assistant" for r, _ in messages) == len(sent) + 1  # one reply each


#: how long a daemon may take to start: these tests run under CPU burners too, where an
#: interpreter's start and imports took over 30 s (the e2e tests' bound)
LOADED_READY_S = 120.0


@pytest.fixture
def three_daemons(pg_url: str, tmp_path: Path) -> Iterator[list[Daemon]]:
    """Daemons ``a``, ``b``, ``c`` started together (placement ties go to the smallest id),
    each waited for; killed after the test."""
    made = [launch_daemon(name, pg_url, tmp_path, CONFIG, chunk_delay_s=CHUNK_DELAY_S, reply=short_reply)
            for name in ("a", "b", "c")]
    try:
        for daemon in made:
            daemon.wait_log("daemon ready", LOADED_READY_S)
        yield made
    finally:
        for daemon in made:
            daemon.kill()


def short_reply(name: str) -> str:
    return reply_of(name, REPLY_WORDS, end=".")


def start_sessions(daemon: Daemon, count: int) -> list[str]:
    return [daemon.call("start", agent=f"mover-{i % 3}", prompt="hello")["session"] for i in range(count)]


def test_a_stream_of_sends_through_every_daemon_during_a_drain_is_answered_once(three_daemons, pg_url):
    a, b, c = three_daemons
    sids = start_sessions(a, SESSIONS)
    b_sessions = {sid for sid, who in owners(pg_url).items() if who == "b"}
    assert b_sessions  # placed on the least-loaded daemon: a third each
    stream = Stream({"a": a, "b": b, "c": c}, sids).start()
    try:
        time.sleep(1.0)
        assert b.call("drain")["draining"] is True
        assert b.wait_exit(WAIT_S * 3) == 0
        time.sleep(1.0)  # and on, through the others
    finally:
        stream.stop()
    assert stream.errors == []
    rows = answered(pg_url, stream)
    assert_each_answered_once(rows, stream)
    assert {who for sid, who in owners(pg_url).items() if sid in b_sessions} <= {"a", "c"}
    through_b = [reply for via, reply in stream.replies if via == "b"]
    assert through_b and any(reply["held"] for reply in through_b)  # b held what came during its drain
    print(f"drain: {sum(map(len, stream.acknowledged.values()))} sends acknowledged, "
          f"{sum(r['held'] for _, r in stream.replies)} held, {stream.rerouted} rerouted after b exited")


def test_a_stream_of_sends_through_every_daemon_during_a_kill_is_answered_once(three_daemons, pg_url):
    a, b, c = three_daemons
    sids = start_sessions(a, SESSIONS)
    a_sessions = {sid for sid, who in owners(pg_url).items() if who == "a"}
    assert a_sessions
    stream = Stream({"a": a, "b": b, "c": c}, sids).start()
    try:
        time.sleep(1.0)
        stream.retire("a")  # a send through a would die with it: the others go on
        a.kill()
        wait_for(lambda: {owners(pg_url)[sid] for sid in a_sessions} <= {"b", "c"}, "a's sessions taken over",
                 timeout_s=WAIT_S * 2)
        time.sleep(1.0)
    finally:
        stream.stop()
    assert stream.errors == []
    rows = answered(pg_url, stream)
    assert_each_answered_once(rows, stream)
    held = [reply for _, reply in stream.replies if reply["held"]]
    assert held  # sends to a's sessions while its lease held were kept for the next owner
    print(f"kill: {sum(map(len, stream.acknowledged.values()))} sends acknowledged, {len(held)} held")
