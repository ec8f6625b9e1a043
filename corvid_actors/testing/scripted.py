"""A scripted model provider for simulations: replies, streamed deltas, tool calls, errors,
outages, clean exits, start failures, health-probe results and latency in simulated time.

Scripts are per session or shared:

- ``provider.for_session(session_id, *turns)`` queues turns for one session. Its model
  calls take them in order, whichever incarnation makes the call: a script survives
  restarts and resumes, as the session's own conversation would. A
  :meth:`Turn.start_failure` in the script fails the session's next *start* instead
  (``spawn_error``); model calls never consume one.
- The shared queue (``provider.reply(...)``, ``provider.crash(...)``, …, or ``add``) serves
  calls of any session with no scripted turn left; a shared turn may be tied to a
  conversation with ``match`` (used only by a call whose last user message contains it).

With nothing scripted, ``responder(request)`` answers (if set and it returns a turn), else
``default_reply``.

    provider = ScriptedProvider(clock)
    provider.for_session(session.id,
        Turn.reply("Hello!", deltas=3, latency_s=2.0),   # 3 deltas after 2 simulated seconds
        Turn.crash("model server fell over"),            # exit 1: chat sessions restart
        Turn.start_failure("model not loaded"),          # the restart fails: spawn_error
    )
    provider.outage("connection refused")              # shared: any session pauses
    provider.health_results = [False, True]            # first probe fails, then healthy

Every model call is kept in ``requests`` (each :class:`ModelRequest` carries the
``session_id`` and incarnation ``generation`` that made it, and ``at``: the clock's time
when it was made); :meth:`requests_for` and :meth:`starts_of` read them per session.

A script counts model *calls*, not answered turns: a call takes its turn when it starts.
A crash mid-turn (the incarnation killed by ``kill_incarnation``, the runtime by
``kill_runtime``) spends the turn of the call in flight, and the turn answered again after
the restart takes the next one: two scripted turns for one user message.

The turns (:class:`ScriptedTurn`, :class:`Turn`) are defined beside this module, in
``_script_turns``, and imported from here as before.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from corvid_actors.clock import Clock
from corvid_actors.core.vocabulary import CancelToken, StreamCancelled
from corvid_actors.providers.base import (
    CallDone,
    ErrorKind,
    ModelInfo,
    ModelRequest,
    ModelResponse,
    ProviderTraits,
    SessionExit,
    StreamCallback,
    TextDelta,
    ToolCall,
    Usage,
)
from corvid_actors.testing._script_turns import ScriptedTurn, ToolCallLike, Turn, turn_chunks

__all__ = ["ScriptError", "ScriptedProvider", "ScriptedTurn", "ScriptedStartFailure", "Turn"]


class ScriptedStartFailure(RuntimeError):
    """Raised while a session is being built, for a scripted :meth:`Turn.start_failure`."""


class ScriptError(ValueError):
    """A scripted turn the session cannot take: its tool calls (:meth:`Turn.tool_call`,
    ``Turn.reply(tool_calls=…)``) reached a loop that offered the model no tools, which
    would drop them. Raised by the model call, so the session fails as on a provider bug
    (``error`` event carrying this text, exit 1); also kept in
    :attr:`ScriptedProvider.script_errors`."""


class ScriptedProvider:
    """See the module docstring. Thread-safe: sessions call it from their workers."""

    name = "scripted"
    #: no slots, direct pseudo-PIDs; pass ``traits`` to stand in for another provider
    traits = ProviderTraits(uses_slots=False, pid_kind="direct")

    def __init__(self, clock: Clock | None = None, *, default_reply: str = "ok",
                 context_window: int = 8192, name: str = "scripted",
                 traits: ProviderTraits | None = None) -> None:
        self.clock = clock
        self.name = name
        if traits is not None:
            self.traits = traits
        self.default_reply = default_reply
        self.context_window = context_window
        self.responder: Callable[[ModelRequest], ScriptedTurn | None] | None = None
        #: health-probe answers: a bool for all probes, or a list consumed in order
        #: (its last value repeats)
        self.health_results: bool | list[bool] = True
        self.requests: list[ModelRequest] = []
        #: session ids, one per start (build) of an incarnation, in order
        self.starts: list[str] = []
        self.health_probes = 0
        #: the loop this provider's sessions run (``conversation``, ``direct``, ``sdk`` …), as
        #: the runtime's ``loop_for_provider`` says: ``sim_runtime`` sets it; it names the
        #: loop in a :class:`ScriptError` (None: the runtime's default, ``conversation``)
        self.loop_kind: str | None = None
        #: every :class:`ScriptError` raised, in order
        self.script_errors: list[ScriptError] = []
        self._turns: list[ScriptedTurn] = []
        self._scripts: dict[str, deque[ScriptedTurn]] = {}
        self._lock = threading.Lock()

    # --- scripting ----------------------------------------------------------------------

    def for_session(self, session_id: str, *turns: ScriptedTurn | str) -> ScriptedProvider:
        """Queue ``turns`` for ``session_id`` (after any already queued for it). A plain
        string is ``Turn.reply(text)``."""
        made = [Turn.reply(t) if isinstance(t, str) else t for t in turns]
        for turn in made:
            if turn.match is not None:
                raise ValueError("a per-session turn needs no match=; it is for that session only")
        with self._lock:
            self._scripts.setdefault(session_id, deque()).extend(made)
        return self

    def remaining(self, session_id: str) -> int:
        """Turns still scripted for ``session_id``."""
        with self._lock:
            return len(self._scripts.get(session_id, ()))

    def requests_for(self, session_id: str) -> list[ModelRequest]:
        """The model calls ``session_id`` made, in order (each with its ``generation``)."""
        with self._lock:
            return [r for r in self.requests if r.session_id == session_id]

    def starts_of(self, session_id: str) -> int:
        """How many times an incarnation of ``session_id`` was built (started or failed to)."""
        with self._lock:
            return self.starts.count(session_id)

    def add(self, turn: ScriptedTurn) -> ScriptedProvider:
        """Queue ``turn`` on the shared queue."""
        if turn.start_failure is not None:
            raise ValueError("a start failure is per session: use for_session(session_id, Turn.start_failure())")
        with self._lock:
            self._turns.append(turn)
        return self

    def reply(self, text: str, *, deltas: int = 1, latency_s: float = 0.0, delta_interval_s: float = 0.0,
              match: str | None = None, usage: Usage | Mapping[str, int] | None = None, cost_usd: float = 0.0,
              tool_calls: Iterable[ToolCallLike] = ()) -> ScriptedProvider:
        """Queue a reply on the shared queue (see :meth:`Turn.reply`); with ``match``, only for a
        request whose user message contains that text."""
        turn = Turn.reply(text, deltas=deltas, latency_s=latency_s, delta_interval_s=delta_interval_s,
                          usage=usage, cost_usd=cost_usd, tool_calls=tool_calls)
        return self.add(replace(turn, match=match))

    def tool_call(self, name: str, arguments: dict[str, Any], *, text: str = "", call_id: str | None = None,
                  match: str | None = None) -> ScriptedProvider:
        """Queue a reply that calls tool ``name`` with ``arguments`` (and says ``text``), on the shared
        queue."""
        with self._lock:
            n = len(self.requests) + len(self._turns)
        return self.reply(text, match=match, tool_calls=[ToolCall(call_id or f"call_{n}", name, arguments)])

    def crash(self, message: str = "scripted provider failure", *, match: str | None = None,
              latency_s: float = 0.0) -> ScriptedProvider:
        """A fatal provider error: the session exits with code 1."""
        return self.add(replace(Turn.crash(message, latency_s=latency_s), match=match))

    def outage(self, message: str = "connection refused", *, match: str | None = None,
               latency_s: float = 0.0) -> ScriptedProvider:
        """A retryable upstream error: the session reports an outage and pauses."""
        return self.add(replace(Turn.outage(message, latency_s=latency_s), match=match))

    def api_error(self, kind: ErrorKind | str, message: str = "scripted API error", *,
                  match: str | None = None, **details: Any) -> ScriptedProvider:
        """A classified provider error of ``kind`` (see :meth:`Turn.api_error`)."""
        return self.add(replace(Turn.api_error(kind, message, **details), match=match))

    def clean_exit(self, *, match: str | None = None, latency_s: float = 0.0) -> ScriptedProvider:
        """The calling incarnation ends with code 0."""
        return self.add(replace(Turn.clean_exit(latency_s=latency_s), match=match))

    def fail_with(self, error: BaseException, *, match: str | None = None) -> ScriptedProvider:
        """The call raises exactly ``error``: a ``ProviderError`` takes the path of its kind,
        any other exception is an unclassified provider bug (fatal: the session exits 1)."""
        return self.add(ScriptedTurn(error=error, match=match))

    @property
    def pending_turns(self) -> int:
        """Turns left on the shared queue and in every session's script."""
        with self._lock:
            return len(self._turns) + sum(len(q) for q in self._scripts.values())

    # --- the Provider protocol ------------------------------------------------------------

    def before_start(self, session_id: str) -> None:
        """Called while an incarnation of ``session_id`` is built (see
        ``providers.base.BEFORE_START_HOOK``): raises for a scripted start failure."""
        with self._lock:
            self.starts.append(session_id)
            script = self._scripts.get(session_id)
            if not script or script[0].start_failure is None:
                return
            message = script.popleft().start_failure
        raise ScriptedStartFailure(message)

    def stream(self, request: ModelRequest, on_event: StreamCallback, cancel: CancelToken) -> ModelResponse:
        """Answer one model call with the session's next scripted turn (else the shared queue, the
        responder, the default reply), streaming its deltas on the runtime's clock."""
        turn = self._next_turn(request)
        if turn.latency_s > 0:
            if not self._need_clock().wait(turn.latency_s, cancel):
                raise StreamCancelled()
        self._open(turn, request, cancel)
        for i, chunk in enumerate(turn_chunks(turn)):
            if i and turn.delta_interval_s > 0 and not self._need_clock().wait(turn.delta_interval_s, cancel):
                raise StreamCancelled()
            cancel.raise_if_cancelled()
            on_event(TextDelta(chunk))
        return self._response(turn, request)

    def stream_soon(self, request: ModelRequest, on_event: StreamCallback, cancel: CancelToken,
                    done: CallDone) -> bool:
        """:meth:`stream` without a thread (``providers.base.ClockStreaming``): the latency
        and the pauses between chunks are timers on the clock; ``done`` gets the reply or
        the error. False (nothing done) for a subclass that overrides :meth:`stream`: its
        own code must run."""
        if type(self).stream is not ScriptedProvider.stream:
            return False
        turn = self._next_turn(request)
        chunks = turn_chunks(turn)

        def later(delay_s: float, then: Callable[[], None]) -> None:
            handle = self._need_clock().call_later(delay_s, then)
            cancel.on_cancel(handle.cancel)

        def send(i: int) -> None:
            # chunk i is due now; the next ones follow at once or after delta_interval_s
            while i < len(chunks):
                if cancel.cancelled:
                    return
                on_event(TextDelta(chunks[i]))
                i += 1
                if i < len(chunks) and turn.delta_interval_s > 0:
                    later(turn.delta_interval_s, functools.partial(send, i))
                    return
            if not cancel.cancelled:
                done(self._response(turn, request), None)

        def serve() -> None:
            if cancel.cancelled:
                return
            try:
                self._open(turn, request, cancel)
            except StreamCancelled:
                return
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, as stream() raises it
                done(None, exc)
                return
            send(0)

        if turn.latency_s > 0:
            later(turn.latency_s, serve)
        else:
            serve()
        return True

    def _need_clock(self) -> Clock:
        if self.clock is None:
            raise RuntimeError("ScriptedProvider needs a clock for latency")
        return self.clock

    def _open(self, turn: ScriptedTurn, request: ModelRequest, cancel: CancelToken) -> None:
        """The scripted turn once its latency has passed: raises its error or exit (or a
        :class:`ScriptError`); returns when its reply may stream."""
        cancel.raise_if_cancelled()
        if turn.tool_calls and not request.tools:
            error = self._no_tools_error(turn, request)
            with self._lock:
                self.script_errors.append(error)
            raise error
        if turn.error is not None:
            raise turn.error
        if turn.exit_code is not None:
            raise SessionExit(turn.exit_code)

    @staticmethod
    def _response(turn: ScriptedTurn, request: ModelRequest) -> ModelResponse:
        usage = turn.usage
        if usage == Usage():
            usage = Usage(input_tokens=sum(len(m.content) for m in request.messages) // 4,
                          output_tokens=len(turn.text) // 4)
        return ModelResponse(text=turn.text, tool_calls=turn.tool_calls, stop_reason=turn.stop_reason,
                             usage=usage, cost_usd=turn.cost_usd, model=request.model)

    def _no_tools_error(self, turn: ScriptedTurn, request: ModelRequest) -> ScriptError:
        loop = self.loop_kind or "conversation"
        names = ", ".join(repr(call.name) for call in turn.tool_calls)
        why = ("which runs no tools" if loop == "conversation" else
               "which offered none to this session (a council deliberation role, or an agent whose "
               "tool permissions leave none)")
        return ScriptError(
            f"session {request.session_id or '?'}: the scripted turn calls {names}, but the session's loop is "
            f"the {loop!r} loop, {why}; the call would be dropped. Script a reply without tool calls, or give "
            f"the {self.name!r} provider a loop with tools: sim_runtime(loop_for_provider={{{self.name!r}: 'direct'}})")

    def health(self) -> bool:
        """Answers from ``health_results`` (a bool, or a list consumed in order)."""
        with self._lock:
            self.health_probes += 1
            results = self.health_results
            if isinstance(results, list):
                if not results:
                    return True
                value = results[0]
                if len(results) > 1:
                    results.pop(0)
                return value
            return results

    def model_info(self, model: str) -> ModelInfo:
        """A ``ModelInfo`` with this provider's ``context_window`` for any model name."""
        return ModelInfo(name=model, context_window=self.context_window)

    def _next_turn(self, request: ModelRequest) -> ScriptedTurn:
        turn = self._scripted_turn(request)
        if turn is None and self.responder is not None:
            turn = self.responder(request)
        turn = turn or ScriptedTurn(text=self.default_reply)
        if any(not call.id for call in turn.tool_calls):
            n = len(self.requests)
            turn = replace(turn, tool_calls=tuple(
                call if call.id else replace(call, id=f"call_{n}_{i}") for i, call in enumerate(turn.tool_calls)))
        return turn

    def _scripted_turn(self, request: ModelRequest) -> ScriptedTurn | None:
        last_user = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
        with self._lock:
            self.requests.append(request)
            script = self._scripts.get(request.session_id) if request.session_id else None
            # a start failure at the head waits for the next start: calls do not consume it
            if script and script[0].start_failure is None:
                return script.popleft()
            for i, turn in enumerate(self._turns):
                if turn.match is None or turn.match in last_user:
                    return self._turns.pop(i)
        return None
