"""Typed configuration: ``config/default.toml`` < a user file < environment variables.

:func:`load_config` returns a frozen :class:`Config`. Every value is checked against its
declared type and range; a bad value raises :class:`ConfigError` naming the key, so a
daemon fails at start-up rather than hours later.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from corvid_actors.errors import ConfigError
from corvid_actors.providers.text_tools import DEFAULT_TEXT_TOOL_FAMILIES


def _positive(value: float) -> bool:
    return value > 0


def _non_negative(value: float) -> bool:
    return value >= 0


def _fraction(value: float) -> bool:
    return 0 < value <= 1


def _check(rule: typing.Callable[[Any], bool], text: str) -> dict[str, Any]:
    return {"check": rule, "must": text}


POSITIVE = _check(_positive, "must be > 0")
NON_NEGATIVE = _check(_non_negative, "must be >= 0")
FRACTION = _check(_fraction, "must be in (0, 1]")
AT_LEAST_ONE = _check(lambda v: v >= 1, "must be >= 1")


@dataclass(frozen=True)
class SupervisorConfig:
    session_timeout_s: float = field(default=1800.0, metadata=POSITIVE)
    timeout_extension_cap_factor: float = field(default=4.0, metadata=AT_LEAST_ONE)
    timeout_fallback_check_s: float = field(default=60.0, metadata=POSITIVE)
    restart_backoff_base_s: float = field(default=5.0, metadata=POSITIVE)
    restart_backoff_multiplier: float = field(default=3.0, metadata=AT_LEAST_ONE)
    max_restarts: int = field(default=3, metadata=NON_NEGATIVE)
    stable_period_s: float = field(default=600.0, metadata=POSITIVE)
    auto_resume_base_s: float = field(default=300.0, metadata=POSITIVE)
    auto_resume_multiplier: float = field(default=3.0, metadata=AT_LEAST_ONE)
    auto_resume_cap_s: float = field(default=3600.0, metadata=POSITIVE)
    auto_resume_max_attempts: int = field(default=10, metadata=NON_NEGATIVE)
    orphan_prune_interval_s: float = field(default=300.0, metadata=POSITIVE)
    session_idle_timeout_s: float = field(default=300.0, metadata=POSITIVE)
    auto_restart_sources: tuple[str, ...] = ("chat",)
    council_model: str = ""
    sdk_pid_base: int = field(default=900000, metadata=POSITIVE)
    direct_pid_base: int = field(default=800000, metadata=POSITIVE)
    auto_resume_check_interval_s: float = field(default=60.0, metadata=POSITIVE)
    idle_exit_loops: tuple[str, ...] = ("direct",)


@dataclass(frozen=True)
class SessionConfig:
    max_turns_before_context_reset: int = field(default=8, metadata=AT_LEAST_ONE)
    resume_history_messages: int = field(default=20, metadata=AT_LEAST_ONE)
    resume_history_message_chars: int = field(default=2000, metadata=AT_LEAST_ONE)
    zero_turn_breaker_threshold: int = field(default=3, metadata=AT_LEAST_ONE)


#: USD per million tokens: input, output, cache read, cache write (as in default.toml).
DEFAULT_ANTHROPIC_PRICES: dict[str, tuple[float, ...]] = {
    "claude-opus-4": (5.0, 25.0, 0.5, 6.25),
    "claude-sonnet-4": (3.0, 15.0, 0.3, 3.75),
    "claude-haiku-4": (1.0, 5.0, 0.1, 1.25),
}


@dataclass(frozen=True)
class ProvidersConfig:
    default_provider: str = ""
    ollama_host: str = "http://127.0.0.1:11434"
    ollama_default_model: str = "qwen3:8b"
    ollama_num_ctx: int = field(default=8192, metadata=POSITIVE)
    ollama_num_predict: int = field(default=2048, metadata=POSITIVE)
    ollama_keep_alive: str = "5m"
    ollama_request_timeout_s: float = field(default=1800.0, metadata=POSITIVE)
    # The runtime passes this list to the Ollama provider as is: empty means "no model
    # gets text-based tools", so the default is the full list, as in default.toml.
    ollama_text_tool_families: tuple[str, ...] = DEFAULT_TEXT_TOOL_FAMILIES
    anthropic_base_url: str = ""
    anthropic_default_model: str = "claude-sonnet-4-6"
    anthropic_max_tokens: int = field(default=8192, metadata=POSITIVE)
    anthropic_default_context_window: int = field(default=200000, metadata=POSITIVE)
    health_probe_timeout_s: float = field(default=10.0, metadata=POSITIVE)
    anthropic_prices: dict[str, tuple[float, ...]] = field(
        default_factory=lambda: dict(DEFAULT_ANTHROPIC_PRICES)
    )
    #: credentials come from the environment only (ANTHROPIC_API_KEY); never from files
    anthropic_api_key: str = ""


@dataclass(frozen=True)
class SlotsConfig:
    max_parallel: int = field(default=1, metadata=AT_LEAST_ONE)
    wait_timeout_s: float = field(default=300.0, metadata=NON_NEGATIVE)
    heavy_model_min_b: float = field(default=14.0, metadata=POSITIVE)
    medium_model_min_b: float = field(default=8.0, metadata=POSITIVE)


@dataclass(frozen=True)
class ApprovalsConfig:
    timeout_s: float = field(default=55.0, metadata=POSITIVE)
    chat_timeout_s: float = field(default=120.0, metadata=POSITIVE)
    mode: str = field(
        default="normal",
        metadata=_check(lambda v: v in ("normal", "queued", "paused"), "must be normal, queued or paused"),
    )


@dataclass(frozen=True)
class DirectLoopConfig:
    max_tool_iterations: int = field(default=25, metadata=AT_LEAST_ONE)
    max_messages: int = field(default=40, metadata=AT_LEAST_ONE)
    keep_recent: int = field(default=30, metadata=AT_LEAST_ONE)
    max_repeats: int = field(default=3, metadata=AT_LEAST_ONE)
    max_same_tool: int = field(default=5, metadata=AT_LEAST_ONE)
    max_nudges: int = field(default=2, metadata=NON_NEGATIVE)
    max_mid_chain_nudges: int = field(default=2, metadata=NON_NEGATIVE)
    trim_usage_threshold: float = field(default=0.70, metadata=FRACTION)
    tool_result_share: float = field(default=0.30, metadata=FRACTION)
    tool_result_min_chars: int = field(default=1000, metadata=AT_LEAST_ONE)
    #: the model's tier sets the iteration and nudge caps (false: the three above hold)
    use_tier_caps: bool = True


@dataclass(frozen=True)
class SdkLoopConfig:
    api_failure_threshold: int = field(default=3, metadata=AT_LEAST_ONE)
    compaction_threshold: float = field(default=0.90, metadata=FRACTION)
    doom_loop_threshold: int = field(default=3, metadata=AT_LEAST_ONE)
    retry_base_s: float = field(default=2.0, metadata=POSITIVE)
    retry_cap_s: float = field(default=30.0, metadata=POSITIVE)
    retry_after_cap_s: float = field(default=60.0, metadata=POSITIVE)
    retry_max_attempts: int = field(default=5, metadata=AT_LEAST_ONE)
    #: a human's denial ends the turn (SDK seed); false: the model is told and goes on
    stop_on_denial: bool = True


@dataclass(frozen=True)
class PlanConfig:
    """Plan tracking: the update_plan tool, offered to both loops (OpenAgent seed)."""

    enabled: bool = True


@dataclass(frozen=True)
class PayloadGuardConfig:
    """The payload-growth failsafe (OpenAgent seed)."""

    enabled: bool = True
    growth_factor: float = field(default=5.0, metadata=_check(lambda v: v > 1, "must be > 1"))
    min_growth_bytes: int = field(default=1024, metadata=NON_NEGATIVE)
    on_trip: str = field(
        default="compact", metadata=_check(lambda v: v in ("compact", "stop"), "must be compact or stop"),
    )
    #: empty: <store.data_dir>/snapshots
    snapshot_dir: str = ""


@dataclass(frozen=True)
class ObservationConfig:
    """Observation caps on tool output shown to the model (OpenAgent seed)."""

    enabled: bool = True
    max_lines: int = field(default=200, metadata=AT_LEAST_ONE)
    max_bytes: int = field(default=16384, metadata=_check(lambda v: v >= 2048, "must be >= 2048"))
    hard_limit_bytes: int = field(default=51200, metadata=AT_LEAST_ONE)


@dataclass(frozen=True)
class MemoryConfig:
    """History memory policies (OpenAgent seed); 0 turns a policy off."""

    amnesia_turns: int = field(default=10, metadata=NON_NEGATIVE)
    dementia_turns: int = field(default=30, metadata=NON_NEGATIVE)
    #: per agent name: [amnesia_turns, dementia_turns]
    agents: dict[str, tuple[float, ...]] = field(default_factory=dict, metadata=_check(
        lambda v: all(len(row) == 2 and min(row) >= 0 and all(x == int(x) for x in row) for row in v.values()),
        "rows must be [amnesia_turns, dementia_turns]: two whole numbers >= 0",
    ))


@dataclass(frozen=True)
class CommandPolicyConfig:
    """Command approval policy: allowlisted simple commands skip the human (OpenAgent seed)."""

    enabled: bool = True
    allowlist: tuple[str, ...] = (
        "ls", "pwd", "cat", "head", "tail", "wc", "grep", "find", "tree", "file", "stat", "du",
        "echo", "which", "diff", "git status", "git log", "git diff", "git show", "git ls-files",
        "git blame", "git rev-parse",
    )
    auto_approve_modes: tuple[str, ...] = ("auto-edit",)


@dataclass(frozen=True)
class SandboxConfig:
    """``[tools.sandbox]``: the OS sandbox of tool commands (``corvid_actors.tools.sandbox``)."""

    mode: str = field(default="auto", metadata=_check(lambda v: v in ("auto", "required", "off"),
                                                      "must be auto, required or off"))
    bwrap_path: str = ""
    network_modes: tuple[str, ...] = ("default",)
    network_agents: tuple[str, ...] = ()
    max_processes: int = field(default=256, metadata=AT_LEAST_ONE)
    cpu_seconds: int = field(default=600, metadata=AT_LEAST_ONE)
    max_file_bytes: int = field(default=2 * 1024**3, metadata=AT_LEAST_ONE)
    max_address_space_bytes: int = field(default=16 * 1024**3, metadata=AT_LEAST_ONE)
    hidden_paths: tuple[str, ...] = ()
    visible_paths: tuple[str, ...] = ()
    mask_walk_max_entries: int = field(default=200_000, metadata=AT_LEAST_ONE)


@dataclass(frozen=True)
class ToolsConfig:
    output_truncate_chars: int = field(default=8000, metadata=AT_LEAST_ONE)
    command_timeout_default_s: float = field(default=30.0, metadata=POSITIVE)
    command_timeout_max_s: float = field(default=120.0, metadata=POSITIVE)
    #: empty means the built-in list (tools.paths.DEFAULT_PROTECTED_PATTERNS); never "none"
    protected_patterns: tuple[str, ...] = ()
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)


@dataclass(frozen=True)
class CreditsConfig:
    credits_per_turn: int = field(default=1, metadata=NON_NEGATIVE)
    low_credit_threshold: int = field(default=50, metadata=NON_NEGATIVE)
    free_credits_on_first_message: int = field(default=100, metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class StoreConfig:
    url: str = ""
    data_dir: str = "~/.local/share/corvid-actors"
    sqlite_busy_timeout_ms: int = field(default=30000, metadata=NON_NEGATIVE)

    def resolved_url(self) -> str:
        if self.url:
            return self.url
        return f"sqlite:///{Path(self.data_dir).expanduser() / 'corvid.db'}"


@dataclass(frozen=True)
class DaemonConfig:
    """``corvid-actors serve``: the admin socket, logs, shutdown bound, model server choice."""

    #: auto (a real provider when one answers, else the stub) | ollama | anthropic | stub
    provider: str = field(
        default="auto",
        metadata=_check(lambda v: v in ("auto", "ollama", "anthropic", "stub"),
                        "must be auto, ollama, anthropic or stub"),
    )
    provider_probe_timeout_s: float = field(default=2.0, metadata=POSITIVE)
    stub_reply: str = "Hello from the corvid-actors stub model: no real model is configured."
    stub_chunks: int = field(default=8, metadata=AT_LEAST_ONE)
    stub_chunk_delay_s: float = field(default=0.05, metadata=NON_NEGATIVE)
    shutdown_timeout_s: float = field(default=30.0, metadata=POSITIVE)
    socket_name: str = "admin.sock"
    pid_file_name: str = "corvid.pid"
    #: operators sharing a host may require this token on every admin request ("" = none)
    admin_token: str = ""
    admin_max_request_bytes: int = field(default=65536, metadata=AT_LEAST_ONE)
    admin_max_connections: int = field(default=32, metadata=AT_LEAST_ONE)
    admin_client_timeout_s: float = field(default=30.0, metadata=POSITIVE)
    follow_queue_events: int = field(default=10000, metadata=AT_LEAST_ONE)
    recent_events: int = field(default=50, metadata=AT_LEAST_ONE)
    recent_event_sessions: int = field(default=500, metadata=AT_LEAST_ONE)
    session_list_limit: int = field(default=100, metadata=AT_LEAST_ONE)
    session_messages_shown: int = field(default=20, metadata=AT_LEAST_ONE)
    max_credit_grant: int = field(default=1000000, metadata=AT_LEAST_ONE)
    with_credits: bool = True
    log_format: str = field(
        default="human", metadata=_check(lambda v: v in ("human", "json"), "must be human or json")
    )
    log_level: str = field(
        default="INFO",
        metadata=_check(lambda v: v.upper() in ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR"),
                        "must be a loguru level (DEBUG, INFO, WARNING, ...)"),
    )
    #: a `send` request line may be this long (its message rides in it); other requests
    #: stay under admin_max_request_bytes
    admin_max_send_bytes: int = field(default=8 * 1024 * 1024, metadata=AT_LEAST_ONE)
    #: a new admin connection must send a valid request (token included) within this
    admin_auth_timeout_s: float = field(default=10.0, metadata=POSITIVE)
    #: an admin connection silent this long after a reply is closed
    admin_idle_timeout_s: float = field(default=300.0, metadata=POSITIVE)


#: the keys of one ``[mcp.servers.NAME]`` table and the type each must have
MCP_SERVER_KEYS: dict[str, tuple[type, ...]] = {
    "command": (str,), "args": (list, tuple), "env": (Mapping,), "cwd": (str,), "enabled": (bool,),
    "agents": (list, tuple), "sandbox": (bool,), "network": (bool,),
}


@dataclass(frozen=True)
class McpConfig:
    """External MCP servers over stdio (``corvid_actors.tools.mcp_client``).

    ``servers`` maps a server name to ``{command, args, env, cwd, enabled, agents}``
    (``agents``: names or ids; empty = every agent). The store's ``mcp_server_configs``
    rows add to these and win over an entry of the same name.
    """

    connect_timeout_s: float = field(default=30.0, metadata=POSITIVE)
    call_timeout_s: float = field(default=120.0, metadata=POSITIVE)
    stderr_tail_chars: int = field(default=2000, metadata=AT_LEAST_ONE)
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: start every server in the OS sandbox of [tools.sandbox] (a server's own
    #: ``sandbox = false`` opts it out; its ``network`` key, default true, gives it the network)
    sandbox: bool = True

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


@dataclass(frozen=True)
class CorvidToolsConfig:
    """The runtime's own ``corvid_*`` tools (``corvid_actors.tools.corvid_tools``)."""

    #: MAX_INVOKE_DEPTH: a session at a deeper depth may not message another agent
    max_agent_depth: int = field(default=3, metadata=AT_LEAST_ONE)
    #: how long corvid_send_message waits for the recipient's reply (runtime clock)
    agent_reply_timeout_s: float = field(default=600.0, metadata=POSITIVE)
    #: agent-sourced sessions lose corvid_send_message / corvid_list_agents (no recursion)
    restrict_agent_sessions: bool = True
    extend_timeout_min_minutes: float = field(default=1.0, metadata=POSITIVE)
    extend_timeout_max_minutes: float = field(default=120.0, metadata=POSITIVE)


@dataclass(frozen=True)
class WebhookConfig:
    """The chat webhook transport (``corvid_actors.chat.webhook``): signatures, limits."""

    #: a signed request's timestamp may differ from now by at most this (replays are
    #: refused for as long: the replay store keeps each signature for the window)
    signature_tolerance_s: float = field(default=300.0, metadata=POSITIVE)
    #: accept the old body-only ``sha256=<hex>`` signature too (no timestamp: only the
    #: replay store's window protects it); off unless a platform cannot be upgraded
    allow_legacy_signatures: bool = False
    max_body_bytes: int = field(default=65536, metadata=AT_LEAST_ONE)
    #: the whole request (line, headers, body) must arrive within this; also the idle
    #: limit of a kept-alive connection
    read_timeout_s: float = field(default=10.0, metadata=POSITIVE)
    #: connections served at once; more are answered 429
    max_connections: int = field(default=64, metadata=AT_LEAST_ONE)
    #: seconds a callback POST may take before it counts as failed
    send_timeout_s: float = field(default=10.0, metadata=POSITIVE)


@dataclass(frozen=True)
class Config:
    """The whole configuration, one frozen dataclass per section."""

    supervisor: SupervisorConfig = field(default_factory=SupervisorConfig)
    session: SessionConfig = field(default_factory=SessionConfig)
    providers: ProvidersConfig = field(default_factory=ProvidersConfig)
    slots: SlotsConfig = field(default_factory=SlotsConfig)
    approvals: ApprovalsConfig = field(default_factory=ApprovalsConfig)
    direct_loop: DirectLoopConfig = field(default_factory=DirectLoopConfig)
    sdk_loop: SdkLoopConfig = field(default_factory=SdkLoopConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    credits: CreditsConfig = field(default_factory=CreditsConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
    corvid_tools: CorvidToolsConfig = field(default_factory=CorvidToolsConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    payload_guard: PayloadGuardConfig = field(default_factory=PayloadGuardConfig)
    observation: ObservationConfig = field(default_factory=ObservationConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    command_policy: CommandPolicyConfig = field(default_factory=CommandPolicyConfig)
    webhook: WebhookConfig = field(default_factory=WebhookConfig)

    def replace(self, **sections: Mapping[str, Any]) -> Config:
        """A copy with some keys changed: ``cfg.replace(supervisor={"max_restarts": 5})``."""
        data = to_dict(self)
        for name, values in sections.items():
            if name not in data:
                raise ConfigError(f"unknown config section [{name}]")
            data[name] = {**data[name], **values}
        return from_dict(data)


# --- environment -------------------------------------------------------------------------

#: env var -> (section, key, converter). The seed's names where the seed has one.
ENV_OVERRIDES: dict[str, tuple[str, str, typing.Callable[[str], Any]]] = {
    "AGENT_TIMEOUT_MS": ("supervisor", "session_timeout_s", lambda v: float(v) / 1000),
    "COUNCIL_MODEL": ("supervisor", "council_model", str),
    "OLLAMA_HOST": ("providers", "ollama_host", str),
    "OLLAMA_DEFAULT_MODEL": ("providers", "ollama_default_model", str),
    "OLLAMA_NUM_CTX": ("providers", "ollama_num_ctx", int),
    "OLLAMA_NUM_PREDICT": ("providers", "ollama_num_predict", int),
    "OLLAMA_KEEP_ALIVE": ("providers", "ollama_keep_alive", str),
    "OLLAMA_REQUEST_TIMEOUT": ("providers", "ollama_request_timeout_s", lambda v: float(v) / 1000),
    "ANTHROPIC_BASE_URL": ("providers", "anthropic_base_url", str),
    "ANTHROPIC_API_KEY": ("providers", "anthropic_api_key", str),
    "CORVID_PROVIDER": ("providers", "default_provider", str),
    "OLLAMA_MAX_PARALLEL": ("slots", "max_parallel", int),
    "OLLAMA_SLOT_WAIT_TIMEOUT_MS": ("slots", "wait_timeout_s", lambda v: float(v) / 1000),
    "CREDITS_PER_TURN": ("credits", "credits_per_turn", int),
    "LOW_CREDIT_THRESHOLD": ("credits", "low_credit_threshold", int),
    "FREE_CREDITS_ON_FIRST_MESSAGE": ("credits", "free_credits_on_first_message", int),
    "CORVID_DB_URL": ("store", "url", str),
    "CORVID_DATA_DIR": ("store", "data_dir", str),
}


def _env_layer(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    layer: dict[str, dict[str, Any]] = {}
    for var, (section, key, convert) in ENV_OVERRIDES.items():
        raw = environ.get(var)
        if raw is None or raw == "":
            continue
        try:
            value = convert(raw)
        except ValueError as exc:
            raise ConfigError(f"environment variable {var}={raw!r} is not valid for {section}.{key}: {exc}") from None
        layer.setdefault(section, {})[key] = value
    return layer


# --- loading -----------------------------------------------------------------------------


def default_toml_text() -> str:
    return resources.files("corvid_actors").joinpath("default.toml").read_text(encoding="utf-8")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _merge(base: dict[str, Any], layer: Mapping[str, Any], where: str) -> None:
    for section, values in layer.items():
        if not isinstance(values, Mapping):
            raise ConfigError(f"{where}: [{section}] must be a table")
        target = base.setdefault(section, {})
        for key, value in values.items():
            # A table inside a section (the price table) merges key by key, so a user
            # file that prices one more model keeps the default rows.
            if isinstance(value, Mapping) and isinstance(target.get(key), Mapping):
                target[key] = {**target[key], **value}
            else:
                target[key] = value


def load_config(
    user_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Defaults, then ``user_file`` (or ``$CORVID_CONFIG``), then the environment."""
    env = os.environ if environ is None else environ
    data: dict[str, Any] = tomllib.loads(default_toml_text())
    path = user_file or env.get("CORVID_CONFIG")
    if path:
        _merge(data, _read_toml(Path(path).expanduser()), str(path))
    _merge(data, _env_layer(env), "environment")
    return from_dict(data)


def from_dict(data: Mapping[str, Any]) -> Config:
    """Build and validate a Config; unknown sections or keys are errors (typos fail loudly)."""
    sections: dict[str, Any] = {}
    known = {f.name: f for f in dataclasses.fields(Config)}
    for name, values in data.items():
        if name not in known:
            raise ConfigError(f"unknown config section [{name}] (known: {', '.join(known)})")
        cls = typing.get_type_hints(Config)[name]
        sections[name] = _build_section(name, cls, values)
    return Config(**sections)


def _build_section(section: str, cls: type, values: Mapping[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, raw in values.items():
        if key not in fields:
            raise ConfigError(f"unknown config key {section}.{key} (known: {', '.join(fields)})")
        value = _coerce(f"{section}.{key}", hints[key], raw)
        rule = fields[key].metadata.get("check")
        if rule is not None and not rule(value):
            raise ConfigError(f"config key {section}.{key} = {raw!r} {fields[key].metadata['must']}")
        kwargs[key] = value
    return cls(**kwargs)


def _coerce(key: str, hint: Any, raw: Any) -> Any:
    origin = typing.get_origin(hint)
    if hint is bool:
        if isinstance(raw, bool):
            return raw
        raise ConfigError(f"config key {key} must be true or false, got {raw!r}")
    if hint is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        raise ConfigError(f"config key {key} must be an integer, got {raw!r}")
    if hint is float:
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return float(raw)
        raise ConfigError(f"config key {key} must be a number, got {raw!r}")
    if hint is str:
        if isinstance(raw, str):
            return raw
        raise ConfigError(f"config key {key} must be a string, got {raw!r}")
    if origin is tuple:
        if isinstance(raw, list | tuple) and all(isinstance(x, str) for x in raw):
            return tuple(raw)
        raise ConfigError(f"config key {key} must be a list of strings, got {raw!r}")
    if origin is dict and typing.get_origin(typing.get_args(hint)[1]) is dict:
        # A table of tables ([mcp.servers.NAME]); its section validates the rows.
        if isinstance(raw, Mapping) and all(isinstance(row, Mapping) for row in raw.values()):
            return {str(name): dict(row) for name, row in raw.items()}
        raise ConfigError(f"config key {key} must be a table of tables, got {raw!r}")
    if origin is dict:
        if isinstance(raw, Mapping):
            out = {}
            for name, row in raw.items():
                if not (isinstance(row, list | tuple) and all(isinstance(x, int | float) for x in row)):
                    raise ConfigError(f"config key {key}.{name} must be a list of numbers, got {row!r}")
                out[str(name)] = tuple(float(x) for x in row)
            return out
        raise ConfigError(f"config key {key} must be a table, got {raw!r}")
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        # a table inside a section ([tools.sandbox]): checked key by key like a section
        if isinstance(raw, Mapping):
            return _build_section(key, hint, raw)
        raise ConfigError(f"config key {key} must be a table, got {raw!r}")
    if isinstance(hint, types.UnionType):  # pragma: no cover - no such fields yet
        return raw
    raise ConfigError(f"config key {key}: unsupported type {hint!r}")  # pragma: no cover


def to_dict(config: Config) -> dict[str, dict[str, Any]]:
    return {f.name: dict(dataclasses.asdict(getattr(config, f.name))) for f in dataclasses.fields(config)}
