"""Permission modes and the permission check every tool call goes through.

The check answers ALLOW, ASK (an approval request, with a one-line description) or
DENY (with the message the model is told). Its order is the SDK-process seed's:

1. Protected paths FIRST, in every mode — even ``full-auto`` cannot write ``.env``
   (invariant 1). Path-like arguments of any tool that name a protected path are
   denied ("Cannot modify protected file: …"; for read-only tools "Cannot read …",
   since secrets must not be read either), and a command is denied when the shell
   guard finds a protected path in it or calls it outright dangerous.
2. Then the mode, by tool kind, from :data:`MODE_TABLE`.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable, Iterator, Mapping

from corvid_actors.core.jsontypes import WireJson
from corvid_actors.core.vocabulary import Permission, PermissionCheck, PermissionDecision, ToolKind
from corvid_actors.tools.base import Tool
from corvid_actors.tools.coding import describe_tool_call
from corvid_actors.tools.paths import DEFAULT_PROTECTED_PATTERNS, is_protected
from corvid_actors.tools.shell_guard import blocked_command, protected_write_target


class PermissionMode(enum.Enum):
    """An agent's permission mode (the original's four)."""

    DEFAULT = "default"  # every tool call asks
    PLAN = "plan"  # read-only tools only (and they ask)
    AUTO_EDIT = "auto-edit"  # reads and file edits run; commands and other tools ask
    FULL_AUTO = "full-auto"  # nothing asks (protected paths are still denied)

    @classmethod
    def parse(cls, value: str | PermissionMode | None) -> PermissionMode:
        """A mode from its name; ``None`` or ``""`` is ``default``.

        Case and ``_``/``-`` are forgiven (``AUTO_EDIT``); anything else is an error
        naming the valid modes, because silently falling back could grant too much.
        """
        if isinstance(value, PermissionMode):
            return value
        if value is None or not str(value).strip():
            return cls.DEFAULT
        wanted = str(value).strip().lower().replace("_", "-")
        for mode in cls:
            if mode.value == wanted:
                return mode
        valid = ", ".join(mode.value for mode in cls)
        raise ValueError(f"Unknown permission mode {value!r}: expected one of {valid}")


_A, _Q, _D = Permission.ALLOW, Permission.ASK, Permission.DENY

#: What each mode does with each kind of tool, after the protected-path check.
#: ``plan`` lets OTHER tools (plan updates, agent messages, MCP tools) ask rather than
#: deny: the seed only forbids edits and commands there, and a human decides the rest.
MODE_TABLE: Mapping[tuple[PermissionMode, ToolKind], Permission] = {
    (PermissionMode.DEFAULT, ToolKind.READ): _Q,
    (PermissionMode.DEFAULT, ToolKind.EDIT): _Q,
    (PermissionMode.DEFAULT, ToolKind.COMMAND): _Q,
    (PermissionMode.DEFAULT, ToolKind.OTHER): _Q,
    (PermissionMode.PLAN, ToolKind.READ): _Q,
    (PermissionMode.PLAN, ToolKind.EDIT): _D,
    (PermissionMode.PLAN, ToolKind.COMMAND): _D,
    (PermissionMode.PLAN, ToolKind.OTHER): _Q,
    (PermissionMode.AUTO_EDIT, ToolKind.READ): _A,
    (PermissionMode.AUTO_EDIT, ToolKind.EDIT): _A,
    (PermissionMode.AUTO_EDIT, ToolKind.COMMAND): _Q,
    (PermissionMode.AUTO_EDIT, ToolKind.OTHER): _Q,
    (PermissionMode.FULL_AUTO, ToolKind.READ): _A,
    (PermissionMode.FULL_AUTO, ToolKind.EDIT): _A,
    (PermissionMode.FULL_AUTO, ToolKind.COMMAND): _A,
    (PermissionMode.FULL_AUTO, ToolKind.OTHER): _A,
}

PLAN_MODE_DENIAL = "plan mode: read-only tools only"

#: argument names taken as file paths, in any tool (plus any name ending in "path")
_PATH_KEYS = frozenset({"path", "file", "filename", "target", "destination", "dest",
                        "source", "src", "files", "paths", "directory", "dir"})
#: argument names taken as shell command lines in COMMAND tools
_COMMAND_KEYS = ("command", "cmd", "script")


def _path_values(args: Mapping[str, object]) -> Iterator[str]:
    """Every string under a path-like key, including lists and ``files[].file_path``."""
    for key, value in args.items():
        pathish = key.lower() in _PATH_KEYS or key.lower().endswith("path")
        if isinstance(value, str) and pathish:
            yield value
        elif isinstance(value, list | tuple):
            for item in value:
                if isinstance(item, str) and pathish:
                    yield item
                elif isinstance(item, Mapping):
                    yield from _path_values(item)
        elif isinstance(value, Mapping):
            yield from _path_values(value)


def _protected_denial(
    tool: Tool, args: Mapping[str, object], project_dir: str, patterns: tuple[str, ...]
) -> str | None:
    for value in _path_values(args):
        if is_protected(project_dir, value, patterns):
            verb = "read" if tool.kind is ToolKind.READ else "modify"
            return f"Cannot {verb} protected file: {value}"
    if tool.kind is ToolKind.COMMAND:
        for key in _COMMAND_KEYS:
            command = args.get(key)
            if not isinstance(command, str):
                continue
            reason = blocked_command(command)
            if reason is not None:
                return reason
            target = protected_write_target(command, project_dir, patterns)
            if target is not None:
                return f"Cannot modify protected file: {target}"
    return None


def make_permission_check(
    mode: PermissionMode | str | None,
    tools: Mapping[str, Tool],
    project_dir: str | os.PathLike[str],
    protected_patterns: Iterable[str] = DEFAULT_PROTECTED_PATTERNS,
    *,
    command_network: str = "",
) -> PermissionCheck:
    """The permission check for one session: ``check(tool_name, args) -> PermissionDecision``.

    ``tools`` are the session's tools by name (their kind drives the mode table); an
    empty ``protected_patterns`` means the defaults, never "nothing is protected".
    ``command_network`` (``none``, ``host`` …: ``Sandbox.network_label``) is what the
    approval request of a command says its network will be (``[network: host]``).
    """
    parsed = PermissionMode.parse(mode)
    root = os.fspath(project_dir)
    patterns = tuple(protected_patterns) or DEFAULT_PROTECTED_PATTERNS

    def check(name: str, args: dict[str, WireJson]) -> PermissionDecision:
        tool = tools.get(name)
        if tool is None:
            return PermissionDecision(Permission.DENY, message=f"Unknown tool: {name}")
        arguments = args if isinstance(args, Mapping) else {}
        denial = _protected_denial(tool, arguments, root, patterns)
        if denial is not None:
            return PermissionDecision(Permission.DENY, message=denial)
        verdict = MODE_TABLE[(parsed, tool.kind)]
        if verdict is Permission.DENY:
            return PermissionDecision(Permission.DENY, message=PLAN_MODE_DENIAL)
        if verdict is Permission.ASK:
            description = describe_tool_call(name, arguments)
            if command_network and tool.kind is ToolKind.COMMAND:
                description += f" [network: {command_network}]"
            return PermissionDecision(Permission.ASK, description=description)
        return PermissionDecision(Permission.ALLOW)

    return check
