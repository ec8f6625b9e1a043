"""The session's blocking work, started off its thread: :class:`Calls`.

A model call streams on the provider's own clock (inline dispatch), as a task on the
runtime's I/O loop, or on a worker thread; a tool runs on a worker (:mod:`.session_work`).
Each reports its outcome to the actor as ``WorkerDone`` with the sequence number it was
started with: a later start, or a stop, makes an older outcome stale. Every call's cancel
token is cancelled with the incarnation's lifeline. Held by the effect performer
(:mod:`.session_effects`); its books are the :class:`~.session_state.SessionState`'s
``worker_seq``, ``worker_cancel`` and ``streamed``. The actor's thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pykka

from corvid_actors.actors.base import ActivityTracker, tell
from corvid_actors.actors.session_messages import WorkerDone
from corvid_actors.actors.session_state import SessionState
from corvid_actors.actors.session_wiring import SessionWiring
from corvid_actors.actors.session_work import (
    Work,
    async_model_call,
    model_call,
    model_outcome,
    tool_run,
)
from corvid_actors.clock import Clock
from corvid_actors.core.io_loop import IoLoop, IoLoopStopped
from corvid_actors.core.vocabulary import CancelToken, StreamCancelled
from corvid_actors.providers.base import (
    AsyncStreaming,
    CallDone,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ToolCall,
    streams_async,
    streams_on_clock,
)
from corvid_actors.telemetry.tracing import ModelCallSpan, TurnTrace


class Calls:
    """Starts and stops an incarnation's model calls and tool runs (see the module
    docstring). ``touch()``: an event, for the inactivity timeout (each streamed chunk)."""

    def __init__(self, w: SessionWiring, clock: Clock, tracker: ActivityTracker, trace: TurnTrace,
                 self_ref: pykka.ActorRef[Any], touch: Callable[[], None]) -> None:
        self.w = w
        self._sid, self._gen = w.session_id, w.generation
        self._clock, self._tracker, self._trace, self._ref, self._touch = clock, tracker, trace, self_ref, touch

    def rewire(self, w: SessionWiring) -> None:
        """The incarnation's build finished: ``w`` has its provider, tools and journal."""
        self.w = w

    def model_call(self, state: SessionState, request: ModelRequest, purpose: str) -> None:
        """Start the model call ``request`` (``purpose`` "turn": its text is streamed to subscribers)."""
        w, sid = self.w, self._sid
        lifeline, stream_text = w.lifeline, purpose == "turn"
        request = replace(request, session_id=sid, generation=self._gen, at=self._clock.monotonic())
        touch = self._touch
        streamed: list[str] = []
        state.streamed = streamed
        tap = w.journal  # the journal keeps the chunks' sizes: one append per chunk
        sizes = tap.model_request(request, purpose) if tap is not None else None

        def on_event(event: StreamEvent) -> None:
            touch()
            if isinstance(event, TextDelta) and event.text:
                if sizes is not None:
                    if not sizes:
                        tap.first_chunk()
                    sizes.append(len(event.text))
                if stream_text:
                    streamed.append(event.text)
                    lifeline.publish_text(event.text)

        provider, io_loop = w.provider, w.io_loop
        span = self._trace.model_call(request, w.provider_name)
        if self._tracker.inline is not None and streams_on_clock(provider):
            cancel, on_done = self._new_call(state, request, span)
            if provider.stream_soon(request, on_event, cancel, on_done):
                return
        if io_loop is not None and streams_async(provider):
            self._run_on_io_loop(state, io_loop, provider, request, on_event, span)
        else:
            self._run_on_worker(state, model_call(provider, request, on_event, sid, span), f"model-{sid[:8]}")

    def stop(self, state: SessionState) -> str:
        """Cancel the model call in flight — between two streamed chunks; a late outcome of
        it is ignored; what it streamed so far."""
        if state.worker_cancel is not None:
            state.worker_cancel.cancel()
            state.worker_cancel = None
        state.worker_seq += 1
        streamed, state.streamed = "".join(state.streamed), []
        self._touch()
        return streamed

    def tool(self, state: SessionState, call: ToolCall) -> None:
        """Run the tool ``call`` on a worker."""
        w = self.w
        if w.journal is not None:
            w.journal.tool_started(call)
        work = tool_run(w.tools.get(call.name), w.tool_context, call, self._trace.tool_call(call.name, call.id))
        self._run_on_worker(state, work, f"tool-{call.name}-{self._sid[:8]}")

    def _new_call(self, state: SessionState, request: ModelRequest,
                  span: ModelCallSpan) -> tuple[CancelToken, CallDone]:
        """A model call that runs without a worker: its cancel token (cancelled with the
        run: a stop, an abort, the lifeline closing) and the ``on_done`` that reports its
        outcome as ``WorkerDone``, like a worker's (any thread; nothing once cancelled)."""
        state.worker_seq += 1
        seq = state.worker_seq
        cancel = CancelToken()
        state.worker_cancel = cancel
        self.w.lifeline.cancel.on_cancel(cancel.cancel)
        ref, sid = self._ref, self._sid

        def on_done(response: Any, error: BaseException | None) -> None:
            span.finish(response, error if error is not None or not cancel.cancelled else StreamCancelled())
            if cancel.cancelled or isinstance(error, (StreamCancelled, asyncio.CancelledError)):
                return
            tell(ref, WorkerDone(seq, model_outcome(response, error, request, sid)))

        return cancel, on_done

    def _run_on_io_loop(self, state: SessionState, io_loop: IoLoop[Any], provider: AsyncStreaming,
                        request: ModelRequest, on_event: Any, span: ModelCallSpan) -> None:
        """The model call as a task on the runtime's I/O loop (no thread of its own); its
        outcome comes back as ``WorkerDone`` like a worker's. Cancelling the run's token (a
        stop, an abort, the lifeline closing) cancels the task: the stream is closed."""
        cancel, on_done = self._new_call(state, request, span)
        try:
            call = io_loop.submit(async_model_call(provider, request, on_event, cancel), on_done)
        except IoLoopStopped:  # the runtime is shutting down: the call would never answer
            self._run_on_worker(state, model_call(self.w.provider, request, on_event, self._sid, span),
                                f"model-{self._sid[:8]}")
            return
        cancel.on_cancel(call.cancel)

    def _run_on_worker(self, state: SessionState, work: Work, name: str) -> None:
        state.worker_seq += 1
        seq = state.worker_seq
        cancel = CancelToken()
        state.worker_cancel = cancel
        self.w.lifeline.cancel.on_cancel(cancel.cancel)
        ref = self._ref

        def body() -> None:
            try:
                result = work(cancel)
            except StreamCancelled:
                return
            if not cancel.cancelled:
                tell(ref, WorkerDone(seq, result))

        self._tracker.run_tracked(body, name)
