"""The Runtime: builds, wires, starts and stops the actor tree; the public entry point.

Every method is synchronous and thread-safe, and may be called from any thread that is
*not* an actor thread (never from inside an event callback: callbacks run on the
EventBus thread — hand work to another thread or use ``tell``-style methods there).

    runtime = Runtime(config, providers={"scripted": provider})
    session = runtime.create_session(agent_id=agent.id, source="chat")
    runtime.start_process(session.id, "hello")
    runtime.settle()

It is a facade: programs use its methods, never its actors or its store. It holds its
parts, one module each, and forwards their public methods (same names and signatures):

- :mod:`corvid_actors.runtime.tree` builds the store, the providers and the actor tree,
  held in one :class:`~corvid_actors.runtime.tree.RuntimeInternals` (``runtime.internals``:
  for ``corvid_actors.testing``, the daemon's admin wiring and tests only);
- :mod:`corvid_actors.runtime.lifecycle`: a :class:`RuntimeLifecycle` starts the tree and
  settles, stops and shuts it down, with the root policy (a core actor that dies shuts the
  whole runtime down; every later call raises ``RuntimeStoppedError`` naming the failure);
- :mod:`corvid_actors.runtime.reads`: a :class:`RuntimeReads` answers the read-only queries,
  a :class:`RuntimeRecords` writes the stored agents, projects, sessions and MCP servers,
  and the credit ledger.

This module adds the commands: sessions started, resumed, stopped and messaged, events
subscribed, approvals resolved, one tool run as a session would.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Self, TypeVar, cast

from opentelemetry.trace import TracerProvider

from corvid_actors.actors import approvals as ap
from corvid_actors.actors import supervisor as sv
from corvid_actors.actors.base import ActivityTracker, DispatcherKind
from corvid_actors.actors.events import (
    EventCallback,
    Subscribe,
    SubscribeAll,
    Unsubscribe,
    UnsubscribeAll,
)
from corvid_actors.actors.session_messages import UserInput
from corvid_actors.clock import Clock, RealClock
from corvid_actors.config import Config, load_config
from corvid_actors.content import UserContent, content_blocks, text_parts
from corvid_actors.core.vocabulary import PermissionCheck, ToolKind
from corvid_actors.db.store import Store
from corvid_actors.errors import RuntimeStoppedError, SessionBusyError
from corvid_actors.loop.direct_tools import model_view
from corvid_actors.providers.base import Provider, ToolCall
from corvid_actors.runtime.lifecycle import RuntimeLifecycle
from corvid_actors.runtime.reads import RuntimeReads
from corvid_actors.runtime.records import RuntimeRecords
from corvid_actors.runtime.session_control import RuntimeSessionControl, session_tools_hook
from corvid_actors.runtime.tree import open_store, resolve_providers, start_actor_tree
from corvid_actors.tools.base import ToolRegistry
from corvid_actors.wiring.builder import SessionBuilder, ToolRun
from corvid_actors.wiring.loop_factories import (
    ApprovalPolicyFactory,
    HistoryPolicyFactory,
    LoopFactory,
    LoopSpec,
)

__all__ = ["Runtime", "LoopSpec", "model_view"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def _forward(part: str, method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """A Runtime method that calls ``method`` on the part held in the attribute ``part``,
    with ``method``'s name, signature and docstring (``inspect``, ``help()``, mypy and the
    aio twins see the part's own)."""
    bound = operator.attrgetter(f"{part}.{method.__name__}")

    def forward(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return cast(R, bound(self)(*args, **kwargs))

    functools.update_wrapper(forward, method)  # __wrapped__: the signature and type hints
    forward.__qualname__ = f"Runtime.{method.__name__}"
    return forward


def _forward_property(part: str, prop: Callable[[Any], T]) -> T:
    """A read-only Runtime property reading the property of the same name of the part held
    in the attribute ``part`` (with its docstring); typed, for mypy, as the value read."""
    getter = cast(property, prop).fget
    assert getter is not None
    return cast(T, property(operator.attrgetter(f"{part}.{getter.__name__}"), doc=getter.__doc__))


class Runtime:
    """The runtime. See the module docstring; every collaborator is injectable.

    Args:
        config: the configuration (default: ``load_config()``).
        clock: ``RealClock()`` by default; ``corvid_actors.testing.SimClock`` for simulations.
        store: a :class:`Store`, or ``store_url`` to open one (default: the config's URL).
        providers: name → :class:`Provider`; replaces the providers built from the config
            (the default: Ollama, and Anthropic when a key is configured).
        extra_providers: name → :class:`Provider` added *beside* ``providers`` (or the
            configured ones): ``Runtime(config, extra_providers={"scripted": scripted})``
            keeps the configured Ollama and Anthropic providers and adds the scripted one.
            A name both have raises ValueError.
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
            ``extra_tools`` (``corvid_actors.runtime.session_control``: the tools reach this runtime
            only through a ``SessionControl``).
        tracer_provider: where its OpenTelemetry spans go (default: the global provider).
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        clock: Clock | None = None,
        store: Store | None = None,
        store_url: str | None = None,
        providers: Mapping[str, Provider] | Callable[[Config], Mapping[str, Provider]] | None = None,
        extra_providers: Mapping[str, Provider] | None = None,
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
        dispatcher: DispatcherKind = "threads",
        seed: int | None = None,
        explore: bool = False,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self._config = config = config or load_config()
        clock = clock or RealClock()
        if dispatcher == "inline" and getattr(clock, "attach", None) is None:
            raise ValueError("the inline dispatcher needs a simulated clock (one that runs the timers on "
                             "the thread that advances it): use dispatcher='threads' with a real clock")
        tracker = ActivityTracker(dispatcher, seed=seed, explore=explore)
        owns_store = store is None
        store = store or open_store(config, clock, store_url)
        providers = resolve_providers(providers, config, extra_providers)
        # corvid_* tools (over a SessionControl of this runtime) and the agents' external MCP
        # servers, after the host's extra_tools
        tools_hook = (session_tools_hook(RuntimeSessionControl(self), config, store, extra_tools)
                      if runtime_tools else extra_tools)
        builder = SessionBuilder(
            config=config, clock=clock, providers=providers,
            tool_registry_factory=tool_registry_factory, loops=loops, loop_for_provider=loop_for_provider,
            permission_check_factory=permission_check_factory,
            workspace_dir=Path(workspace_dir) if workspace_dir else None, extra_tools=tools_hook,
            approval_policy_factory=approval_policy_factory, history_policy_factory=history_policy_factory,
        )
        builder.bind_store(store)
        #: the sessions this start-up found left ``running`` (reset and marked for resume);
        #: with several daemons none are: a row left running may be another daemon's, and a
        #: dead daemon's sessions come back through their expired leases (the cluster sweep)
        self.stale_session_ids: list[str] = (store.reset_stale_sessions()
                                             if reset_stale and not config.cluster.enabled else [])
        # attaches the clock, sets the root policy's hooks, starts the tree, watches its core actors
        self._lifecycle = RuntimeLifecycle(clock, tracker, owns_store=owns_store, start=partial(
            start_actor_tree, config=config, clock=clock, tracker=tracker, store=store, builder=builder,
            with_credits=with_credits, is_owner=is_owner, tracer_provider=tracer_provider))
        self._internals = self._lifecycle.internals
        self._reads = RuntimeReads(config, clock, self._internals, self._lifecycle.ask)
        self._records = RuntimeRecords(self._internals, self._lifecycle.ask)

    # --- what the runtime was made with; its lifecycle (RuntimeLifecycle) --------------------
    config = _forward_property("_reads", RuntimeReads.config)
    clock = _forward_property("_reads", RuntimeReads.clock)
    metrics = _forward_property("_reads", RuntimeReads.metrics)
    internals = _forward_property("_reads", RuntimeReads.internals)
    credits_enabled = _forward_property("_reads", RuntimeReads.credits_enabled)
    database_url = _forward_property("_reads", RuntimeReads.database_url)
    failure = _forward_property("_lifecycle", RuntimeLifecycle.failure)
    mark_stopping = _forward("_lifecycle", RuntimeLifecycle.mark_stopping)
    resume_all = _forward("_lifecycle", RuntimeLifecycle.resume_all)
    resume_pending_sessions = _forward("_lifecycle", RuntimeLifecycle.resume_pending_sessions)
    take_restart_pending = _forward("_lifecycle", RuntimeLifecycle.take_restart_pending)
    work_tracker = _forward("_lifecycle", RuntimeLifecycle.work_tracker)
    settle = _forward("_lifecycle", RuntimeLifecycle.settle)
    stop_sessions = _forward("_lifecycle", RuntimeLifecycle.stop_sessions)
    shutdown = _forward("_lifecycle", RuntimeLifecycle.shutdown)
    watch = _forward("_lifecycle", RuntimeLifecycle.watch)
    add_fatal_listener = _forward("_lifecycle", RuntimeLifecycle.add_fatal_listener)
    _ask = _forward("_lifecycle", RuntimeLifecycle.ask)
    _die = _forward("_lifecycle", RuntimeLifecycle.die)  # corvid_actors.testing.faults.kill_runtime

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- reads (RuntimeReads) -------------------------------------------------------------------
    sandbox_status = _forward("_reads", RuntimeReads.sandbox_status)
    route = _forward("_reads", RuntimeReads.route)
    has_provider = _forward("_reads", RuntimeReads.has_provider)
    provider = _forward("_reads", RuntimeReads.provider)
    agent = _forward("_reads", RuntimeReads.agent)
    agents = _forward("_reads", RuntimeReads.agents)
    project = _forward("_reads", RuntimeReads.project)
    session = _forward("_reads", RuntimeReads.session)
    find_session = _forward("_reads", RuntimeReads.find_session)
    agent_access = _forward("_reads", RuntimeReads.agent_access)
    spend = _forward("_reads", RuntimeReads.spend)
    check_budget = _forward("_reads", RuntimeReads.check_budget)
    history = _forward("_reads", RuntimeReads.history)
    message_count = _forward("_reads", RuntimeReads.message_count)
    is_running = _forward("_reads", RuntimeReads.is_running)
    get_active_session_ids = _forward("_reads", RuntimeReads.get_active_session_ids)
    is_paused = _forward("_reads", RuntimeReads.is_paused)
    get_paused_session_ids = _forward("_reads", RuntimeReads.get_paused_session_ids)
    get_memory_stats = _forward("_reads", RuntimeReads.get_memory_stats)
    session_info = _forward("_reads", RuntimeReads.session_info)
    get_plan = _forward("_reads", RuntimeReads.get_plan)
    get_tool_outputs = _forward("_reads", RuntimeReads.get_tool_outputs)
    list_approvals = _forward("_reads", RuntimeReads.list_approvals)
    approval_mode = _forward("_reads", RuntimeReads.approval_mode)
    slot_stats = _forward("_reads", RuntimeReads.slot_stats)
    credit_balance = _forward("_reads", RuntimeReads.credit_balance)
    credit_transactions = _forward("_reads", RuntimeReads.credit_transactions)

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
        """Stop a running session (``reason`` goes into ``session_stopped``); else nothing."""
        self._ask(sv.StopProcess(session_id, reason))

    def send_message(self, session_id: str, content: UserContent) -> bool:
        """Persist ``content`` and deliver it; False (nothing persisted) if the session is not
        running or its incarnation refuses input because it is ending.
        ``content`` is a string or multimodal content blocks (text and image blocks as the
        Anthropic Messages API takes them, see :mod:`corvid_actors.content`); they are
        stored as given and sent to providers that take images, the text parts to the
        others. Invalid blocks raise InvalidContentError. While a turn runs and the agent's
        ``double_texting`` is ``reject``, SessionBusyError (nothing stored).

        A running session gets the message without the supervisor: it is persisted on this
        thread with its turn counted open (the acknowledgement; on a connection of its own)
        and told to the incarnation found in the live registry. A session with no
        incarnation at all (none building, none live) gets False at once, from the same
        registry. The supervisor is asked only when neither applies (an incarnation
        building, a resumed one's first message, a context reset, an incarnation that is
        ending), or when the incarnation ended between the lookup and the delivery: then the
        message is taken back and the supervisor cold-starts the session with it."""
        checked = content if isinstance(content, str) else content_blocks(content)
        if self._lifecycle.stopped:
            raise RuntimeStoppedError(self._lifecycle.stopped_message())
        live = self._internals.live
        entry = live.get(session_id)
        if entry is not None and entry.refuses_mid_turn():
            raise SessionBusyError(f"session {session_id} is still answering the previous message and its agent's "
                                   "double_texting policy is 'reject': the message was not stored; send it "
                                   "again after the turn's result")
        if entry is None and not live.has_incarnation(session_id):
            return False  # no incarnation, building or live: the supervisor's answer too
        if entry is None or not entry.fast_path(self._config.session.max_turns_before_context_reset):
            return bool(self._ask(sv.SendMessage(session_id, checked)))
        blocks = content_blocks(checked)
        message = UserInput(text_parts(blocks) if blocks else str(checked), blocks, turn_opened=True)
        message_id = self._internals.store.append_user_turn(session_id, checked)
        if entry.deliver(message):
            return True
        self._internals.store.take_back_user_turn(session_id, message_id)  # the cold path stores it again
        return bool(self._ask(sv.SendMessage(session_id, checked, fallback=entry.generation)))

    def subscribe(self, session_id: str, callback: EventCallback) -> None:
        """``callback(session_id, event)`` for this session's events (on the EventBus thread)."""
        self._ask(Subscribe(session_id, callback), self._internals.bus)

    def unsubscribe(self, session_id: str, callback: EventCallback) -> None:
        """Remove a callback given to :meth:`subscribe` for this session."""
        self._ask(Unsubscribe(session_id, callback), self._internals.bus)

    def subscribe_all(self, callback: EventCallback) -> None:
        """``callback(session_id, event)`` for every session's events (on the EventBus thread)."""
        self._ask(SubscribeAll(callback), self._internals.bus)

    def unsubscribe_all(self, callback: EventCallback) -> None:
        """Remove a callback given to :meth:`subscribe_all`."""
        self._ask(UnsubscribeAll(callback), self._internals.bus)

    def resume_session(self, session_id: str) -> bool:
        """Resume a session paused by an outage; False if it is not paused."""
        return bool(self._ask(sv.ResumeSession(session_id)))

    def extend_timeout(self, session_id: str, additional_s: float) -> bool:
        """Add ``additional_s`` to a running session's timeout (capped at 4× the default)."""
        return bool(self._ask(sv.ExtendSessionTimeout(session_id, additional_s)))

    def cleanup_session_state(self, session_id: str) -> None:
        """Forget a session: its incarnation ended silently, timers, slot, approvals, subscribers."""
        self._ask(sv.CleanupSessionState(session_id))

    # --- one tool run ------------------------------------------------------------------------
    def run_tool(self, project_dir: str | Path, tool: str, args: Mapping[str, Any] | None = None, *,
                 mode: str = "default", agent: Any = None, approve: bool = False,
                 context_window: int | None = None) -> ToolRun:
        """Run one tool call exactly as a session of permission ``mode`` would: the same
        tool registry (``tool_registry_factory``), permission check (protected paths
        included), environment (``safe_env``), deadline, and OS sandbox launcher with its
        network choice (``agent``: an agent or its name, for ``[tools.sandbox]
        network_agents``). For tests, and for operators asking why a call is denied.

        Returns a :class:`~corvid_actors.wiring.builder.ToolRun`: ``decision`` (allow / ask /
        deny) and ``reason``; when it ran, ``output`` (what the tool produced), ``is_error``
        and ``model_sees``: what the direct loop gives the model of it, after the loop's
        caps, applied by the loop's own functions in the loop's order — the observation
        caps (``[observation]``, the full output kept for the operator) and the seed's
        30 % cap on one tool result, in a conversation that has used none of a
        ``context_window``-token window yet (default ``[providers] ollama_num_ctx``).
        A call that needs approval (``ask``) runs only with ``approve=True``, as if approved.
        Blocks the calling thread for the tool's run; publishes and stores nothing.
        """
        if self._lifecycle.stopped:
            raise RuntimeStoppedError(self._lifecycle.stopped_message())
        agent_name = agent if isinstance(agent, str) else str(getattr(agent, "name", "") or "")
        run = self._internals.builder.run_tool(Path(project_dir), tool, args or {}, mode=mode, agent_name=agent_name,
                                               approve=approve)
        if run.result is None:
            return run
        window = context_window or self._config.providers.ollama_num_ctx
        call = ToolCall("run_tool", tool, dict(args or {}))
        commands = tuple(t.name for t in self._internals.builder.tool_registry_factory() if t.kind is ToolKind.COMMAND)
        return replace(run, model_sees=model_view(call, run.result, self._config, window, commands))

    # --- approvals ------------------------------------------------------------------------------
    def resolve_approval(self, approval_id: str, behavior: str, message: str = "", updated_input: dict[str, Any]
                         | None = None, *, answered_by: str = "library") -> dict[str, Any] | None:
        """allow | deny | allow_session, by ``answered_by`` (journaled); the request's info or None."""
        return self._ask(ap.Resolve(approval_id, behavior, message, updated_input, answered_by), self._internals.approvals)

    def set_approval_mode(self, mode: str) -> str:
        """Set the approval mode (normal, queued or paused); returns the mode in force."""
        return str(self._ask(ap.SetMode(mode), self._internals.approvals))

    # --- stored records and credits (RuntimeRecords) ------------------------------------------
    create_agent = _forward("_records", RuntimeRecords.create_agent)
    ensure_agent = _forward("_records", RuntimeRecords.ensure_agent)
    update_agent = _forward("_records", RuntimeRecords.update_agent)
    create_project = _forward("_records", RuntimeRecords.create_project)
    create_session = _forward("_records", RuntimeRecords.create_session)
    add_mcp_server = _forward("_records", RuntimeRecords.add_mcp_server)
    replay_store = _forward("_records", RuntimeRecords.replay_store)
    grant_credits = _forward("_records", RuntimeRecords.grant_credits)
    open_credit_account = _forward("_records", RuntimeRecords.open_credit_account)
    charge_turn = _forward("_records", RuntimeRecords.charge_turn)

def _checked(content: UserContent | None) -> UserContent | None:
    """Content blocks checked (InvalidContentError) and copied on the caller's thread, so
    a bad message fails before anything is stored and a caller's later edits change nothing."""
    if content is None or isinstance(content, str):
        return content
    return content_blocks(content)
