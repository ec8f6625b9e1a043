"""The Runtime's construction: the store, the providers and the actor tree, and the
:class:`RuntimeInternals` that hold them.

The :class:`~corvid_actors.runtime.Runtime` is a facade: programs use its methods, never
its actors. What it is built from sits in one :class:`RuntimeInternals` object,
``runtime.internals``, for the few places that must wire into the tree itself:

- the runtime's own modules (the ``corvid_actors.runtime`` package);
- ``corvid_actors.testing`` (fault hooks reach the store and the actors on purpose);
- the daemon's admin-actor wiring (``daemon/service.py``: the AdminActor is one more
  actor of the same tree, started on the same tracker);
- tests.

``tests/public_api/test_runtime_facade.py`` fails when other package code reaches into it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import pykka
from opentelemetry.trace import TracerProvider

from corvid_actors.actors import approvals as ap
from corvid_actors.actors import supervisor as sv
from corvid_actors.actors.base import ActivityTracker
from corvid_actors.actors.cluster import ClusterMember, ClusterSeat, new_daemon_id
from corvid_actors.actors.credits import BindSupervisor, CreditBank
from corvid_actors.actors.events import EventBus, SubscribeAll
from corvid_actors.actors.journal import Journal
from corvid_actors.actors.live import LiveSessions
from corvid_actors.actors.slots import SlotPool
from corvid_actors.actors.stats import runtime_stats
from corvid_actors.actors.timers import Timers
from corvid_actors.actors.watchdog import StoreWatch
from corvid_actors.clock import Clock
from corvid_actors.config import Config
from corvid_actors.core.io_loop import IoLoop
from corvid_actors.db.cluster import ClusterStore
from corvid_actors.db.store import Store
from corvid_actors.errors import ConfigError
from corvid_actors.providers.base import Provider
from corvid_actors.telemetry.metrics import RuntimeMetrics, SessionLabels, agent_labels
from corvid_actors.telemetry.tracing import Tracing
from corvid_actors.wiring.builder import SessionBuilder

__all__ = ["RuntimeInternals", "default_providers", "open_store", "resolve_providers", "start_actor_tree"]

#: ``providers`` as a Runtime takes it: a mapping, a factory of the config, or None (default)
ProvidersArg = Mapping[str, Provider] | Callable[[Config], Mapping[str, Provider]] | None


@dataclass(frozen=True, slots=True)
class RuntimeInternals:
    """What one Runtime is built from (see the module docstring for who may use it).

    ``store``: the persistence API; ``tracker``: the activity count ``settle()`` waits on;
    ``builder``: makes session incarnations; ``providers``: name → Provider; ``live``: the
    registry of running incarnations (the supervisor writes it); ``timers``: the timer
    table (a thread-safe object, not an actor: it cannot die, so the root policy does not
    watch it; shutdown closes it after every actor stopped). The actor refs:
    ``store_watch``, ``bus`` (EventBus), ``slot_pool``, ``approvals`` (ApprovalBroker),
    ``credits`` (CreditBank, None unless ``with_credits``) and ``supervisor``.
    """

    store: Store
    tracker: ActivityTracker
    builder: SessionBuilder
    providers: Mapping[str, Provider]
    live: LiveSessions
    timers: Timers
    store_watch: pykka.ActorRef[Any]
    bus: pykka.ActorRef[Any]
    slot_pool: pykka.ActorRef[Any]
    approvals: pykka.ActorRef[Any]
    credits: pykka.ActorRef[Any] | None
    supervisor: pykka.ActorRef[Any]
    #: the one event loop every asynchronous model stream runs on (stopped after the actors)
    io_loop: IoLoop[Any]
    #: several daemons on one PostgreSQL (``[cluster] enabled``): this daemon's seat and the
    #: actor that keeps it (heartbeats, sweeps); None for one daemon
    cluster: ClusterSeat | None = None
    cluster_member: pykka.ActorRef[Any] | None = None
    #: the Prometheus registry and its counters (subscribed to every event; ``admin stats``
    #: and ``/metrics`` read it)
    metrics: RuntimeMetrics = field(default_factory=RuntimeMetrics)
    #: what the outside world said to the journaled sessions (``[journal]``); None: off
    journal: Journal | None = None

    def core_actors(self) -> Iterator[tuple[str, pykka.ActorRef[Any]]]:
        """The root policy's actors, by the name a failure report gives them (the timer
        table is none: it has no thread to lose)."""
        for name, ref in (("store watch", self.store_watch), ("event bus", self.bus),
                          ("slot pool", self.slot_pool), ("approval broker", self.approvals),
                          ("credit bank", self.credits), ("supervisor", self.supervisor),
                          ("cluster member", self.cluster_member)):
            if ref is not None:
                yield name, ref

    def stop_order(self) -> Iterator[pykka.ActorRef[Any]]:
        """The actors in the order shutdown stops them (the cluster member and the supervisor
        first, the store watch last); shutdown then closes the timer table (every timer
        cancelled)."""
        for ref in (self.cluster_member, self.supervisor, self.credits, self.slot_pool, self.approvals, self.bus,
                    self.store_watch):
            if ref is not None:
                yield ref


def default_providers(config: Config) -> dict[str, Provider]:
    """Ollama always (it is local); Anthropic when an API key is configured."""
    from corvid_actors.providers.ollama import OllamaProvider

    p = config.providers
    providers: dict[str, Provider] = {
        "ollama": OllamaProvider(
            p.ollama_host, num_ctx=p.ollama_num_ctx, num_predict=p.ollama_num_predict,
            keep_alive=p.ollama_keep_alive, text_tool_families=p.ollama_text_tool_families,
            request_timeout_s=p.ollama_request_timeout_s,
            # never below the calls the slot pool lets run at once (each holds a slot)
            max_connections=max(p.ollama_max_connections, config.slots.max_parallel) if p.ollama_max_connections
            else None,
        )
    }
    if p.anthropic_api_key:
        from corvid_actors.providers.anthropic import AnthropicProvider, ModelPrice

        providers["anthropic"] = AnthropicProvider(
            p.anthropic_api_key, base_url=p.anthropic_base_url or None, max_tokens=p.anthropic_max_tokens,
            prices={name: ModelPrice(*row) for name, row in p.anthropic_prices.items()},
            default_context_window=p.anthropic_default_context_window,
        )
    return providers


def resolve_providers(providers: ProvidersArg, config: Config,
                      extra: Mapping[str, Provider] | None = None) -> dict[str, Provider]:
    """The providers a Runtime was given (a mapping or a factory), else the defaults (the
    configured ones), with ``extra`` added beside them. A name in both raises ValueError:
    ``extra`` adds, it never replaces."""
    if callable(providers) and not isinstance(providers, Mapping):
        providers = providers(config)
    resolved = dict(providers) if providers is not None else default_providers(config)
    clash = sorted(set(resolved) & set(extra or {}))
    if clash:
        raise ValueError(f"extra_providers names {', '.join(map(repr, clash))}, which the providers already have: "
                         "extra_providers adds providers beside them; to replace one, pass providers=")
    return {**resolved, **(extra or {})}


def open_store(config: Config, clock: Clock, store_url: str | None = None) -> Store:
    """The store at ``store_url`` (default: the config's URL) with the ``[store]`` settings."""
    sc = config.store
    return Store(store_url or sc.resolved_url(), busy_timeout_ms=sc.sqlite_busy_timeout_ms,
                 reconnect_backoff_s=(sc.reconnect_backoff_initial_s, sc.reconnect_backoff_max_s),
                 message_writes=sc.message_writes, max_message_batch=sc.max_message_batch,
                 file_check_interval_s=sc.file_check_interval_s, monotonic=clock.monotonic, now=clock.now,
                 build_cache_entries=config.session.build_cache_entries)


def start_actor_tree(*, config: Config, clock: Clock, tracker: ActivityTracker, store: Store,
                     builder: SessionBuilder, with_credits: bool,
                     is_owner: Callable[[str], bool] | None,
                     tracer_provider: TracerProvider | None = None) -> RuntimeInternals:
    """Make the timer table and start the core actors on ``tracker``, each given the refs
    (and the table) it talks to.

    The tracker's failure hooks must be set before: an actor may end as soon as it starts.
    ``tracer_provider``: where the spans go (None: the global provider)."""
    sc = config.store
    io_loop: IoLoop[Any] = IoLoop(begin=tracker.begin, end=tracker.end)
    io_loop.start()
    timers = Timers(clock)
    tracing = Tracing(tracer_provider, capture_content=config.telemetry.capture_content, monotonic=clock.monotonic)
    store_watch = StoreWatch.start(tracker, store=store, timers=timers,
                                   backoff_s=(sc.reconnect_backoff_initial_s, sc.reconnect_backoff_max_s))
    live = LiveSessions()
    metrics = RuntimeMetrics(labels_of=partial(session_labels, live, store), monotonic=clock.monotonic,
                             label_cap=config.telemetry.metrics_label_cap)
    bus = EventBus.start(tracker, observer=metrics.on_event)  # every event is counted
    slot_pool = SlotPool.start(tracker, config=config.slots, timers=timers, clock=clock)
    approvals = ap.ApprovalBroker.start(tracker, clock=clock, timers=timers, mode=config.approvals.mode)
    credits = None
    if with_credits:  # an optional part of the package (the daemon checks for it)

        credits = CreditBank.start(tracker, store=store, config=config.credits, bus=bus,
                                   is_owner=is_owner or (lambda participant: False), timers=timers)
    seat = cluster_seat(config, clock, store)
    journal = Journal.for_config(config, store, clock)
    if journal is not None:  # the journaled sessions' events, for a replay to assert
        bus.tell(SubscribeAll(journal.on_event, deltas=False))
    supervisor = sv.SessionSupervisor.start(
        tracker, config=config, clock=clock, store=store, builder=builder, bus=bus, timers=timers,
        slot_pool=slot_pool, approvals=approvals, credits=credits, live=live, io_loop=io_loop, cluster=seat,
        tracing=tracing, journal=journal,
    )
    if credits is not None:
        credits.tell(BindSupervisor(supervisor))
    member = (ClusterMember.start(tracker, seat=seat, timers=timers, supervisor=supervisor)
              if seat is not None else None)
    metrics.set_stats_source(partial(runtime_stats, supervisor=supervisor, bus=bus, slot_pool=slot_pool,
                                     timers=timers, store=store, cluster_member=member))
    return RuntimeInternals(store=store, tracker=tracker, builder=builder, providers=builder.providers, live=live,
                            timers=timers, store_watch=store_watch, bus=bus, slot_pool=slot_pool,
                            approvals=approvals, credits=credits, supervisor=supervisor, io_loop=io_loop,
                            cluster=seat, cluster_member=member, metrics=metrics, journal=journal)


def session_labels(live: LiveSessions, store: Store, session_id: str) -> SessionLabels:
    """A session's agent, provider and model for its metrics: its live (or passivated)
    incarnation's (no store read), else — an incarnation already gone when its first event is counted — the
    agent row's."""
    labels = live.labels_of(session_id)
    if labels is not None:
        return labels
    row = store.get_session(session_id)
    return agent_labels(None if row is None or row.agent_id is None else store.get_agent(row.agent_id))


def cluster_seat(config: Config, clock: Clock, store: Store) -> ClusterSeat | None:
    """This daemon's seat among several on the store's PostgreSQL (``[cluster] enabled``),
    registered; None for one daemon. A SQLite store cannot be shared: ConfigError."""
    cc = config.cluster
    if not cc.enabled:
        return None
    if store.is_sqlite:
        raise ConfigError("[cluster] enabled (CORVID_CLUSTER=1) needs a PostgreSQL store "
                          "(CORVID_DB_URL=postgresql://…): a SQLite file serves one daemon")
    seat = ClusterSeat(ClusterStore(store, history_max=cc.ownership_history_max), store, cc.daemon_id or new_daemon_id(), cc, clock,
                       version=package_version())
    seat.register()
    return seat


def package_version() -> str:
    """The installed corvid-actors version (``unknown`` when running from a source tree)."""
    try:
        return version("corvid-actors")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"
