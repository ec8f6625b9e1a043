"""The blocking work a session actor hands to its worker threads, and what it reports.

Each function returns the body of one worker run: it takes the run's
:class:`CancelToken`, blocks (a model stream, a tool), and returns the loop input the
actor feeds back (or :class:`ExitRequested`). Runs on a worker thread; touches no actor
state — what it must publish mid-run (streamed text) goes through the callback it is
given.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from loguru import logger
from opentelemetry.trace import INVALID_SPAN, Span

from corvid_actors.core.vocabulary import CancelToken, StreamCancelled, ToolResult
from corvid_actors.loop import effects as fx
from corvid_actors.loop.payload_guard import request_size
from corvid_actors.providers.base import (
    AsyncStreaming,
    ErrorKind,
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderError,
    SessionExit,
    StreamEvent,
    ToolCall,
)
from corvid_actors.telemetry.tracing import ModelCallSpan, activated, note_tool_result
from corvid_actors.tools.base import Tool, ToolContext


@dataclass(frozen=True)
class ExitRequested:
    """A worker's outcome that bypasses the loop: the provider asked to end (SessionExit)."""

    code: int


Work = Callable[[CancelToken], "fx.LoopInput | ExitRequested"]


def request_bytes(request: ModelRequest) -> int:
    """The size of ``request`` as sent: one measure for the actor and the loop's
    payload-growth failsafe."""
    return request_size(request)


def model_call(
    provider: Provider, request: ModelRequest, on_event: Callable[[StreamEvent], None], session_id: str,
    span: ModelCallSpan | None = None,
) -> Work:
    """One model call: its reply (``ModelSucceeded``), a classified failure
    (``ModelFailed``; an unclassified provider bug is fatal, not a hang), or the
    provider's request to end the session. ``span``: the call's (ended with its outcome;
    the current span while it streams)."""

    def call(cancel: CancelToken) -> fx.LoopInput | ExitRequested:
        try:
            with activated(span.span if span is not None else None):
                response = provider.stream(request, on_event, cancel)
        except BaseException as exc:
            if span is not None:
                span.finish(None, exc)
            if isinstance(exc, StreamCancelled) or not isinstance(exc, Exception):
                raise
            return model_outcome(None, exc, request, session_id)
        if span is not None:
            span.finish(response, None)
        return model_outcome(response, None, request, session_id)

    return call


def async_model_call(provider: AsyncStreaming, request: ModelRequest, on_event: Callable[[StreamEvent], None],
                     cancel: CancelToken) -> Callable[[], Awaitable[ModelResponse]]:
    """One model call as a coroutine factory for the runtime's I/O loop; its outcome goes
    through :func:`model_outcome` (on the loop thread) like a worker's."""
    return lambda: provider.astream(request, on_event, cancel)


def model_outcome(response: ModelResponse | None, error: BaseException | None, request: ModelRequest,
                  session_id: str) -> fx.LoopInput | ExitRequested:
    """What the loop is told about a finished model call: its reply (``ModelSucceeded``),
    a classified failure (``ModelFailed``; an unclassified provider bug is fatal, not a
    hang), or the provider's request to end the session (``ExitRequested``). Any thread."""
    if error is None and response is not None:
        return fx.ModelSucceeded(response, request_bytes=request_bytes(request))
    if isinstance(error, ProviderError):
        return fx.ModelFailed(error)
    if isinstance(error, SessionExit):
        return ExitRequested(error.code)
    logger.bind(session_id=session_id).opt(exception=error).error("provider raised an unclassified error")
    return fx.ModelFailed(ProviderError(ErrorKind.FATAL, f"{type(error).__name__}: {error}"))


def tool_run(tool: Tool | None, context: ToolContext, call: ToolCall,
             span: AbstractContextManager[Span] | None = None) -> Work:
    """One tool run; a tool that raises gives an error result the model sees. ``span``:
    the run's span (``TurnTrace.tool_call``), entered on the worker around the run."""

    def run(cancel: CancelToken) -> fx.LoopInput | ExitRequested:
        with span if span is not None else nullcontext(INVALID_SPAN) as current:
            if tool is None:
                result = ToolResult(f"Unknown tool: {call.name}", is_error=True)
            else:
                try:
                    result = tool.handler(dict(call.arguments), replace(context, cancel=cancel))
                except Exception as exc:  # noqa: BLE001 - a tool bug becomes a result the model sees
                    result = ToolResult(f"Tool execution error: {type(exc).__name__}: {exc}", is_error=True)
            note_tool_result(current, result.is_error)
        return fx.ToolFinished(call.id, result)

    return run


def write_snapshot(directory: Path | None, session_id: str, now: datetime, content: str) -> Path | None:
    """The payload-growth failsafe's diagnostic snapshot → a file in ``directory``; its
    path, or None when none was written (no directory configured, or an OS error: logged)."""
    log = logger.bind(session_id=session_id)
    if directory is None:
        log.warning("payload-growth snapshot not written: no snapshot directory configured")
        return None
    path = directory / f"payload-{session_id}-{now.strftime('%Y%m%dT%H%M%S%fZ')}.json"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    except OSError as exc:
        log.warning("payload-growth snapshot not written to {}: {}", path, exc)
        return None
    log.warning("payload-growth snapshot written to {}", path)
    return path
