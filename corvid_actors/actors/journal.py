"""The journal: what the outside world said to a session, recorded where the loop meets it.

A :class:`Journal` is the runtime's (``[journal]``; None when nothing is journaled). For
each incarnation of a journaled session it makes a :class:`SessionTap`, which the session
actor calls at its boundaries — a model call as it is made and as its outcome reaches the
loop (text with its streamed chunks' boundaries, tool calls, usage, cost, stop reason, or
the error with its kind and status; request, first chunk and end on the runtime's clock),
a tool call's arguments, the result the loop receives and its duration, an approval's
answer and who gave it, a user message, the actor's crash (a failure of its own, not the
model's: the calls in flight are recorded as cancelled, then the crash: the calls written
before it are its step) — the supervisor tells it each health probe's outcome during an outage,
and the Journal, subscribed to the EventBus, keeps the session's events (type, key fields,
time) for a replay to assert. Entries go to :class:`~corvid_actors.db.journal.JournalStore`
(compressed, batched by its writer); :mod:`corvid_actors.testing.replay` reads them back.

A tap runs on its actor's thread, except :meth:`SessionTap.delta` (the thread streaming the
call: it only appends a length). ``capture_content = false`` keeps shapes and timings: no
prompt, reply, argument or result text.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

from corvid_actors.clock import Clock
from corvid_actors.config import Config, to_dict
from corvid_actors.db.journal import JournalStore
from corvid_actors.events import Event
from corvid_actors.loop import effects as fx
from corvid_actors.providers.base import ModelRequest, ProviderError, ToolCall
from corvid_actors.schema.sections import JournalConfig

#: event types not journaled: streamed text is in the model entries, the rest is chatter
#: a replay need not assert
QUIET_EVENTS = frozenset({"content_block_delta", "content_block_start", "message_stop", "thinking",
                          "context_usage", "queue_status", "credits_low", "retry", "system"})
#: per event type, the fields a replay asserts (besides the type and the time)
KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "session_exited": ("code",), "session_stopped": ("reason",), "session_paused": ("attempt",),
    "session_resumed": ("automatic",), "session_restarting": ("attempt", "delay_s"),
    "error": ("error_type",), "session_error": ("error_type",), "assistant": ("content",),
    "tool_status": ("tool_name", "state"), "result": ("subtype", "num_turns"),
    "approval_request": ("tool_name",), "approval_resolved": ("behavior", "answered_by"),
}
#: fields that hold text (dropped without content capture)
CONTENT_FIELDS = frozenset({"content"})
#: config sections a replay does not need (where the daemon keeps its files, its peers …)
UNREPLAYED_SECTIONS = frozenset({"store", "daemon", "cluster", "webhook", "telemetry", "journal", "mcp"})
#: how often (seconds) a new session's tap checks whether old entries are due for deletion
PURGE_EVERY_S = 3600.0


def tools_hash(specs: Any) -> str:
    """A short digest of the tool specs offered (names, descriptions, parameters)."""
    text = json.dumps([[s.name, s.description, s.parameters] for s in specs], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def config_overrides(config: Config) -> dict[str, dict[str, Any]]:
    """The config keys that differ from the packaged defaults, by section (what a replay
    sets to run the session under the same rules)."""
    mine, defaults = to_dict(config), to_dict(Config())
    out: dict[str, dict[str, Any]] = {}
    for name, section in mine.items():
        if name in UNREPLAYED_SECTIONS:
            continue
        changed = {k: v for k, v in section.items() if defaults.get(name, {}).get(k) != v}
        if changed:
            out[name] = changed
    return out


def run_lengths(sizes: list[int]) -> list[list[int]]:
    """Chunk sizes as ``[[size, times], …]`` (a stream of 30,000 four-character chunks is
    one pair)."""
    out: list[list[int]] = []
    for size in sizes:
        if out and out[-1][0] == size:
            out[-1][1] += 1
        else:
            out.append([size, 1])
    return out


def error_data(error: ProviderError) -> dict[str, Any]:
    return {"kind": error.kind.value, "message": error.message, "status": error.status,
            "retry_after_s": error.retry_after_s, "error_type": error.error_type}


class Journal:
    """The runtime's journal (see the module docstring). Thread-safe."""

    def __init__(self, settings: JournalConfig, store: Any, clock: Clock, config: Config) -> None:
        self.settings = settings
        self.clock = clock
        self.capture = settings.capture_content
        self.entries = JournalStore(store)
        self._overrides = config_overrides(config)
        self._sessions: set[str] = set()
        self._lock = threading.Lock()
        self._next_purge = 0.0

    @classmethod
    def for_config(cls, config: Config, store: Any, clock: Clock) -> Journal | None:
        """The journal ``config`` asks for; None when it journals nothing."""
        settings = config.journal
        if not settings.enabled and not settings.agents:
            return None
        return cls(settings, store, clock, config)

    def wants(self, agent_name: str) -> bool:
        """Is a session of this agent journaled?"""
        return self.settings.enabled or agent_name in self.settings.agents

    def now(self) -> float:
        return self.clock.now().timestamp()

    def write(self, session_id: str, kind: str, data: dict[str, Any], at: float | None = None) -> None:
        self.entries.append(session_id, self.now() if at is None else at, kind, data)

    def tap(self, session_id: str, generation: int, agent: Any, built: Any, source: str) -> SessionTap | None:
        """The tap of a new incarnation (its ``start`` entry written), or None when the
        session's agent is not journaled."""
        name = getattr(agent, "name", "") or ""
        if not self.wants(name):
            return None
        with self._lock:
            self._sessions.add(session_id)
        self._purge_if_due()
        tools = [{"name": t.spec.name, "description": t.spec.description if self.capture else "",
                  "parameters": t.spec.parameters if self.capture else {}, "kind": t.kind.value}
                 for t in built.tools]
        agent_data = {"name": name, "kind": getattr(agent, "kind", None),
                      "permission_mode": getattr(agent, "permission_mode", None),
                      "model": getattr(agent, "model", None), "provider": getattr(agent, "provider", None)}
        if self.capture:
            agent_data["system_prompt"] = getattr(agent, "system_prompt", "") or ""
        self.write(session_id, "start", {
            "generation": generation, "provider": built.provider_name, "model": built.model,
            "loop": built.loop_kind, "source": source, "agent": agent_data, "tools": tools,
            "tools_hash": tools_hash(built.tools.specs()), "capture_content": self.capture,
            "config": self._overrides})
        return SessionTap(self, session_id, generation)

    def probe(self, session_id: str, healthy: bool) -> None:
        """A paused session's health probe answered (the supervisor's thread): a replay
        answers its probes so, and its outage lasts as long."""
        if session_id in self._sessions:
            self.write(session_id, "probe", {"healthy": healthy})

    def on_event(self, session_id: str, event: Event) -> None:
        """The EventBus's subscriber: a journaled session's event, summarised."""
        kind = event.type
        if kind in QUIET_EVENTS or session_id not in self._sessions:
            return
        data: dict[str, Any] = {"type": kind}
        for name in KEY_FIELDS.get(kind, ()):
            if name in CONTENT_FIELDS and not self.capture:
                continue
            data[name] = getattr(event, name, None)
        self.write(session_id, "event", data)
        if kind == "session_stopped" or (kind == "session_exited" and not data.get("code")):
            # nothing follows but a new start, whose tap adds it again (after a crash or a
            # pause the restart or resume events follow: it stays)
            with self._lock:
                self._sessions.discard(session_id)

    def _purge_if_due(self) -> None:
        keep_s = self.settings.keep_days * 86400.0
        now = self.now()
        if keep_s <= 0 or now < self._next_purge:
            return
        self._next_purge = now + PURGE_EVERY_S
        self.entries.flush()  # entries still queued are purged too (simulated days pass in microseconds)
        self.entries.purge(now - keep_s)

    def close(self) -> None:
        self.entries.close()


class SessionTap:
    """One incarnation's journal calls (see the module docstring)."""

    def __init__(self, journal: Journal, session_id: str, generation: int) -> None:
        self.j = journal
        self.sid = session_id
        self.gen = generation
        self._call: dict[str, Any] | None = None
        self._deltas: list[int] = []
        self._first: float | None = None
        self._tools: dict[str, tuple[float, ToolCall]] = {}

    def _text(self, text: str) -> str | None:
        return text if self.j.capture else None

    def user(self, text: str, first: bool) -> None:
        """A user message reached the loop (``first``: the prompt the incarnation began with)."""
        self.j.write(self.sid, "user", {"text": self._text(text), "chars": len(text), "begin": first,
                                        "generation": self.gen})

    def model_request(self, request: ModelRequest, purpose: str) -> list[int]:
        """A model call is made; returns the list the caller appends each streamed chunk's
        size to (on the thread streaming the call; :meth:`first_chunk` before the first)."""
        if self._call is not None:  # the previous call never reached the loop (stopped)
            self._finish({"cancelled": True})
        last_user = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
        self._call = {"purpose": purpose, "model": request.model, "messages": len(request.messages),
                      "roles": "".join(m.role[0] for m in request.messages),
                      "tools": [t.name for t in request.tools], "tools_hash": tools_hash(request.tools),
                      "last_user": self._text(last_user), "system_hash": hashlib.sha256(
                          request.system.encode("utf-8")).hexdigest()[:16],
                      "requested_at": self.j.now(), "generation": self.gen}
        self._deltas = []
        self._first = None
        return self._deltas

    def first_chunk(self) -> None:
        """The call's first chunk arrives (any thread: the one streaming the call)."""
        self._first = self.j.now()

    def outcome(self, result: Any) -> None:
        """What a worker reported, as the loop is about to receive it."""
        if isinstance(result, fx.ToolFinished):
            started, call = self._tools.pop(result.call_id, (self.j.now(), ToolCall(result.call_id, "?", {})))
            now = self.j.now()
            self.j.write(self.sid, "tool", {
                "id": call.id, "name": call.name,
                "arguments": call.arguments if self.j.capture else {k: None for k in call.arguments},
                "output": self._text(result.result.output), "output_chars": len(result.result.output),
                "is_error": result.result.is_error, "duration_s": now - started, "generation": self.gen})
            return
        if self._call is None:
            return
        if isinstance(result, fx.ModelSucceeded):
            r = result.response
            self._finish({"text": self._text(r.text), "chars": len(r.text),
                          "tool_calls": [[c.id, c.name, c.arguments if self.j.capture else {}]
                                         for c in r.tool_calls],
                          "stop_reason": r.stop_reason, "cost_usd": r.cost_usd,
                          "usage": {"input_tokens": r.usage.input_tokens, "output_tokens": r.usage.output_tokens}})
        elif isinstance(result, fx.ModelFailed):
            self._finish({"error": error_data(result.error)})
        elif hasattr(result, "code"):  # ExitRequested: the provider ended the incarnation
            self._finish({"exit": result.code})

    def _finish(self, outcome: dict[str, Any]) -> None:
        call, self._call = self._call, None
        if call is None:
            return
        now = self.j.now()
        call.update(outcome, chunks=run_lengths(self._deltas), first_chunk_at=self._first, ended_at=now)
        self.j.write(self.sid, "model", call, at=call["requested_at"])

    def tool_started(self, call: ToolCall) -> None:
        self._tools[call.id] = (self.j.now(), call)

    def approval(self, call_id: str, allowed: bool, text: str, scope: str, *, asked: bool,
                 answered_by: str = "") -> None:
        """An approval's answer reached the loop (``asked``: a human was asked, not a policy;
        ``answered_by``: who answered — ``admin:<user>``, ``http:<token>``, ``chat:<user>``,
        ``library`` —, empty for the runtime's own answers: a timeout, a stop)."""
        self.j.write(self.sid, "approval", {"call_id": call_id, "allowed": allowed, "message": self._text(text),
                                            "scope": scope, "asked": asked, "answered_by": answered_by,
                                            "generation": self.gen})

    def crash(self, error: str) -> None:
        """The incarnation's actor failed (its own bug, not the model's; on its thread, in
        ``on_failure``): the calls in flight never reach the loop — they are recorded as
        cancelled, as a replay must start them too —, then the crash (the model and tool
        entries before it count the step a replay crashes after)."""
        if self._call is not None:
            self._finish({"cancelled": True})
        now = self.j.now()
        for call_id, (started, call) in list(self._tools.items()):
            self.j.write(self.sid, "tool", {
                "id": call_id, "name": call.name,
                "arguments": call.arguments if self.j.capture else {k: None for k in call.arguments},
                "cancelled": True, "duration_s": now - started, "generation": self.gen}, at=started)
        self._tools.clear()
        self.j.write(self.sid, "crash", {"error": self._text(error), "generation": self.gen})
