"""The SessionActor on its own: driven with its public messages, observed from outside.

One incarnation on the smallest wiring — a simulated clock, the timer table, the event
bus, an in-memory store, a scripted provider and the plain conversation loop — with a
probe in the supervisor's place. Each test sends the actor what the supervisor (or
``Runtime.send_message``, or another actor) sends it and checks only what anyone outside
can see: the events it publishes, the rows it writes, the messages it sends the
supervisor, the timers it leaves and whether it is alive. Nothing here reads the actor's
own attributes, so the tests hold however the actor is arranged inside.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pykka
import pytest

from corvid_actors.actors.base import ActivityTracker
from corvid_actors.actors.credits import CreditsExhausted
from corvid_actors.actors.events import EventBus, SubscribeAll
from corvid_actors.actors.session import SessionActor
from corvid_actors.actors.session_messages import (
    Abort,
    Begin,
    BuildFailed,
    Built,
    ExtendTimeout,
    IdleDue,
    InjectedCrash,
    LoopTimerDue,
    OutageReported,
    Ready,
    SessionCrashed,
    SessionEnded,
    StopRequested,
    TimedOut,
    TimeoutDue,
    UserInput,
)
from corvid_actors.actors.session_wiring import Lifeline, SessionWiring
from corvid_actors.actors.timers import Timers
from corvid_actors.db.store import Store
from corvid_actors.events import Event
from corvid_actors.loop.conversation import ConversationLoop
from corvid_actors.testing import ScriptedProvider, SimClock, Turn
from corvid_actors.tools.base import ToolContext, ToolRegistry
from tests.actors.recording import Inbox

#: real seconds any settle may take (the work itself is microseconds)
SETTLE_S = 10.0
TIMEOUT_S = 1800.0
IDLE_S = 300.0
GEN = 3
#: streamed and bookkeeping events, left out of the sequences compared below
NOISE = frozenset({"content_block_delta"})


#: stands in for the supervisor: keeps every message it is told
Probe = Inbox


@dataclass
class Cell:
    """One session incarnation and everything around it."""

    clock: SimClock
    tracker: ActivityTracker
    store: Store
    provider: ScriptedProvider
    bus: pykka.ActorRef[Any]
    timers: Timers
    supervisor: pykka.ActorRef[Any]
    sid: str
    workspace: Path
    events: list[Event] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ref: pykka.ActorRef[Any] | None = None
    lifeline: Lifeline | None = None

    def wiring(self, *, idle_timeout_s: float | None = IDLE_S) -> SessionWiring:
        self.lifeline = Lifeline(self.sid, self.bus)
        return SessionWiring(
            session_id=self.sid, generation=GEN, lifeline=self.lifeline, supervisor=self.supervisor,
            timers=self.timers, clock=self.clock, store=self.store, provider=self.provider,
            loop=ConversationLoop(model="test-model", system_prompt="be brief"), tools=ToolRegistry(),
            tool_context=ToolContext(project_dir=self.workspace), timeout_s=TIMEOUT_S,
            idle_timeout_s=idle_timeout_s,
        )

    def start(self, wiring: SessionWiring | None = None,
              build: Callable[[], tuple[SessionWiring, Any]] | None = None) -> pykka.ActorRef[Any]:
        self.ref = SessionActor.start(self.tracker, wiring or self.wiring(), build)
        self.settle()
        return self.ref

    def tell(self, message: Any) -> None:
        assert self.ref is not None
        self.ref.tell(message)
        self.settle()

    def settle(self) -> None:
        self.tracker.wait_idle(SETTLE_S)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.settle()

    def types(self) -> list[str]:
        with self.lock:
            return [e.type for e in self.events if e.type not in NOISE]

    def of(self, kind: str) -> list[Any]:
        with self.lock:
            return [e for e in self.events if e.type == kind]

    def told(self) -> list[Any]:
        """What the actor told the supervisor, in order."""
        return list(self.supervisor.ask("dump"))

    def rows(self) -> list[tuple[str, str]]:
        return [(m.role, m.content) for m in self.store.messages(self.sid)]

    def session(self) -> Any:
        return self.store.get_session(self.sid)

    def alive(self) -> bool:
        assert self.ref is not None
        return self.ref.is_alive()


@pytest.fixture
def cell(tmp_path: Path) -> Iterator[Cell]:
    clock = SimClock()
    tracker = ActivityTracker()
    clock.attach(tracker, lambda: tracker.wait_idle(SETTLE_S))
    store = Store("sqlite:///:memory:")
    sid = store.create_session(source="web", name="unit").id
    c = Cell(clock=clock, tracker=tracker, store=store, provider=ScriptedProvider(clock),
             bus=EventBus.start(tracker), timers=Timers(clock),
             supervisor=Probe.start(tracker), sid=sid, workspace=tmp_path)

    def record(session_id: str, event: Event) -> None:
        assert session_id == sid
        with c.lock:
            c.events.append(event)

    c.bus.tell(SubscribeAll(record))
    try:
        yield c
    finally:
        if c.lifeline is not None:
            c.lifeline.close()
        pykka.ActorRegistry.stop_all()
        store.close()
        clock.close()


# --- a turn ------------------------------------------------------------------------------


def test_begin_runs_one_turn_publishes_it_and_stores_the_answer_and_its_usage(cell):
    cell.provider.for_session(cell.sid, Turn.reply("Hello there.", deltas=3, cost_usd=0.25))
    cell.start()
    cell.tell(Begin("hi"))
    assert cell.types() == ["thinking", "assistant", "result", "thinking"]
    assert [e.thinking for e in cell.of("thinking")] == [True, False]
    assert "".join(e.text for e in cell.of("content_block_delta")) == "Hello there."
    [result] = cell.of("result")
    assert (result.subtype, result.result, result.total_cost_usd) == ("success", "Hello there.", 0.25)
    # the user's prompt is the supervisor's to store; the answer is the actor's
    assert cell.rows() == [("assistant", "Hello there.")]
    session = cell.session()
    assert (session.total_cost_usd, session.cumulative_turns, session.open_turns) == (0.25, 1, 0)
    # the model call names the session and this incarnation
    [request] = cell.provider.requests
    assert (request.session_id, request.generation, request.messages[-1].content) == (cell.sid, GEN, "hi")
    assert cell.told() == []  # nothing for the supervisor: the session waits for a message
    assert cell.alive()


def test_a_message_that_arrives_mid_turn_is_answered_after_it_in_order(cell):
    cell.provider.for_session(cell.sid, Turn.reply("first answer", latency_s=10), "second answer")
    cell.start()
    cell.tell(Begin("first"))
    cell.tell(UserInput("second"))  # the first turn is still waiting for its model
    assert cell.of("assistant") == []
    cell.advance(10)
    assert [e.content for e in cell.of("assistant")] == ["first answer", "second answer"]
    assert cell.types() == ["thinking", "assistant", "result", "thinking",
                            "thinking", "assistant", "result", "thinking"]
    # the second call saw the whole conversation, the second message last
    second = cell.provider.requests[1]
    assert [(m.role, m.content) for m in second.messages] == [
        ("user", "first"), ("assistant", "first answer"), ("user", "second")]
    session = cell.session()
    assert (session.cumulative_turns, session.open_turns) == (2, 0)
    assert cell.rows() == [("assistant", "first answer"), ("assistant", "second answer")]


def test_ready_waits_without_a_turn_until_the_first_message(cell):
    cell.provider.for_session(cell.sid, "welcome back")
    cell.start()
    cell.tell(Ready())
    assert cell.types() == ["thinking"] and cell.of("thinking")[0].thinking is False
    assert cell.provider.requests == []
    cell.tell(UserInput("are you there?"))
    assert [e.content for e in cell.of("assistant")] == ["welcome back"]
    session = cell.session()
    assert (session.cumulative_turns, session.open_turns) == (1, 0)  # opened by the message, closed by its result


def test_a_multimodal_first_message_reaches_the_model_with_its_blocks(cell):
    blocks = ({"type": "text", "text": "what is this?"},
              {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}})
    cell.start()
    cell.tell(Begin("what is this?", blocks))
    [request] = cell.provider.requests
    assert request.messages[-1].content == "what is this?"
    assert request.messages[-1].blocks == blocks
    assert [e.content for e in cell.of("assistant")] == ["ok"]


# --- how an incarnation ends ---------------------------------------------------------------


def test_waiting_past_the_idle_timeout_ends_the_session_cleanly(cell):
    cell.start()
    cell.tell(Begin("hi"))
    cell.advance(IDLE_S - 1)
    assert cell.told() == []
    cell.advance(1)
    assert cell.told() == [SessionEnded(cell.sid, GEN, 0, "")]
    assert cell.lifeline.accepting_input is False
    # it released its timers; the supervisor's Abort then ends the actor
    assert cell.clock.pending() == 0
    cell.tell(Abort())
    assert not cell.alive()
    assert cell.types()[-1] == "thinking"  # nothing published after the end


def test_a_message_restarts_the_idle_wait(cell):
    cell.start()
    cell.tell(Begin("hi"))
    cell.advance(IDLE_S - 1)
    cell.tell(UserInput("still here"))
    cell.advance(IDLE_S - 1)
    assert cell.told() == []
    cell.advance(1)
    assert cell.told() == [SessionEnded(cell.sid, GEN, 0, "")]


def test_a_fatal_model_error_ends_the_session_with_code_1_and_the_error(cell):
    cell.provider.for_session(cell.sid, Turn.crash("model server fell over"))
    cell.start()
    cell.tell(Begin("hi"))
    assert cell.types() == ["thinking", "result", "error"]
    assert cell.of("result")[0].subtype == "error"
    [ended] = cell.told()
    assert (ended.code, ended.generation) == (1, GEN)
    assert "model server fell over" in ended.error
    assert cell.session().cumulative_turns == 1  # a failed turn is counted, not answered


def test_an_outage_is_reported_to_the_supervisor_and_no_more_input_is_taken(cell):
    cell.provider.for_session(cell.sid, Turn.outage("connection refused"))
    cell.start()
    cell.tell(Begin("hi"))
    assert cell.told() == [OutageReported(cell.sid, GEN, "connection refused")]
    assert cell.lifeline.accepting_input is False
    assert cell.clock.pending() == 0


def test_a_provider_asking_to_exit_ends_the_session_with_its_code(cell):
    cell.provider.for_session(cell.sid, Turn.exit(3))
    cell.start()
    cell.tell(Begin("hi"))
    [ended] = cell.told()
    assert (ended.session_id, ended.generation, ended.code) == (cell.sid, GEN, 3)


def test_abort_mid_stream_cancels_the_call_publishes_nothing_and_ends_the_actor(cell):
    cell.provider.for_session(cell.sid, Turn.reply("never heard", latency_s=60))
    cell.start()
    cell.tell(Begin("hi"))
    before = cell.types()
    cell.tell(Abort())
    assert not cell.alive()
    cell.advance(60)  # the cancelled call's time passes: nothing comes of it
    assert cell.types() == before == ["thinking"]
    assert cell.of("assistant") == [] and cell.rows() == []
    assert cell.told() == []  # a stop is the supervisor's: the actor reports no end of its own
    assert cell.clock.pending() == 0


def test_no_events_for_the_timeout_is_reported_as_timed_out(cell):
    cell.start(cell.wiring(idle_timeout_s=None))  # no idle exit: the session waits for a message
    cell.tell(Begin("hi"))
    cell.advance(TIMEOUT_S - 1)
    assert cell.told() == []
    cell.advance(1)
    assert cell.told() == [TimedOut(cell.sid, GEN)]


def test_late_timer_messages_of_another_generation_are_ignored(cell):
    # The timer table does not recall a message it told already (a fire that won the race
    # with a cancel): a timer message of another incarnation must change nothing.
    cell.start(cell.wiring(idle_timeout_s=None))
    cell.tell(Begin("hi"))
    before = cell.types()
    for late in (TimeoutDue(GEN - 1), IdleDue(GEN - 1, 0), IdleDue(GEN + 1, 0), LoopTimerDue(GEN - 1, "t")):
        cell.tell(late)
    assert cell.alive() and cell.told() == [] and cell.types() == before


def test_extend_timeout_holds_off_the_timeout_until_the_extension_runs_out(cell):
    cell.start(cell.wiring(idle_timeout_s=None))
    cell.tell(Begin("hi"))
    cell.tell(ExtendTimeout(2 * TIMEOUT_S))
    cell.advance(TIMEOUT_S)
    assert cell.told() == []
    cell.advance(TIMEOUT_S)
    assert cell.told() == [TimedOut(cell.sid, GEN)]


def test_exhausted_credits_ask_the_supervisor_for_a_stop(cell):
    cell.start()
    cell.tell(Begin("hi"))
    cell.tell(CreditsExhausted("another-session"))  # not this session's: ignored
    cell.tell(CreditsExhausted(cell.sid))
    assert cell.told() == [StopRequested(cell.sid, GEN, "credits_exhausted")]


def test_a_crash_in_the_actor_is_reported_as_such_and_frees_its_timers(cell):
    cell.start()
    cell.tell(Begin("hi"))
    cell.tell(InjectedCrash("a bug in the handler"))
    [crashed] = cell.told()
    assert isinstance(crashed, SessionCrashed) and (crashed.session_id, crashed.generation) == (cell.sid, GEN)
    assert "a bug in the handler" in crashed.error
    assert not cell.alive()
    assert cell.lifeline.accepting_input is False
    assert cell.clock.pending() == 0


def test_messages_after_the_lifeline_closed_are_ignored(cell):
    cell.start()
    cell.tell(Begin("hi"))
    seen = cell.types()
    cell.lifeline.close()  # the supervisor closes it first, then aborts
    cell.tell(UserInput("too late"))
    assert cell.types() == seen and len(cell.provider.requests) == 1
    cell.tell(Abort())
    assert not cell.alive()


# --- building on the incarnation's own worker ---------------------------------------------


def test_a_build_reports_built_then_the_incarnation_runs(cell):
    full = cell.wiring()
    partial = replace(full, provider=None, loop=None, tools=None, tool_context=None)
    made = object()
    cell.start(partial, build=lambda: (full, made))
    [built] = cell.told()
    assert isinstance(built, Built) and (built.session_id, built.generation, built.built) == (cell.sid, GEN, made)
    cell.tell(Begin("hi"))
    assert [e.content for e in cell.of("assistant")] == ["ok"]


def test_a_build_that_raises_is_reported_as_failed_and_the_actor_stops(cell):
    partial = replace(cell.wiring(), provider=None, loop=None, tools=None, tool_context=None)

    def build() -> tuple[SessionWiring, Any]:
        raise FileNotFoundError("no such project directory")

    cell.start(partial, build=build)
    assert cell.told() == [BuildFailed(cell.sid, GEN, "no such project directory")]
    assert not cell.alive()
    assert cell.clock.pending() == 0 and cell.types() == []
