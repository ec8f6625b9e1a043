"""The recorded outside world, served back to a runtime under test (issue 40).

:class:`Script` walks a recording's steps — its model calls and tool calls, in the order
the session made them — and checks each request the runtime under test makes against the
recorded one: the first that differs is a :class:`ReplayDivergence` naming the step, what
was recorded and what was asked. :class:`ReplayProvider` answers the model calls with the
recorded responses (chunks, tool calls, usage, errors, latencies in simulated time) and
its health probes with the recorded outcomes; :func:`replay_tools` is the scripted tool
registry that answers the tool calls with the recorded results after their recorded
durations in simulated time (no command runs).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from corvid_actors.clock import Clock
from corvid_actors.core.vocabulary import ToolKind, ToolResult, ToolSpec
from corvid_actors.providers.base import ErrorKind, ModelRequest, ProviderError, ToolCall, Usage
from corvid_actors.testing.scripted import ScriptedProvider, ScriptedTurn
from corvid_actors.tools.base import Tool, ToolRegistry

#: a reply the recording never saw end (the call was stopped): it never comes
NEVER_S = 10.0 * 365 * 86400


class ReplayDivergence(AssertionError):
    """The runtime under test asked the outside world something the recording does not
    have at that step: Temporal's non-determinism error, for agents. ``step`` counts the
    recording's model and tool calls from 1; ``recorded`` and ``asked`` describe both."""

    def __init__(self, step: int, recorded: str, asked: str, hint: str = "", session: str = "") -> None:
        self.step = step
        self.recorded = recorded
        self.asked = asked
        self.session = session
        where = f" of session {session}" if session else ""
        super().__init__(f"replay diverged at step {step}{where}: the recording has {recorded}, "
                         f"but the runtime under test asked {asked}" + (f" ({hint})" if hint else ""))


ReplayDivergence.__module__ = "corvid_actors.testing.replay"  # its public home, as tracebacks name it


def describe_model(step: Mapping[str, Any]) -> str:
    last = step.get("last_user")
    tools = ", ".join(step.get("tools") or ()) or "none"
    return (f"a model call with {step.get('messages')} messages"
            + (f" (last user message {_short(last)})" if last is not None else "")
            + f" offering tools [{tools}]")


def describe_tool(step: Mapping[str, Any]) -> str:
    return f"a {step.get('name')!r} tool call with arguments {step.get('arguments')}"


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


def first_difference(recorded: str, asked: str, context: int = 60) -> str:
    """Where two texts part: ``from character N: recorded '…', asked '…'``."""
    n = next((i for i, (a, b) in enumerate(zip(recorded, asked, strict=False)) if a != b),
             min(len(recorded), len(asked)))
    return (f"they differ from character {n}: recorded {recorded[n:n + context]!r}, "
            f"asked {asked[n:n + context]!r}")


class Script:
    """The recording's steps and the cursor over them; thread-safe. The first divergence
    is kept in :attr:`divergence` (later requests are answered with failures)."""

    def __init__(self, steps: list[dict[str, Any]], *, tolerate: bool = False, content: bool = True,
                 session: str = "") -> None:
        self.steps = steps
        #: the recorded session, named in a divergence when several replay together
        self.session = session
        self.tolerate = tolerate
        self.content = content
        self.position = 0
        self.divergence: ReplayDivergence | None = None
        self._lock = threading.Lock()

    @property
    def unused(self) -> list[dict[str, Any]]:
        with self._lock:
            return self.steps[self.position:]

    def _diverge(self, recorded: str, asked: str, hint: str = "") -> ReplayDivergence:
        error = ReplayDivergence(self.position + 1, recorded, asked, hint, self.session)
        if self.divergence is None:
            self.divergence = error
        return error

    def _step(self, kind: str, asked: str) -> dict[str, Any] | ReplayDivergence:
        # the recorded step a call of ``kind`` meets (under the lock), or the divergence
        if self.divergence is not None:
            return self.divergence
        step = self.steps[self.position] if self.position < len(self.steps) else None
        if step is None:
            return self._diverge("no more calls", asked, "a call the recording does not have")
        if step["kind"] != kind:
            return self._diverge(describe_tool(step) if step["kind"] == "tool" else describe_model(step), asked)
        return step

    def next_model(self, request: ModelRequest) -> dict[str, Any] | ReplayDivergence:
        """The recorded call for ``request``, or the divergence."""
        last_user = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
        asked = describe_model({"messages": len(request.messages), "tools": [t.name for t in request.tools],
                                "last_user": last_user if self.content else None})
        with self._lock:
            step = self._step("model", asked)
            if isinstance(step, ReplayDivergence):
                return step
            recorded = describe_model(step)
            if step["messages"] != len(request.messages):
                return self._diverge(recorded, asked, "a different message count")
            if sorted(step.get("tools") or ()) != sorted(t.name for t in request.tools):
                return self._diverge(recorded, asked, "different tools offered")
            if (not self.tolerate and self.content and step.get("last_user") is not None
                    and step["last_user"] != last_user):
                return self._diverge(recorded, asked, "a different last user message; "
                                     + first_difference(step["last_user"], last_user)
                                     + "; --tolerate accepts prompt-only changes")
            self.position += 1
            return step

    def next_tool(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any] | ReplayDivergence:
        """The recorded tool call for ``name(arguments)``, or the divergence."""
        asked = describe_tool({"name": name, "arguments": dict(arguments)})
        with self._lock:
            step = self._step("tool", asked)
            if isinstance(step, ReplayDivergence):
                return step
            if step["name"] != name:
                return self._diverge(describe_tool(step), asked, "a different tool")
            if self.content and step.get("arguments") is not None and step["arguments"] != dict(arguments):
                return self._diverge(describe_tool(step), asked, "different arguments")
            self.position += 1
            return step


def recorded_turn(step: Mapping[str, Any]) -> ScriptedTurn:
    """The scripted turn that answers as the recorded call was answered, at its times."""
    requested = float(step.get("requested_at") or 0.0)
    ended = float(step.get("ended_at") or requested)
    first = step.get("first_chunk_at")
    if step.get("cancelled"):
        return ScriptedTurn(text="", latency_s=NEVER_S)
    if "error" in step:
        e = step["error"]
        error = ProviderError(ErrorKind(e["kind"]), e.get("message") or "", status=e.get("status"),
                              retry_after_s=e.get("retry_after_s"), error_type=e.get("error_type"))
        return ScriptedTurn(error=error, latency_s=max(ended - requested, 0.0))
    if "exit" in step:
        return ScriptedTurn(exit_code=int(step["exit"]), latency_s=max(ended - requested, 0.0))
    text = step.get("text")
    if text is None:  # recorded without content: a stand-in of the same length
        text = "x" * int(step.get("chars") or 0)
    sizes = [int(size) for size, times in step.get("chunks") or () for _ in range(int(times))]
    chunks: list[str] = []
    at = 0
    for size in sizes:
        chunks.append(text[at:at + size])
        at += size
    if at < len(text):  # text the stream did not carry (a reply given whole)
        chunks.append(text[at:])
    chunks = [c for c in chunks if c]
    latency = max((float(first) if first is not None else ended) - requested, 0.0)
    interval = (max(ended - float(first), 0.0) / (len(chunks) - 1)) if first is not None and len(chunks) > 1 else 0.0
    calls = tuple(ToolCall(c[0], c[1], dict(c[2] or {})) for c in step.get("tool_calls") or ())
    usage = step.get("usage") or {}
    return ScriptedTurn(text=text, chunks=tuple(chunks), latency_s=latency, delta_interval_s=interval,
                        tool_calls=calls, usage=Usage(**usage) if usage else Usage(),
                        cost_usd=float(step.get("cost_usd") or 0.0), stop_reason=step.get("stop_reason") or "end_turn")


class ReplayProvider(ScriptedProvider):
    """A scripted provider answering each session from its :class:`Script` (``scripts``:
    session id → script), named as the recorded provider."""

    def __init__(self, clock: Clock, scripts: Mapping[str, Script], *, name: str = "scripted",
                 context_window: int = 8192) -> None:
        super().__init__(clock, name=name, context_window=context_window)
        self.scripts = scripts

    def answer_probes(self, recordings: Sequence[Any]) -> None:
        """Answer the health probes as the recordings' were answered (in time order across
        them; healthy when none was recorded, and after the last)."""
        probes = sorted((float(p["t"]), bool(p["healthy"])) for rec in recordings for p in rec.of("probe"))
        with self._lock:
            self.health_results = [healthy for _t, healthy in probes] + [True] if probes else True

    def _next_turn(self, request: ModelRequest) -> ScriptedTurn:
        with self._lock:
            self.requests.append(request)
        script = self.scripts.get(request.session_id)
        if script is None:
            return ScriptedTurn(error=ProviderError(ErrorKind.FATAL, f"no recording for session {request.session_id}"))
        step = script.next_model(request)
        if isinstance(step, ReplayDivergence):
            return ScriptedTurn(error=ProviderError(ErrorKind.FATAL, str(step)))
        return recorded_turn(step)


def replay_tools(tools: list[Mapping[str, Any]], scripts: Mapping[str, Script], clock: Clock | None = None) -> ToolRegistry:
    """The recorded sessions' tools, each answering a session (``scripts``: session id →
    script) with its recorded result, after its recorded duration on ``clock`` (None: at
    once). A call the recording saw cancelled (its actor crashed meanwhile) never answers."""

    def handler_for(name: str) -> Any:
        def handler(arguments: dict[str, Any], context: Any) -> ToolResult:
            script = scripts.get(getattr(context, "session_id", ""))
            if script is None:
                return ToolResult(f"no recording for session {getattr(context, 'session_id', '')}", is_error=True)
            step = script.next_tool(name, arguments)
            if isinstance(step, ReplayDivergence):
                return ToolResult(str(step), is_error=True)
            duration = NEVER_S if step.get("cancelled") else max(float(step.get("duration_s") or 0.0), 0.0)
            if clock is not None and duration > 0:
                clock.wait(duration, getattr(context, "cancel", None))
            if step.get("cancelled"):
                return ToolResult("cancelled (the recorded session crashed during this call)", is_error=True)
            output = step.get("output")
            if output is None:
                output = "x" * int(step.get("output_chars") or 0)
            return ToolResult(output, is_error=bool(step.get("is_error")))
        return handler

    return ToolRegistry(
        Tool(ToolSpec(t["name"], t.get("description") or "", t.get("parameters") or {"type": "object", "properties": {}}),
             ToolKind(t.get("kind") or "other"), handler_for(t["name"]))
        for t in tools)
