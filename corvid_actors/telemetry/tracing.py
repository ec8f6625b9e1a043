"""OpenTelemetry traces of turns, model calls, tool calls and the supervisor's decisions.

:class:`Tracing` is the runtime's tracer (from the ``TracerProvider`` given to the
``Runtime``, else the global one) and the ``[telemetry]`` switch ``capture_content``. It
makes:

- a span per turn (``corvid.turn``: session id, agent, source, turn number, termination
  reason), kept by the session actor in a :class:`TurnTrace` across the turn's messages;
- a child span per model call (``chat {model}``) with the OpenTelemetry GenAI semantic
  conventions (``gen_ai.operation.name``, ``gen_ai.provider.name``,
  ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` / ``output_tokens``,
  ``gen_ai.response.finish_reasons``; the prompt and reply only with ``capture_content``);
- a child span per tool call (``execute_tool {name}``: tool name, approval outcome,
  whether it ran in the OS sandbox, exit status, duration on the runtime's clock);
- a span per lifecycle decision of the supervisor (``corvid.session.{decision}``: start,
  crash, restart with its backoff, outage pause and resume, takeover).

A turn spans several actor messages and its calls run on worker threads: the session
actor passes the turn's span explicitly (``parent``) and the worker makes the call's span
the current one (:func:`activated`), so what runs beneath it (the sandbox launcher's
:func:`note_command`, an instrumented HTTP client) lands on it.

With no SDK configured the API's tracer is a no-op: each call costs a few method calls;
attributes are computed only for a span that records (``is_recording``). Spans take the
SDK's clock (real time, also in simulations). Any thread unless said otherwise.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from corvid_actors.errors import ConfigError

#: the instrumentation scope of every span of the runtime
TRACER_NAME = "corvid_actors"

#: the approval outcome of a tool call that needed none (the permission check allowed it)
APPROVAL_NOT_REQUIRED = "not_required"

_Attributes = Mapping[str, str | bool | int | float]


class Tracing:
    """The runtime's tracer and content switch (see the module docstring).

    ``provider``: the ``TracerProvider`` spans go to (None: the global one, a no-op until
    an SDK sets it; the daemon's is :func:`tracer_provider_from_environment`). ``capture_content``:
    prompt and reply text go into model-call spans (``[telemetry] capture_content``; off
    by default: they may hold what users would not want in a trace backend).
    ``monotonic``: the runtime's clock, which times tool runs (None: untimed)."""

    def __init__(self, provider: TracerProvider | None = None, *, capture_content: bool = False,
                 monotonic: Callable[[], float] | None = None) -> None:
        source = provider if provider is not None else trace.get_tracer_provider()
        self.tracer = source.get_tracer(TRACER_NAME)
        self.capture_content = capture_content
        self._monotonic = monotonic

    def start_turn(self, *, session_id: str, agent: str, source: str, turn: int, generation: int) -> Span:
        """The span of one turn (ended by :meth:`TurnTrace.end`). Actor thread."""
        span = self.tracer.start_span("corvid.turn", kind=SpanKind.INTERNAL)
        if span.is_recording():
            span.set_attributes({"corvid.session.id": session_id, "corvid.agent.name": agent,
                                 "corvid.session.source": source, "corvid.turn.number": turn,
                                 "corvid.session.generation": generation})
        return span

    def start_model_call(self, parent: Span | None, request: Any, provider_name: str) -> ModelCallSpan:
        """The span of one model call, a child of ``parent`` (the turn's), started as the
        call is made (actor thread); its :meth:`ModelCallSpan.finish` ends it where the
        outcome is known (a worker, the I/O loop, the clock's thread)."""
        model = getattr(request, "model", "") or ""
        span = self.tracer.start_span(f"chat {model}".rstrip(), context=_under(parent), kind=SpanKind.CLIENT)
        if span.is_recording():
            span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider_name,
                                 "gen_ai.request.model": model,
                                 "corvid.session.id": getattr(request, "session_id", "") or ""})
            max_tokens = getattr(request, "max_tokens", None)
            if max_tokens:
                span.set_attribute("gen_ai.request.max_tokens", max_tokens)
            if self.capture_content:
                span.set_attribute("gen_ai.system_instructions", getattr(request, "system", "") or "")
                span.set_attribute("gen_ai.input.messages", _messages_json(getattr(request, "messages", ())))
        return ModelCallSpan(span, self.capture_content)

    @contextmanager
    def tool_call(self, parent: Span | None, name: str, call_id: str, approval: str) -> Iterator[Span]:
        """The span of one tool run, a child of ``parent``, current while the body runs
        (worker thread): :func:`note_command` and :func:`note_tool_result` fill it in."""
        span = self.tracer.start_span(f"execute_tool {name}", context=_under(parent), kind=SpanKind.INTERNAL)
        if span.is_recording():
            span.set_attributes({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                                 "gen_ai.tool.call.id": call_id, "corvid.tool.approval": approval})
        if not _carries(span):  # the no-op tracer: nothing to time or make current
            yield span
            return
        monotonic = self._monotonic if span.is_recording() else None
        started = monotonic() if monotonic is not None else 0.0
        with trace.use_span(span, end_on_exit=False, record_exception=True, set_status_on_exception=True):
            try:
                yield span
            finally:
                if monotonic is not None:  # on the runtime's clock: simulated seconds in a simulation
                    span.set_attribute("corvid.tool.duration_s", monotonic() - started)
                span.end()

    def denied_tool(self, parent: Span | None, name: str, call_id: str) -> None:
        """A tool call that did not run (its approval was denied): a span saying so."""
        span = self.tracer.start_span(f"execute_tool {name}", context=_under(parent), kind=SpanKind.INTERNAL)
        if span.is_recording():
            span.set_attributes({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                                 "gen_ai.tool.call.id": call_id, "corvid.tool.approval": "deny",
                                 "corvid.tool.status": "not_run"})
        span.end()

    def decision(self, name: str, session_id: str, attributes: _Attributes | None = None) -> None:
        """A lifecycle decision of the supervisor (``start``, ``crash``, ``restart``,
        ``pause``, ``resume``, ``takeover``) as a span of its own — a root: no turn
        parents it. Supervisor thread."""
        span = self.tracer.start_span(f"corvid.session.{name}", kind=SpanKind.INTERNAL)
        if span.is_recording():
            span.set_attribute("corvid.session.id", session_id)
            if attributes:
                span.set_attributes(attributes)
        span.end()


class ModelCallSpan:
    """The span of one model call in flight: :meth:`finish` ends it (once; any thread),
    :meth:`activated` makes it current on the thread that streams (a worker)."""

    def __init__(self, span: Span, capture_content: bool) -> None:
        self.span = span
        self._capture_content = capture_content
        self._finished = False

    def finish(self, response: Any, error: BaseException | None) -> None:
        """End the span with the reply's usage and finish reason, or the call's error (a
        cancelled call: ``error`` is the cancellation)."""
        if self._finished:
            return
        self._finished = True
        span = self.span
        if span.is_recording():
            if response is not None:
                usage = getattr(response, "usage", None)
                attributes: dict[str, Any] = {
                    "gen_ai.response.finish_reasons": (getattr(response, "stop_reason", "") or "",)}
                if getattr(response, "model", ""):
                    attributes["gen_ai.response.model"] = response.model
                if usage is not None:
                    attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
                    attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
                if self._capture_content:
                    attributes["gen_ai.output.messages"] = json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": response.text or ""}]}])
                span.set_attributes(attributes)
            if error is not None:
                _failed(span, error)
        span.end()

    def activated(self) -> AbstractContextManager[None]:
        """The span is the current one while the body runs (on this thread)."""
        return activated(self.span)


class TurnTrace:
    """The span of the turn in flight, kept by the session actor across its messages.

    :meth:`start` when a turn starts, :meth:`end` when it ends (its result's subtype, or
    why the incarnation ended mid-turn); :attr:`span` parents the turn's model and tool
    calls. Actor thread only."""

    def __init__(self, tracing: Tracing, *, session_id: str, agent: str, source: str, generation: int) -> None:
        self.tracing = tracing
        self._ids = (session_id, agent, source, generation)
        self.span: Span | None = None
        #: call id → approval outcome of the turn's tool calls that asked for one
        self._approvals: dict[str, str] = {}
        #: call id → tool name of the approvals asked and not yet answered
        self._asked: dict[str, str] = {}

    def start(self, turn: int) -> None:
        """A turn starts (number ``turn`` of the session); one still open ends first."""
        self.end("superseded")
        session_id, agent, source, generation = self._ids
        self.span = self.tracing.start_turn(session_id=session_id, agent=agent, source=source, turn=turn,
                                            generation=generation)

    def end(self, reason: str) -> None:
        """The turn ends for ``reason`` (a result's subtype — ``success``,
        ``error_max_turns``, ``interrupted`` … — or ``outage``, ``crashed``, ``aborted``,
        ``exited``); nothing when no turn is open."""
        span, self.span = self.span, None
        self._approvals.clear()
        self._asked.clear()
        if span is None:
            return
        if span.is_recording():
            span.set_attribute("corvid.turn.termination_reason", reason)
            if reason.startswith("error") or reason in ("crashed", "outage"):
                span.set_status(Status(StatusCode.ERROR, reason))
        span.end()

    def asked(self, call_id: str, tool_name: str) -> None:
        """The turn asks approval for a tool call."""
        self._asked[call_id] = tool_name

    def decided(self, call_id: str, allowed: bool) -> None:
        """Its answer: the run that follows is marked ``allow``; a denied call, which does
        not run, gets a span of its own (``corvid.tool.status`` ``not_run``)."""
        name = self._asked.pop(call_id, "")
        if allowed:
            self._approvals[call_id] = "allow"
        else:
            self.tracing.denied_tool(self.span, name, call_id)

    def tool_call(self, name: str, call_id: str) -> AbstractContextManager[Span]:
        """The span of a tool run of this turn (see :meth:`Tracing.tool_call`), made when
        the body enters it (on the worker)."""
        approval = self._approvals.pop(call_id, APPROVAL_NOT_REQUIRED)
        return self.tracing.tool_call(self.span, name, call_id, approval)

    def model_call(self, request: Any, provider_name: str) -> ModelCallSpan:
        """The span of a model call of this turn, started now."""
        return self.tracing.start_model_call(self.span, request, provider_name)


@contextmanager
def activated(span: Span | None) -> Iterator[None]:
    """``span`` is the current span while the body runs (on this thread): spans started
    beneath it (an instrumented HTTP client) and :func:`note_command` land on it."""
    if span is None or not _carries(span):
        yield
        return
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        otel_context.detach(token)


def note_command(exit_code: int | None, *, sandboxed: bool, ended_by: str = "") -> None:
    """A command ran (``run_command``, in the OS sandbox or not): its exit status on the
    current span — the tool call's, when it runs under one. Worker thread."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute("corvid.tool.sandboxed", sandboxed)
        if exit_code is not None:
            span.set_attribute("process.exit.code", exit_code)
        if ended_by:
            span.set_attribute("corvid.tool.ended_by", ended_by)


def note_tool_result(span: Span, is_error: bool) -> None:
    """The tool's result on its span: ``corvid.tool.status`` ``ok`` or ``error``."""
    if span.is_recording():
        span.set_attribute("corvid.tool.status", "error" if is_error else "ok")
        if is_error:
            span.set_status(Status(StatusCode.ERROR, "the tool returned an error"))


def tracer_provider_from_environment() -> TracerProvider | None:
    """An SDK ``TracerProvider`` that exports as the standard ``OTEL_*`` variables say, or
    None when they ask for no traces (the daemon then runs on the API's no-op tracer).

    Traces are on when ``OTEL_TRACES_EXPORTER`` names exporters (``otlp``, ``console``;
    ``none``: off) or, with it unset, when an OTLP endpoint is set
    (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``);
    ``OTEL_SDK_DISABLED=true`` turns them off. OTLP speaks ``OTEL_EXPORTER_OTLP_PROTOCOL``
    (``http/protobuf`` by default, or ``grpc``); endpoint, headers, service name
    (default ``corvid-actors``) and resource come from their ``OTEL_*`` variables, read by
    the SDK. Needs the ``otel`` extra: :class:`~corvid_actors.errors.ConfigError` names it
    when traces are asked for without it. Call it in the process that serves (after a fork)."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if not names:
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        names = ["otlp"] if endpoint else []
    names = [n for n in names if n != "none"]
    if not names:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ConfigError(_NEEDS_EXTRA.format(what="the OpenTelemetry SDK")) from None
    named = "OTEL_SERVICE_NAME" in env or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = SdkTracerProvider(resource=Resource.create({} if named else {"service.name": "corvid-actors"}))
    for name in names:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name, env)))
    return provider


def _exporter(name: str, env: Mapping[str, str]) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        raise ConfigError(f"OTEL_TRACES_EXPORTER names {name!r}: corvid-actors knows otlp, console and none")
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ConfigError(_NEEDS_EXTRA.format(what=f"the OTLP exporter ({protocol})")) from None
    return OTLPSpanExporter()


_NEEDS_EXTRA = ("the OTEL_* environment asks for traces but {what} is not installed: "
                "pip install 'corvid-actors[otel]' (or unset OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT)")


NO_TRACING = Tracing(trace.NoOpTracerProvider())
"""A Tracing that records nothing (the default of wiring made without a runtime)."""


def _under(parent: Span | None) -> otel_context.Context | None:
    """The context ``parent`` heads (None: no parent, or a no-op span — nothing to carry)."""
    return trace.set_span_in_context(parent) if parent is not None and _carries(parent) else None


def _carries(span: Span | None) -> bool:
    """``span`` has a real context to pass on: not None, nor the no-op tracer's (whose
    context is invalid: attaching it costs a context switch and carries nothing)."""
    return span is not None and span.get_span_context().is_valid


def _failed(span: Span, error: BaseException) -> None:
    kind = getattr(getattr(error, "kind", None), "value", None)
    span.set_attribute("error.type", kind if isinstance(kind, str) else type(error).__name__)
    span.set_status(Status(StatusCode.ERROR, str(error)[:200]))


def _messages_json(messages: Any) -> str:
    """The GenAI conventions' input messages (role and text parts) as JSON."""
    return json.dumps([{"role": getattr(m, "role", ""),
                        "parts": [{"type": "text", "content": str(getattr(m, "content", ""))}]}
                       for m in messages or ()])
