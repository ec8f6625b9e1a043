"""External MCP servers as session tools, through the official ``mcp`` client.

:class:`McpToolSource` is a ``SessionBuilder.extra_tools`` hook. For a session that may
use them it starts the agent's MCP servers over stdio (global ones and the agent's own,
from the config file's ``[mcp.servers]`` and the store's ``mcp_server_configs``), lists
their tools, and returns them as our :class:`~corvid_actors.tools.base.Tool` objects —
namespaced ``mcp__<server>__<tool>``, with the server's JSON schemas, of kind
``OTHER`` so the permission modes and approvals treat them like any tool — inside a
:class:`SessionTools` that also carries the closers and the notices of the start.

**One set of servers per session incarnation**, not one shared per agent: a server's
state (open files, a browser page, a working directory) then belongs to one
conversation, a server that crashes takes down the tools of one session only, the
servers get the session's project directory, and their lifetime is exactly the
incarnation's — the supervisor runs the closers on every exit path (exit, crash,
outage pause, stop, timeout, context reset, shutdown). The price is a start-up per
incarnation (a Python server takes about a second) and one process per session.

**Failures never fail the session**: a server that cannot start, does not answer
``initialize`` in time or dies mid-call is logged, a ``system`` event says so
(``mcp_server_failed`` at start, ``mcp_server_lost`` later), its process tree is
killed, and the session goes on without its tools. Servers get the allowlisted
environment (``corvid_actors.tools.env.safe_env``) plus their own configured
variables, never the daemon's secrets.

The hook blocks the supervisor while the servers start (all in parallel, bounded by
``mcp.connect_timeout_s``): the loops need the tool list when they are built.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from loguru import logger

from corvid_actors.core.jsontypes import JsonObject, WireJson
from corvid_actors.core.vocabulary import ToolKind, ToolResult, ToolSpec
from corvid_actors.events import Event, SystemEvent
from corvid_actors.schema.tool_sections import McpConfig
from corvid_actors.tools.base import Tool, ToolContext, ToolRegistry
from corvid_actors.tools.coding_base import truncate_middle
from corvid_actors.tools.env import safe_env
from corvid_actors.tools.mcp_connection import McpConnection, McpLimits, McpServerSpec, McpToolInfo
from corvid_actors.tools.sandbox import Sandbox, SandboxUnavailable, current_sandbox

if TYPE_CHECKING:  # the MCP SDK is an optional dependency
    from mcp.types import CallToolResult

__all__ = [
    "MCP_TOOL_PREFIX", "McpServerSpec", "McpToolSource", "SessionTools", "add_mcp_server",
    "namespaced_tool_name", "render_result", "resolve_servers", "servers_for_agent",
]

#: every MCP tool's name starts with this (then the server, "__", the tool)
MCP_TOOL_PREFIX = "mcp__"
#: the longest tool name every provider accepts (Anthropic's limit; Ollama has none)
MAX_TOOL_NAME_CHARS = 64
#: characters a tool name may hold (Anthropic: ^[a-zA-Z0-9_-]+$)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
#: hex digits of the hash that keeps a shortened name unique
_HASH_CHARS = 8


class _AgentRow(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...


class _SessionRow(Protocol):
    @property
    def id(self) -> str: ...


class _ProjectRow(Protocol):
    @property
    def working_dir(self) -> str: ...


class _McpServerRow(Protocol):
    """A ``mcp_server_configs`` row as the hook reads it."""

    @property
    def agent_id(self) -> str | None: ...
    @property
    def name(self) -> str: ...
    @property
    def command(self) -> str: ...
    @property
    def args(self) -> str | None: ...
    @property
    def env_vars(self) -> str | None: ...
    @property
    def cwd(self) -> str: ...
    @property
    def enabled(self) -> bool: ...


class McpSessionContext(Protocol):
    """What the hook reads of the session being built (``db.store.SessionContext`` has it:
    declared here so the tools layer does not import the store)."""

    @property
    def session(self) -> _SessionRow: ...
    @property
    def agent(self) -> _AgentRow | None: ...
    @property
    def project(self) -> _ProjectRow | None: ...
    @property
    def agent_tool_base(self) -> tuple[str, ...] | None: ...
    def tool_permissions(self, defaults: Sequence[str]) -> tuple[str, ...] | None: ...


class McpConfigStore(Protocol):
    """The store's MCP server configs (``db.store.Store`` has it)."""

    def mcp_server_configs(self, agent_id: str | None) -> Sequence[_McpServerRow]: ...


class McpConfigWriter(Protocol):
    """What :func:`add_mcp_server` writes through: the store's transaction and its
    peewee models (``m``, the ORM's own dynamic classes)."""

    m: Any

    def transaction(self) -> AbstractContextManager[None]: ...


class SessionTools(ToolRegistry):
    """A registry of tools plus what the session must do with them besides offering them.

    ``closers`` (blocking, idempotent) end what the tools hold — run when the
    incarnation ends (``BuiltSession.resources``). ``notices`` are events published
    right after ``session_started`` (``BuiltSession.notices``).
    """

    def __init__(self, tools: Iterable[Tool] = (), *, closers: Iterable[Callable[[], None]] = (),
                 notices: Iterable[Event] = ()) -> None:
        super().__init__(tools)
        self.closers: list[Callable[[], None]] = list(closers)
        self.notices: list[Event] = list(notices)

    def merge(self, other: ToolRegistry) -> None:
        """Add ``other``'s tools (and, for a SessionTools, its closers and notices)."""
        for tool in other:
            self.add(tool)
        self.closers.extend(getattr(other, "closers", ()))
        self.notices.extend(getattr(other, "notices", ()))


# --- which servers a session gets --------------------------------------------------------------


def _spec(name: str, row: Mapping[str, WireJson]) -> McpServerSpec:
    return McpServerSpec(
        name=name, command=str(row.get("command", "")), args=tuple(str(a) for a in row.get("args", ())),
        env={str(k): str(v) for k, v in dict(row.get("env") or {}).items()},
        cwd=str(row.get("cwd", "") or ""), enabled=bool(row.get("enabled", True)),
        sandbox=bool(row.get("sandbox", True)), network=bool(row.get("network", True)),
    )


def resolve_servers(layers: Iterable[Iterable[McpServerSpec]]) -> list[McpServerSpec]:
    """Merge layers of server specs, least specific first: a later spec of the same name
    replaces an earlier one, and a disabled one removes it (an agent can opt out of a
    global server by disabling it under the same name)."""
    merged: dict[str, McpServerSpec] = {}
    for layer in layers:
        for spec in layer:
            merged[spec.name] = spec
    return [spec for spec in merged.values() if spec.enabled]


def _matches(agent: _AgentRow | None, names: Sequence[str]) -> bool:
    if agent is None:
        return False
    wanted = {n.lower() for n in names}
    return str(agent.id).lower() in wanted or str(agent.name).lower() in wanted


def servers_for_agent(config: McpConfig, store: McpConfigStore | None,
                      agent: _AgentRow | None) -> list[McpServerSpec]:
    """The servers a session of ``agent`` gets: config global < config for the agent <
    store global < store for the agent (see :func:`resolve_servers`)."""
    rows = config.servers.items()
    layers: list[list[McpServerSpec]] = [
        [_spec(n, r) for n, r in rows if not r.get("agents")],
        [_spec(n, r) for n, r in rows if r.get("agents") and _matches(agent, r["agents"])],
    ]
    if store is not None:
        stored = store.mcp_server_configs(agent.id if agent is not None else None)
        decoded = [(row.agent_id, _spec(row.name, {
            "command": row.command, "args": json.loads(row.args or "[]"),
            "env": json.loads(row.env_vars or "{}"), "cwd": row.cwd, "enabled": row.enabled,
        })) for row in stored]
        layers.append([spec for owner, spec in decoded if owner is None])
        layers.append([spec for owner, spec in decoded if owner is not None])
    return resolve_servers(layers)


def add_mcp_server(store: McpConfigWriter, name: str, command: str, *, args: Sequence[str] = (),
                   env: Mapping[str, str] | None = None, cwd: str = "", agent_id: str | None = None,
                   enabled: bool = True) -> Any:
    """Store an MCP server config (``agent_id`` None: every agent). Returns the (peewee) row."""
    with store.transaction():
        return store.m.McpServerConfig.create(
            agent=agent_id, name=name, command=command, args=json.dumps(list(args)),
            env_vars=json.dumps(dict(env or {})), cwd=cwd, enabled=enabled,
        )


def server_prefix(server: str) -> str:
    return f"{MCP_TOOL_PREFIX}{_UNSAFE.sub('_', server)}__"


def may_use_server(allowed: Sequence[str] | None, server: str) -> bool:
    """With an explicit tool list (the permission chain), only a server one of whose
    tools is listed is started at all."""
    if allowed is None:
        return True
    prefix = server_prefix(server)
    return any(name.startswith(prefix) for name in allowed)


# --- tools -----------------------------------------------------------------------------------


def namespaced_tool_name(server: str, tool: str, taken: set[str]) -> str:
    """``mcp__<server>__<tool>``, made of safe characters, at most
    :data:`MAX_TOOL_NAME_CHARS` long, and not in ``taken`` (which it joins)."""
    name = f"{server_prefix(server)}{_UNSAFE.sub('_', tool)}"
    if len(name) > MAX_TOOL_NAME_CHARS:
        digest = hashlib.sha1(f"{server}\0{tool}".encode()).hexdigest()[:_HASH_CHARS]
        name = f"{name[:MAX_TOOL_NAME_CHARS - _HASH_CHARS - 1]}_{digest}"
    base, n = name, 2
    while name in taken:
        suffix = f"_{n}"
        name, n = base[:MAX_TOOL_NAME_CHARS - len(suffix)] + suffix, n + 1
    taken.add(name)
    return name


def _block_text(block: Any) -> str:  # an MCP SDK content block, told apart by its type field
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return f"[{kind} content: {block.mime_type}, {len(block.data)} base64 chars]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        return str(text) if text is not None else f"[binary resource {resource.uri}]"
    if kind == "resource_link":
        return f"[resource link {block.uri}]"
    return f"[{kind or 'unknown'} content]"


def render_result(result: CallToolResult, limit: int) -> ToolResult:
    """A ``CallToolResult`` as the text the model sees (cut in the middle past ``limit``)."""
    parts = [_block_text(block) for block in result.content or ()]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    text = "\n".join(parts) or "(no output)"
    shown = truncate_middle(text, limit)
    return ToolResult(shown, is_error=bool(result.is_error), full_output=text if shown != text else None)


def _schema(info: McpToolInfo) -> JsonObject:
    schema = dict(info.input_schema)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def connection_tools(connection: McpConnection, taken: set[str]) -> list[Tool]:
    """The tools of a ready connection, as our Tool objects (calls go to the server)."""
    tools = []
    for info in connection.tools:
        name = namespaced_tool_name(connection.spec.name, info.name, taken)
        description = info.description or f"Tool {info.name} of the MCP server {connection.spec.name}"

        def handler(args: dict[str, WireJson], ctx: ToolContext, _tool: str = info.name) -> ToolResult:
            return connection.call(_tool, args if isinstance(args, dict) else {}, ctx.cancel)

        tools.append(Tool(ToolSpec(name, description, _schema(info)), ToolKind.OTHER, handler))
    return tools


# --- the hook --------------------------------------------------------------------------------


class McpToolSource:
    """The ``extra_tools`` hook for external MCP servers (see the module docstring).

    Args:
        config: the ``[mcp]`` section (timeouts and the config file's servers).
        store: where ``mcp_server_configs`` rows live (None: config only).
        publish: ``publish(session_id, event)`` for a server lost mid-session.
        output_limit: characters of a tool result the model sees.
    """

    def __init__(self, config: McpConfig, store: McpConfigStore | None = None, *,
                 publish: Callable[[str, Event], None] | None = None, output_limit: int = 8000) -> None:
        self.config = config
        self.store = store
        self.publish = publish
        self.output_limit = output_limit
        self.limits = McpLimits(connect_timeout_s=config.connect_timeout_s, call_timeout_s=config.call_timeout_s,
                                stderr_tail_chars=config.stderr_tail_chars)

    def __call__(self, ctx: McpSessionContext) -> SessionTools:
        session_id = ctx.session.id
        # Only an explicit tool list narrows anything: without one every tool is allowed.
        allowed = ctx.tool_permissions(defaults=()) if ctx.agent_tool_base is not None else None
        specs = [s for s in servers_for_agent(self.config, self.store, ctx.agent)
                 if may_use_server(allowed, s.name)]
        if not specs:
            return SessionTools()
        cwd = str(Path(ctx.project.working_dir)) if ctx.project is not None else None
        sandbox = current_sandbox.get() if self.config.sandbox else None
        notices: list[Event] = []
        connections = []
        for spec in specs:
            try:
                connections.append(self._connection(spec, session_id, cwd, sandbox))
            except (SandboxUnavailable, FileNotFoundError) as exc:
                message = f"MCP server {spec.name!r} could not start: {exc}; the session continues without its tools"
                logger.bind(session_id=session_id).warning(message)
                notices.append(SystemEvent(subtype="mcp_server_failed", message=message))
        for connection in connections:
            connection.start()
        tools: list[Tool] = []
        taken: set[str] = set()
        for connection in connections:
            if connection.wait_ready():
                tools.extend(connection_tools(connection, taken))
                logger.bind(session_id=session_id).info(
                    "MCP server {} ready with {} tools", connection.spec.name, len(connection.tools))
            else:
                message = f"{connection.error}; the session continues without its tools"
                logger.bind(session_id=session_id).warning(message)
                notices.append(SystemEvent(subtype="mcp_server_failed", message=message))
        return SessionTools(tools, closers=[c.close for c in connections], notices=notices)

    def _connection(self, spec: McpServerSpec, session_id: str, project_dir: str | None,
                    sandbox: Sandbox | None = None) -> McpConnection:
        publish = self.publish

        def on_lost(message: str) -> None:
            if publish is not None:
                publish(session_id, SystemEvent(subtype="mcp_server_lost", message=message))

        cwd = str(Path(spec.cwd).expanduser()) if spec.cwd else project_dir
        argv, on_end = sandboxed_argv(sandbox if spec.sandbox else None, spec, cwd)
        return McpConnection(spec, env=safe_env(spec.env), cwd=cwd, limits=self.limits, on_lost=on_lost,
                             render=lambda result: render_result(result, self.output_limit),
                             argv=argv, on_end=on_end)


def sandboxed_argv(sandbox: Sandbox | None, spec: McpServerSpec,
                   cwd: str | None) -> tuple[list[str] | None, Callable[[], None] | None]:
    """The command line starting ``spec`` through the OS sandbox launcher, and what to do
    when the server has ended; (None, None) to start it as configured (no launcher, mode
    ``off``, or ``auto`` without a sandbox). Raises SandboxUnavailable in ``required`` mode
    without a sandbox. The server's working directory is its project, read-write."""
    if sandbox is None or sandbox.status.mode == "off":
        return None, None
    if not sandbox.active:
        if sandbox.status.refuses_commands:
            raise SandboxUnavailable(f"the OS sandbox is required and unavailable ({sandbox.status.reason})")
        return None, None
    # resolved here, on the server's PATH: inside the sandbox a missing program would only
    # show as a server that "exited before it answered"
    program = shutil.which(spec.command, path=safe_env(spec.env).get("PATH"))
    if program is None:
        raise FileNotFoundError(f"command not found: {spec.command}")
    # the operator's own program and script files stay readable where the sandbox hides
    # their directory (a server kept under /tmp or $HOME): named files only, never the folder
    named = [program, *(a for a in spec.args if os.path.isabs(a) and os.path.isfile(a))]
    launch = sandbox.wrap([program, *spec.args], project_dir=cwd, network=spec.network,
                          readable_files=named)
    active = sandbox

    def on_end() -> None:
        launch.finish(active, active.patterns)

    return launch.argv, on_end
