"""The tools' config sections: ``[tools]``, ``[tools.sandbox]``, ``[mcp]``,
``[corvid_tools]``, ``[command_policy]`` (names, types, checks; values: default.toml).

See :mod:`corvid_actors.schema.fields` for how the defaults are filled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from corvid_actors.errors import ConfigError
from corvid_actors.schema.fields import AT_LEAST_ONE, POSITIVE, one_of, section

#: the sandbox modes (docs/site/concepts/security-model.md)
SANDBOX_MODES = ("auto", "required", "off")
#: what a sandboxed command's network is: ``none`` (a new, empty network namespace: not
#: even the host's loopback) or ``host`` (the host's network, loopback services included)
NETWORK_CHOICES = ("none", "host")
#: the permission modes (``tools.permissions.PermissionMode``): the keys of
#: ``[tools.sandbox] network``
PERMISSION_MODE_NAMES = ("default", "plan", "auto-edit", "full-auto")
#: the sandbox backends: ``auto`` tries bwrap, then Landlock (docs/site/concepts/security-model.md)
SANDBOX_BACKENDS = ("auto", "bwrap", "landlock")


@section("tools.sandbox")
class SandboxConfig:
    """``[tools.sandbox]``: the OS sandbox of tool commands (``corvid_actors.tools.sandbox``),
    which takes this section as its settings (``SandboxSettings`` is this class)."""

    mode: str = field(metadata=one_of(*SANDBOX_MODES))
    backend: str = field(metadata=one_of(*SANDBOX_BACKENDS))
    bwrap_path: str
    #: permission mode -> "none" | "host" (a mode left out: "none"); earlier releases'
    #: ``network_modes`` list is read as this table (corvid_actors.config)
    network: dict[str, str]
    network_agents: tuple[str, ...]
    max_processes: int = field(metadata=AT_LEAST_ONE)
    cpu_seconds: int = field(metadata=AT_LEAST_ONE)
    max_file_bytes: int = field(metadata=AT_LEAST_ONE)
    max_address_space_bytes: int = field(metadata=AT_LEAST_ONE)
    #: the private tmpfs mounts' size in all: /tmp half, the other hidden paths the rest
    tmpfs_max_bytes: int = field(metadata=AT_LEAST_ONE)
    hidden_paths: tuple[str, ...]
    visible_paths: tuple[str, ...]
    mask_walk_max_entries: int = field(metadata=AT_LEAST_ONE)
    mask_skip_dirs: tuple[str, ...]
    moved_search_max_entries: int = field(metadata=AT_LEAST_ONE)
    pids_cgroup_roots: tuple[str, ...]

    def __post_init__(self) -> None:
        for mode, choice in self.network.items():
            if mode not in PERMISSION_MODE_NAMES:
                raise ConfigError(f"config key tools.sandbox.network.{mode}: unknown permission mode "
                                  f"(known: {', '.join(PERMISSION_MODE_NAMES)})")
            if choice not in NETWORK_CHOICES:
                raise ConfigError(f"config key tools.sandbox.network.{mode} = {choice!r} must be "
                                  f"{' or '.join(repr(c) for c in NETWORK_CHOICES)}")

    def network_of(self, permission_mode: str) -> str:
        """``none`` or ``host``: the network of a sandboxed command in ``permission_mode``."""
        return self.network.get(permission_mode or "default", "none")


@section("tools")
class ToolsConfig:
    output_truncate_chars: int = field(metadata=AT_LEAST_ONE)
    command_timeout_default_s: float = field(metadata=POSITIVE)
    command_timeout_max_s: float = field(metadata=POSITIVE)
    #: empty means the built-in list (tools.paths.DEFAULT_PROTECTED_PATTERNS); never "none"
    protected_patterns: tuple[str, ...]
    sandbox: SandboxConfig


@section("command_policy")
class CommandPolicyConfig:
    """Command approval policy: allowlisted simple commands skip the human (OpenAgent seed)."""

    enabled: bool
    allowlist: tuple[str, ...]
    auto_approve_modes: tuple[str, ...]


#: the keys of one ``[mcp.servers.NAME]`` table and the type each must have
MCP_SERVER_KEYS: dict[str, tuple[type, ...]] = {
    "command": (str,), "args": (list, tuple), "env": (Mapping,), "cwd": (str,), "enabled": (bool,),
    "agents": (list, tuple), "sandbox": (bool,), "network": (bool,),
}


@section("mcp")
class McpConfig:
    """External MCP servers over stdio (``corvid_actors.tools.mcp_client``).

    ``servers`` maps a server name to ``{command, args, env, cwd, enabled, agents}``
    (``agents``: names or ids; empty = every agent). The store's ``mcp_server_configs``
    rows add to these and win over an entry of the same name.
    """

    connect_timeout_s: float = field(metadata=POSITIVE)
    call_timeout_s: float = field(metadata=POSITIVE)
    stderr_tail_chars: int = field(metadata=AT_LEAST_ONE)
    servers: dict[str, dict[str, Any]]
    #: start every server in the OS sandbox of [tools.sandbox] (a server's own
    #: ``sandbox = false`` opts it out; its ``network`` key, default true, gives it the network)
    sandbox: bool

    def __post_init__(self) -> None:
        for name, row in self.servers.items():
            where = f"mcp.servers.{name}"
            for key, value in row.items():
                if key not in MCP_SERVER_KEYS:
                    raise ConfigError(f"unknown config key {where}.{key} (known: {', '.join(MCP_SERVER_KEYS)})")
                if not isinstance(value, MCP_SERVER_KEYS[key]):
                    raise ConfigError(f"config key {where}.{key} has the wrong type: {value!r}")
            if not str(row.get("command", "")).strip():
                raise ConfigError(f"config key {where}.command must name the server's executable")
            if not all(isinstance(x, str) for x in [*row.get("args", ()), *row.get("agents", ())]):
                raise ConfigError(f"config keys {where}.args and .agents must be lists of strings")
            if not all(isinstance(v, str) for v in dict(row.get("env", {})).values()):
                raise ConfigError(f"config key {where}.env must map names to strings")


@section("corvid_tools")
class CorvidToolsConfig:
    """The runtime's own ``corvid_*`` tools (``corvid_actors.tools.corvid_tools``)."""

    #: MAX_INVOKE_DEPTH: a session at a deeper depth may not message another agent
    max_agent_depth: int = field(metadata=AT_LEAST_ONE)
    #: how long corvid_send_message waits for the recipient's reply (runtime clock)
    agent_reply_timeout_s: float = field(metadata=POSITIVE)
    #: agent-sourced sessions lose corvid_send_message / corvid_list_agents (no recursion)
    restrict_agent_sessions: bool
    extend_timeout_min_minutes: float = field(metadata=POSITIVE)
    extend_timeout_max_minutes: float = field(metadata=POSITIVE)
