"""The SessionSupervisor's message handling, driven by its own messages (issue 17 item 7).

Two wirings. Without incarnations: the supervisor alone, with recording actors as its
EventBus, Timers and SlotPool and an in-memory store — each test asks or tells it one
message and reads the reply, the rows and what it told the others. With incarnations: a
simulated runtime whose supervisor is asked directly (not through ``Runtime``), so the
replies (tickets, pids, booleans) and the reports of real session actors are what is
checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pykka
import pytest

from corvid_actors.actors.base import ActivityTracker
from corvid_actors.actors.credits import CreditsExhausted
from corvid_actors.actors.events import PruneSessions, Publish, RemoveSession
from corvid_actors.actors.session_messages import (
    OutageReported,
    SessionCrashed,
    SessionEnded,
    TimedOut,
)
from corvid_actors.actors.slots import ReleaseSlot
from corvid_actors.actors.supervisor import (
    ActiveSessionIds,
    CleanupSessionState,
    ExtendSessionTimeout,
    IsPaused,
    IsRunning,
    KillIncarnation,
    PausedSessionIds,
    RefuseInput,
    ResumeProcess,
    ResumeSession,
    SendMessage,
    SessionInfo,
    SessionSupervisor,
    Shutdown,
    StartProcess,
    StartTicket,
    StopProcess,
    SupervisorStats,
    started_pid,
)
from corvid_actors.actors.supervisor._state import _RestartDue, _ResumeDue
from corvid_actors.actors.timers import CancelTimer, CancelTimers
from corvid_actors.config import Config
from corvid_actors.db.store import Store
from corvid_actors.errors import NotFoundError, RuntimeStoppedError
from corvid_actors.events import SessionStopped
from corvid_actors.testing import EventRecorder
from corvid_actors.testing.clock import SimClock
from tests.actors.recording import Inbox

# --- the supervisor alone ---------------------------------------------------------------------




class Bare:
    """A supervisor wired to recording actors; ``got(name)`` reads what one was told."""

    def __init__(self) -> None:
        self.tracker = ActivityTracker()
        self.clock = SimClock()
        self.store = Store("sqlite:///:memory:")
        self.inboxes = {name: Inbox.start(self.tracker) for name in ("bus", "timers", "slots", "approvals")}
        self.sup = SessionSupervisor.start(
            self.tracker, config=Config(), clock=self.clock, store=self.store, builder=None,
            bus=self.inboxes["bus"], timers=self.inboxes["timers"], slot_pool=self.inboxes["slots"],
            approvals=self.inboxes["approvals"])

    def ask(self, message: Any) -> Any:
        return self.sup.ask(message)

    def got(self, name: str) -> list[Any]:
        # the supervisor told them before it replied to our last ask: FIFO makes it visible
        self.sup.ask(IsRunning("-"))
        return list(self.inboxes[name].ask("dump"))

    def close(self) -> None:
        self.sup.stop()
        for ref in self.inboxes.values():
            ref.stop()
        self.store.close()
        self.clock.close()


@pytest.fixture
def bare() -> Iterator[Bare]:
    b = Bare()
    yield b
    b.close()


def test_queries_on_an_empty_supervisor(bare):
    assert bare.ask(IsRunning("s")) is False
    assert bare.ask(IsPaused("s")) is False
    assert bare.ask(ActiveSessionIds()) == []
    assert bare.ask(PausedSessionIds()) == []
    assert bare.ask(SupervisorStats()) == {"processes": 0, "session_meta": 0, "paused_sessions": 0,
                                             "stable_timers": 0, "passivated_sessions": 0}
    assert bare.ask(SessionInfo(None)) == {}
    assert bare.ask(ResumeSession("s")) is False
    assert bare.ask(ExtendSessionTimeout("s", 60.0)) is False
    assert bare.ask(RefuseInput("s")) is False
    assert bare.ask(KillIncarnation("s")) is False
    assert bare.got("bus") == [] and bare.got("timers") == []


def test_send_to_a_session_without_incarnation_is_refused_and_not_stored(bare):
    sid = bare.store.create_session(source="web").id
    assert bare.ask(SendMessage(sid, "hello")) is False
    assert bare.store.recent_messages(sid, 10) == []


def test_stop_of_an_idle_session_stops_its_row_and_cleans_up(bare):
    sid = bare.store.create_session(source="web").id
    assert bare.ask(StopProcess(sid, "user_stop")) is True
    assert bare.store.get_session(sid).status == "stopped"
    assert bare.got("bus") == [Publish(sid, SessionStopped(reason="user_stop")), RemoveSession(sid)]
    assert CancelTimers(sid) in bare.got("timers")
    assert bare.got("slots") == [ReleaseSlot(sid)]


def test_stop_of_a_stopped_session_replies_false_and_publishes_nothing(bare):
    sid = bare.store.create_session(source="web").id
    bare.store.update_session(sid, status="stopped")
    assert bare.ask(StopProcess(sid)) is False
    assert bare.got("bus") == []


def test_credits_exhausted_stops_the_session(bare):
    sid = bare.store.create_session(source="chat", participant="p").id
    bare.sup.tell(CreditsExhausted(sid))
    assert Publish(sid, SessionStopped(reason="credits_exhausted")) in bare.got("bus")
    assert bare.store.get_session(sid).status == "stopped"


def test_cleanup_releases_everything_the_session_held(bare):
    assert bare.ask(CleanupSessionState("s")) is None
    assert bare.got("bus") == [RemoveSession("s")]
    assert bare.got("timers") == [CancelTimers("s")]
    assert bare.got("slots") == [ReleaseSlot("s")]
    assert len(bare.got("approvals")) == 1


def test_start_of_an_unknown_session_raises_to_the_asker(bare):
    with pytest.raises(NotFoundError):
        bare.ask(StartProcess("no-such-session"))
    assert bare.sup.is_alive()


def test_shutdown_prunes_every_subscriber_and_refuses_new_starts(bare):
    sid = bare.store.create_session(source="web").id
    assert bare.ask(Shutdown()) is None
    assert bare.got("bus") == [PruneSessions(frozenset())]
    assert {CancelTimer(("supervisor", "fallback")), CancelTimer(("supervisor", "prune"))} <= set(bare.got("timers"))
    with pytest.raises(RuntimeStoppedError):
        bare.ask(StartProcess(sid, "hi"))
    with pytest.raises(RuntimeStoppedError):
        bare.ask(ResumeProcess(sid, "hi"))


def test_started_pid_passes_plain_replies_through():
    ticket = StartTicket()
    ticket.resolve(7)
    ticket.resolve(8)  # only the first outcome counts
    assert (started_pid(ticket), started_pid(3), started_pid(None)) == (7, 3, None)
    assert ticket.done


# --- with incarnations (a simulated runtime, its supervisor asked directly) --------------------


@pytest.fixture
def rec(runtime: Any) -> EventRecorder:
    return EventRecorder.attach(runtime)


def _start(runtime: Any, sid: str, prompt: str | None = "hi") -> int:
    reply = runtime.internals.supervisor.ask(StartProcess(sid, prompt))
    assert isinstance(reply, StartTicket)
    runtime.clock.advance(0)
    pid = reply.wait(10)
    assert pid is not None
    runtime.settle()  # the events it published have reached the recorder
    return pid


def _generation(runtime: Any, sid: str) -> int:
    return int(runtime.internals.supervisor.ask(SessionInfo(sid))[sid]["generation"])


def test_a_start_replies_with_a_ticket_that_gets_the_pid(runtime, scripted, rec):
    scripted.reply("thinking", latency_s=60)
    sid = runtime.create_session(source="web").id
    pid = _start(runtime, sid)
    sup = runtime.internals.supervisor
    assert sup.ask(IsRunning(sid)) is True and sup.ask(ActiveSessionIds()) == [sid]
    assert runtime.internals.store.get_session(sid).pid == pid and runtime.internals.store.get_session(sid).status == "running"
    info = sup.ask(SessionInfo(sid))[sid]
    assert info["running"] and info["pid"] == pid and info["generation"] >= 1
    assert rec.last("session_started", sid).pid == pid
    # a resume without a message of a running session replies with its pid
    assert sup.ask(ResumeProcess(sid, None)) == pid


def test_reports_of_an_old_generation_are_ignored(runtime, scripted, rec):
    scripted.reply("thinking", latency_s=60)
    sid = runtime.create_session(source="web").id
    _start(runtime, sid)
    gen = _generation(runtime, sid)
    runtime.internals.supervisor.tell(SessionEnded(sid, gen - 1, 0, ""))
    runtime.internals.supervisor.tell(TimedOut(sid, gen + 1))
    assert runtime.internals.supervisor.ask(IsRunning(sid)) is True
    runtime.settle()
    assert rec.of(sid, "session_exited") == [] and rec.of(sid, "session_stopped") == []


def test_late_timer_messages_are_ignored(runtime, scripted, rec):
    # The timer table does not recall a message it told already (a fire that won the race
    # with a cancel): a restart that is no longer pending, a resume of a pause that is not
    # (or no longer) the current one, change nothing.
    scripted.reply("thinking", latency_s=60)
    sid = runtime.create_session(source="web").id
    pid = _start(runtime, sid)
    sup = runtime.internals.supervisor
    sup.tell(_RestartDue(sid, 1))
    sup.tell(_ResumeDue(sid, 99))
    runtime.settle()
    assert sup.ask(IsRunning(sid)) is True and sup.ask(IsPaused(sid)) is False
    assert sup.ask(SessionInfo(sid))[sid]["pid"] == pid
    assert rec.of(sid, "session_exited") == [] and rec.of(sid, "session_stopped") == []
    assert len(rec.of(sid, "session_started")) == 1


def test_a_clean_exit_writes_the_row_and_the_exit_note(runtime, scripted, rec):
    scripted.reply("thinking", latency_s=60)
    sid = runtime.create_session(source="web").id
    _start(runtime, sid)
    runtime.internals.supervisor.tell(SessionEnded(sid, _generation(runtime, sid), 0, ""))
    runtime.settle()
    assert runtime.internals.supervisor.ask(IsRunning(sid)) is False
    assert runtime.internals.store.get_session(sid).status == "idle"
    assert rec.last("session_exited", sid).code == 0
    notes = runtime.internals.store.recent_messages(sid, 5, roles=("system",))
    assert notes and "Turns:" in notes[-1][1]


def test_a_crash_of_a_chat_session_schedules_a_restart_with_backoff(runtime, scripted, rec):
    scripted.reply("thinking", latency_s=60)
    sid = runtime.create_session(source="chat", participant="p").id
    _start(runtime, sid)
    runtime.internals.supervisor.tell(SessionCrashed(sid, _generation(runtime, sid), "boom"))
    runtime.settle()
    restarting = rec.last("session_restarting", sid)
    assert (restarting.attempt, restarting.delay_s) == (1, 5.0)
    assert runtime.internals.store.get_session(sid).status == "error"
    assert runtime.internals.supervisor.ask(SessionInfo(sid))[sid]["restart_pending"] is True
    runtime.clock.advance(5.0)
    runtime.settle()
    assert len(rec.of(sid, "session_started")) == 2 and runtime.internals.supervisor.ask(IsRunning(sid))


def test_an_outage_pauses_and_a_manual_resume_restarts(runtime, scripted, rec):
    scripted.reply("thinking", latency_s=60)
    sid = runtime.create_session(source="web").id
    _start(runtime, sid)
    runtime.internals.supervisor.tell(OutageReported(sid, _generation(runtime, sid), "connection refused"))
    sup = runtime.internals.supervisor
    assert sup.ask(IsPaused(sid)) is True and sup.ask(PausedSessionIds()) == [sid]
    runtime.settle()
    assert runtime.internals.store.get_session(sid).status == "paused"
    assert rec.last("session_paused", sid).attempt == 1
    assert sup.ask(ResumeSession(sid)) is True
    runtime.clock.advance(0)
    runtime.settle()
    assert sup.ask(IsPaused(sid)) is False and sup.ask(IsRunning(sid)) is True
    assert rec.last("session_resumed", sid).automatic is False


def test_extend_replies_true_and_caps_the_timeout(runtime, scripted):
    scripted.reply("thinking", latency_s=60)
    sid = runtime.create_session(source="web").id
    _start(runtime, sid)
    cap = 4 * runtime.config.supervisor.session_timeout_s
    assert runtime.internals.supervisor.ask(ExtendSessionTimeout(sid, cap * 10)) is True
    assert runtime.internals.supervisor.ask(SessionInfo(sid))[sid]["timeout_s"] == cap


def test_a_timeout_report_stops_the_session(runtime, scripted, rec):
    scripted.reply("thinking", latency_s=60)
    sid = runtime.create_session(source="web").id
    _start(runtime, sid)
    runtime.internals.supervisor.tell(TimedOut(sid, _generation(runtime, sid)))
    runtime.settle()
    assert rec.last("session_stopped", sid).reason == "timeout"
    assert rec.last("session_error", sid).error_type == "timeout"
    assert runtime.internals.store.get_session(sid).status == "stopped"
    assert runtime.internals.supervisor.ask(StopProcess(sid)) is False  # stopped already


def test_an_incarnation_that_refuses_input_is_evicted_by_a_send(runtime, scripted):
    scripted.reply("thinking", latency_s=60)
    sid = runtime.create_session(source="web").id
    _start(runtime, sid)
    sup = runtime.internals.supervisor
    assert sup.ask(RefuseInput(sid)) is True
    before = len(runtime.internals.store.recent_messages(sid, 50))
    assert sup.ask(SendMessage(sid, "are you there?")) is False
    assert sup.ask(IsRunning(sid)) is False
    runtime.settle()
    assert runtime.internals.store.get_session(sid).status == "idle"
    assert len(runtime.internals.store.recent_messages(sid, 50)) == before  # nothing of it stored


def test_shutdown_marks_running_sessions_for_resume(runtime, scripted, rec):
    scripted.reply("thinking", latency_s=60)
    sid = runtime.create_session(source="web").id
    _start(runtime, sid)
    assert runtime.internals.supervisor.ask(Shutdown("server_shutdown")) is None
    runtime.settle()
    row = runtime.internals.store.get_session(sid)
    assert row.status == "stopped" and row.restart_pending
    assert rec.last("session_stopped", sid).reason == "server_shutdown"
    with pytest.raises(RuntimeStoppedError):
        runtime.internals.supervisor.ask(StartProcess(sid))


def test_supervisor_is_alive_after_a_told_report_for_an_unknown_session(runtime):
    runtime.internals.supervisor.tell(SessionCrashed("nobody", 1, "boom"))
    runtime.internals.supervisor.tell(CreditsExhausted("nobody"))
    assert runtime.internals.supervisor.ask(SupervisorStats())["processes"] == 0
    assert isinstance(runtime.internals.supervisor, pykka.ActorRef) and runtime.internals.supervisor.is_alive()
