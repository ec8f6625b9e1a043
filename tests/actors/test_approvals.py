"""ApprovalBroker: timeouts deny, session grants, modes, cancel on stop, prefix resolution."""

from __future__ import annotations

import pykka
import pytest

from corvid_actors.actors.approvals import (
    ApprovalAnswer,
    ApprovalAsked,
    ApprovalBroker,
    CancelSession,
    DenyAll,
    ListPending,
    RequestApproval,
    Resolve,
    SetMode,
)
from corvid_actors.actors.base import ActivityTracker, TrackedActor
from corvid_actors.actors.session_messages import approval_id_for
from corvid_actors.actors.timers import Timers
from corvid_actors.testing import SimClock


class Inbox(TrackedActor):
    def __init__(self, tracker):
        super().__init__(tracker)
        self.got = []

    def on_receive(self, message):
        if message == "dump":
            return list(self.got)
        self.got.append(message)


@pytest.fixture
def env():
    clock = SimClock()
    tracker = ActivityTracker()
    timers = Timers(clock)
    broker = ApprovalBroker.start(tracker, clock=clock, timers=timers)
    inbox = Inbox.start(tracker)
    clock.attach(tracker, lambda: tracker.wait_idle(5))

    class Env:
        pass

    e = Env()
    e.clock, e.tracker, e.broker, e.inbox = clock, tracker, broker, inbox

    def request(approval_id, session="s1", tool="write_file", kind="tool", timeout=55.0):
        broker.tell(RequestApproval(approval_id, session, f"call-{approval_id}", tool, f"Write file: {approval_id}",
                                    kind, timeout, inbox, {"path": "secret.txt", "content": "RAW INPUT"}))
        tracker.wait_idle(5)

    e.request = request
    e.answers = lambda: [m for m in inbox.ask("dump") if isinstance(m, ApprovalAnswer)]
    e.asked = lambda: [m for m in inbox.ask("dump") if isinstance(m, ApprovalAsked)]
    yield e
    pykka.ActorRegistry.stop_all()
    clock.close()


def test_pending_requests_are_listed_without_raw_input(env):
    env.request("abcd1234")
    pending = env.broker.ask(ListPending())
    assert [p["id"] for p in pending] == ["abcd1234"]
    assert "RAW INPUT" not in repr(pending)
    assert pending[0]["description"] == "Write file: abcd1234"


def test_timeout_denies(env):
    env.request("abcd1234", timeout=55)
    env.clock.advance(54)
    assert env.answers() == []
    env.clock.advance(1)
    [answer] = env.answers()
    assert (answer.allowed, answer.message) == (False, "Approval timed out")
    assert env.broker.ask(ListPending()) == []


def test_resolve_by_unique_prefix_with_updated_input(env):
    env.request("abcd1234")
    env.request("abff0000")
    assert env.broker.ask(Resolve("ab", "allow")) is None  # too short and ambiguous
    info = env.broker.ask(Resolve("abcd", "allow", updated_input={"path": "other.txt"}))
    assert info["id"] == "abcd1234"
    env.tracker.wait_idle(5)
    [answer] = env.answers()
    assert answer.allowed and answer.updated_input == {"path": "other.txt"}
    assert env.broker.ask(Resolve("abcd1234", "deny")) is None  # already resolved


def test_allow_for_session_grants_the_tool_for_later_requests(env):
    env.request("aaaa0001", tool="run_command")
    env.broker.ask(Resolve("aaaa0001", "allow_session"))
    env.request("aaaa0002", tool="run_command")
    env.request("aaaa0003", tool="write_file")
    env.tracker.wait_idle(5)
    answers = env.answers()
    assert [(a.call_id, a.allowed) for a in answers] == [("call-aaaa0001", True), ("call-aaaa0002", True)]
    assert answers[0].scope == "session"
    assert [p["id"] for p in env.broker.ask(ListPending())] == ["aaaa0003"]


def test_paused_mode_denies_at_once_and_queued_mode_never_times_out(env):
    env.broker.ask(SetMode("paused"))
    env.request("bbbb0001")
    assert env.answers()[0].message.startswith("System is in paused mode")
    env.broker.ask(SetMode("queued"))
    env.request("bbbb0002")
    env.clock.advance(24 * 3600)
    assert len(env.answers()) == 1
    env.broker.ask(Resolve("bbbb0002", "allow"))
    env.tracker.wait_idle(5)
    assert env.answers()[-1].allowed
    with pytest.raises(ValueError, match="unknown approval mode"):
        env.broker.ask(SetMode("yolo"))


def test_cancel_session_and_deny_all(env):
    env.request("cccc0001", session="s1")
    env.request("cccc0002", session="s2")
    env.broker.tell(CancelSession("s1", "Session stopped"))
    env.tracker.wait_idle(5)
    assert [(a.call_id, a.message) for a in env.answers()] == [("call-cccc0001", "Session stopped")]
    env.broker.tell(DenyAll("Server shutting down"))
    env.tracker.wait_idle(5)
    assert env.answers()[-1].message == "Server shutting down"
    env.clock.advance(100)
    assert len(env.answers()) == 2  # cancelled timers do not fire a second answer


def test_only_requests_that_ask_a_human_are_announced(env):
    env.request("dddd0001", tool="run_command")
    [asked] = env.asked()
    assert (asked.call_id, asked.approval_id) == ("call-dddd0001", "dddd0001")
    assert asked.created_at == "2026-01-01T00:00:00.000Z"  # ISO 8601 UTC with Z, as every time shown
    assert asked.expires is True  # normal mode: the request times out
    env.broker.ask(Resolve("dddd0001", "allow_session"))
    env.request("dddd0002", tool="run_command")  # granted for the session: nobody is asked
    env.broker.ask(SetMode("paused"))
    env.request("dddd0003", tool="write_file")  # denied at once: nobody is asked
    env.broker.ask(SetMode("queued"))
    env.request("dddd0004", tool="write_file")  # kept for a human
    env.tracker.wait_idle(5)
    assert [a.approval_id for a in env.asked()] == ["dddd0001", "dddd0004"]
    assert [(a.call_id, a.allowed) for a in env.answers()] == [
        ("call-dddd0001", True), ("call-dddd0002", True), ("call-dddd0003", False)]


def test_an_id_already_pending_is_replaced_by_another_8_character_id(env):
    env.request("eeee0001", session="s1")
    env.request("eeee0001", session="s2")
    first, second = env.asked()
    assert first.approval_id == "eeee0001"
    assert len(second.approval_id) == 8 and second.approval_id != "eeee0001"
    assert sorted(p["id"] for p in env.broker.ask(ListPending())) == sorted([first.approval_id,
                                                                            second.approval_id])
    env.broker.ask(Resolve(second.approval_id, "deny"))
    env.tracker.wait_idle(5)
    [answer] = env.answers()
    assert (answer.call_id, answer.approval_id, answer.allowed) == ("call-eeee0001", second.approval_id, False)


def test_approval_ids_are_8_hex_characters_and_differ_by_session_and_request():
    ids = {approval_id_for(f"session-{s}", g, n) for s in range(20) for g in (1, 2) for n in range(1, 20)}
    assert len(ids) == 20 * 2 * 19
    assert all(len(i) == 8 and int(i, 16) >= 0 for i in ids)
    assert approval_id_for("a", 1, 1) == approval_id_for("a", 1, 1)  # replayable in simulations
