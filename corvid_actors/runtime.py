"""The Runtime: builds, wires, starts and stops the actor tree; the public entry point.

Every method is synchronous and thread-safe, and may be called from any thread that is
*not* an actor thread (never from inside an event callback: callbacks run on the
EventBus thread — hand work to another thread or use ``tell``-style methods there).

    runtime = Runtime(config, providers={"scripted": provider})
    session = runtime.create_session(agent_id=agent.id, source="chat")
    runtime.start_process(session.id, "hello")
    runtime.settle()

Root policy (issue 16): the core actors (supervisor, slot pool, approval broker, credit
bank, event bus, timers, store watch — and whatever a host adds with :meth:`Runtime.watch`,
e.g. the daemon's admin actor) survive a bad message each (``actors/base.py``). If one
dies anyway — a bug, or someone stopped its ref — the runtime does not go on half alive:
it logs the failure, shuts down cleanly (sessions stopped and marked for resume, the same
rows the next start-up resumes: the state is rebuilt from the store by a restart), and
tells its ``on_fatal`` listeners, so the daemon exits non-zero for its process supervisor
to restart it. Every later call raises ``RuntimeStoppedError`` naming the failure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors import approvals as ap
from corvid_actors.actors import supervisor as sv
from corvid_actors.actors.base import ActivityAware, ActivityTracker, tell
from corvid_actors.actors.credits import (
    BindSupervisor,
    ChargeTurn,
    CreditBank,
    GetBalance,
    GetTransactions,
    GrantCredits,
    OpenAccount,
)
from corvid_actors.actors.events import (
    BusStats,
    EventBus,
    EventCallback,
    Publish,
    Subscribe,
    SubscribeAll,
    Unsubscribe,
    UnsubscribeAll,
)
from corvid_actors.actors.live import LiveSessions
from corvid_actors.actors.session_messages import UserInput
from corvid_actors.actors.slots import SlotPool, SlotStats
from corvid_actors.actors.timers import Timers, TimerStats
from corvid_actors.actors.watchdog import StoreWatch
from corvid_actors.clock import Clock, RealClock
from corvid_actors.config import Config, load_config
from corvid_actors.content import UserContent, content_blocks, text_parts
from corvid_actors.db.store import Store
from corvid_actors.errors import ConfigError, RuntimeStoppedError, StoreError
from corvid_actors.events import ErrorEvent, SessionError
from corvid_actors.loop.observation import OPERATOR_OUTPUT_ROLE, parse_operator_record
from corvid_actors.loop.plan import plan_from_json
from corvid_actors.loop_factories import (
    ApprovalPolicyFactory,
    HistoryPolicyFactory,
    LoopFactory,
    LoopSpec,
)
from corvid_actors.providers.base import Provider
from corvid_actors.session_control import RuntimeSessionControl, session_tools_hook
from corvid_actors.tools.base import ToolRegistry
from corvid_actors.vocabulary import PermissionCheck
from corvid_actors.wiring import SessionBuilder, ToolRun

__all__ = ["Runtime", "LoopSpec"]


def default_providers(config: Config) -> dict[str, Provider]:
    """Ollama always (it is local); Anthropic when an API key is configured."""
    from corvid_actors.providers.ollama import OllamaProvider

    p = config.providers
    providers: dict[str, Provider] = {
        "ollama": OllamaProvider(
            p.ollama_host, num_ctx=p.ollama_num_ctx, num_predict=p.ollama_num_predict,
            keep_alive=p.ollama_keep_alive, text_tool_families=p.ollama_text_tool_families,
            request_timeout_s=p.ollama_request_timeout_s,
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


class Runtime:
    """The runtime. See the module docstring; every collaborator is injectable.

    Args:
        config: the configuration (default: ``load_config()``).
        clock: ``RealClock()`` by default; ``corvid_actors.testing.SimClock`` for simulations.
        store: a :class:`Store`, or ``store_url`` to open one (default: the config's URL).
        providers: name → :class:`Provider` (default: built from the config).
        tool_registry_factory: returns the tools sessions may use (filtered per agent;
            default: the coding tools, with the ``[tools]`` output cap and command timeouts).
        loops / loop_for_provider: loop factories by kind, and which kind a provider gets.
        permission_check_factory: ``(mode, tools, project_dir, protected) -> PermissionCheck``.
        with_slot_pool / with_credits: start the optional actors.
        approval_policy_factory: ``(LoopSpec) -> ApprovalPolicy`` refining every permission
            decision (default: the command allowlist / session-signature policy,
            ``corvid_actors.tools.command_policy``).
        history_policy_factory: ``(LoopSpec) -> HistoryPolicy | None``, applied to the
            conversation before each model call (default: amnesia/dementia from ``[memory]``,
            ``corvid_actors.loop.memory_policy``).
        ``providers`` may also be a factory ``(config) -> {name: Provider}``. With ``clock``,
        ``store`` and ``tool_registry_factory`` these are the collaborators a host replaces
        without patching the core (the OpenAgent seed's DI hooks).
        runtime_tools: offer the corvid_* tools and the agents' MCP servers besides
            ``extra_tools`` (``corvid_actors.session_control``: the tools reach this runtime
            only through a ``SessionControl``).
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        clock: Clock | None = None,
        store: Store | None = None,
        store_url: str | None = None,
        providers: Mapping[str, Provider] | Callable[[Config], Mapping[str, Provider]] | None = None,
        tool_registry_factory: Callable[[], ToolRegistry] | None = None,
        loops: Mapping[str, LoopFactory] | None = None,
        loop_for_provider: Mapping[str, str] | None = None,
        permission_check_factory: Callable[..., PermissionCheck] | None = None,
        extra_tools: Callable[[Any], ToolRegistry] | None = None,
        workspace_dir: str | Path | None = None,
        with_credits: bool = False,
        is_owner: Callable[[str], bool] | None = None,
        reset_stale: bool = True,
        approval_policy_factory: ApprovalPolicyFactory | None = None,
        history_policy_factory: HistoryPolicyFactory | None = None,
        runtime_tools: bool = True,
    ) -> None:
        self.config = config or load_config()
        self.clock: Clock = clock or RealClock()
        self.tracker = ActivityTracker()
        self._owns_store = store is None
        sc = self.config.store
        self.store = store or Store(store_url or sc.resolved_url(), busy_timeout_ms=sc.sqlite_busy_timeout_ms,
                                    reconnect_backoff_s=(sc.reconnect_backoff_initial_s, sc.reconnect_backoff_max_s),
                                    monotonic=self.clock.monotonic)
        if callable(providers) and not isinstance(providers, Mapping):
            providers = providers(self.config)
        self.providers = dict(providers) if providers is not None else default_providers(self.config)
        # corvid_* tools (over a SessionControl of this runtime) and the agents' external MCP
        # servers, after the host's extra_tools
        tools_hook = (session_tools_hook(RuntimeSessionControl(self), self.config, self.store, extra_tools)
                      if runtime_tools else extra_tools)
        self.builder = SessionBuilder(
            config=self.config, clock=self.clock, providers=self.providers,
            tool_registry_factory=tool_registry_factory, loops=loops, loop_for_provider=loop_for_provider,
            permission_check_factory=permission_check_factory,
            workspace_dir=Path(workspace_dir) if workspace_dir else None, extra_tools=tools_hook,
            approval_policy_factory=approval_policy_factory, history_policy_factory=history_policy_factory,
        )
        self.builder.bind_store(self.store)
        self._stopped = False
        self.stale_session_ids: list[str] = self.store.reset_stale_sessions() if reset_stale else []

        if isinstance(self.clock, ActivityAware):  # the simulated clock settles us after each timer
            self.clock.attach(self.tracker, self.settle)
        self.clock.start()
        t = self.tracker
        #: why the runtime failed (a core actor died), or None; see the module docstring
        self.failure: str | None = None
        self._fatal_listeners: list[Callable[[str], None]] = []
        self._core: dict[str, str] = {}
        self._fail_lock = threading.Lock()
        t.on_actor_exit = self._actor_exited
        t.on_message_error = self._message_failed
        self.timers = Timers.start(t, self.clock)
        self.store_watch = StoreWatch.start(t, store=self.store, timers=self.timers,
                                            backoff_s=(sc.reconnect_backoff_initial_s, sc.reconnect_backoff_max_s))
        self.bus = EventBus.start(t)
        self.slot_pool = SlotPool.start(t, config=self.config.slots, timers=self.timers)
        self.approvals = ap.ApprovalBroker.start(t, clock=self.clock, timers=self.timers,
                                                 mode=self.config.approvals.mode)
        self.credits = None
        if with_credits:
            self.credits = CreditBank.start(t, store=self.store, config=self.config.credits, bus=self.bus,
                                            is_owner=is_owner or (lambda participant: False), timers=self.timers)
        #: live incarnations, for send_message's direct path (the supervisor writes it)
        self.live = LiveSessions()
        self.supervisor = sv.SessionSupervisor.start(
            t, config=self.config, clock=self.clock, store=self.store, builder=self.builder, bus=self.bus,
            timers=self.timers, slot_pool=self.slot_pool, approvals=self.approvals, credits=self.credits,
            live=self.live,
        )
        if self.credits is not None:
            self.credits.tell(BindSupervisor(self.supervisor))
        for name, ref in (("timers", self.timers), ("store watch", self.store_watch), ("event bus", self.bus),
                          ("slot pool", self.slot_pool), ("approval broker", self.approvals),
                          ("credit bank", self.credits), ("supervisor", self.supervisor)):
            if ref is not None:
                self.watch(ref, name)

    # --- the seed's ProcessManager API ------------------------------------------------------

    def start_process(self, session_id: str, prompt: UserContent | None = None) -> int | None:
        """Start ``session_id`` (stopping a running incarnation first). Returns its pid, or
        None when it could not start (an ``error`` event says why). ``prompt`` is a string
        or multimodal content blocks (see :mod:`corvid_actors.content`); invalid blocks
        raise InvalidContentError before anything happens."""
        return sv.started_pid(self._ask(sv.StartProcess(session_id, _checked(prompt))))

    def resume_process(self, session_id: str, prompt: UserContent | None = None) -> int | None:
        """Resume with conversation history (or send ``prompt`` to a running session).

        Without ``prompt`` the model is called only if the session was mid-turn (a turn in
        flight when it ended, or an unanswered user message); otherwise the session comes
        back ready and its next message reaches the model with the history."""
        return sv.started_pid(self._ask(sv.ResumeProcess(session_id, _checked(prompt))))

    def stop_process(self, session_id: str, reason: str = "user_stop") -> None:
        self._ask(sv.StopProcess(session_id, reason))

    def send_message(self, session_id: str, content: UserContent) -> bool:
        """Persist ``content`` and deliver it; False (nothing persisted) if the session is not
        running or its incarnation refuses input because it is ending.
        ``content`` is a string or multimodal content blocks (text and image blocks as the
        Anthropic Messages API takes them, see :mod:`corvid_actors.content`); they are
        stored as given and sent to providers that take images, the text parts to the
        others. Invalid blocks raise InvalidContentError.

        A running session gets the message without the supervisor: it is persisted on this
        thread (the acknowledgement) and told to the incarnation found in the live
        registry. The supervisor is asked only when that does not apply (no incarnation,
        a resumed one's first message, a context reset, an incarnation that is ending),
        or when the incarnation ended between the lookup and the delivery: then the
        message is taken back and the supervisor cold-starts the session with it."""
        checked = content if isinstance(content, str) else content_blocks(content)
        if self._stopped:
            raise RuntimeStoppedError(self._stopped_message())
        entry = self.live.get(session_id)
        if entry is None or not entry.fast_path(self.config.session.max_turns_before_context_reset):
            return bool(self._ask(sv.SendMessage(session_id, checked)))
        blocks = content_blocks(checked)
        message = UserInput(text_parts(blocks) if blocks else str(checked), blocks)
        message_id = self.store.append_message(session_id, "user", checked)
        if entry.deliver(message):
            return True
        self.store.delete_message(message_id)  # not delivered: the cold path stores it again
        return bool(self._ask(sv.SendMessage(session_id, checked, fallback=entry.generation)))

    def is_running(self, session_id: str) -> bool:
        return bool(self._ask(sv.IsRunning(session_id)))

    def subscribe(self, session_id: str, callback: EventCallback) -> None:
        """``callback(session_id, event)`` for this session's events (on the EventBus thread)."""
        self._ask(Subscribe(session_id, callback), self.bus)

    def unsubscribe(self, session_id: str, callback: EventCallback) -> None:
        self._ask(Unsubscribe(session_id, callback), self.bus)

    def subscribe_all(self, callback: EventCallback) -> None:
        self._ask(SubscribeAll(callback), self.bus)

    def unsubscribe_all(self, callback: EventCallback) -> None:
        self._ask(UnsubscribeAll(callback), self.bus)

    def get_active_session_ids(self) -> list[str]:
        return list(self._ask(sv.ActiveSessionIds()))

    def resume_session(self, session_id: str) -> bool:
        """Resume a session paused by an outage; False if it is not paused."""
        return bool(self._ask(sv.ResumeSession(session_id)))

    def is_paused(self, session_id: str) -> bool:
        return bool(self._ask(sv.IsPaused(session_id)))

    def get_paused_session_ids(self) -> list[str]:
        return list(self._ask(sv.PausedSessionIds()))

    def extend_timeout(self, session_id: str, additional_s: float) -> bool:
        """Add ``additional_s`` to a running session's timeout (capped at 4× the default)."""
        return bool(self._ask(sv.ExtendSessionTimeout(session_id, additional_s)))

    def get_memory_stats(self) -> dict[str, int]:
        stats = dict(self._ask(sv.SupervisorStats()))
        stats.update(self._ask(BusStats(), self.bus))
        timers = self._ask(TimerStats(), self.timers)
        stats["timers"] = timers["timers"]
        stats["session_timeouts"] = timers["by_kind"].get("timeout", 0)
        stats["stable_timers"] = timers["by_kind"].get("stable", 0)
        return stats

    def cleanup_session_state(self, session_id: str) -> None:
        self._ask(sv.CleanupSessionState(session_id))

    def session_info(self, session_id: str | None = None) -> dict[str, Any]:
        """In-memory facts per session, plus each one's current ``plan`` (see get_plan)."""
        info = dict(self._ask(sv.SessionInfo(session_id)))
        for sid, facts in info.items():
            if isinstance(facts, dict):
                facts["plan"] = self._stored_plan(sid)
        return info

    # --- plans and full tool outputs (OpenAgent seed) ---------------------------------------------

    def get_plan(self, session_id: str) -> list[dict[str, Any]]:
        """The session's current plan: ``[{"id", "title", "status", "waiting_for"}, …]``.

        Read from the store (``sessions.plan``), which the session updates before it
        publishes each ``plan`` event; works for idle sessions too. Render it for people
        with ``corvid_actors.loop.plan.render_plan``. Raises NotFoundError for an unknown id.
        """
        self.store.require_session(session_id)
        return self._stored_plan(session_id)

    def _stored_plan(self, session_id: str) -> list[dict[str, Any]]:
        row = self.store.get_session(session_id)
        return plan_from_json(getattr(row, "plan", "")) if row is not None else []

    def get_tool_outputs(self, session_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """The complete outputs of the session's last ``limit`` tool calls whose output the
        model saw only in part (observation caps), oldest first: ``{"call_id",
        "tool_name", "is_error", "bytes", "output"}``."""
        rows = self.store.recent_messages(session_id, limit, roles=(OPERATOR_OUTPUT_ROLE,))
        return [record for _, content in rows if (record := parse_operator_record(content)) is not None]

    # --- one tool run ------------------------------------------------------------------------

    def run_tool(self, project_dir: str | Path, tool: str, args: Mapping[str, Any] | None = None, *,
                 mode: str = "default", agent: Any = None, approve: bool = False) -> ToolRun:
        """Run one tool call exactly as a session of permission ``mode`` would: the same
        tool registry (``tool_registry_factory``), permission check (protected paths
        included), environment (``safe_env``), deadline, and OS sandbox launcher with its
        network choice (``agent``: an agent or its name, for ``[tools.sandbox]
        network_agents``). For tests, and for operators asking why a call is denied.

        Returns a :class:`~corvid_actors.wiring.ToolRun`: ``decision`` (allow / ask /
        deny) and ``reason``; when it ran, ``result`` (``output``, ``is_error``). A call
        that needs approval (``ask``) runs only with ``approve=True``, as if approved.
        Blocks the calling thread for the tool's run; publishes and stores nothing.
        """
        if self._stopped:
            raise RuntimeStoppedError(self._stopped_message())
        agent_name = agent if isinstance(agent, str) else str(getattr(agent, "name", "") or "")
        return self.builder.run_tool(Path(project_dir), tool, args or {}, mode=mode, agent_name=agent_name,
                                     approve=approve)

    # --- approvals, slots ---------------------------------------------------------------------

    def list_approvals(self, session_id: str | None = None) -> list[dict[str, Any]]:
        return list(self._ask(ap.ListPending(session_id), self.approvals))

    def resolve_approval(self, approval_id: str, behavior: str, message: str = "",
                         updated_input: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """allow | deny | allow_session. Returns the request's info, or None if not pending."""
        return self._ask(ap.Resolve(approval_id, behavior, message, updated_input), self.approvals)

    def set_approval_mode(self, mode: str) -> str:
        return str(self._ask(ap.SetMode(mode), self.approvals))

    def approval_mode(self) -> str:
        """The approval broker's mode: ``normal``, ``queued`` or ``paused``."""
        return str(self._ask(ap.GetMode(), self.approvals))

    def slot_stats(self) -> dict[str, Any]:
        return dict(self._ask(SlotStats(), self.slot_pool))

    # --- credits (Runtime(with_credits=True)) -------------------------------------------------

    def grant_credits(self, participant: str, amount: int, *, type: str = "grant", reference: str = "") -> int:
        """Add ``amount`` (> 0) credits (``type``: grant | purchase | refund); returns the balance."""
        return int(self._ask(GrantCredits(participant, amount, type, reference), self._credit_bank()))

    def credit_balance(self, participant: str) -> int:
        """The participant's balance (0 without an account)."""
        return int(self._ask(GetBalance(participant), self._credit_bank()))

    def credit_transactions(self, participant: str, limit: int = 10) -> list[dict[str, Any]]:
        """The latest ``limit`` ledger rows of ``participant``, newest first."""
        return list(self._ask(GetTransactions(participant, limit), self._credit_bank()))

    def open_credit_account(self, participant: str) -> Any:
        """Open the account with the first-time free credits if it has none (idempotent).
        Returns an ``Account(participant, balance, created)``."""
        return self._ask(OpenAccount(participant), self._credit_bank())

    def charge_turn(self, session_id: str) -> Any:
        """Charge one model turn of ``session_id`` now, exactly as the end of a turn does
        (``credits.credits_per_turn`` from the session's participant when its source is
        charged and the participant is no owner; ``credits_low`` / ``credits_exhausted``
        events, and an exhausted running session is stopped).

        Returns the ``Deduction(success, remaining, is_low, is_exhausted)``, or None when
        the turn is not charged (source not charged, an owner, no participant). Raises
        NotFoundError for an unknown session.
        """
        session = self.store.require_session(session_id)
        # an exhausted session is stopped: the bank tells the supervisor CreditsExhausted
        return self._ask(ChargeTurn(session_id, session.source, self.supervisor), self._credit_bank())

    def _credit_bank(self) -> pykka.ActorRef[Any]:
        if self.credits is None:
            raise ConfigError("credits are not enabled: create the runtime with Runtime(with_credits=True)")
        return self.credits

    # --- sessions ----------------------------------------------------------------------------

    def create_session(self, **fields: Any) -> Any:
        """Create a session row (``agent_id``, ``project_id``, ``source``, ``name``, …)."""
        return self.store.create_session(**fields)

    def resume_pending_sessions(self) -> list[str]:
        """Resume every session marked for resume (stale at start-up or stopped by shutdown)."""
        ids = self.store.take_restart_pending()
        for sid in ids:
            self.resume_process(sid)
        return ids

    # --- lifecycle -----------------------------------------------------------------------------

    def settle(self, timeout_s: float | None = 30.0) -> None:
        """Return when no actor has a message in flight and no worker is running.

        Exact, not a sleep. ``timeout_s`` (real seconds) is a safety net that raises
        SettleTimeout. Never call this from an actor thread or an event callback.
        """
        self.tracker.wait_idle(timeout_s)

    def stop_sessions(self, reason: str = "server_shutdown", *, settle_timeout_s: float = 10.0) -> None:
        """The supervisor half of :meth:`shutdown`: every session stopped and marked for
        resume exactly as shutdown does (``session_stopped`` with ``reason``, pending
        approvals denied, the runtime settled), while the store, the event bus and every
        read keep working — so a test can assert what shutdown leaves behind.

        From now on the runtime starts no session (``start_process`` / ``resume_process``
        raise RuntimeStoppedError; ``send_message`` returns False). Call :meth:`shutdown`
        afterwards, as always. Unlike shutdown, a step that fails raises.
        """
        if self._stopped:
            raise RuntimeStoppedError(self._stopped_message())
        for _, step in self._session_stop_steps(reason, settle_timeout_s):
            try:
                step()
            except pykka.ActorDeadError:
                raise RuntimeStoppedError(self._stopped_message()) from None

    def _session_stop_steps(self, reason: str, settle_timeout_s: float) -> tuple[tuple[str, Callable[[], Any]], ...]:
        """What stopping the sessions takes (shutdown's first half, and stop_sessions)."""
        return (("stopping the sessions", lambda: self.supervisor.ask(sv.Shutdown(reason))),
                ("denying pending approvals", lambda: self.approvals.ask(ap.DenyAll("Server shutting down"))),
                ("settling", lambda: self.tracker.wait_idle(settle_timeout_s)))

    def shutdown(self, reason: str = "server_shutdown", *, settle_timeout_s: float = 10.0) -> None:
        """Stop every session (marked for resume), deny pending approvals, stop all actors."""
        with self._fail_lock:  # the root policy may shut down from its own thread meanwhile
            if self._stopped:
                return
            self._stopped = True
        self.tracker.stopping = True
        for what, step in self._session_stop_steps(reason, settle_timeout_s):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - shutdown goes on regardless, but says so
                logger.opt(exception=not isinstance(exc, pykka.ActorDeadError)).warning(
                    "shutdown: {} failed ({}: {}); going on", what, type(exc).__name__, exc)
        for ref in (self.supervisor, self.credits, self.slot_pool, self.approvals, self.bus,
                    self.store_watch, self.timers):
            if ref is not None:
                try:
                    ref.stop(block=True)
                except pykka.ActorDeadError:
                    logger.debug("shutdown: {} was already stopped", ref.actor_class.__name__)
        if self.failure is not None:
            # The supervisor may be the one that died: sessions it could not stop are marked
            # for resume here, exactly as the next start-up would.
            try:
                marked = self.store.reset_stale_sessions()
                if marked:
                    logger.warning("shutdown after a failure: {} session(s) marked for resume", len(marked))
            except Exception as exc:  # noqa: BLE001 - the next start-up resets them anyway
                logger.warning("shutdown: could not mark sessions for resume ({}); the next start-up will", exc)
        self.clock.stop()
        if self._owns_store:
            self.store.close()

    # --- root policy --------------------------------------------------------------------------

    def watch(self, ref: pykka.ActorRef[Any], name: str) -> None:
        """Put ``ref`` (an actor started on this runtime's tracker) under the root policy:
        if it ends while the runtime runs, the runtime fails (see the module docstring)."""
        self._core[ref.actor_urn] = name
        if not ref.is_alive():
            self._actor_exited(ref, True)

    def add_fatal_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(failure)`` once, on a runtime thread, after a failure shut the runtime
        down (the daemon exits non-zero there)."""
        self._fatal_listeners.append(listener)

    def _actor_exited(self, ref: pykka.ActorRef[Any], failed: bool) -> None:
        # On the ending actor's own thread; most calls are session incarnations: cheap exit.
        name = self._core.get(ref.actor_urn)
        if name is None or self._stopped or self.tracker.stopping:
            return
        with self._fail_lock:
            if self.failure is not None:
                return
            self.failure = f"the {name} actor {'failed' if failed else 'was stopped'}"
        logger.critical("core actor failure: {}; shutting the runtime down (sessions marked for resume)",
                        self.failure)
        # Not on this thread: shutting down stops (and joins) actors, this one among them.
        threading.Thread(target=self._fail, name="corvid-root-policy", daemon=True).start()

    def _message_failed(self, ref: pykka.ActorRef[Any], message: Any, error: Exception) -> None:
        # A core actor skipped a told message that raised: the session it names hears why.
        sid = getattr(message, "session_id", None)
        if not isinstance(sid, str) or not sid:
            return
        kind = "store_unavailable" if isinstance(error, StoreError) else "internal_error"
        text = f"{ref.actor_class.__name__} could not handle {type(message).__name__}: {error}"
        tell(self.bus, Publish(sid, ErrorEvent(error_type=kind, message=text)))
        tell(self.bus, Publish(sid, SessionError(error_type=kind, severity="error", recoverable=True,
                                                 message=text)))

    def _fail(self) -> None:
        failure = self.failure or "a core actor ended"
        try:
            self.shutdown("core_actor_failed")
        except Exception:  # noqa: BLE001 - the listeners must hear of the failure whatever happened
            logger.exception("shutdown after a core actor failure failed")
        for listener in list(self._fatal_listeners):
            try:
                listener(failure)
            except Exception:  # noqa: BLE001 - one listener must not keep the others from hearing
                logger.opt(exception=True).error("fatal listener {} raised", listener)

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _ask(self, message: Any, ref: pykka.ActorRef[Any] | None = None) -> Any:
        if self._stopped:
            raise RuntimeStoppedError(self._stopped_message())
        try:
            return (ref or self.supervisor).ask(message)
        except pykka.ActorDeadError:
            raise RuntimeStoppedError(self._stopped_message()) from None

    def _stopped_message(self) -> str:
        if self.failure is not None:
            return f"the runtime is shut down: {self.failure} (see the log; restart to resume)"
        return "the runtime is shut down"


def _checked(content: UserContent | None) -> UserContent | None:
    """Content blocks checked (InvalidContentError) and copied on the caller's thread, so
    a bad message fails before anything is stored and a caller's later edits change nothing."""
    if content is None or isinstance(content, str):
        return content
    return content_blocks(content)
