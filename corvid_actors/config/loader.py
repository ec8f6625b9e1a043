"""Typed configuration: ``config/default.toml`` < a user file < environment variables.

:func:`load_config` returns a frozen :class:`Config`, one section object per ``[table]``.
The sections are declared beside what reads them (:mod:`corvid_actors.schema.sections`,
:mod:`corvid_actors.schema.tool_sections`, :mod:`corvid_actors.loop.settings`) and take their
defaults from the packaged TOML (:mod:`corvid_actors.schema.fields`), the only place a
default is written. Every value is checked against its declared type and range; a bad
value raises :class:`ConfigError` naming the key, so a daemon fails at start-up rather
than hours later.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corvid_actors.errors import ConfigError
from corvid_actors.loop.settings import (
    DirectLoopSettings,
    MemoryConfig,
    ObservationConfig,
    PayloadGuardConfig,
    PlanConfig,
    SdkLoopSettings,
)
from corvid_actors.schema.fields import build_section, default_toml_text, values_of
from corvid_actors.schema.sections import (
    AccessConfig,
    AgentsConfig,
    ApprovalsConfig,
    ClusterConfig,
    CreditsConfig,
    DaemonConfig,
    HttpConfig,
    JournalConfig,
    ProvidersConfig,
    SessionConfig,
    SlotsConfig,
    StoreConfig,
    SupervisorConfig,
    TelemetryConfig,
    WebhookConfig,
)
from corvid_actors.schema.tool_sections import (
    PERMISSION_MODE_NAMES,
    CommandPolicyConfig,
    CorvidToolsConfig,
    McpConfig,
    ToolsConfig,
)


@dataclass(frozen=True)
class Config:
    """The whole configuration, one frozen dataclass per section."""

    supervisor: SupervisorConfig = field(default_factory=SupervisorConfig)
    session: SessionConfig = field(default_factory=SessionConfig)
    providers: ProvidersConfig = field(default_factory=ProvidersConfig)
    slots: SlotsConfig = field(default_factory=SlotsConfig)
    approvals: ApprovalsConfig = field(default_factory=ApprovalsConfig)
    direct_loop: DirectLoopSettings = field(default_factory=DirectLoopSettings)
    sdk_loop: SdkLoopSettings = field(default_factory=SdkLoopSettings)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    credits: CreditsConfig = field(default_factory=CreditsConfig)
    access: AccessConfig = field(default_factory=AccessConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
    corvid_tools: CorvidToolsConfig = field(default_factory=CorvidToolsConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    payload_guard: PayloadGuardConfig = field(default_factory=PayloadGuardConfig)
    observation: ObservationConfig = field(default_factory=ObservationConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    command_policy: CommandPolicyConfig = field(default_factory=CommandPolicyConfig)
    agents: AgentsConfig = field(default_factory=AgentsConfig)
    webhook: WebhookConfig = field(default_factory=WebhookConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    journal: JournalConfig = field(default_factory=JournalConfig)

    def replace(self, **sections: Mapping[str, Any]) -> Config:
        """A copy with some keys changed: ``cfg.replace(supervisor={"max_restarts": 5})``."""
        data: dict[str, Any] = to_dict(self)
        for name in sections:
            if name not in data:
                raise ConfigError(f"unknown config section [{name}]")
        _merge(data, sections, "Config.replace")
        return from_dict(data)


# --- environment -------------------------------------------------------------------------

def _truthy(value: str) -> bool:
    """An environment switch: 1/true/yes/on or 0/false/no/off."""
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 1/0, true/false, yes/no or on/off")


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
    "CORVID_CLUSTER": ("cluster", "enabled", _truthy),
    "CORVID_METRICS_LISTEN": ("telemetry", "metrics_listen", str),
    "CORVID_HTTP_LISTEN": ("http", "listen", str),
    "CORVID_DAEMON_ID": ("cluster", "daemon_id", str),
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


#: keys of earlier releases that moved into a sub-table: section -> old key -> (table, key)
RENAMED_KEYS: dict[str, dict[str, tuple[str, str]]] = {
    "sdk_loop": {
        "retry_base_s": ("retry", "base_s"),
        "retry_cap_s": ("retry", "cap_s"),
        "retry_after_cap_s": ("retry", "retry_after_cap_s"),
        "retry_max_attempts": ("retry", "max_attempts"),
    },
}


def _legacy_network_modes(layer: dict[str, Any], where: str) -> dict[str, Any]:
    """Earlier releases' ``[tools.sandbox] network_modes = [modes]`` (those modes got the
    host network, the others none) read as today's ``network`` table, in full."""
    tools = layer.get("tools")
    if not isinstance(tools, Mapping):
        return layer
    sandbox = tools.get("sandbox")
    if not isinstance(sandbox, Mapping) or "network_modes" not in sandbox:
        return layer
    modes = sandbox["network_modes"]
    if "network" in sandbox:
        raise ConfigError(f"{where}: [tools.sandbox] sets both network_modes and network; "
                          "network_modes was replaced by network = {MODE = \"none\"|\"host\"}: "
                          "keep network only")
    if not isinstance(modes, list | tuple) or not all(m in PERMISSION_MODE_NAMES for m in modes):
        raise ConfigError(f"{where}: config key tools.sandbox.network_modes must list permission "
                          f"modes ({', '.join(PERMISSION_MODE_NAMES)}), got {modes!r}")
    rest = {k: v for k, v in sandbox.items() if k != "network_modes"}
    rest["network"] = {m: "host" if m in modes else "none" for m in PERMISSION_MODE_NAMES}
    return {**layer, "tools": {**tools, "sandbox": rest}}


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return _legacy_network_modes(tomllib.load(fh), str(path))
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
    hints = typing.get_type_hints(Config)
    for name, values in data.items():
        if name not in known:
            raise ConfigError(f"unknown config section [{name}] (known: {', '.join(known)})")
        if not isinstance(values, Mapping):
            raise ConfigError(f"config section [{name}] must be a table")
        sections[name] = build_section(name, hints[name], _renamed_keys(name, values))
    return Config(**sections)


def _renamed_keys(section: str, values: Mapping[str, Any]) -> Mapping[str, Any]:
    """Keys of earlier releases moved into a sub-table (``sdk_loop.retry_base_s`` is
    ``sdk_loop.retry.base_s``): an operator's file keeps loading, and wins over the
    sub-table's value, which is the packaged default unless the file names it too."""
    moves = RENAMED_KEYS.get(section)
    if not moves or not any(key in values for key in moves):
        return values
    out = dict(values)
    for old, (table, key) in moves.items():
        if old in out:
            out[table] = {**dict(out.get(table) or {}), key: out.pop(old)}
    return out


def to_dict(config: Config) -> dict[str, dict[str, Any]]:
    """Every config key by section (sub-tables as dicts; calibrations left out)."""
    return {f.name: _section_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}


def _section_dict(value: object) -> dict[str, Any]:
    return {name: _section_dict(item) if dataclasses.is_dataclass(item) else copy.deepcopy(item)
            for name, item in values_of(value).items()}
