"""What participants type and what the bridge tells them: pure functions, no I/O.

:func:`parse_input` turns a chat line into a :class:`Command`, an :class:`ApprovalReply`
candidate or plain text; :func:`render_event` turns a session event into the text (and
kind) a participant sees, or None for events that stay internal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from corvid_actors.events import (
    ApprovalRequestEvent,
    ApprovalResolved,
    Assistant,
    CreditsLow,
    ErrorEvent,
    Event,
    SessionRestarting,
    SessionResumed,
    SessionStopped,
)

#: the commands every bridge understands, with their one-line help
COMMANDS: dict[str, str] = {
    "/help": "this list",
    "/status": "what your session is doing, turns, credits and pending approvals",
    "/stop": "stop your session (your next message starts it again)",
    "/credits": "your balance, the price of a turn and your recent transactions",
    "/grant <participant> <amount>": "owners only: give credits to a participant",
}

# an answer word, optionally followed by ONE word (the id, or what a careless user typed)
_APPROVAL_REPLY = re.compile(r"^\s*(yes|y|approve|allow|no|n|deny)(?:\s+(\S+))?\s*$", re.IGNORECASE)
_ALLOW_WORDS = frozenset({"yes", "y", "approve", "allow"})


@dataclass(frozen=True)
class Command:
    name: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class ApprovalReply:
    """``yes <id>`` / ``no <id>`` (also y/approve/allow, n/deny); ``ref`` is the id or a
    prefix of it ("" for a bare ``yes``). Only a candidate: the bridge treats it as plain
    text unless a pending approval matches ``ref`` — so "no thanks" stays a chat message —
    or, when the conversation has approvals pending, answers what it expects."""

    allow: bool
    ref: str


@dataclass(frozen=True)
class Text:
    text: str


def parse_input(text: str) -> Command | ApprovalReply | Text:
    stripped = text.strip()
    if stripped.startswith("/") and len(stripped) > 1:
        name, *args = stripped.split()
        return Command(name.lower(), tuple(args))
    match = _APPROVAL_REPLY.match(stripped)
    if match:
        return ApprovalReply(match.group(1).lower() in _ALLOW_WORDS, (match.group(2) or "").lower())
    return Text(stripped)


def help_text() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"{name.ljust(width)}  {what}" for name, what in COMMANDS.items()]
    lines.append("Answer a tool approval with 'yes <id>' or 'no <id>'.")
    return "Commands:\n" + "\n".join(lines)


def approval_text(approval_id: str, description: str, timeout_s: float) -> str:
    # timeout_s 0: a queued request waits for the answer, with no countdown to announce
    deadline = f"denied automatically after {timeout_s:g} s" if timeout_s > 0 else "it waits for your answer"
    return (f"[APPROVE?:{approval_id}] {description}\n"
            f"Reply 'yes {approval_id}' to allow or 'no {approval_id}' to deny ({deadline}).")


def transactions_text(rows: list[dict[str, object]]) -> str:
    if not rows:
        return "No transactions yet."
    lines = [f"  {r['type']:<9} {r['amount']:+d} → {r['balance_after']}"
             + (f" ({r['reference']})" if r.get("reference") else "") for r in rows]
    return "Recent transactions:\n" + "\n".join(lines)


#: stop reasons the participant already heard about (their /stop, the exhaustion error)
#: a message the session did not answer for a spending cap (see :func:`_render_error`)
BUDGET_REFUSED = ("Sorry, this bot has reached its spending limit, so this message was not answered. "
                  "Its owner can raise it.")
_QUIET_STOP_REASONS = frozenset({"user_stop", "credits_exhausted", "replaced"})


def render_event(event: Event) -> tuple[str, str] | None:
    """``(kind, text)`` to send to the conversation for ``event``, or None."""
    match event:
        case Assistant() as e:
            return ("reply", e.content) if e.content.strip() else None
        case ApprovalRequestEvent() as e:
            return "approval", approval_text(e.id, e.description, e.timeout_s)
        case ApprovalResolved() as e:
            verdict = "allowed" if e.behavior == "allow" else "denied"
            return "notice", f"Approval {e.id} {verdict}" + (f": {e.message}" if e.message else ".")
        case CreditsLow() as e:
            return "notice", e.message
        case SessionRestarting() as e:
            return "notice", (f"The assistant stopped unexpectedly; restarting in {e.delay_s:g} s "
                              f"(attempt {e.attempt}).")
        case SessionResumed() as e if e.automatic:
            return "notice", "The model is reachable again; resuming."
        case SessionStopped() as e if e.reason not in _QUIET_STOP_REASONS:
            if e.reason == "timeout":
                return "notice", "Session stopped after a long silence. Send a message to continue."
            if e.reason == "server_shutdown":
                return "notice", "The bot is shutting down; your conversation will resume when it is back."
            return "notice", f"Session stopped ({e.reason}). Send a message to continue."
        case ErrorEvent() as e:
            return _render_error(e.error_type, e.message)
    return None


def _render_error(error_type: str, message: str) -> tuple[str, str] | None:
    if error_type == "crash":
        return None  # a restart notice or the give-up error follows
    if error_type == "max_restarts_exceeded":
        return "notice", "The assistant keeps failing and has given up for now. Send a message to try again."
    if error_type == "api_outage":
        return "notice", f"The model is unavailable; retrying automatically. ({message})"
    if error_type == "credits_exhausted":
        return "notice", message
    if error_type == "budget_exceeded":
        # the session refused a message the bridge had let through (queued behind the turn
        # that reached the cap); one the bridge refuses gets its own notice and no error event
        return "notice", BUDGET_REFUSED
    return "notice", f"Error ({error_type}): {message}"
