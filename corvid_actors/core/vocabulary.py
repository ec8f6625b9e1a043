"""The vocabulary every layer shares: cancellation, tool descriptions and results, and the
permission and approval types.

Providers, tools, loops, actors and the runtime all speak these types, so they sit in the
bottom layer beside :mod:`corvid_actors.events`, :mod:`corvid_actors.errors` and
:mod:`corvid_actors.content`, and import nothing of the package themselves. Before this
module they lived in ``providers/base.py`` and ``tools/base.py``, which made the tools
import a provider module and the loops import the tool layer for a result type.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

# --- agent kinds -----------------------------------------------------------------------

#: an agent that is given tasks: a text-only reply with no tool used yet may be nudged to
#: act with its tools (the direct-process seed's behaviour, the default)
TASK_AGENT = "task"
#: a conversational agent: a question back, a short or a long answer are all legitimate
#: replies, so no initial nudges (the loop's safety rules still apply)
CHAT_AGENT = "chat"
AGENT_KINDS = (TASK_AGENT, CHAT_AGENT)
#: who may talk to an agent in chat: its owners only, an allowlist, or anyone
#: (``[access]``, ``agents.conversation_mode``)
CONVERSATION_MODES = ("private", "allowlist", "public")


# --- cancellation ---------------------------------------------------------------------


class StreamCancelled(Exception):
    """Raised by a provider when its call was cancelled through the CancelToken."""


class CancelToken:
    """A one-shot cancellation signal shared between an actor and its worker.

    ``cancel()`` may be called from any thread; callbacks registered with
    :meth:`on_cancel` run exactly once, on the cancelling thread (or at once, on the
    registering thread, if the token is already cancelled). Providers register a
    callback that closes their HTTP response so a blocked read returns.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` has been called."""
        return self._cancelled

    def cancel(self) -> None:
        """Cancel, once: later calls do nothing. Runs the registered callbacks on this thread; one that
        raises does not stop the others."""
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # noqa: BLE001 - a failing closer must not stop the others
                pass

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Register ``callback``; returns a function that unregisters it."""
        with self._lock:
            if not self._cancelled:
                self._callbacks.append(callback)

                def unregister() -> None:
                    with self._lock:
                        if callback in self._callbacks:
                            self._callbacks.remove(callback)

                return unregister
        callback()
        return lambda: None

    def raise_if_cancelled(self) -> None:
        """Raise :class:`StreamCancelled` when the token is cancelled."""
        if self._cancelled:
            raise StreamCancelled()


# --- tools ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool: name, description and JSON-schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


class ToolKind(enum.Enum):
    """What a tool does, for permission modes: read-only, file edit, command, other."""

    READ = "read"
    EDIT = "edit"
    COMMAND = "command"
    OTHER = "other"


@dataclass(frozen=True)
class ToolResult:
    """A tool's answer to the model.

    ``output`` is what the model sees. ``full_output``, when set, is the complete
    output kept for the operator (events/store) when ``output`` was capped.
    """

    output: str
    is_error: bool = False
    full_output: str | None = None


# --- permissions ------------------------------------------------------------------------


class Permission(enum.Enum):
    """A permission check's verdict for one tool call."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


@dataclass(frozen=True)
class PermissionDecision:
    """``ASK`` carries the human-readable ``description`` for the approval request;
    ``DENY`` carries the ``message`` the model is told."""

    permission: Permission
    message: str = ""
    description: str = ""


#: decides, for one (call name, arguments), whether it runs, needs approval, or is denied
PermissionCheck = Callable[[str, dict[str, Any]], PermissionDecision]


# --- approval policies ------------------------------------------------------------------
# Both sides use them: the loops call an ApprovalPolicy (corvid_actors.loop.rules) and the
# tool layer implements one (corvid_actors.tools.command_policy) — neither imports the other.

#: AskApproval kinds: an ordinary tool approval, a shell command approval
TOOL_APPROVAL = "tool"
COMMAND_APPROVAL = "command"


@dataclass(frozen=True)
class Review:
    """A policy's verdict on one call: the decision, and the approval kind if it asks."""

    decision: PermissionDecision
    kind: str = TOOL_APPROVAL


class ApprovalPolicy(Protocol):
    """What the loops ask before a tool call runs (injectable: ``approval_policy_factory``).

    Called on the session actor's thread, one call at a time.
    """

    def review(self, tool_name: str, arguments: Mapping[str, Any],
               decision: PermissionDecision) -> Review:
        """Refine the permission check's ``decision`` for this call."""
        ...

    def remember(self, tool_name: str, arguments: Mapping[str, Any]) -> None:
        """A human allowed this call for the rest of the session."""
        ...


class PassThroughPolicy:
    """An approval policy that changes nothing (the permission check decides alone)."""

    def review(self, tool_name: str, arguments: Mapping[str, Any],
               decision: PermissionDecision) -> Review:
        return Review(decision)

    def remember(self, tool_name: str, arguments: Mapping[str, Any]) -> None:
        return None
