"""Two corners of the testing API: ``SimClock.run_until_idle`` and ``ScriptedProvider.fail_with``.

``run_until_idle`` fires timers in time order until none is left, or until the next one
is due more than ``max_seconds`` after the call; it returns the simulated time it moved
(the due time of the last timer it fired, not ``max_seconds``). ``fail_with(error)``
makes a model call raise exactly that exception: a ``ProviderError`` takes the path of its
kind, any other exception is an unclassified provider bug (fatal: exit code 1).
"""

from __future__ import annotations

import pytest

from corvid_actors.core.vocabulary import CancelToken
from corvid_actors.providers.base import ChatMessage, ErrorKind, ModelRequest, ProviderError
from corvid_actors.testing import ScriptedProvider, SimClock

# --- SimClock.run_until_idle -------------------------------------------------------------


@pytest.fixture
def clock():
    c = SimClock()
    yield c
    c.close()


def test_run_until_idle_fires_every_timer_in_order_and_returns_the_time_moved(clock):
    fired: list[tuple[str, float]] = []
    clock.call_later(10, lambda: fired.append(("b", clock.elapsed)))
    clock.call_later(5, lambda: fired.append(("a", clock.elapsed)))
    # a timer that schedules another: the chain is followed to its end
    clock.call_later(7, lambda: clock.call_later(20, lambda: fired.append(("c", clock.elapsed))))
    assert clock.run_until_idle() == 27.0
    assert fired == [("a", 5.0), ("b", 10.0), ("c", 27.0)]
    assert (clock.elapsed, clock.pending(), clock.next_due()) == (27.0, 0, None)
    assert clock.run_until_idle() == 0.0  # nothing left: time does not move


def test_run_until_idle_skips_cancelled_timers(clock):
    fired: list[float] = []
    clock.call_later(3, lambda: fired.append(clock.elapsed))
    clock.call_later(50, lambda: fired.append(clock.elapsed)).cancel()
    assert clock.run_until_idle() == 3.0
    assert fired == [3.0]


def test_run_until_idle_stops_before_a_timer_due_after_max_seconds(clock):
    ticks: list[float] = []

    def tick() -> None:  # a periodic timer never runs out by itself
        ticks.append(clock.elapsed)
        clock.call_later(60, tick)

    clock.call_later(60, tick)
    assert clock.run_until_idle(max_seconds=300) == 300.0
    assert ticks == [60.0, 120.0, 180.0, 240.0, 300.0]
    assert (clock.pending(), clock.next_due()) == (1, 60.0)  # the next tick is left waiting
    # the bound counts from the call, and time stops at the last timer fired
    assert clock.run_until_idle(max_seconds=90) == 60.0
    assert clock.elapsed == 360.0


def test_run_until_idle_runs_a_crash_restart_timeline_to_its_end(runtime, scripted, recorder):
    session = runtime.create_session(source="chat", participant="alice")
    scripted.crash("model server fell over")              # exit 1: restarted after 5 s
    scripted.reply("I'm back.", latency_s=2)               # answers at t = 5 + 2
    runtime.start_process(session.id, "hello")
    moved = runtime.clock.run_until_idle(max_seconds=24 * 3600)
    assert recorder.times("session_started", session.id) == [0.0, 5.0]
    assert recorder.last("assistant", session.id).content == "I'm back."
    # it went on through the session's inactivity timeout (30 min after its last event)
    # and the supervisor's housekeeping, then stopped: nothing is scheduled any more
    assert recorder.times("session_stopped", session.id) == [7.0 + 1800]
    assert recorder.last("session_stopped", session.id).reason == "timeout"
    assert runtime.clock.pending() == 0 and runtime.clock.next_due() is None
    assert 7.0 + 1800 <= moved < 24 * 3600
    assert runtime.get_active_session_ids() == []


# --- ScriptedProvider.fail_with ---------------------------------------------------------------


def call(provider: ScriptedProvider, text: str = "hi", session_id: str = "") -> str:
    request = ModelRequest(model="m", system="", messages=(ChatMessage("user", text),), session_id=session_id)
    return provider.stream(request, lambda event: None, CancelToken()).text


def test_fail_with_raises_that_very_exception_once_then_the_queue_goes_on():
    p = ScriptedProvider(default_reply="fine")
    error = ConnectionResetError("the socket went away")
    p.fail_with(error)
    with pytest.raises(ConnectionResetError) as caught:
        call(p)
    assert caught.value is error
    assert call(p) == "fine"
    assert len(p.requests) == 2  # the failed call is recorded like any other


def test_fail_with_match_waits_for_a_message_that_contains_the_text():
    p = ScriptedProvider(default_reply="fine")
    p.fail_with(ProviderError(ErrorKind.FATAL, "invalid api key"), match="bob")
    assert call(p, "hello alice") == "fine"
    with pytest.raises(ProviderError) as caught:
        call(p, "hello bob")
    assert (caught.value.kind, str(caught.value)) == (ErrorKind.FATAL, "invalid api key")
    assert p.pending_turns == 0


def test_fail_with_an_unclassified_exception_is_fatal_for_the_session(runtime, scripted, recorder):
    session = runtime.create_session(source="web")
    scripted.fail_with(KeyError("choices"))  # a provider bug, not a ProviderError
    runtime.start_process(session.id, "hello")
    runtime.settle()
    assert recorder.last("session_exited", session.id).code == 1
    assert "KeyError" in recorder.last("error", session.id).message
    assert runtime.get_active_session_ids() == []


def test_fail_with_a_retryable_provider_error_pauses_the_session(runtime, scripted, recorder):
    session = runtime.create_session(source="web")
    scripted.fail_with(ProviderError(ErrorKind.RETRYABLE, "connection refused"))
    runtime.start_process(session.id, "hello")
    runtime.settle()
    assert recorder.last("session_paused", session.id) is not None
    assert runtime.get_paused_session_ids() == [session.id]
