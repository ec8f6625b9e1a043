"""The delegation rule: a session started by another agent never has more permission than its sender.

A recipient's session (source ``agent``, started by ``corvid_send_message``) runs in the
*stricter* of its own agent's mode and its sender session's effective mode (strictness:
``plan`` < ``default`` < ``auto-edit`` < ``full-auto``), down the whole chain
(:func:`effective_agent_mode`). The session builder applies it when it builds a delegated
session. Pure apart from reading the sender rows from the store it is given.
"""

from __future__ import annotations

from typing import Any

from corvid_actors.tools.corvid_tools import sender_session_id
from corvid_actors.tools.permissions import PermissionMode

#: permission modes from the most restrictive to the most permissive: each allows, per
#: tool kind, at least what the one before it allows (tools.permissions.MODE_TABLE)
MODES_BY_STRICTNESS = ("plan", "default", "auto-edit", "full-auto")
#: the mode of a delegated session whose sender cannot be found
_UNKNOWN_SENDER_MODE = "plan"


def stricter_mode(a: str, b: str) -> str:
    """The more restrictive of two permission modes (names parsed as PermissionMode does)."""
    first, second = PermissionMode.parse(a).value, PermissionMode.parse(b).value
    return first if MODES_BY_STRICTNESS.index(first) <= MODES_BY_STRICTNESS.index(second) else second


def effective_agent_mode(store: Any, session: Any, own_mode: str | None = None) -> str:
    """The permission mode ``session`` runs in: its agent's, bounded by its sender's
    effective mode when it was started by another agent (recursively, up the chain)."""
    if own_mode is None:
        agent = store.get_agent(session.agent_id) if getattr(session, "agent_id", None) else None
        own_mode = agent.permission_mode if agent is not None else "default"
    mode = stricter_mode(own_mode or "default", MODES_BY_STRICTNESS[-1])  # its own, normalised
    seen = {session.id}
    current = session
    while (sender_id := sender_session_id(current)) is not None:
        sender = store.get_session(sender_id) if sender_id not in seen else None
        if sender is None:  # gone, or a loop: assume the least
            return stricter_mode(mode, _UNKNOWN_SENDER_MODE)
        seen.add(sender_id)
        agent = store.get_agent(sender.agent_id) if sender.agent_id else None
        mode = stricter_mode(mode, agent.permission_mode if agent is not None else "default")
        current = sender
    return mode
