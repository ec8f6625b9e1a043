"""The OpenAgent seed's rules, bundled for both loops (direct and SDK).

A loop owns one :class:`LoopRules` and calls it at a few fixed points:

========================  ===============================================================
``offered_tools``         the tools the model is offered (+ ``update_plan``, + the
                          ``tail_lines`` argument of command tools)
``prepare_history``       before trimming/compaction: the history policy (amnesia, dementia)
``system_prompt``         the system prompt with the current plan appended
``begin_turn`` / ``check``  the payload-growth failsafe before each model call;
``trip``                  its effects (snapshot, ``error``) when a request ballooned
``on_reply``              after each model reply: re-baseline, prune completed plan steps
``is_plan_call`` /        ``update_plan`` calls, answered by the loop itself
``plan_call``
``review`` / ``approved``  the approval policy around the permission check
``observe``               observation caps on every tool result; the full output is kept
                          for the operator
========================  ===============================================================

The rules themselves are pure functions in :mod:`.plan` (the ``update_plan`` tool's
schema included), :mod:`.payload_guard`, :mod:`.observation` and :mod:`.memory_policy`;
the approval policy is injected through the ``ApprovalPolicy`` protocol of
:mod:`corvid_actors.core.vocabulary` (the runtime's default, the command policy of
:mod:`corvid_actors.tools.command_policy`, is chosen by ``corvid_actors.wiring.builder``: the loop
never imports a tool). This class only holds their state for one session incarnation. Like the loops it is
driven from the session actor's thread only. ``LoopRules.off()`` turns everything off
(the loops' default, so a bare loop behaves as its own seed says); the runtime builds
rules from the configuration (:func:`rules_for`), where they are on by default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from corvid_actors.core.vocabulary import (
    ApprovalPolicy,
    PassThroughPolicy,
    PermissionDecision,
    Review,
    ToolResult,
    ToolSpec,
)
from corvid_actors.events import ErrorEvent, PlanEvent
from corvid_actors.loop.effects import ApprovalDecided, Effect, Emit, ModelSucceeded, PersistMessage
from corvid_actors.loop.memory_policy import HistoryPolicy, memory_policy_for
from corvid_actors.loop.observation import (
    OPERATOR_OUTPUT_ROLE,
    ObservationSettings,
    build_observation,
    operator_record,
    parse_tail_lines,
)
from corvid_actors.loop.payload_guard import (
    ON_TRIP_STOP,
    PAYLOAD_GROWTH_ERROR,
    SNAPSHOT_ROLE,
    GrowthCheck,
    GrowthGuard,
    GuardSettings,
    snapshot_json,
    trip_message,
)
from corvid_actors.loop.plan import (
    PLAN_TOOL_NAME,
    PlanState,
    PlanUpdateError,
    merge_plan,
    parse_plan_update,
    plan_prompt,
    plan_tool_spec,
    prune_completed,
    state_from_dicts,
    summarize_update,
)
from corvid_actors.providers.base import ChatMessage, ModelRequest, ToolCall

TAIL_LINES_DESCRIPTION = "Show only the last N lines of the output (default 200)"


@dataclass(frozen=True)
class LoopRulesSettings:
    """Which rules are on, and their constants."""

    plan_enabled: bool = True
    guard: GuardSettings = field(default_factory=GuardSettings)
    observation: ObservationSettings = field(default_factory=ObservationSettings)


class LoopRules:
    """The rules' state for one loop (see the module docstring)."""

    def __init__(
        self,
        settings: LoopRulesSettings | None = None,
        *,
        approval_policy: ApprovalPolicy | None = None,
        history_policy: HistoryPolicy | None = None,
        initial_plan: Iterable[Mapping[str, Any]] = (),
        command_tools: Iterable[str] = ("run_command",),
    ) -> None:
        self.settings = settings or LoopRulesSettings()
        self._approvals: ApprovalPolicy = approval_policy or PassThroughPolicy()
        self._history_policy = history_policy
        self._plan = state_from_dicts(initial_plan)
        self._guard = GrowthGuard()
        self._stop_on_trip = False
        self._command_tools = frozenset(command_tools)

    @classmethod
    def off(cls) -> LoopRules:
        """No plan tool, no failsafe, no caps, no policies."""
        return cls(LoopRulesSettings(plan_enabled=False, guard=GuardSettings(enabled=False),
                                     observation=ObservationSettings(enabled=False)))

    # --- tools --------------------------------------------------------------------------

    def offered_tools(self, tools: Sequence[ToolSpec]) -> tuple[ToolSpec, ...]:
        """The tools to offer: command tools learn ``tail_lines``; ``update_plan`` joins a
        non-empty tool list (an agent with no tools gets no plan tool either)."""
        out = [self._with_tail_lines(spec) for spec in tools]
        if self.settings.plan_enabled and out and all(s.name != PLAN_TOOL_NAME for s in out):
            out.append(plan_tool_spec())
        return tuple(out)

    def _with_tail_lines(self, spec: ToolSpec) -> ToolSpec:
        obs = self.settings.observation
        props = spec.parameters.get("properties")
        if not obs.enabled or spec.name not in self._command_tools or not isinstance(props, dict) \
                or obs.tail_lines_argument in props:
            return spec
        extra = {obs.tail_lines_argument: {"type": "integer", "description": TAIL_LINES_DESCRIPTION}}
        return replace(spec, parameters={**spec.parameters, "properties": {**props, **extra}})

    # --- plan ---------------------------------------------------------------------------

    @property
    def plan(self) -> PlanState:
        """The current plan."""
        return self._plan

    def is_plan_call(self, call: ToolCall) -> bool:
        return self.settings.plan_enabled and call.name == PLAN_TOOL_NAME

    def plan_call(self, call: ToolCall) -> tuple[ToolResult, list[Effect]]:
        """Apply an ``update_plan`` call: its result for the model, and a ``plan`` event
        when the steps changed."""
        try:
            updates = parse_plan_update(call.arguments)
        except PlanUpdateError as exc:
            return ToolResult(f"Invalid plan update: {exc}", is_error=True), []
        before = self._plan
        merge = merge_plan(before, updates)
        self._plan = merge.state
        return ToolResult(summarize_update(before, merge)), self._plan_changed(before)

    def _plan_changed(self, before: PlanState) -> list[Effect]:
        if self._plan.steps == before.steps:
            return []
        return [Emit(PlanEvent(steps=self._plan.as_dicts()))]

    def system_prompt(self, system: str) -> str:
        """``system`` with the current plan appended (unchanged while there is none)."""
        block = plan_prompt(self._plan) if self.settings.plan_enabled else ""
        if not block:
            return system
        return f"{system}\n\n{block}" if system else block

    # --- history ------------------------------------------------------------------------

    def prepare_history(self, history: Sequence[ChatMessage]) -> list[ChatMessage]:
        """The history policy applied (before any trimming or compaction)."""
        return list(history) if self._history_policy is None else self._history_policy(history)

    # --- payload-growth failsafe -----------------------------------------------------------

    def begin_turn(self) -> None:
        """A user message opens a turn: its first request is not compared."""
        self._guard = self._guard.new_turn()

    def check(self, request: ModelRequest) -> GrowthCheck:
        """Measure ``request`` before it is sent; ``tripped`` means: do not send it."""
        tripped_before = self._guard.tripped_in_turn
        self._guard, verdict = self._guard.check(request, self.settings.guard)
        self._stop_on_trip = self.settings.guard.on_trip == ON_TRIP_STOP or tripped_before
        return verdict

    def trip(self, request: ModelRequest, verdict: GrowthCheck) -> tuple[list[Effect], bool]:
        """After a tripped :meth:`check`: the snapshot (written by the session actor) and
        the ``error`` event, and whether the loop must stop (``on_trip = "stop"``, or a
        second trip in the turn) rather than compact (and then call :meth:`compacted`)."""
        guard, stop = self.settings.guard, self._stop_on_trip
        return [
            PersistMessage(role=SNAPSHOT_ROLE, content=snapshot_json(request, verdict, guard)),
            Emit(ErrorEvent(error_type=PAYLOAD_GROWTH_ERROR, message=trip_message(verdict, guard, stop=stop))),
        ], stop

    def compacted(self) -> None:
        """The conversation was compacted: the next request starts a new baseline."""
        self._guard = self._guard.compacted()

    def on_reply(self, event: ModelSucceeded) -> list[Effect]:
        """After a model reply: re-baseline the guard; prune completed plan steps."""
        self._guard = self._guard.after_reply(event.request_bytes, event.response)
        before = self._plan
        self._plan = prune_completed(before)
        return self._plan_changed(before)

    # --- approvals ----------------------------------------------------------------------

    def review(self, call: ToolCall, decision: PermissionDecision) -> Review:
        return self._approvals.review(call.name, dict(call.arguments), decision)

    def approved(self, call: ToolCall, decided: ApprovalDecided) -> None:
        """Tell the policy about a human's "allow for this session"."""
        if decided.allowed and decided.scope == "session":
            self._approvals.remember(call.name, dict(call.arguments))

    # --- observation caps ---------------------------------------------------------------------

    def observe(self, call: ToolCall, result: ToolResult,
                max_chars: int | None = None) -> tuple[ToolResult, list[Effect]]:
        """What the model sees of ``result``; when that is less than the full output, the
        full output is stored for the operator (a ``tool`` message). ``max_chars``: the
        caller's own cap on the result (the direct loop's share of the context window),
        folded into the observation's byte cap so one cut states the output's size."""
        obs = self.settings.observation
        if not obs.enabled:
            return result, []
        full = result.full_output if result.full_output is not None else result.output
        command = call.name in self._command_tools
        tail = parse_tail_lines(dict(call.arguments), obs) if command else None
        seen = build_observation(full, obs, command=command, tail_lines=tail, max_bytes=max_chars)
        if not seen.truncated:
            return ToolResult(seen.text, result.is_error), []
        record = operator_record(call.id, call.name, full, result.is_error)
        return (ToolResult(seen.text, result.is_error, full_output=full),
                [PersistMessage(role=OPERATOR_OUTPUT_ROLE, content=record)])


# --- building from the configuration (used by corvid_actors.wiring.builder) ----------------------------


def settings_from_config(config: Any) -> LoopRulesSettings:
    """The rules' settings from a :class:`~corvid_actors.config.Config`."""
    g, o = config.payload_guard, config.observation
    return LoopRulesSettings(
        plan_enabled=config.plan.enabled,
        guard=GuardSettings(enabled=g.enabled, growth_factor=g.growth_factor,
                            min_growth_bytes=g.min_growth_bytes, on_trip=g.on_trip),
        observation=ObservationSettings(enabled=o.enabled, max_lines=o.max_lines,
                                        max_bytes=o.max_bytes, hard_limit_bytes=o.hard_limit_bytes),
    )


def default_history_policy(spec: Any) -> HistoryPolicy | None:
    """The configured memory policy for the spec's agent (None when both are off)."""
    m = spec.config.memory
    policy = memory_policy_for(spec.agent_name, m.amnesia_turns, m.dementia_turns, m.agents)
    return policy if policy.active else None


def rules_for(spec: Any) -> LoopRules:
    """The rules of one incarnation from its :class:`~corvid_actors.wiring.loop_factories.LoopSpec`."""
    return LoopRules(settings_from_config(spec.config), approval_policy=spec.approval_policy,
                     history_policy=spec.history_policy, initial_plan=spec.initial_plan,
                     command_tools=spec.command_tools)
