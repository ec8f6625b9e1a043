"""The runtime's config sections: each key's name, type and check (values: default.toml).

One frozen dataclass per ``[section]`` of ``config/default.toml``; :func:`section` fills
their defaults from that file (see :mod:`corvid_actors.schema.fields`). The actors take
their section directly (the slot pool its :class:`SlotsConfig`, the credit bank its
:class:`CreditsConfig`). The loops' sections live in :mod:`corvid_actors.loop.settings`,
the tools' in :mod:`corvid_actors.schema.tool_sections`; :class:`corvid_actors.config.Config`
holds them all.
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path

from corvid_actors.core.double_texting import DOUBLE_TEXTING_POLICIES
from corvid_actors.core.vocabulary import AGENT_KINDS, CHAT_AGENT, CONVERSATION_MODES  # noqa: F401 - re-exported
from corvid_actors.errors import ConfigError
from corvid_actors.schema.fields import (
    AT_LEAST_ONE,
    NON_NEGATIVE,
    POSITIVE,
    check,
    env_only,
    one_of,
    section,
)


@section("supervisor")
class SupervisorConfig:
    session_timeout_s: float = field(metadata=POSITIVE)
    timeout_extension_cap_factor: float = field(metadata=AT_LEAST_ONE)
    timeout_fallback_check_s: float = field(metadata=POSITIVE)
    restart_backoff_base_s: float = field(metadata=POSITIVE)
    restart_backoff_multiplier: float = field(metadata=AT_LEAST_ONE)
    max_restarts: int = field(metadata=NON_NEGATIVE)
    coalesce_deltas: bool
    delta_interval_ms: float = field(metadata=NON_NEGATIVE)
    stable_period_s: float = field(metadata=POSITIVE)
    auto_resume_base_s: float = field(metadata=POSITIVE)
    auto_resume_multiplier: float = field(metadata=AT_LEAST_ONE)
    auto_resume_cap_s: float = field(metadata=POSITIVE)
    auto_resume_max_attempts: int = field(metadata=NON_NEGATIVE)
    orphan_prune_interval_s: float = field(metadata=POSITIVE)
    session_idle_timeout_s: float = field(metadata=POSITIVE)
    auto_restart_sources: tuple[str, ...]
    council_model: str
    sdk_pid_base: int = field(metadata=POSITIVE)
    direct_pid_base: int = field(metadata=POSITIVE)
    auto_resume_check_interval_s: float = field(metadata=POSITIVE)
    idle_exit_loops: tuple[str, ...]


@section("session")
class SessionConfig:
    max_turns_before_context_reset: int = field(metadata=AT_LEAST_ONE)
    resume_history_messages: int = field(metadata=AT_LEAST_ONE)
    resume_history_message_chars: int = field(metadata=AT_LEAST_ONE)
    zero_turn_breaker_threshold: int = field(metadata=AT_LEAST_ONE)
    #: idle this long (no turn in flight), a session loses its actor (issue 37); 0: never
    passivate_after_s: float = field(metadata=NON_NEGATIVE)
    #: agents (by revision) whose rows and built parts a process keeps (issue 37); 0: none
    build_cache_entries: int = field(metadata=NON_NEGATIVE)


@section("providers")
class ProvidersConfig:
    default_provider: str
    ollama_host: str
    ollama_default_model: str
    ollama_num_ctx: int = field(metadata=POSITIVE)
    ollama_num_predict: int = field(metadata=POSITIVE)
    ollama_keep_alive: str
    ollama_request_timeout_s: float = field(metadata=POSITIVE)
    #: the async client's connection cap (httpx ``max_connections``); 0: no cap
    ollama_max_connections: int = field(metadata=NON_NEGATIVE)
    #: passed to the Ollama provider as is: empty means "no model gets text-based tools"
    ollama_text_tool_families: tuple[str, ...]
    anthropic_base_url: str
    anthropic_default_model: str
    anthropic_max_tokens: int = field(metadata=POSITIVE)
    anthropic_default_context_window: int = field(metadata=POSITIVE)
    health_probe_timeout_s: float = field(metadata=POSITIVE)
    #: USD per million tokens: input, output, cache read, cache write
    anthropic_prices: dict[str, tuple[float, ...]]
    #: credentials come from the environment only (ANTHROPIC_API_KEY); never from files
    anthropic_api_key: str = env_only()


@section("slots")
class SlotsConfig:
    """The SlotPool's section (``actors/slots.py``) and the model weights it admits by."""

    max_parallel: int = field(metadata=AT_LEAST_ONE)
    wait_timeout_s: float = field(metadata=NON_NEGATIVE)
    heavy_model_min_b: float = field(metadata=POSITIVE)
    medium_model_min_b: float = field(metadata=POSITIVE)
    heavy_model_weight: int = field(metadata=AT_LEAST_ONE)
    medium_model_weight: int = field(metadata=AT_LEAST_ONE)
    light_model_weight: int = field(metadata=AT_LEAST_ONE)

    def weight_for(self, parameter_size_b: float | None) -> int:
        """A model's slot weight from its size in billions of parameters (unknown: light)."""
        if parameter_size_b is None:
            return self.light_model_weight
        if parameter_size_b >= self.heavy_model_min_b:
            return self.heavy_model_weight
        if parameter_size_b >= self.medium_model_min_b:
            return self.medium_model_weight
        return self.light_model_weight


@section("approvals")
class ApprovalsConfig:
    timeout_s: float = field(metadata=POSITIVE)
    chat_timeout_s: float = field(metadata=POSITIVE)
    mode: str = field(metadata=one_of("normal", "queued", "paused"))


@section("store.write_retry")
class RetrySchedule:
    """Waits between the tries of something that must happen (a store write, a credit
    charge), scheduled through the timer table: ``delays_s[n]`` before retry ``n + 1``,
    the last delay repeating, at most ``max_attempts`` tries in all (the first included).
    The same type is the ``[store.write_retry]`` and ``[credits.charge_retry]`` tables."""

    delays_s: tuple[float, ...] = field(metadata=check(lambda v: min(v) >= 0, "must be delays >= 0"))
    max_attempts: int = field(metadata=AT_LEAST_ONE)

    def delay_s(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failed tries (1 for the first)."""
        return self.delays_s[min(max(failures, 1), len(self.delays_s)) - 1]


@section("credits")
class CreditsConfig:
    credits_per_turn: int = field(metadata=NON_NEGATIVE)
    low_credit_threshold: int = field(metadata=NON_NEGATIVE)
    free_credits_on_first_message: int = field(metadata=NON_NEGATIVE)
    #: session sources whose turns cost credits
    charged_sources: tuple[str, ...]
    #: a charge the store refused is tried again on this schedule
    charge_retry: RetrySchedule


@section("access")
class AccessConfig:
    """Who may talk to an agent, how often, and for how much: the values an agent uses when
    its own column is NULL (``corvid_actors.policy.access``; the original's agents carry them)."""

    #: private: owners only; allowlist: owners and ``conversation_allowlist``; public: anyone
    conversation_mode: str = field(metadata=one_of(*CONVERSATION_MODES))
    #: participant ids (as the chat transport names them) admitted in ``allowlist`` mode
    conversation_allowlist: tuple[str, ...]
    #: a participant's messages answered per agent in any window of this many seconds
    conversation_rate_limit_window_s: float = field(metadata=POSITIVE)
    #: ... at most this many (0: no limit); owners are not limited
    conversation_rate_limit_max: int = field(metadata=NON_NEGATIVE)
    #: USD one session of an agent may spend (0: no cap)
    max_budget_usd: float = field(metadata=NON_NEGATIVE)
    #: USD all the sessions of an agent together may spend (0: no cap)
    max_total_budget_usd: float = field(metadata=NON_NEGATIVE)


@section("store")
class StoreConfig:
    url: str
    data_dir: str
    sqlite_busy_timeout_ms: int = field(metadata=NON_NEGATIVE)
    #: while the database is unreachable: first and longest wait between reconnect attempts
    reconnect_backoff_initial_s: float = field(metadata=POSITIVE)
    reconnect_backoff_max_s: float = field(metadata=POSITIVE)
    #: "writer" | "group_commit" | "direct" (db/writer.py, db/group_commit.py)
    message_writes: str = field(metadata=one_of("writer", "group_commit", "direct"))
    max_message_batch: int = field(metadata=AT_LEAST_ONE)
    #: seconds between two looks at a SQLite file before writes (0: before every write)
    file_check_interval_s: float = field(metadata=NON_NEGATIVE)
    #: writes an actor could not make are retried on this schedule (actors/retry.py)
    write_retry: RetrySchedule

    def resolved_url(self) -> str:
        if self.url:
            return self.url
        return f"sqlite:///{Path(self.data_dir).expanduser() / 'corvid.db'}"


_LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR")


@section("daemon")
class DaemonConfig:
    """``corvid-actors serve``: the admin socket, logs, shutdown bound, model server choice."""

    provider: str = field(metadata=one_of("auto", "ollama", "anthropic", "stub"))
    provider_probe_timeout_s: float = field(metadata=POSITIVE)
    stub_reply: str
    stub_chunks: int = field(metadata=AT_LEAST_ONE)
    stub_chunk_delay_s: float = field(metadata=NON_NEGATIVE)
    shutdown_timeout_s: float = field(metadata=POSITIVE)
    socket_name: str
    pid_file_name: str
    admin_token: str
    admin_max_request_bytes: int = field(metadata=AT_LEAST_ONE)
    admin_max_connections: int = field(metadata=AT_LEAST_ONE)
    admin_client_timeout_s: float = field(metadata=POSITIVE)
    follow_queue_events: int = field(metadata=AT_LEAST_ONE)
    recent_events: int = field(metadata=AT_LEAST_ONE)
    recent_event_sessions: int = field(metadata=AT_LEAST_ONE)
    session_list_limit: int = field(metadata=AT_LEAST_ONE)
    session_messages_shown: int = field(metadata=AT_LEAST_ONE)
    max_credit_grant: int = field(metadata=AT_LEAST_ONE)
    with_credits: bool
    log_format: str = field(metadata=one_of("human", "json"))
    log_level: str = field(metadata=check(lambda v: v.upper() in _LOG_LEVELS,
                                          "must be a loguru level (DEBUG, INFO, WARNING, ...)"))
    admin_max_send_bytes: int = field(metadata=AT_LEAST_ONE)
    admin_auth_timeout_s: float = field(metadata=POSITIVE)
    admin_idle_timeout_s: float = field(metadata=POSITIVE)
    history_messages: int = field(metadata=AT_LEAST_ONE)
    log_file: str
    log_rotation: str
    log_retention: str
    log_compression: str = field(metadata=one_of("", "gz", "bz2", "xz", "zip", "tar", "tar.gz", "tar.bz2", "tar.xz"))
    allow_fault_commands: bool = False


def _listen_address(value: str) -> bool:
    """Empty (off) or ``host:port`` with a port number."""
    if value == "":
        return True
    host, sep, port = value.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 <= int(port) <= 65535)


@section("telemetry")
class TelemetryConfig:
    """``[telemetry]``: the Prometheus metrics (:mod:`corvid_actors.telemetry.metrics`) and
    what OpenTelemetry traces hold (:mod:`corvid_actors.telemetry.tracing`; where they go
    is the ``OTEL_*`` environment's)."""

    #: model-call spans also carry the prompt and the reply text
    capture_content: bool

    #: ``host:port`` the daemon serves ``/metrics`` on ("" = off)
    metrics_listen: str = field(metadata=check(_listen_address, 'must be "" (off) or host:port'))
    #: distinct agents (and tools) named in labels; later ones are counted as ``other``
    metrics_label_cap: int = field(metadata=AT_LEAST_ONE)


@section("http")
class HttpConfig:
    """``[http]``: the daemon's HTTP listener (:mod:`corvid_actors.http`, the ``http`` extra)."""

    #: ``host:port`` of the JSON API, events, health and metrics ("" = off)
    listen: str = field(metadata=check(_listen_address, 'must be "" (off) or host:port'))
    #: uvicorn: connections and tasks at once (beyond: 503)
    limit_concurrency: int = field(metadata=AT_LEAST_ONE)
    #: uvicorn: an idle keep-alive connection is closed after this long
    timeout_keep_alive_s: float = field(metadata=POSITIVE)
    #: uvicorn (h11): the request line and headers' buffer in bytes
    h11_max_incomplete_event_size: int = field(metadata=AT_LEAST_ONE)
    #: largest request body in bytes (413 ``too_large`` beyond)
    max_body_bytes: int = field(metadata=AT_LEAST_ONE)
    #: events kept for a reconnecting client's ``Last-Event-ID`` and a new one's backlog
    sse_backlog_events: int = field(metadata=AT_LEAST_ONE)
    #: undelivered events a stream may hold before it is closed (the client resumes)
    sse_client_queue_events: int = field(metadata=AT_LEAST_ONE)
    #: a comment on an idle stream this often
    sse_heartbeat_s: float = field(metadata=POSITIVE)
    #: ``GET /api/v1/sessions`` page size when ``limit`` is not given
    sessions_page_default: int = field(metadata=AT_LEAST_ONE)
@section("journal")
class JournalConfig:
    """``[journal]``: the record of what the outside world said to each session (model
    responses, tool results, approvals, lifecycle), kept to turn a session into a replay
    test (:mod:`corvid_actors.actors.journal`, :mod:`corvid_actors.testing.replay`)."""

    #: journal every session (off: only the agents named in ``agents``)
    enabled: bool
    #: entries older than this many days are deleted (0: kept until deleted by hand)
    keep_days: float = field(metadata=NON_NEGATIVE)
    #: keep texts (prompts, replies, tool arguments and results); off: shapes and timings only
    capture_content: bool
    #: agents journaled even when ``enabled`` is off (the per-agent opt-in), by name
    agents: tuple[str, ...]


@section("agents")
class AgentsConfig:
    """What an agent is and does when its row does not say (``agents.kind``,
    ``agents.double_texting`` NULL)."""

    #: ``task`` (nudged to act with tools) or ``chat`` (converses); a session of a chat
    #: bridge (source ``chat``) whose agent does not say is ``chat`` whatever this is
    default_kind: str = field(metadata=one_of(*AGENT_KINDS))
    #: enqueue, interrupt or reject; "" (the default): by the agent's kind
    #: (``corvid_actors.core.double_texting``: a task agent enqueues, a chat agent interrupts)
    double_texting: str = field(metadata=one_of("", *DOUBLE_TEXTING_POLICIES))

    def kind_for(self, stored: str | None, source: str) -> str:
        """The kind of an agent whose row holds ``stored`` (None: not set), in a session
        from ``source``: the row's, else ``chat`` behind a chat bridge, else the default."""
        if stored:
            return stored
        return CHAT_AGENT if source == "chat" else self.default_kind


@section("webhook")
class WebhookConfig:
    """The chat webhook transport (``corvid_actors.chat.webhook``): signatures, limits."""

    signature_tolerance_s: float = field(metadata=POSITIVE)
    allow_legacy_signatures: bool
    max_body_bytes: int = field(metadata=AT_LEAST_ONE)
    read_timeout_s: float = field(metadata=POSITIVE)
    max_connections: int = field(metadata=AT_LEAST_ONE)
    max_connections_per_client: int = field(metadata=AT_LEAST_ONE)
    send_timeout_s: float = field(metadata=POSITIVE)

    def __post_init__(self) -> None:
        if self.max_connections_per_client > self.max_connections:
            raise ConfigError(f"config key webhook.max_connections_per_client = {self.max_connections_per_client} "
                              f"must be at most webhook.max_connections = {self.max_connections} "
                              "(one client cannot hold more than every connection)")


@section("cluster.bus")
class ClusterBusConfig:
    """``[cluster.bus]``: the purge of the daemon-to-daemon bus's tables
    (:mod:`corvid_actors.db.pg_bus_purge`) and how long a read waits for a session's owner
    (:mod:`corvid_actors.actors.admin._cluster`)."""

    purge_interval_s: float = field(metadata=POSITIVE)
    finished_retention_s: float = field(metadata=POSITIVE)
    unanswered_retention_s: float = field(metadata=POSITIVE)
    purge_batch: int = field(metadata=AT_LEAST_ONE)
    owner_query_timeout_s: float = field(metadata=POSITIVE)


@section("cluster")
class ClusterConfig:
    """Several daemons on one PostgreSQL (``[cluster]``; :mod:`corvid_actors.db.cluster`):
    heartbeats, session leases, the expired-lease sweep and the per-daemon bound."""

    enabled: bool
    daemon_id: str
    heartbeat_s: float = field(metadata=POSITIVE)
    lease_s: float = field(metadata=POSITIVE)
    sweep_interval_s: float = field(metadata=POSITIVE)
    sweep_jitter_s: float = field(metadata=NON_NEGATIVE)
    max_sessions: int = field(metadata=AT_LEAST_ONE)
    dead_daemon_grace_s: float = field(metadata=POSITIVE)
    bus: ClusterBusConfig
    #: after the store comes back from an outage, this daemon sweeps no lease (and declares
    #: no daemon gone) until ``heartbeat_s + outage_grace_s`` after it saw it back (issue 36)
    outage_grace_s: float = field(default=5.0, metadata=NON_NEGATIVE)
    #: the ownership rows kept per session (issue 36; ``admin session`` shows them; 0: none)
    ownership_history_max: int = field(default=50, metadata=NON_NEGATIVE)
    #: a rebalance hands sessions over until this daemon holds at most this many more than
    #: the least-loaded live daemon (issue 36)
    rebalance_tolerance: int = field(default=1, metadata=AT_LEAST_ONE)
    #: when a daemon joins, every other daemon offers it its idle sessions beyond that bound
    rebalance_on_join: bool = False

    def __post_init__(self) -> None:
        # A lease shorter than a heartbeat expires between two renewals of a live owner.
        if self.lease_s <= self.heartbeat_s:
            raise ConfigError(f"config key cluster.lease_s = {self.lease_s} must be more than "
                              f"cluster.heartbeat_s = {self.heartbeat_s} (leases would lapse between heartbeats)")
        if self.dead_daemon_grace_s < self.lease_s:
            raise ConfigError(f"config key cluster.dead_daemon_grace_s = {self.dead_daemon_grace_s} must be at "
                              f"least cluster.lease_s = {self.lease_s} (a daemon is declared gone after its leases expired)")
