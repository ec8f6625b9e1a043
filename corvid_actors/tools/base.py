"""The tool layer's contracts: a tool, the context it runs in, its result, and the
permission vocabulary (a check's decision, an approval policy's review) the loops share.

Tools run on a session's worker thread. A tool must honour ``ctx.cancel`` (kill its
process group when cancelled) and schedule any timeout through ``ctx.call_later`` —
never through ``time.sleep`` or ``threading.Timer`` — so simulations stay exact.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from corvid_actors.providers.base import CancelToken, ToolSpec


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


class ToolError(Exception):
    """Raised by a tool handler for an expected failure; becomes an error result."""


class PathDenied(ToolError):
    """A path escapes the project directory or is protected."""


#: call_later(delay_s, fn) -> cancel()
CallLater = Callable[[float, Callable[[], None]], Callable[[], None]]


def _no_call_later(delay: float, fn: Callable[[], None]) -> Callable[[], None]:
    return lambda: None


@dataclass
class ToolContext:
    """Everything a tool may use: where it runs, with which environment, and how to stop.

    ``env`` is the complete subprocess environment (already allowlisted plus the
    project's own variables). ``protected_patterns`` are the protected-path patterns
    (see ``corvid_actors.tools.paths``). ``sandbox`` is the OS sandbox launcher
    (``corvid_actors.tools.sandbox.Sandbox``; None: commands run unconfined, as in unit
    tests of the tools themselves) and ``sandbox_network`` whether its commands get the
    host network (decided per permission mode and agent when the session is built).
    """

    project_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    cancel: CancelToken = field(default_factory=CancelToken)
    call_later: CallLater = _no_call_later
    protected_patterns: tuple[str, ...] = ()
    session_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    sandbox: Any = None
    sandbox_network: bool = False


Handler = Callable[[dict[str, Any], ToolContext], ToolResult]


@dataclass(frozen=True)
class Tool:
    """A tool: its spec for the model, its kind for permissions, and its handler."""

    spec: ToolSpec
    kind: ToolKind
    handler: Handler

    @property
    def name(self) -> str:
        return self.spec.name


class ToolRegistry:
    """The tools a session may use, by name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(tool.spec for tool in self._tools.values())

    def filtered(self, allowed: Iterable[str] | None) -> ToolRegistry:
        """A registry holding only ``allowed`` names (all of them when ``allowed`` is None)."""
        if allowed is None:
            return ToolRegistry(self._tools.values())
        keep = set(allowed)
        return ToolRegistry(t for t in self._tools.values() if t.name in keep)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())


def as_mapping(registry: ToolRegistry) -> Mapping[str, Tool]:
    return {tool.name: tool for tool in registry}


# --- permissions ---------------------------------------------------------------------


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


# --- approval policies ----------------------------------------------------------------
# Declared here, beside the permission decision they refine, because both sides use them:
# the loops call an ApprovalPolicy (corvid_actors.loop.rules) and the tool layer implements
# one (corvid_actors.tools.command_policy) — neither imports the other.

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
