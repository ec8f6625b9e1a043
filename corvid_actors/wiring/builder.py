"""Building one session incarnation: provider routing, model, system prompt, tools, loop.

The supervisor calls :meth:`SessionBuilder.build` with a session's stored context and
gets everything a :class:`~corvid_actors.actors.session.SessionActor` needs. Every
collaborator here is injectable through the ``Runtime`` (providers, tool registry
factory, loop factories), so a host changes behaviour without patching the core.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loguru import logger

from corvid_actors.clock import Clock, io_clock
from corvid_actors.config import Config
from corvid_actors.core.vocabulary import (
    Permission,
    PermissionCheck,
    PermissionDecision,
    ToolKind,
    ToolResult,
)
from corvid_actors.db.lru import LruCache
from corvid_actors.db.session_context import SessionContext
from corvid_actors.errors import ConfigError, NotFoundError
from corvid_actors.events import SystemEvent
from corvid_actors.loop.effects import Loop
from corvid_actors.loop.plan import plan_from_json
from corvid_actors.loop.prompts import compose_persona_prompt, compose_system_prompt
from corvid_actors.loop.rules import default_history_policy
from corvid_actors.policy.routing import (
    DEFAULT_LOOP_FOR_PROVIDER,
    RoutingDecision,
    choose_provider,
    default_model,
    looks_like_ollama_model,
    provider_selected_message,
)
from corvid_actors.providers.base import BEFORE_START_HOOK, Provider, traits_of
from corvid_actors.schema.tool_sections import ToolsConfig
from corvid_actors.tools.base import ToolContext, ToolRegistry, as_mapping
from corvid_actors.tools.coding import coding_tools
from corvid_actors.tools.coding_base import CodingToolSettings
from corvid_actors.tools.command_policy import default_approval_policy
from corvid_actors.tools.delegation import effective_agent_mode
from corvid_actors.tools.env import safe_env
from corvid_actors.tools.permissions import PermissionMode, make_permission_check
from corvid_actors.tools.sandbox import Sandbox, current_sandbox
from corvid_actors.wiring.loop_factories import (
    DEFAULT_LOOPS,
    ApprovalPolicyFactory,
    HistoryPolicyFactory,
    LoopFactory,
    LoopSpec,
)

#: roles that deliberate and get no tools (direct-process seed invariant 10)
COUNCIL_DELIBERATION_ROLES = frozenset({"member", "discusser", "reviewer"})
#: tools an agent-sourced session may not use (no agent→agent recursion)
AGENT_RESTRICTED_TOOLS = frozenset({"corvid_send_message", "corvid_list_agents"})


@dataclass(frozen=True)
class BuiltSession:
    provider_name: str
    provider: Provider
    model: str
    loop: Loop
    tools: ToolRegistry
    tool_context: ToolContext
    pid_kind: str
    uses_slots: bool
    slot_weight: int
    approval_timeout_s: float
    #: blocking closers of what this incarnation owns (MCP server processes); the
    #: supervisor runs them on a worker thread when the incarnation ends, on every path
    resources: tuple[Callable[[], None], ...] = ()
    #: events published right after ``session_started`` (e.g. an MCP server that failed)
    notices: tuple[Any, ...] = ()
    #: the loop's name in the builder's loop table ("direct", "sdk", "conversation", …);
    #: the idle exit applies to the loops named in ``supervisor.idle_exit_loops``
    loop_kind: str = ""
    #: the ``provider_selected`` note: "Provider: ollama (fallback: no_claude_access)" when
    #: routing fell back (the original's wording); empty lets the supervisor say its own
    provider_selected: str = ""


@dataclass(frozen=True)
class AgentParts:
    """What an incarnation builds from its agent and project alone, the same for every
    incarnation of the same key (:meth:`SessionBuilder.agent_parts`): kept in the builder's
    :class:`~corvid_actors.db.lru.LruCache` across incarnations (issue 37)."""

    decision: RoutingDecision
    model: str
    loop_kind: str
    system_prompt: str


@dataclass(frozen=True)
class ToolRun:
    """What ``Runtime.run_tool`` reports: the permission ``decision`` (``allow``, ``ask``
    or ``deny``) with its ``reason`` (the denial the model would be told, or the approval
    request's description), and — when the tool ran — its :class:`ToolResult` and
    ``model_sees``, what the model is given of it after the loop's caps."""

    decision: str
    reason: str = ""
    ran: bool = False
    result: Any = None
    #: the tool's output after the loop's caps (None when the tool did not run; see
    #: ``Runtime.run_tool``)
    model_sees: str | None = None

    @property
    def output(self) -> str | None:
        """What the tool produced (None when it did not run): its result's ``output``,
        with the tool's own cap (``[tools] output_truncate_chars``) but none of the
        loop's; :attr:`model_sees` is what reaches the model."""
        return self.result.output if self.result is not None else None

    @property
    def is_error(self) -> bool:
        return bool(self.result is not None and self.result.is_error)


def build_sandbox(config: Config) -> Sandbox:
    """The OS sandbox launcher of a runtime (``[tools.sandbox]``; probes bwrap once per
    process): the data directory (database, admin socket) is hidden from commands. The
    ``[tools.sandbox]`` section is the sandbox's settings (``SandboxSettings``)."""
    return Sandbox(config.tools.sandbox, hidden_paths=[config.store.data_dir],
                   patterns=config.tools.protected_patterns)


def default_tool_registry(tools: ToolsConfig | None = None) -> ToolRegistry:
    """The coding tools, with the ``[tools]`` section's output cap and command timeouts
    (the packaged defaults when none is given)."""
    c = tools or ToolsConfig()
    return ToolRegistry(coding_tools(CodingToolSettings(
        output_truncate_chars=c.output_truncate_chars, command_timeout_default_s=c.command_timeout_default_s,
        command_timeout_max_s=c.command_timeout_max_s)))


class SessionBuilder:
    """Turns a stored :class:`SessionContext` into a :class:`BuiltSession`."""
    def __init__(
        self,
        *,
        config: Config,
        clock: Clock,
        providers: Mapping[str, Provider],
        tool_registry_factory: Callable[[], ToolRegistry] | None = None,
        loops: Mapping[str, LoopFactory] | None = None,
        loop_for_provider: Mapping[str, str] | None = None,
        permission_check_factory: Callable[..., PermissionCheck] | None = None,
        workspace_dir: Path | None = None,
        extra_tools: Callable[[SessionContext], ToolRegistry] | None = None,
        approval_policy_factory: ApprovalPolicyFactory | None = None,
        history_policy_factory: HistoryPolicyFactory | None = None,
    ) -> None:

        self.approval_policy_factory = approval_policy_factory or default_approval_policy
        self.history_policy_factory = history_policy_factory or default_history_policy
        self.config = config
        self.clock = clock
        self.providers = dict(providers)
        #: None: the coding tools configured by ``[tools]``
        self.tool_registry_factory = tool_registry_factory or functools.partial(default_tool_registry, config.tools)
        self.loops = {**DEFAULT_LOOPS, **(loops or {})}
        self.loop_for_provider = {**DEFAULT_LOOP_FOR_PROVIDER, **(loop_for_provider or {})}
        self.permission_check_factory = permission_check_factory
        self.workspace_dir = workspace_dir or Path(config.store.data_dir).expanduser() / "workspace"
        self.extra_tools = extra_tools
        self.sandbox = build_sandbox(config)
        #: what incarnations built from their agent (:class:`AgentParts`), by agent revision
        self.parts: LruCache[AgentParts] = LruCache(config.session.build_cache_entries)

    # --- routing ------------------------------------------------------------------------

    def route(self, agent: Any | None) -> str:
        """Seed invariant 5: explicit provider wins; with none and no Anthropic credentials, Ollama."""
        return self.routing(agent).provider

    def routing(self, agent: Any | None) -> RoutingDecision:
        """The routing decision with its reason (see :func:`provider_selected_message`)."""
        return choose_provider(agent.provider if agent is not None else "", self.config.providers, self.providers)

    def provider(self, name: str) -> Provider:
        try:
            return self.providers[name]
        except KeyError:
            configured = ", ".join(sorted(self.providers)) or "none"
            raise ConfigError(
                f"provider {name!r} is not configured (configured: {configured}); "
                "set the agent's provider or providers.default_provider"
            ) from None

    def model_for(self, provider_name: str, agent: Any | None, council_role: str | None,
                  *, fallback: bool = False) -> str:
        """The model of an incarnation. On a ``fallback`` to Ollama an agent model that is
        not an Ollama name (a Claude model) gives way to the Ollama default."""
        if council_role == "chairman" and self.config.supervisor.council_model:
            return self.config.supervisor.council_model
        if agent is not None and agent.model and not (fallback and not looks_like_ollama_model(str(agent.model))):
            return str(agent.model)
        return default_model(provider_name, self.config.providers)

    def health_probe(self, session_id: str) -> Callable[[], bool]:
        """A probe for the provider this session routes to (runs on a worker thread)."""
        ctx = None
        try:

            ctx = self._store_context(session_id)
        except NotFoundError:
            pass
        name = self.route(ctx.agent if ctx is not None else None)
        provider = self.providers.get(name)
        return (lambda: False) if provider is None else provider.health

    _store_context: Callable[[str], SessionContext]
    _store: Any = None

    def bind_store(self, store: Any) -> None:
        self._store_context = store.session_context
        self._store = store
        store.on_agent_change(lambda agent_id: self.parts.drop(lambda key: key[0] == agent_id))  # type: ignore[index]

    def agent_parts(self, ctx: SessionContext) -> AgentParts:
        """Routing, model, loop kind and system prompt of
        ``ctx``'s incarnation: from the cache when an incarnation of the same agent
        revision, project, role, source and lease epoch built them (a context reset, a
        restart, a reactivation), else made and kept. A host's providers and factories
        are asked as before on a miss; an agent written by any process has a new revision."""
        session, agent = ctx.session, ctx.agent
        epoch = self._store.epoch_of(session.id) if self._store is not None else None
        key = (getattr(agent, "id", None), getattr(agent, "name", None), ctx.agent_revision,
               getattr(ctx.project, "working_dir", None), ctx.skill_prompt, session.council_role,
               session.source, epoch)
        parts = self.parts.get(key) if agent is None or ctx.agent_revision is not None else None
        if parts is not None:
            return parts
        decision = self.routing(agent)
        model = self.model_for(decision.provider, agent, session.council_role, fallback=decision.fallback)
        parts = AgentParts(
            decision, model, self.loop_for_provider.get(decision.provider, "conversation"),
            compose_system_prompt(agent.system_prompt if agent is not None else "",
                                  agent.append_prompt if agent is not None else "",
                                  compose_persona_prompt(ctx.personas), ctx.skill_prompt))
        if agent is None or ctx.agent_revision is not None:
            self.parts.put(key, parts)
        return parts

    # --- building ----------------------------------------------------------------------------

    def build(self, ctx: SessionContext) -> BuiltSession:
        # What extra_tools started (MCP servers) must not outlive a build that fails.
        resources: list[Callable[[], None]] = []
        try:
            return self._build(ctx, resources)
        except BaseException:
            if resources:
                threading.Thread(target=close_resources, args=(tuple(resources), ctx.session.id),
                                 name="close-failed-build", daemon=True).start()
            raise

    def _build(self, ctx: SessionContext, resources: list[Callable[[], None]]) -> BuiltSession:
        session, agent = ctx.session, ctx.agent
        notices: list[Any] = []
        parts = self.agent_parts(ctx)
        decision, model, loop_kind = parts.decision, parts.model, parts.loop_kind
        provider_name = decision.provider
        provider = self.provider(provider_name)
        before_start = getattr(provider, BEFORE_START_HOOK, None)
        if before_start is not None:
            before_start(session.id)  # raising fails the start (spawn_error)
        if loop_kind not in self.loops:
            raise ConfigError(f"unknown loop {loop_kind!r} for provider {provider_name!r}")
        project_dir = Path(ctx.project.working_dir) if ctx.project is not None else self.workspace_dir
        if not project_dir.is_dir():  # one stat per build (mkdir of an existing dir raises inside)
            project_dir.mkdir(parents=True, exist_ok=True)

        tools = ToolRegistry()
        if loop_kind != "conversation" and session.council_role not in COUNCIL_DELIBERATION_ROLES:
            registry = self.tool_registry_factory()
            coding = set(registry.names())
            if self.extra_tools is not None:

                token = current_sandbox.set(self.sandbox)  # MCP servers start through it
                try:
                    extra = self.extra_tools(ctx)
                finally:
                    current_sandbox.reset(token)
                # A hook may return a registry that also carries closers and notices
                # (corvid_actors.tools.mcp_client.SessionTools).
                resources.extend(getattr(extra, "closers", ()))
                notices.extend(getattr(extra, "notices", ()))
                for tool in extra:
                    registry.add(tool)
            # The default core tools — what a session gets besides the coding registry: the
            # runtime's corvid_* tools, its MCP servers', a host's — are where skill bundles
            # start from when the agent has no explicit list (seed 001 invariant 4; the
            # original's DEFAULT_CORE_TOOLS). No list and no bundle: every tool.
            core = [name for name in registry.names() if name not in coding]
            allowed = ctx.tool_permissions(defaults=core)
            tools = registry.filtered(allowed)
            if session.source == "agent" and self.config.corvid_tools.restrict_agent_sessions:
                tools = tools.filtered([n for n in tools.names() if n not in AGENT_RESTRICTED_TOOLS])

        info = provider.model_info(model)  # the provider keeps what its server said
        mode = agent.permission_mode if agent is not None else "default"
        if session.source == "agent":  # delegated: never more than the sender (corvid_tools)
            mode = effective_agent_mode(self._store, session, mode)
        protected = self.config.tools.protected_patterns
        agent_name = agent.name if agent is not None else ""
        permission_check = self._permission_check(mode, tools, project_dir, protected, agent_name)
        system_prompt = parts.system_prompt
        # the OpenAgent rules' inputs (agent, mode, command tools, stored plan) are in the
        # spec the policy factories get; their policies are laid on top
        spec = LoopSpec(model, system_prompt, tools, permission_check, info.context_window,
                        session.council_role, self.config, provider_name,
                        agent_name=agent_name, permission_mode=mode or "default",
                        command_tools=tuple(t.name for t in tools if t.kind is ToolKind.COMMAND),
                        initial_plan=tuple(plan_from_json(getattr(session, "plan", ""))),
                        sandboxed=self.sandbox.active, project_dir=project_dir,
                        agent_kind=self.config.agents.kind_for(getattr(agent, "kind", None), session.source))
        spec = replace(spec, approval_policy=self.approval_policy_factory(spec),
                       history_policy=self.history_policy_factory(spec))
        loop = self.loops[loop_kind](spec)

        # as root, the incarnation's commands share one pids cgroup, removed when it ends
        cgroup = self.sandbox.session_cgroup()
        if cgroup is not None:
            resources.append(cgroup.close)
        tool_context = self.tool_context(project_dir, mode, agent_name, project_env=ctx.project_env,
                                         session_id=session.id, sandbox_cgroup=cgroup,
                                         extra={"depth": session.depth, "source": session.source})
        notices.extend(self._sandbox_notices(session.id, tools))
        weight = self.config.slots.weight_for(info.parameter_size_b)
        traits = traits_of(provider)
        approval_timeout = (
            self.config.approvals.chat_timeout_s if session.source == "chat" else self.config.approvals.timeout_s
        )
        return BuiltSession(
            provider_name=provider_name, provider=provider, model=model, loop=loop, tools=tools,
            tool_context=tool_context, pid_kind=traits.pid_kind,
            uses_slots=traits.uses_slots, slot_weight=weight, approval_timeout_s=approval_timeout,
            resources=tuple(resources), notices=tuple(notices), loop_kind=loop_kind,
            provider_selected=provider_selected_message(decision, model),
        )

    def tool_context(self, project_dir: Path, mode: str, agent_name: str = "", *,
                     project_env: Mapping[str, str] | None = None, session_id: str = "",
                     extra: dict[str, Any] | None = None, sandbox_cgroup: Any = None) -> ToolContext:
        """The context a session's tools run in: the allowlisted environment
        (``safe_env``), the real-time deadline scheduler, the protected paths, and the OS
        sandbox launcher with the network choice for ``mode`` and ``agent_name`` (and an
        incarnation's pids cgroup, ``sandbox_cgroup``). Used by every incarnation and by
        :meth:`run_tool`, so the two cannot drift."""

        return ToolContext(
            project_dir=project_dir,
            env=safe_env(project_env),
            call_later=self._call_later,
            protected_patterns=self.config.tools.protected_patterns,
            session_id=session_id,
            extra=dict(extra or {}),
            sandbox=self.sandbox,
            sandbox_network=self.sandbox.network_for(mode or "default", agent_name),
            sandbox_cgroup=sandbox_cgroup,
        )

    def run_tool(self, project_dir: Path, tool: str, args: Mapping[str, Any], *, mode: str = "default",
                 agent_name: str = "", approve: bool = False) -> ToolRun:
        """One tool call as a session of permission ``mode`` makes it: the registry of the
        tool registry factory, the permission check the session's loop gets, and the
        :meth:`tool_context` its worker runs the handler in (see ``Runtime.run_tool``)."""

        project_dir.mkdir(parents=True, exist_ok=True)  # as a session's build does
        tools = self.tool_registry_factory()
        check = self._permission_check(mode or "default", tools, project_dir, self.config.tools.protected_patterns,
                                       agent_name)
        arguments = dict(args)
        decision = check(tool, arguments)
        verdict = decision.permission.value
        reason = decision.message if decision.permission is Permission.DENY else decision.description
        if decision.permission is Permission.DENY or (decision.permission is Permission.ASK and not approve):
            return ToolRun(verdict, reason)
        handler = tools.get(tool)
        if handler is None:  # a custom permission check let an unknown name through
            return ToolRun(verdict, reason, ran=True, result=ToolResult(f"Unknown tool: {tool}", is_error=True))
        ctx = self.tool_context(project_dir, mode, agent_name)
        try:
            result = handler.handler(arguments, ctx)
        except Exception as exc:  # noqa: BLE001 - as a session: a tool bug is a result the model sees
            result = ToolResult(f"Tool execution error: {type(exc).__name__}: {exc}", is_error=True)
        return ToolRun(verdict, reason, ran=True, result=result)

    def _sandbox_notices(self, session_id: str, tools: ToolRegistry) -> list[Any]:
        """The per-session warning when commands will not run in the OS sandbox."""
        status = self.sandbox.status
        if status.active or status.mode == "off" or not any(t.kind is ToolKind.COMMAND for t in tools):
            return []
        if status.refuses_commands:
            message = (f"The OS sandbox is unavailable ({status.reason}) and [tools.sandbox] mode is "
                       "\"required\": this session's commands will be refused.")
        else:
            message = status.warning

        logger.bind(session_id=session_id).warning(message)
        return [SystemEvent(subtype="sandbox_unavailable", message=message)]

    def _permission_check(self, mode: str, tools: ToolRegistry, project_dir: Path,
                          protected: tuple[str, ...], agent_name: str = "") -> PermissionCheck:
        if self.permission_check_factory is not None:
            return self.permission_check_factory(mode, tools, project_dir, protected)
        if len(tools) == 0:

            return lambda name, args: PermissionDecision(Permission.DENY, f"Unknown tool: {name}")

        # the approval prompt of a command says which network it gets (docs/site/concepts/security-model.md)
        return make_permission_check(PermissionMode.parse(mode), as_mapping(tools), project_dir, protected,
                                     command_network=self.sandbox.network_label(mode or "default", agent_name))

    @staticmethod
    def _call_later(delay_s: float, fn: Callable[[], None]) -> Callable[[], None]:
        # Tool deadlines guard real subprocesses: always real time (see clock.io_clock).
        return io_clock().call_later(delay_s, fn).cancel


def close_resources(closers: tuple[Callable[[], None], ...], session_id: str) -> None:
    """Run every closer (blocking); one that fails is logged and the others still run."""
    for close in closers:
        try:
            close()
        except Exception:  # noqa: BLE001 - a closer must not stop the others

            logger.bind(session_id=session_id).exception("closing a session resource failed")

