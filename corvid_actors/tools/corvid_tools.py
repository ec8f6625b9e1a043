"""The runtime's own tools, served to sessions through the same tool layer as any tool.

- ``corvid_list_agents()``: the agents a session may message.
- ``corvid_send_message(to_agent, message, thread?, share_project?)``: to another agent
  by id or case-insensitive name; starts or resumes the recipient's session (source
  ``agent``, depth + 1, the restricted tool policy of ``wiring.AGENT_RESTRICTED_TOOLS``)
  and returns its reply. No self-send; a session deeper than
  ``corvid_tools.max_agent_depth`` (MAX_INVOKE_DEPTH = 3) may not send, so a chain
  A→B→C→D→E stops at D.

The delegation rule: a recipient never has more permission than its sender (its mode is
bounded by its sender's, :mod:`corvid_actors.tools.delegation`). It works in its own
agent's default project (no project: the runtime's workspace), never in the sender's —
unless the call passes ``share_project: true``, which the approval shows. The approval of
a send names the recipient and shows the message (:func:`describe_send_message`).
- ``corvid_extend_timeout(minutes)``: 1–120 minutes, capped as the supervisor caps it.
- ``corvid_check_credits(wallet_address?)``: the CreditBank's balance, when there is one.

Their kind is ``OTHER``: permission modes and approvals treat them like any tool, and
the permission chain (agent list → agent bundles → project bundles) decides which ones
a session gets. :class:`CorvidTools` is an ``extra_tools`` hook; the runtime composes it
with the MCP servers and a host's own hook (``corvid_actors.runtime.session_control``, the seed's
``setMcpServices``).

The tools see the runtime only through the narrow
:class:`~corvid_actors.tools.session_control.SessionControl` protocol. Handlers run on a
session's worker thread — never an actor — so ``corvid_send_message`` may block on it: it
waits for the recipient's ``result`` on the runtime's clock, bounded by
``agent_reply_timeout_s`` (simulated time in simulations).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from corvid_actors.clock import Cancellable
from corvid_actors.core.vocabulary import CancelToken, ToolKind, ToolResult, ToolSpec
from corvid_actors.errors import CorvidError
from corvid_actors.events import Assistant, ErrorEvent, Event, Result
from corvid_actors.schema.tool_sections import CorvidToolsConfig
from corvid_actors.tools.base import Tool, ToolContext, ToolRegistry
from corvid_actors.tools.session_control import AgentInfo, SessionControl

#: the names of the runtime's own tools
CORVID_TOOL_NAMES = ("corvid_list_agents", "corvid_send_message", "corvid_extend_timeout", "corvid_check_credits")
#: the source of a session started by an agent's message
AGENT_SOURCE = "agent"
#: events after which a recipient will not answer this message
_GIVE_UP_EVENTS = frozenset({"session_exited", "session_stopped", "session_paused"})

_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "corvid_list_agents": (
        "List the agents you can message with corvid_send_message: name, id and description.",
        {"type": "object", "properties": {}},
    ),
    "corvid_send_message": (
        "Send a message to another agent (by name or id) and wait for its reply, which this "
        "tool returns. Use `thread` to keep separate conversations with the same agent.",
        {"type": "object", "properties": {
            "to_agent": {"type": "string", "description": "The recipient agent's name or id"},
            "message": {"type": "string", "description": "What to tell or ask the agent"},
            "thread": {"type": "string", "description": "Optional conversation key"},
            "share_project": {"type": "boolean", "description": "Let the agent work in your project "
                              "(default: it works in its own)"},
        }, "required": ["to_agent", "message"]},
    ),
    "corvid_extend_timeout": (
        "Give this session more time before its inactivity timeout stops it: it stops `minutes` from "
        "now unless it is active again (its next activity restores the default timeout).",
        {"type": "object", "properties": {
            "minutes": {"type": "number", "description": "Minutes from now (1-120)", "minimum": 1, "maximum": 120},
        }, "required": ["minutes"]},
    ),
    "corvid_check_credits": (
        "Check a participant's credit balance (default: this session's participant).",
        {"type": "object", "properties": {
            "wallet_address": {"type": "string", "description": "Participant / wallet address"},
        }},
    ),
}


#: how many characters of the message an approval shows
DESCRIPTION_MESSAGE_CHARS = 1000


def agent_channel(sender_session_id: str, thread: str = "", *, shared: bool = False) -> str:
    """The channel of a delegated session: ``agent:<sender sid>[#thread][+shared]`` — one
    recipient session per sender session, thread and sharing."""
    return f"agent:{sender_session_id}" + (f"#{thread}" if thread else "") + ("+shared" if shared else "")


def sender_session_id(session: Any) -> str | None:
    """The sender's session id of a delegated session (see :func:`agent_channel`)."""
    channel = str(getattr(session, "channel", "") or "")
    if getattr(session, "source", None) != AGENT_SOURCE or not channel.startswith("agent:"):
        return None
    return channel[len("agent:"):].split("#", 1)[0].split("+", 1)[0] or None


def describe_send_message(args: Any) -> str:
    """The approval line of a ``corvid_send_message`` call: who gets what."""
    to = _text_arg(args, "to_agent") or "(no recipient)"
    message = _text_arg(args, "message") or "(no message)"
    if len(message) > DESCRIPTION_MESSAGE_CHARS:
        message = message[:DESCRIPTION_MESSAGE_CHARS] + f"… ({len(message)} characters)"
    shared = " (sharing this session's project)" if _shares_project(args) else ""
    return f"Message agent {to}{shared}: {message}"


def _shares_project(args: Any) -> bool:
    return isinstance(args, dict) and args.get("share_project") is True


def _error(message: str) -> ToolResult:
    return ToolResult(message, is_error=True)


def _text_arg(args: dict[str, Any], name: str) -> str:
    value = args.get(name) if isinstance(args, dict) else None
    return value.strip() if isinstance(value, str) else ""


class _ReplyWaiter:
    """An event subscriber that waits for the recipient's next ``result``."""

    def __init__(self) -> None:
        self.token = CancelToken()  # cancelled when there is an answer (or none will come)
        self._lock = threading.Lock()
        self.reply: str | None = None
        self.failure = ""
        self._last_text = ""

    def __call__(self, session_id: str, event: Event) -> None:
        with self._lock:
            if self.token.cancelled:
                return
            if isinstance(event, Assistant) and event.content:
                self._last_text = event.content
            elif isinstance(event, ErrorEvent):
                self.failure = f"{event.error_type}: {event.message}"
            elif isinstance(event, Result):
                text = event.result or self._last_text
                if event.subtype == "success":
                    self.reply = text
                else:
                    self.failure = f"the turn ended with {event.subtype}" + (f": {text}" if text else "")
            elif event.type in _GIVE_UP_EVENTS:
                self.failure = self.failure or f"the session ended ({event.type}) without a reply"
            else:
                return
            if self.reply is not None or (self.failure and not isinstance(event, ErrorEvent)):
                self.token.cancel()


class CorvidTools:
    """The ``extra_tools`` hook serving the corvid_* tools over a :class:`SessionControl`.

    Called by the session builder (on the supervisor's thread) with a session's stored
    context; the handlers it returns run on that session's worker thread.
    """

    def __init__(self, control: SessionControl, settings: CorvidToolsConfig) -> None:
        self.control = control
        self.cfg = settings

    def __call__(self, ctx: Any) -> ToolRegistry:
        handlers: dict[str, Callable[[dict[str, Any], ToolContext], ToolResult]] = {
            "corvid_list_agents": lambda args, tctx: self.list_agents(ctx),
            "corvid_send_message": lambda args, tctx: self.send_message(ctx, args, tctx.cancel),
            "corvid_extend_timeout": lambda args, tctx: self.extend_timeout(ctx, args),
            "corvid_check_credits": lambda args, tctx: self.check_credits(ctx, args),
        }
        return ToolRegistry(
            Tool(ToolSpec(name, description, parameters), ToolKind.OTHER, _guard(handlers[name]))
            for name, (description, parameters) in _SPECS.items()
        )

    # --- the tools --------------------------------------------------------------------------

    def list_agents(self, ctx: Any) -> ToolResult:
        me = ctx.agent.id if ctx.agent is not None else None
        lines = []
        for agent in self.control.list_agents():
            about = f": {agent.description}" if agent.description else ""
            lines.append(f"- {agent.name} (id {agent.id}){' [you]' if agent.id == me else ''}{about}")
        return ToolResult("\n".join(lines) if lines else "No agents are registered.")

    def send_message(self, ctx: Any, args: dict[str, Any], cancel: Cancellable) -> ToolResult:
        to, message, thread = _text_arg(args, "to_agent"), _text_arg(args, "message"), _text_arg(args, "thread")
        if not to or not message:
            return _error("corvid_send_message needs `to_agent` (a name or id) and a non-empty `message`")
        depth = int(ctx.session.depth or 1)
        if depth > self.cfg.max_agent_depth:
            return _error(f"Refused: this conversation is already {depth - 1} agent messages deep and "
                          f"chains deeper than {self.cfg.max_agent_depth} are not allowed. Answer with what you have.")
        recipient = self.control.find_agent(to)
        if recipient is None:
            names = ", ".join(a.name for a in self.control.list_agents()) or "none"
            return _error(f"No agent named or with id {to!r}. Agents: {names}")
        sender = ctx.agent
        if sender is not None and recipient.id == sender.id:
            return _error("You cannot send a message to yourself.")
        sender_name = sender.name if sender is not None else "a session"
        sid = self._recipient_session(ctx, recipient, depth, thread, share=_shares_project(args))
        prompt = (f"[Message from agent {sender_name}. Reply with plain text: your reply is returned to "
                  f"{sender_name} automatically.]\n\n{message}")
        return self._deliver(sid, recipient.name, prompt, cancel)

    def extend_timeout(self, ctx: Any, args: dict[str, Any]) -> ToolResult:
        minutes = args.get("minutes") if isinstance(args, dict) else None
        low, high = self.cfg.extend_timeout_min_minutes, self.cfg.extend_timeout_max_minutes
        if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not low <= minutes <= high:
            return _error(f"`minutes` must be a number from {low:g} to {high:g}")
        extended = self.control.extend_timeout(ctx.session.id, float(minutes) * 60)
        if extended is None:
            return _error("This session is not running; its timeout cannot be extended.")
        capped = " (the maximum)" if extended.timeout_s >= extended.cap_s else ""
        return ToolResult(f"Timeout extended: this session now stops in {extended.timeout_s / 60:g} minutes{capped} "
                          f"unless it is active again; its next activity restores the default of "
                          f"{extended.default_s / 60:g} minutes.")

    def check_credits(self, ctx: Any, args: dict[str, Any]) -> ToolResult:
        if not self.control.credits_enabled():
            return ToolResult("Credits are not enabled on this runtime: no balance to check.")
        participant = _text_arg(args, "wallet_address") or str(ctx.session.participant or "")
        if not participant:
            return _error("This session has no participant: pass `wallet_address`.")
        credits = self.control.credit_balance(participant)
        low = " This is low." if credits.balance < credits.low_threshold else ""
        return ToolResult(f"{participant} has {credits.balance} credits ({credits.credits_per_turn} per turn).{low}")

    # --- sending ----------------------------------------------------------------------------

    def _recipient_session(self, ctx: Any, recipient: AgentInfo, depth: int, thread: str, *, share: bool) -> str:
        """The recipient's session for this sender session (and thread, and sharing): reused,
        or created in the recipient's own project (the sender's only when shared)."""
        shared = share and bool(ctx.session.project_id)
        channel = agent_channel(ctx.session.id, thread, shared=shared)
        found = self.control.find_session(recipient.id, AGENT_SOURCE, channel)
        if found is not None:
            return found
        sender = ctx.agent
        return self.control.create_session(
            agent_id=recipient.id, project_id=ctx.session.project_id if shared else recipient.default_project_id,
            source=AGENT_SOURCE, name=f"Message from {sender.name if sender is not None else 'a session'}",
            participant=str(sender.id) if sender is not None else "", channel=channel, depth=depth + 1,
        )

    def _deliver(self, sid: str, recipient: str, prompt: str, cancel: Cancellable) -> ToolResult:
        control = self.control
        waiter = _ReplyWaiter()
        control.subscribe(sid, waiter)
        unregister = cancel.on_cancel(waiter.token.cancel)
        try:
            if not control.resume(sid, prompt) and not waiter.token.cancelled:
                waiter.failure = waiter.failure or "its session could not start"
                waiter.token.cancel()
            timed_out = control.wait(self.cfg.agent_reply_timeout_s, waiter.token)
        finally:
            unregister()
            control.unsubscribe(sid, waiter)
        if waiter.reply is not None:
            return ToolResult(f"Reply from {recipient}:\n{waiter.reply}")
        if cancel.cancelled:
            return _error(f"Stopped while waiting for {recipient}'s reply.")
        if timed_out:
            return _error(f"{recipient} did not reply within {self.cfg.agent_reply_timeout_s:g}s.")
        return _error(f"{recipient} did not reply: {waiter.failure}")


def _guard(handler: Callable[[dict[str, Any], ToolContext], ToolResult]
           ) -> Callable[[dict[str, Any], ToolContext], ToolResult]:
    """A runtime that is shutting down, or a missing row, is an error result, not a crash."""

    def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            return handler(args if isinstance(args, dict) else {}, ctx)
        except CorvidError as exc:
            return _error(f"{type(exc).__name__}: {exc}")

    return run
