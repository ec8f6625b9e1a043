"""Under the inline dispatcher a scripted model call and an incarnation's build start no
thread (issue 18 item 4): the call's latency is a timer on the simulated clock
(``ScriptedProvider.stream_soon``), the build runs on the dispatching thread. A provider
that overrides ``stream`` keeps its worker, and the thread dispatcher is unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from corvid_actors.core.vocabulary import CancelToken
from corvid_actors.providers.base import ModelRequest, ModelResponse, StreamCallback
from corvid_actors.testing import ScriptedProvider, SimClock, Turn, sim_runtime


@pytest.fixture
def started_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Names of the threads started meanwhile (threading's own start, recorded)."""
    names: list[str] = []
    start = threading.Thread.start

    def recording_start(self: threading.Thread) -> None:
        names.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", recording_start)
    yield names


def _events(runtime: Any, sid: str) -> list[Any]:
    seen: list[Any] = []
    runtime.subscribe(sid, lambda _sid, event: seen.append(event))
    return seen


def test_a_scripted_turn_with_latency_starts_no_thread_and_waits_in_simulated_time(started_threads):
    clock = SimClock()
    model = ScriptedProvider(clock)
    runtime = sim_runtime(clock, model, dispatcher="inline")
    try:
        s = runtime.create_session(source="web")
        model.for_session(s.id, Turn.reply("hello there", deltas=3, latency_s=30))
        seen = _events(runtime, s.id)
        runtime.start_process(s.id, "hi")
        runtime.settle()
        assert not any(e.type == "result" for e in seen)  # the reply is 30 simulated seconds away
        clock.advance(29)
        assert not any(e.type == "result" for e in seen)
        clock.advance(1)
        text = "".join(e.text for e in seen if e.type == "content_block_delta")
        assert text == "hello there" and any(e.type == "result" for e in seen)
        assert not [n for n in started_threads if n.startswith(("model-", "build-"))], started_threads
    finally:
        runtime.shutdown()
        clock.close()


def test_a_stop_during_the_latency_cancels_the_timer_and_nothing_of_the_turn_follows():
    clock = SimClock()
    model = ScriptedProvider(clock)
    runtime = sim_runtime(clock, model, dispatcher="inline")
    try:
        s = runtime.create_session(source="web")
        model.for_session(s.id, Turn.reply("too late", latency_s=60))
        seen = _events(runtime, s.id)
        runtime.start_process(s.id, "hi")
        runtime.settle()
        runtime.stop_process(s.id)
        runtime.settle()
        clock.advance(120)
        types = [e.type for e in seen]
        assert "session_stopped" in types
        after_stop = types[types.index("session_stopped"):]
        assert "content_block_delta" not in after_stop and "result" not in after_stop
        assert "too late" not in [m.content for m in runtime.internals.store.messages(s.id)]
    finally:
        runtime.shutdown()
        clock.close()


def test_errors_and_exits_of_a_threadless_call_take_their_usual_paths():
    clock = SimClock()
    model = ScriptedProvider(clock)
    runtime = sim_runtime(clock, model, dispatcher="inline")
    try:
        crashing, leaving = runtime.create_session(source="web"), runtime.create_session(source="web")
        model.for_session(crashing.id, Turn.crash("boom", latency_s=5))
        model.for_session(leaving.id, Turn.clean_exit(latency_s=5))
        crash_events, exit_events = _events(runtime, crashing.id), _events(runtime, leaving.id)
        runtime.start_process(crashing.id, "hi")
        runtime.start_process(leaving.id, "hi")
        clock.advance(5)
        assert any(e.type == "session_exited" and e.code == 1 for e in crash_events)
        assert any(e.type == "error" for e in crash_events)
        assert any(e.type == "session_exited" and e.code == 0 for e in exit_events)
    finally:
        runtime.shutdown()
        clock.close()


class _OwnStream(ScriptedProvider):
    """A subclass with its own ``stream``: it must keep running on a worker."""

    def stream(self, request: ModelRequest, on_event: StreamCallback, cancel: CancelToken) -> ModelResponse:
        self.on_thread = threading.current_thread().name
        return super().stream(request, on_event, cancel)


def test_a_provider_that_overrides_stream_still_runs_it_on_a_worker():
    clock = SimClock()
    model = _OwnStream(clock, default_reply="mine")
    runtime = sim_runtime(clock, model, dispatcher="inline")
    try:
        s = runtime.create_session(source="web")
        seen = _events(runtime, s.id)
        runtime.start_process(s.id, "hi")
        runtime.settle()
        assert model.on_thread.startswith("model-")
        assert any(e.type == "result" for e in seen)
    finally:
        runtime.shutdown()
        clock.close()


def test_the_thread_dispatcher_keeps_model_calls_and_builds_on_workers(started_threads):
    clock = SimClock()
    model = ScriptedProvider(clock)
    runtime = sim_runtime(clock, model, dispatcher="threads")
    try:
        s = runtime.create_session(source="web")
        model.for_session(s.id, Turn.reply("threaded", latency_s=2))
        runtime.start_process(s.id, "hi")
        clock.advance(2)
        assert any(n.startswith("model-") for n in started_threads)
        assert any(n.startswith("build-") for n in started_threads)
        assert runtime.internals.store.messages(s.id)[-1].content == "threaded"
    finally:
        runtime.shutdown()
        clock.close()
