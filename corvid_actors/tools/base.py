"""The tool layer's contracts: a tool, the context it runs in, and the registry of tools.
(A tool's result and the permission types the loops share are in
:mod:`corvid_actors.core.vocabulary`.)

Tools run on a session's worker thread. A tool must honour ``ctx.cancel`` (kill its
process group when cancelled) and schedule any timeout through ``ctx.call_later`` —
never through ``time.sleep`` or ``threading.Timer`` — so simulations stay exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corvid_actors.core.vocabulary import CancelToken, ToolKind, ToolResult, ToolSpec


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
    ``sandbox_cgroup`` is the session incarnation's pids cgroup
    (``corvid_actors.tools.sandbox.SessionCgroup``, root only; None: each command gets
    one of its own), which the incarnation's resources close.
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
    sandbox_cgroup: Any = None


Handler = Callable[[dict[str, Any], ToolContext], ToolResult]


@dataclass(frozen=True)
class Tool:
    """A tool: its spec for the model, its kind for permissions, and its handler."""

    spec: ToolSpec
    kind: ToolKind
    handler: Handler

    @property
    def name(self) -> str:
        """The tool's name, as the model calls it (``spec.name``)."""
        return self.spec.name


class ToolRegistry:
    """The tools a session may use, by name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        """Add ``tool`` under its name; a tool of the same name is replaced."""
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        """The tool named ``name``, or None."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """The tools' names, in the order they were added."""
        return list(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        """The tools' specs, as offered to the model."""
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
