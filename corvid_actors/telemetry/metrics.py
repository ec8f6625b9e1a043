"""Prometheus metrics of one Runtime, from one registry that ``/metrics`` and ``admin stats`` read.

:class:`RuntimeMetrics` holds a per-Runtime ``CollectorRegistry`` (never the global one:
several runtimes share a test process). Two kinds of figures live in it:

- **counters and histograms from events**: the runtime makes :meth:`RuntimeMetrics.on_event`
  the EventBus's observer (it hears every event on the bus thread, and is not counted among
  the subscribers), so turns, model calls, tokens, cost, tool calls and their time, crashes,
  restarts, outage pauses, give-ups, failed store writes and approvals are counted where
  they are already announced;
- **gauges and counters read at scrape time** from one stats source
  (:func:`corvid_actors.actors.stats.runtime_stats`, the dict ``admin stats`` shows):
  sessions by status, the slot pool and its waits, the event bus, the timer table, the
  store's commits, replays and fenced writes, a cluster seat's leases and heartbeats.
  :meth:`RuntimeMetrics.read` gives ``admin stats`` that dict and the registry's samples
  built from that one reading, so the two never disagree.

Labels are bounded: agent and tool names pass through a :class:`LabelCap` (the first
``[telemetry] metrics_label_cap`` distinct values, then ``other``); no label carries a
session id. :class:`MetricsServer` serves the registry over HTTP (``[telemetry] metrics_listen``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from corvid_actors.errors import ConfigError
from corvid_actors.events import (
    ApprovalRequestEvent,
    ApprovalResolved,
    ErrorEvent,
    Event,
    Result,
    SessionError,
    SessionExited,
    SessionPaused,
    SessionRestarting,
    SessionStarted,
    SessionStopped,
    ToolStatus,
)
from corvid_actors.schema.sections import TelemetryConfig

__all__ = ["LabelCap", "MetricsServer", "RuntimeMetrics", "SessionLabels", "agent_labels", "OTHER", "UNKNOWN"]

#: the label value of every agent (or tool) past the cap
OTHER = "other"
#: the label value when a session's agent (provider, model) cannot be told
UNKNOWN = "unknown"
#: the agent label of a session without an agent
NO_AGENT = "none"
#: the provider (model) label where the agent leaves the choice to routing
DEFAULT = "default"
#: error types that end a session's supervision: the supervisor gave up on it
GIVE_UP_ERRORS = frozenset({"max_restarts_exceeded", "auto_resume_exhausted"})
#: the error type of a store write that failed (``session_error``: retried; ``error``: given up)
STORE_ERROR = "store_error"
#: a tool call's final states (``tool_status``), the ``outcome`` label
TOOL_OUTCOMES = frozenset({"completed", "error"})
#: usage keys counted as ``corvid_tokens_total{kind}`` (providers report these; others are ignored)
TOKEN_KINDS = frozenset({"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"})
#: seconds: a turn takes from a second to many minutes (tool rounds included)
TURN_SECONDS_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
#: seconds: a tool (a sandboxed command included) runs from milliseconds to its timeout
TOOL_SECONDS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: seconds: a person answers an approval in seconds to an hour (``approvals.timeout_s``)
APPROVAL_WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
#: sessions whose labels are remembered at once; past it the memo starts afresh (a bound
#: against sessions that never announce their end, not a figure anyone tunes)
LABEL_MEMO_MAX = 10_000


@dataclass(frozen=True, slots=True)
class SessionLabels:
    """What a session's figures are labelled by (never its id)."""

    agent: str = UNKNOWN
    provider: str = UNKNOWN
    model: str = UNKNOWN


def agent_labels(agent: Any) -> SessionLabels:
    """The labels of a session of ``agent`` (an agent row, or None): ``none`` for a session
    without an agent, ``default`` where the row leaves provider or model to routing."""
    if agent is None:
        return SessionLabels(agent=NO_AGENT, provider=DEFAULT, model=DEFAULT)
    return SessionLabels(agent=agent.name, provider=agent.provider or DEFAULT, model=agent.model or DEFAULT)


class LabelCap:
    """Bounds one label's values: the first ``cap`` distinct values pass, later ones become
    :data:`OTHER` (so a host with thousands of agents keeps a bounded series count)."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        value = value or UNKNOWN
        with self._lock:
            if value in self._seen:
                return value
            if len(self._seen) < self._cap:
                self._seen.add(value)
                return value
        return OTHER


class RuntimeMetrics:
    """The registry of one Runtime and the counters its events move (see the module docstring).

    ``labels_of(session_id)`` names a session's agent, provider and model (read once per
    incarnation, on the bus thread); ``monotonic`` times approval and tool waits;
    ``label_cap``: ``[telemetry] metrics_label_cap`` (default: the packaged value)."""

    def __init__(self, *, labels_of: Callable[[str], SessionLabels] | None = None,
                 monotonic: Callable[[], float] | None = None, label_cap: int | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        if label_cap is None:
            label_cap = TelemetryConfig().metrics_label_cap
        self._labels_of = labels_of or (lambda _sid: SessionLabels())
        self._monotonic = monotonic
        self._agent = LabelCap(label_cap)
        self._tool = LabelCap(label_cap)
        self._memo: dict[str, SessionLabels] = {}
        self._asked: dict[str, float | None] = {}  # approval id -> when asked (monotonic)
        self._running: dict[str, float] = {}  # tool call id -> when it began running (monotonic)
        self._stats_source: Callable[[], Mapping[str, Any]] | None = None
        self._parts: dict[str, Callable[[], Mapping[str, Any]]] = {}
        r, model = self.registry, ("agent", "provider", "model")
        self.sessions_started = Counter("corvid_session_starts", "Session incarnations started (starts, resumes, restarts)", ["agent"], registry=r)
        self.turns = Counter("corvid_turns", "Turns ended, by outcome (success, error, interrupted)", [*model, "outcome"], registry=r)
        self.turn_seconds = Histogram("corvid_turn_duration_seconds", "How long turns took (runtime clock)", ["agent"],
                                      buckets=TURN_SECONDS_BUCKETS, registry=r)
        self.model_calls = Counter("corvid_model_calls", "Model calls (loop iterations, tool rounds included)", model, registry=r)
        self.tokens = Counter("corvid_tokens", "Tokens the provider reported, by kind", [*model, "kind"], registry=r)
        self.cost = Counter("corvid_cost_usd", "Cost of turns in US dollars (as the provider priced them)", model, registry=r)
        self.tool_calls = Counter("corvid_tool_calls", "Tool calls finished, by tool and outcome", ["tool", "outcome"], registry=r)
        self.tool_seconds = Histogram("corvid_tool_call_duration_seconds",
                                      "How long tool calls ran (run_command: the sandboxed command)", ["tool"],
                                      buckets=TOOL_SECONDS_BUCKETS, registry=r)
        self.crashes = Counter("corvid_session_crashes", "Session incarnations that ended with a non-zero code", ["agent"], registry=r)
        self.restarts = Counter("corvid_session_restarts", "Restarts with backoff scheduled after a crash", ["agent"], registry=r)
        self.outage_pauses = Counter("corvid_session_outage_pauses", "Sessions paused by an upstream outage", ["agent"], registry=r)
        self.give_ups = Counter("corvid_session_give_ups", "Sessions the supervisor gave up on, by reason", ["agent", "reason"], registry=r)
        self.store_write_failures = Counter("corvid_store_write_failures", "Writes that must happen and failed: "
                                            "queued for a retry, or given up after the last", ["then"], registry=r)
        self.approvals = Counter("corvid_approvals_requested", "Approval requests, by kind (tool, command, doom_loop)", ["kind"], registry=r)
        self.approvals_pending = Gauge("corvid_approvals_pending", "Approval requests awaiting an answer", registry=r)
        self.approval_wait = Histogram("corvid_approval_wait_seconds", "From an approval request to its answer, by answer",
                                       ["behavior"], buckets=APPROVAL_WAIT_BUCKETS, registry=r)
        self._instruments = (self.sessions_started, self.turns, self.turn_seconds, self.model_calls, self.tokens,
                             self.cost, self.tool_calls, self.tool_seconds, self.crashes, self.restarts, self.outage_pauses,
                             self.give_ups, self.store_write_failures, self.approvals, self.approvals_pending, self.approval_wait)
        r.register(_StatsCollector(self))

    # --- events (the EventBus thread) ----------------------------------------------------------

    def on_event(self, session_id: str, event: Event) -> None:
        """The EventBus's observer (on its thread): count what ``event`` says happened."""
        if isinstance(event, SessionStarted):
            self._memo.pop(session_id, None)  # a new incarnation: read its labels afresh
            self.sessions_started.labels(self._labels(session_id).agent).inc()
        elif isinstance(event, Result):
            self._count_turn(self._labels(session_id), event)
        elif isinstance(event, ToolStatus):
            self._tool_status(event)
        elif isinstance(event, ApprovalRequestEvent):
            self.approvals.labels(event.kind).inc()
            self._asked[event.id] = self._now()
            self.approvals_pending.set(len(self._asked))
        elif isinstance(event, ApprovalResolved):
            self._answered(event)
        elif isinstance(event, SessionRestarting):
            self.restarts.labels(self._labels(session_id).agent).inc()
        elif isinstance(event, SessionPaused):
            self.outage_pauses.labels(self._labels(session_id).agent).inc()
        elif isinstance(event, ErrorEvent) and event.error_type in GIVE_UP_ERRORS:
            self.give_ups.labels(self._labels(session_id).agent, event.error_type).inc()
        elif isinstance(event, SessionError | ErrorEvent) and event.error_type == STORE_ERROR:
            self.store_write_failures.labels("retry" if isinstance(event, SessionError) else "give_up").inc()
        elif isinstance(event, SessionExited):
            if event.code != 0:
                self.crashes.labels(self._labels(session_id).agent).inc()
            self._memo.pop(session_id, None)
        elif isinstance(event, SessionStopped):
            self._memo.pop(session_id, None)

    def _count_turn(self, labels: SessionLabels, event: Result) -> None:
        by_model = (labels.agent, labels.provider, labels.model)
        self.turns.labels(*by_model, event.subtype).inc()
        self.turn_seconds.labels(labels.agent).observe(event.duration_ms / 1000)
        if event.num_turns > 0:
            self.model_calls.labels(*by_model).inc(event.num_turns)
        if event.total_cost_usd > 0:
            self.cost.labels(*by_model).inc(event.total_cost_usd)
        for kind, n in event.usage.items():
            if kind in TOKEN_KINDS and isinstance(n, int) and n > 0:
                self.tokens.labels(*by_model, kind).inc(n)

    def _tool_status(self, event: ToolStatus) -> None:
        now = self._now()
        if event.state == "running" and now is not None and event.call_id:
            if len(self._running) >= LABEL_MEMO_MAX:
                self._running.clear()  # calls that never announced their end
            self._running[event.call_id] = now
        elif event.state in TOOL_OUTCOMES:
            tool = self._tool(event.tool_name)
            self.tool_calls.labels(tool, event.state).inc()
            began = self._running.pop(event.call_id, None)
            if began is not None and now is not None:
                self.tool_seconds.labels(tool).observe(max(0.0, now - began))

    def _answered(self, event: ApprovalResolved) -> None:
        if event.id not in self._asked:
            return  # asked before this registry existed
        asked = self._asked.pop(event.id)
        now = self._now()
        if asked is not None and now is not None:
            self.approval_wait.labels(event.behavior).observe(max(0.0, now - asked))
        self.approvals_pending.set(len(self._asked))

    def _now(self) -> float | None:
        return None if self._monotonic is None else self._monotonic()

    def _labels(self, session_id: str) -> SessionLabels:
        labels = self._memo.get(session_id)
        if labels is not None:
            return labels
        try:
            found = self._labels_of(session_id)
        except Exception:  # noqa: BLE001 - a store that cannot answer must not lose the count
            return SessionLabels(agent=self._agent(UNKNOWN))
        labels = SessionLabels(self._agent(found.agent), found.provider or UNKNOWN, found.model or UNKNOWN)
        if len(self._memo) >= LABEL_MEMO_MAX:
            self._memo.clear()
        self._memo[session_id] = labels
        return labels

    # --- figures read at scrape time -----------------------------------------------------------

    def set_stats_source(self, source: Callable[[], Mapping[str, Any]]) -> None:
        """Where the scrape-time gauges come from (the runtime's stats, as ``admin stats`` shows them)."""
        self._stats_source = source

    def add_stats_part(self, name: str, part: Callable[[], Mapping[str, Any]]) -> None:
        """One more section of the stats (``stats[name] = part()``), for what a host adds
        around the runtime (the daemon: its event followers)."""
        self._parts[name] = part

    def _stats(self) -> dict[str, Any]:
        stats = dict(self._stats_source()) if self._stats_source is not None else {}
        for name, part in self._parts.items():
            stats[name] = dict(part())
        return stats

    def read(self) -> tuple[dict[str, Any], dict[str, float]]:
        """One reading of the stats source and the registry's samples made from it:
        ``(stats, {"name{label=\\"value\\"}": value})`` (buckets left out). ``admin stats``
        shows both; a scrape at the same moment shows the same numbers."""
        stats = self._stats()
        families = [*self._event_families(), *stat_families(stats)]
        return stats, flatten(families)

    def _event_families(self) -> Iterator[Metric]:
        for instrument in self._instruments:
            yield from instrument.collect()


class _StatsCollector(Collector):
    """The scrape-time gauges: one reading of the stats source per scrape."""

    def __init__(self, metrics: RuntimeMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        try:
            stats = self._metrics._stats()
        except Exception:  # noqa: BLE001 - a stopping runtime: the counters are still worth serving
            return []
        return list(stat_families(stats))

    def describe(self) -> Iterable[Metric]:
        return []  # names are known only when read: the registry must not collect at register


def stat_families(stats: Mapping[str, Any]) -> Iterator[Metric]:
    """The gauges (and the counters the actors keep themselves) of one stats reading."""
    by_status = stats.get("sessions_by_status")
    if by_status is not None:
        g = GaugeMetricFamily("corvid_sessions", "Session rows by status (store)", labels=["status"])
        for status, n in sorted(by_status.items()):
            g.add_metric([status], n)
        yield g
    sup = stats.get("supervisor")
    if sup is not None:
        g = GaugeMetricFamily("corvid_live_sessions", "Sessions the supervisor holds, running or paused", labels=["state"])
        g.add_metric(["running"], sup.get("processes", 0))
        g.add_metric(["paused"], sup.get("paused_sessions", 0))
        yield g
    slots = stats.get("slots")
    if slots is not None:
        yield GaugeMetricFamily("corvid_slots_capacity", "Inference slots in the pool", value=slots.get("capacity", 0))
        yield GaugeMetricFamily("corvid_slots_in_use", "Inference slots held", value=slots.get("in_use", 0))
        yield GaugeMetricFamily("corvid_slots_waiting", "Sessions waiting for a slot", value=slots.get("waiting", 0))
        yield CounterMetricFamily("corvid_slot_grants", "Slots granted", value=slots.get("grants", 0))
        yield SummaryMetricFamily("corvid_slot_wait_seconds", "Time granted requests waited for a slot",
                                  count_value=slots.get("grants", 0), sum_value=slots.get("wait_s_total", 0.0))
        yield CounterMetricFamily("corvid_slot_wait_timeouts", "Requests that gave up waiting for a slot",
                                  value=slots.get("wait_timeouts", 0))
    bus = stats.get("event_bus")
    if bus is not None:
        g = GaugeMetricFamily("corvid_event_bus_subscribers", "Event subscribers, per session or global", labels=["scope"])
        g.add_metric(["session"], bus.get("subscribers", 0))
        g.add_metric(["global"], bus.get("global_subscribers", 0))
        yield g
        yield GaugeMetricFamily("corvid_event_bus_queue_depth", "Messages waiting in the EventBus's mailbox",
                                value=bus.get("queue_depth", 0))
        yield CounterMetricFamily("corvid_event_bus_subscriber_errors", "Deliveries a subscriber raised on (event lost to it)",
                                  value=bus.get("subscriber_errors", 0))
        yield CounterMetricFamily("corvid_event_bus_deltas_coalesced", "Text deltas merged for subscribers that fell behind",
                                  value=bus.get("deltas_merged", 0))
    store = stats.get("store")
    if store is not None:
        yield SummaryMetricFamily("corvid_store_message_commit_seconds", "Message batches committed, and the time",
                                  count_value=store.get("message_commits", 0),
                                  sum_value=store.get("message_commit_s_total", 0.0))
        yield GaugeMetricFamily("corvid_store_available", "1 while the store answers, 0 during an outage",
                                value=1 if store.get("available", True) else 0)
        yield CounterMetricFamily("corvid_store_replays", "Store operations replayed after a lost connection",
                                  value=store.get("replays", 0))
        yield CounterMetricFamily("corvid_store_fenced_writes", "Writes refused: a newer owner holds the session",
                                  value=store.get("fenced_writes", 0))
    cluster = stats.get("cluster")
    if cluster is not None:
        yield GaugeMetricFamily("corvid_cluster_leases_held", "Session leases this daemon holds", value=cluster.get("owned", 0))
        yield CounterMetricFamily("corvid_cluster_takeovers", "Sessions claimed from daemons that stopped renewing",
                                  value=cluster.get("adopted", 0))
        yield CounterMetricFamily("corvid_cluster_sessions_lost", "Sessions another daemon claimed from this one",
                                  value=cluster.get("lost", 0))
        yield CounterMetricFamily("corvid_cluster_heartbeats", "Heartbeats that renewed this daemon's leases",
                                  value=cluster.get("heartbeats", 0))
        yield GaugeMetricFamily("corvid_cluster_heartbeat_age_seconds", "Seconds since the last successful heartbeat",
                                value=cluster.get("heartbeat_age_s", 0.0))
    followers = stats.get("followers")
    if followers is not None:
        yield GaugeMetricFamily("corvid_event_followers", "Event streams followed over the admin socket",
                                value=followers.get("followers", 0))
        yield CounterMetricFamily("corvid_event_follower_dropped_events", "Events followers lost by falling behind",
                                  value=followers.get("dropped_events", 0))
    timers = stats.get("timers")
    if timers is not None:
        yield GaugeMetricFamily("corvid_timers_pending", "Timers scheduled", value=timers.get("timers", 0))


def flatten(families: Iterable[Metric]) -> dict[str, float]:
    """Samples as ``{"name{label=\\"value\\"}": value}``, histogram buckets and ``_created`` left out."""
    out: dict[str, float] = {}
    for family in families:
        for s in family.samples:
            if s.name.endswith(("_bucket", "_created")):
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


class MetricsServer:
    """``/metrics`` over HTTP on ``host:port`` (prometheus_client's server, on its own
    thread); :meth:`close` stops it and joins the thread."""

    def __init__(self, registry: CollectorRegistry, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        try:
            self._server, self._thread = start_http_server(int(port), addr=host.strip("[]"), registry=registry)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"[telemetry] metrics_listen = {listen!r}: cannot serve /metrics there ({exc}); "
                              "choose a free host:port, or \"\" to serve no metrics") from exc
        self.host = host
        self.port: int = self._server.server_address[1]

    @property
    def url(self) -> str:
        """Where to scrape: ``http://host:port/metrics``."""
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
