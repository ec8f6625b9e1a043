"""No message refused while a session moves (issue 36 item 2), in simulated time: two
runtimes ("daemons") on one simulated clock and one PostgreSQL. Messages are sent through
both daemons' supervisors (``SendOrHold``, what ``admin send`` asks) while daemon A drains
— its idle sessions handed over at once, its mid-turn one when the turn ends — and while
A is cut off from the database until B takes its sessions over. Every send is committed
before its reply (no error), and every message is answered exactly once: one user row per
message, one model turn and one assistant reply per user row."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from corvid_actors.actors.cluster import HandOverIdle, SendOrHold
from corvid_actors.db.cluster import ClusterStore
from corvid_actors.db.held import HeldMessages
from corvid_actors.db.store import Store
from corvid_actors.testing import Turn
from tests.cluster.conftest import SimDaemon, sim_pair

pytestmark = pytest.mark.postgres


def send(daemon: SimDaemon, sid: str, text: str) -> dict[str, Any]:
    """``admin send`` through ``daemon``'s supervisor: never an error while the session moves."""
    reply: dict[str, Any] = daemon.runtime.internals.supervisor.ask(SendOrHold(sid, text))
    return reply


def conversation(url: str, sid: str) -> list[tuple[str, str]]:
    store = Store(url)
    try:
        return [(m.role, m.content) for m in store.messages(sid) if m.role in ("user", "assistant")]
    finally:
        store.close()


def assert_answered_once(url: str, sid: str, sent: list[str], first_prompt: str = "hi") -> None:
    """Each message is in the conversation once, and the session has one reply per message."""
    rows = conversation(url, sid)
    users = Counter(content for role, content in rows if role == "user")
    assert {text: users[text] for text in sent} == dict.fromkeys(sent, 1), rows
    assert sum(users.values()) == len(sent) + 1, rows  # nothing else asked (the first prompt)
    assert sum(role == "assistant" for role, _ in rows) == len(sent) + 1, rows
    assert rows[-1][0] == "assistant", rows


def owner(runtime: Any, sid: str) -> str | None:
    lease = ClusterStore(runtime.internals.store).owner_of(sid)
    return lease.owner_id if lease is not None else None


def test_sends_through_either_daemon_during_a_drain_are_each_answered_once(pg_url):
    with sim_pair(pg_url) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        idle = [a.create_session(source="web").id for _ in range(3)]
        for sid in idle:
            a.start_process(sid, "hi")
        busy = a.create_session(source="web").id
        sim.a.model.for_session(busy, Turn.reply("a long answer", latency_s=30.0))
        a.start_process(busy, "hi")
        clock.advance_to(2)
        assert a.session_info(busy)[busy]["in_turn"] is True
        a_asked = len(sim.a.model.requests)

        a.internals.cluster.draining = True  # what `admin drain` does first
        handed = a.internals.supervisor.ask(HandOverIdle("drain"))
        assert sorted(handed) == sorted(idle)  # the idle ones at once; the mid-turn one stays
        assert all(owner(a, sid) is None for sid in idle) and owner(a, busy) == "a"
        replies = {
            # a drains: held for the next owner, whoever it will be
            (idle[0], "through a"): send(sim.a, idle[0], "one through a"),
            # nobody owns it yet: b claims and starts it itself
            (idle[1], "through b"): send(sim.b, idle[1], "one through b"),
            # a runs it mid-turn: held, for the daemon that takes it after the turn
            (busy, "through a"): send(sim.a, busy, "busy through a"),
            (busy, "through b"): send(sim.b, busy, "busy through b"),
        }
        assert all(reply["held"] for reply in replies.values())  # committed, no error
        assert replies[(idle[1], "through b")]["owner"] == "b"
        assert replies[(busy, "through b")]["owner"] == "a"
        assert not any(reply.get("taken") for reply in replies.values())
        assert HeldMessages(b.internals.store).pending([busy]) == {busy: 2}

        clock.advance_to(20)  # b's sweeps take the released idle sessions and deliver
        assert {owner(b, sid) for sid in idle} == {"b"}
        assert a.is_running(busy) and a.session_info(busy)[busy]["in_turn"] is True
        clock.advance_to(33)  # the long turn ended on a (answered by a, once)
        assert a.internals.supervisor.ask(HandOverIdle("drain")) == [busy]
        clock.advance_to(45)  # b's sweep took it and answered both held messages, in order
        assert owner(b, busy) == "b" and b.is_running(busy) and not a.is_running(busy)

        assert_answered_once(pg_url, idle[0], ["one through a"])
        assert_answered_once(pg_url, idle[1], ["one through b"])
        assert_answered_once(pg_url, idle[2], [])
        assert_answered_once(pg_url, busy, ["busy through a", "busy through b"])
        rows = conversation(pg_url, busy)
        assert [c for r, c in rows if r == "user"][1:] == ["busy through a", "busy through b"]  # their order
        assert len(sim.a.model.requests) == a_asked  # a answered nothing after the drain began
        asked_b = Counter(r.session_id for r in sim.b.model.requests)
        assert asked_b == {idle[0]: 1, idle[1]: 1, busy: 2}  # one turn per message; no turn to move
        assert HeldMessages(b.internals.store).pending(idle + [busy]) == {}


def test_sends_through_the_survivor_during_a_failover_are_each_answered_once(pg_url):
    with sim_pair(pg_url) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sids = [a.create_session(source="web").id for _ in range(3)]
        for sid in sids:
            a.start_process(sid, "hi")
        clock.advance_to(5)
        sim.proxy.partition()  # a is gone for the database and for b (its last heartbeat: 5 s)
        sent: dict[str, list[str]] = {sid: [] for sid in sids}
        early: list[dict[str, Any]] = []
        for k, at in enumerate((6.0, 9.0, 12.0)):  # a's lease still holds: held for it
            clock.advance_to(at)
            text = f"early {k}"
            sent[sids[k]].append(text)
            early.append(send(sim.b, sids[k], text))
        assert [(r["held"], r["owner"]) for r in early] == [(True, "a")] * 3
        clock.advance_to(20.5)  # expired (5 + 15), not swept yet by b unless its sweep came
        for sid in sids:
            text = f"late {sid[:4]}"
            sent[sid].append(text)
            reply = send(sim.b, sid, text)
            assert reply["owner"] == "b"  # b claims it now (held, taken once built), or its sweep had
        clock.advance_to(40)
        for sid in sids:
            assert owner(b, sid) == "b" and b.is_running(sid)
            assert_answered_once(pg_url, sid, sent[sid])
        asked = Counter(r.session_id for r in sim.b.model.requests)
        assert asked == {sid: len(sent[sid]) for sid in sids}
        assert HeldMessages(b.internals.store).pending(sids) == {}


def test_a_held_message_is_taken_once_and_only_by_the_lease_holder(pg_url):
    with sim_pair(pg_url) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        a.start_process(sid, "hi")
        clock.advance_to(1)
        held = HeldMessages(b.internals.store)
        held.hold(sid, "kept for a", "b")
        epoch = a.internals.store.epoch_of(sid)
        assert held.take(sid, "b", epoch) == []  # not b's lease
        assert held.take(sid, "a", epoch - 1) == []  # not that epoch
        assert held.pending([sid]) == {sid: 1}
        [taken] = held.take(sid, "a", epoch)
        assert taken.content == "kept for a"
        assert held.take(sid, "a", epoch) == []  # gone: a second take finds nothing
        assert conversation(pg_url, sid)[-1] == ("user", "kept for a")


def test_messages_queued_behind_a_turn_are_each_answered_once_after_a_failover(pg_url):
    with sim_pair(pg_url) as sim:
        clock, a, b = sim.clock, sim.a.runtime, sim.b.runtime
        sid = a.create_session(source="web").id
        sim.a.model.for_session(sid, Turn.reply("a long answer", latency_s=60.0))
        a.start_process(sid, "hi")
        clock.advance_to(1)
        queued = ["second", "third"]
        for text in queued:  # delivered to a's incarnation, queued behind its turn (enqueue)
            assert send(sim.a, sid, text)["held"] is False
        clock.advance_to(5)
        sim.proxy.partition()  # a dies for the database mid-turn, two messages queued
        clock.advance_to(40)
        assert owner(b, sid) == "b" and b.is_running(sid)
        # the interrupted turn and each queued message, once each, in order
        assert [r.session_id for r in sim.b.model.requests] == [sid] * 3
        assert_answered_once(pg_url, sid, queued)
        assert [c for r, c in conversation(pg_url, sid) if r == "user"] == ["hi", *queued]


def test_a_send_to_a_session_that_does_not_exist_is_refused_and_nothing_is_held(pg_url):
    from corvid_actors.errors import NotFoundError

    with sim_pair(pg_url) as sim:
        b = sim.b.runtime
        with pytest.raises(NotFoundError):
            send(sim.b, "no-such-session", "hello?")
        store = b.internals.store
        with store.transaction():
            assert store.m.HeldMessage.select().count() == 0
