"""The SDK loop, driven by scripted inputs; every test asserts the effects it returns.

The permission checks here are small stand-ins for the permission modes (the real one
lives in corvid_actors.tools.permissions): the loop only sees the callable's verdicts.
"""

from __future__ import annotations

from typing import Any

import pytest

from corvid_actors.core.vocabulary import Permission, PermissionDecision, ToolResult, ToolSpec
from corvid_actors.events import (
    Assistant,
    ContentBlockStart,
    ContextUsage,
    ErrorEvent,
    Event,
    Result,
    RetryScheduled,
    SystemEvent,
    Thinking,
    ToolStatus,
)
from corvid_actors.loop.effects import (
    ApprovalDecided,
    AskApproval,
    CallModel,
    Effect,
    Emit,
    Exit,
    ModelFailed,
    ModelSucceeded,
    ReportOutage,
    RunTool,
    Schedule,
    TimerFired,
    ToolFinished,
    TurnFinished,
    UserMessage,
)
from corvid_actors.loop.retry import RetrySettings
from corvid_actors.loop.sdk import SdkLoop
from corvid_actors.loop.sdk_compaction import needs_compaction, next_signal
from corvid_actors.loop.settings import SdkLoopSettings
from corvid_actors.providers.base import (
    ChatMessage,
    ErrorKind,
    ModelResponse,
    ProviderError,
    ToolCall,
    Usage,
)

TOOLS = (ToolSpec("read_file", "read"), ToolSpec("write_file", "write"))
EDIT_TOOLS = {"write_file", "edit_file"}


# --- stand-in permission checks (one per mode) ---------------------------------------


def default_mode(name: str, args: dict[str, Any]) -> PermissionDecision:
    return PermissionDecision(Permission.ASK, description=f"Use tool: {name}")


def plan_mode(name: str, args: dict[str, Any]) -> PermissionDecision:
    if name in EDIT_TOOLS:
        return PermissionDecision(Permission.DENY, message=f"Plan mode: {name} is not allowed")
    return PermissionDecision(Permission.ALLOW)


def full_auto(name: str, args: dict[str, Any]) -> PermissionDecision:
    return PermissionDecision(Permission.ALLOW)


# --- helpers ------------------------------------------------------------------------


def make_loop(check=full_auto, window: int = 100_000, **settings: Any) -> SdkLoop:
    return SdkLoop(
        model="claude-test",
        system_prompt="SYS",
        tools=TOOLS,
        permission_check=check,
        context_window=window,
        settings=SdkLoopSettings(**settings),
    )


def call(name: str, call_id: str, **args: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=args)


def reply(text: str = "", *calls: ToolCall, tokens: int = 100, cost: float = 0.0,
          **usage: int) -> ModelSucceeded:
    return ModelSucceeded(
        ModelResponse(text=text, tool_calls=calls, cost_usd=cost,
                      usage=Usage(input_tokens=tokens, **usage))
    )


def failure(kind: ErrorKind = ErrorKind.RETRYABLE, message: str = "overloaded",
            retry_after_s: float | None = None) -> ModelFailed:
    return ModelFailed(ProviderError(kind, message, retry_after_s=retry_after_s))


def events(effects: list[Effect]) -> list[Event]:
    return [e.event for e in effects if isinstance(e, Emit)]


def of(kind: type, effects: list[Effect]) -> list[Any]:
    """Effects of a type, or emitted events of a type."""
    return [e for e in effects if isinstance(e, kind)] + [
        ev for ev in events(effects) if isinstance(ev, kind)
    ]


def only(kind: type, effects: list[Effect]) -> Any:
    found = of(kind, effects)
    assert len(found) == 1, f"expected one {kind.__name__} in {effects}"
    return found[0]


def statuses(effects: list[Effect]) -> list[tuple[str, str]]:
    return [(s.call_id, s.state) for s in of(ToolStatus, effects)]


def assert_turn_finished(effects: list[Effect], subtype: str = "success") -> Result:
    assert isinstance(effects[-1], TurnFinished)
    assert events(effects)[-1] == Thinking(thinking=False)
    result = only(Result, effects)
    assert result.subtype == subtype
    return result


# --- the normal flow ----------------------------------------------------------------


def test_start_emits_thinking_then_calls_the_model() -> None:
    effects = make_loop().start("hello")
    assert effects[0] == Emit(Thinking(thinking=True))
    request = only(CallModel, effects).request
    assert only(CallModel, effects).purpose == "turn"
    assert request.system == "SYS" and request.tools == TOOLS
    assert request.messages == (ChatMessage(role="user", content="hello"),)


def test_normal_approval_flow_in_default_mode() -> None:
    loop = make_loop(default_mode)
    loop.start("read a.py")
    effects = loop.handle(reply("Let me look.", call("read_file", "c1", path="a.py")))
    assert Emit(Assistant(content="Let me look.")) in effects
    assert statuses(effects) == [("c1", "pending")]
    start = only(ContentBlockStart, effects)
    assert (start.block_type, start.name, start.input) == ("tool_use", "read_file", {"path": "a.py"})
    ask = only(AskApproval, effects)
    assert (ask.kind, ask.call.id, ask.description) == ("tool", "c1", "Use tool: read_file")
    assert not of(RunTool, effects)

    effects = loop.handle(ApprovalDecided("c1", allowed=True))
    assert statuses(effects) == [("c1", "running")]
    assert only(RunTool, effects).call == call("read_file", "c1", path="a.py")

    effects = loop.handle(ToolFinished("c1", ToolResult("print('a')")))
    assert statuses(effects) == [("c1", "completed")]
    assert only(ToolStatus, effects).output == "print('a')"
    last = only(CallModel, effects).request.messages[-1]
    assert (last.role, last.tool_call_id, last.content) == ("tool", "c1", "print('a')")

    effects = loop.handle(reply("It prints a."))
    assert_turn_finished(effects)


def test_plan_mode_denial_is_told_to_the_model_and_the_turn_goes_on() -> None:
    loop = make_loop(plan_mode)
    loop.start("change a.py")
    effects = loop.handle(reply("", call("write_file", "c1", path="a.py", content="x")))
    assert not of(AskApproval, effects) and not of(RunTool, effects)
    assert statuses(effects) == [("c1", "pending"), ("c1", "error")]
    assert of(ToolStatus, effects)[-1].output == "Plan mode: write_file is not allowed"
    tool_msg = only(CallModel, effects).request.messages[-1]
    assert tool_msg.is_error and tool_msg.content == "Plan mode: write_file is not allowed"


def test_full_auto_never_asks() -> None:
    loop = make_loop(full_auto)
    loop.start("go")
    effects = loop.handle(
        reply("", call("read_file", "c1", path="a"), call("write_file", "c2", path="b"))
    )
    assert not of(AskApproval, effects)
    assert only(RunTool, effects).call.id == "c1"  # one at a time
    effects = loop.handle(ToolFinished("c1", ToolResult("A")))
    assert only(RunTool, effects).call.id == "c2" and not of(AskApproval, effects)
    effects = loop.handle(ToolFinished("c2", ToolResult("ok")))
    assert only(CallModel, effects)


def test_approval_with_updated_input_runs_with_it() -> None:
    loop = make_loop(default_mode)
    loop.start("go")
    loop.handle(reply("", call("write_file", "c1", path="a", content="old")))
    effects = loop.handle(
        ApprovalDecided("c1", allowed=True, updated_input={"path": "a", "content": "new"})
    )
    assert only(RunTool, effects).call == call("write_file", "c1", path="a", content="new")


def test_human_denial_goes_back_to_the_model_by_default() -> None:
    # issue 34 item 9, seed 004: "Permission denied by user" is the tool result and the
    # model goes on (the doom-loop guard handles repeated denials)
    loop = make_loop(default_mode)
    loop.start("go")
    loop.handle(reply("", call("read_file", "c1", path="a"), call("read_file", "c2", path="b")))
    effects = loop.handle(ApprovalDecided("c1", allowed=False))
    assert statuses(effects) == [("c1", "error")]
    assert only(AskApproval, effects).call.id == "c2"  # the next call is still asked for
    effects = loop.handle(ApprovalDecided("c2", allowed=True))
    effects += loop.handle(ToolFinished("c2", ToolResult("B")))
    sent = only(CallModel, effects).request.messages
    assert [(m.tool_call_id, m.content, m.is_error) for m in sent if m.role == "tool"] == [
        ("c1", "Permission denied by user", True), ("c2", "B", False)]
    result = assert_turn_finished(loop.handle(reply("I could not read a; b says B.")))
    assert result.metrics["termination_reason"] != "permission_denied"


def test_human_denial_stops_the_turn_and_answers_every_call_when_configured() -> None:
    loop = make_loop(default_mode, stop_on_denial=True)
    loop.start("go")
    loop.handle(reply("", call("read_file", "c1", path="a"), call("read_file", "c2", path="b")))
    effects = loop.handle(ApprovalDecided("c1", allowed=False))
    assert not of(CallModel, effects) and not of(RunTool, effects)
    assert statuses(effects) == [("c1", "error"), ("c2", "error")]
    result = assert_turn_finished(effects, "stopped")
    assert result.metrics["termination_reason"] == "permission_denied"
    tool_msgs = [m for m in loop.history if m.role == "tool"]
    assert [(m.tool_call_id, m.is_error) for m in tool_msgs] == [("c1", True), ("c2", True)]
    assert tool_msgs[0].content == "Permission denied by user"
    # the next user message starts a fresh turn on a consistent history
    effects = loop.handle(UserMessage("try again"))
    assert only(CallModel, effects).request.messages[-1].content == "try again"


def test_human_denial_message_is_used_and_turn_can_continue_when_configured() -> None:
    loop = make_loop(default_mode, stop_on_denial=False)
    loop.start("go")
    loop.handle(reply("", call("read_file", "c1", path="a")))
    effects = loop.handle(ApprovalDecided("c1", allowed=False, message="not that file"))
    assert statuses(effects) == [("c1", "error")]
    assert only(CallModel, effects).request.messages[-1].content == "not that file"


def test_tool_status_goes_pending_running_then_completed_or_error() -> None:
    loop = make_loop(full_auto)
    loop.start("go")
    log = loop.handle(reply("", call("read_file", "c1", path="a"), call("read_file", "c2", path="b")))
    log += loop.handle(ToolFinished("c1", ToolResult("A")))
    log += loop.handle(ToolFinished("c2", ToolResult("no such file", is_error=True)))
    assert statuses(log) == [
        ("c1", "pending"), ("c2", "pending"),
        ("c1", "running"), ("c1", "completed"),
        ("c2", "running"), ("c2", "error"),
    ]


def test_invalid_arguments_are_answered_without_running_or_asking() -> None:
    checked: list[str] = []

    def check(name: str, args: dict[str, Any]) -> PermissionDecision:
        checked.append(name)
        return PermissionDecision(Permission.ASK)

    loop = make_loop(check)
    loop.start("go")
    bad = ToolCall(id="c1", name="read_file", arguments_error="not a JSON object")
    effects = loop.handle(reply("", bad))
    assert checked == [] and not of(AskApproval, effects)
    assert statuses(effects) == [("c1", "pending"), ("c1", "error")]
    assert "not a JSON object" in only(CallModel, effects).request.messages[-1].content


def test_stale_results_and_decisions_are_ignored() -> None:
    loop = make_loop(default_mode)
    loop.start("go")
    assert loop.handle(ToolFinished("c1", ToolResult("x"))) == []
    loop.handle(reply("", call("read_file", "c1", path="a")))
    assert loop.handle(ApprovalDecided("other", allowed=True)) == []
    assert loop.handle(reply("late duplicate")) == []
    assert only(RunTool, loop.handle(ApprovalDecided("c1", allowed=True)))


def test_result_reports_turn_cost_usage_and_metrics() -> None:
    loop = make_loop(full_auto, window=1000)
    loop.start("go")
    loop.handle(reply("", call("read_file", "c1", path="a"), tokens=100, cost=0.01,
                      output_tokens=5, cache_read_tokens=20, cache_creation_tokens=3))
    loop.handle(ToolFinished("c1", ToolResult("A")))
    effects = loop.handle(reply("done", tokens=200, cost=0.02, output_tokens=7))
    result = assert_turn_finished(effects)
    assert result.total_cost_usd == pytest.approx(0.03)
    assert result.num_turns == 2 and result.result == "done"
    assert result.usage == {"input_tokens": 300, "output_tokens": 12,
                            "cache_read_tokens": 20, "cache_creation_tokens": 3}
    assert result.metrics["iterations"] == 2 and result.metrics["tool_calls"] == 1
    usage = only(ContextUsage, effects)
    assert (usage.estimated_tokens, usage.context_window, usage.usage_percent) == (200, 1000, 20.0)
    # the next turn starts its accounting afresh
    loop.handle(UserMessage("again"))
    assert only(Result, loop.handle(reply("ok", cost=0.5))).total_cost_usd == pytest.approx(0.5)


def test_message_during_a_turn_is_queued_for_the_next_turn() -> None:
    loop = make_loop()
    loop.start("first")
    assert loop.handle(UserMessage("second")) == []
    effects = loop.handle(reply("answer one"))
    finished = effects.index(TurnFinished())
    assert only(CallModel, effects[finished:]).request.messages[-1].content == "second"
    assert effects[finished + 1] == Emit(Thinking(thinking=True))


def test_iteration_cap_ends_the_turn() -> None:
    loop = make_loop(full_auto, max_iterations=2)
    loop.start("go")
    loop.handle(reply("", call("read_file", "c1", path="a")))
    loop.handle(ToolFinished("c1", ToolResult("A")))
    effects = loop.handle(reply("", call("read_file", "c2", path="b")))
    assert not of(RunTool, effects) and not of(CallModel, effects)
    assert statuses(effects) == [("c2", "pending"), ("c2", "error")]
    assert assert_turn_finished(effects, "error_max_turns").metrics["termination_reason"] == (
        "max_iterations"
    )


# --- doom loop ----------------------------------------------------------------------


def repeat_call(loop: SdkLoop, n: int) -> list[Effect]:
    """Feed the n-th identical read_file call; returns the effects of that response."""
    return loop.handle(reply("", call("read_file", f"c{n}", path="same.py")))


def run_identical_calls(loop: SdkLoop, count: int) -> None:
    for n in range(1, count + 1):
        effects = repeat_call(loop, n)
        assert not of(AskApproval, effects)
        loop.handle(ToolFinished(f"c{n}", ToolResult("same")))


def test_third_identical_call_asks_doom_loop_permission() -> None:
    loop = make_loop(full_auto)
    loop.start("go")
    run_identical_calls(loop, 2)
    effects = repeat_call(loop, 3)
    ask = only(AskApproval, effects)
    assert ask.kind == "doom_loop" and ask.call.id == "c3"
    assert "read_file" in ask.description and "3×" in ask.description
    assert not of(RunTool, effects)
    # allowed once: it runs; the 4th identical call asks again
    assert only(RunTool, loop.handle(ApprovalDecided("c3", allowed=True))).call.id == "c3"
    loop.handle(ToolFinished("c3", ToolResult("same")))
    assert only(AskApproval, repeat_call(loop, 4)).kind == "doom_loop"


def test_doom_loop_allow_for_session_whitelists_the_tool() -> None:
    loop = make_loop(full_auto)
    loop.start("go")
    run_identical_calls(loop, 2)
    repeat_call(loop, 3)
    effects = loop.handle(ApprovalDecided("c3", allowed=True, scope="session"))
    assert only(RunTool, effects).call.id == "c3"
    loop.handle(ToolFinished("c3", ToolResult("same")))
    for n in (4, 5):
        effects = repeat_call(loop, n)
        assert not of(AskApproval, effects) and only(RunTool, effects).call.id == f"c{n}"
        loop.handle(ToolFinished(f"c{n}", ToolResult("same")))


def test_doom_loop_allowed_still_needs_the_ordinary_permission() -> None:
    loop = make_loop(plan_mode)
    loop.start("go")
    for n in (1, 2):
        loop.handle(reply("", call("write_file", f"w{n}", path="x")))  # denied by policy
    loop.handle(reply("", call("write_file", "w3", path="x")))
    effects = loop.handle(ApprovalDecided("w3", allowed=True))
    assert not of(RunTool, effects)
    assert statuses(effects) == [("w3", "error")]


def test_doom_loop_denied_stops_the_turn() -> None:
    loop = make_loop(full_auto)
    loop.start("go")
    run_identical_calls(loop, 2)
    repeat_call(loop, 3)
    effects = loop.handle(ApprovalDecided("c3", allowed=False))
    assert not of(RunTool, effects) and not of(CallModel, effects)
    assert statuses(effects) == [("c3", "error")]
    assert assert_turn_finished(effects, "stopped").metrics["termination_reason"] == "doom_loop"


def test_user_message_resets_the_repeat_streak() -> None:
    loop = make_loop(full_auto)
    loop.start("go")
    run_identical_calls(loop, 2)
    loop.handle(reply("done"))
    loop.handle(UserMessage("read it again"))
    assert not of(AskApproval, repeat_call(loop, 3))


# --- retries and outage -------------------------------------------------------------


def test_two_retryable_failures_retry_at_2s_and_4s_then_succeed() -> None:
    loop = make_loop()
    first = only(CallModel, loop.start("go"))
    effects = loop.handle(failure())
    retry = only(RetryScheduled, effects)
    assert (retry.attempt, retry.delay_s, retry.message) == (1, 2.0, "overloaded")
    schedule = only(Schedule, effects)
    assert schedule.delay_s == 2.0 and not of(CallModel, effects)
    assert loop.handle(TimerFired(schedule.token)) == [first]

    effects = loop.handle(failure())
    schedule = only(Schedule, effects)
    assert schedule.delay_s == 4.0 and only(RetryScheduled, effects).attempt == 2
    assert loop.handle(TimerFired("stale-token")) == []
    assert loop.handle(TimerFired(schedule.token)) == [first]
    assert_turn_finished(loop.handle(reply("ok")))
    assert loop.consecutive_api_errors == 0


def test_retry_after_is_honoured_and_capped() -> None:
    loop = make_loop(retry=RetrySettings(retry_after_cap_s=60.0))
    loop.start("go")
    schedule = only(Schedule, loop.handle(failure(retry_after_s=7.0)))
    assert schedule.delay_s == 7.0
    loop.handle(TimerFired(schedule.token))
    assert only(Schedule, loop.handle(failure(retry_after_s=900.0))).delay_s == 60.0


def test_third_consecutive_failure_reports_an_outage_without_exit_or_error() -> None:
    loop = make_loop()
    loop.start("go")
    for _ in range(2):
        loop.handle(TimerFired(only(Schedule, loop.handle(failure())).token))
    effects = loop.handle(failure(message="connection refused"))
    assert len(effects) == 1
    assert isinstance(effects[0], ReportOutage) and "connection refused" in effects[0].message


def test_outage_count_is_reset_by_a_success_and_by_non_api_errors() -> None:
    loop = make_loop()
    loop.start("go")
    loop.handle(TimerFired(only(Schedule, loop.handle(failure())).token))
    loop.handle(TimerFired(only(Schedule, loop.handle(failure())).token))
    loop.handle(reply("ok"))
    loop.handle(UserMessage("more"))
    loop.handle(TimerFired(only(Schedule, loop.handle(failure())).token))
    loop.handle(TimerFired(only(Schedule, loop.handle(failure())).token))
    assert loop.consecutive_api_errors == 2
    # a context overflow is not an API error: it resets the count (and compacts)
    effects = loop.handle(failure(ErrorKind.CONTEXT_OVERFLOW, "prompt is too long"))
    assert only(CallModel, effects).purpose == "compaction"
    assert loop.consecutive_api_errors == 0


def test_retries_exhausted_take_the_fatal_path() -> None:
    loop = make_loop(api_failure_threshold=10, retry=RetrySettings(max_attempts=3))
    loop.start("go")
    for _ in range(2):
        loop.handle(TimerFired(only(Schedule, loop.handle(failure())).token))
    effects = loop.handle(failure())
    assert not of(Schedule, effects)
    assert only(ErrorEvent, effects).error_type == "sdk_error"
    assert effects[-1] == Exit(1)


def test_fatal_error_emits_result_error_event_and_exit_1() -> None:
    loop = make_loop()
    loop.start("go")
    effects = loop.handle(failure(ErrorKind.FATAL, "invalid x-api-key"))
    result, error = events(effects)
    assert isinstance(result, Result)
    assert (result.subtype, result.result, result.num_turns) == ("error", "invalid x-api-key", 0)
    assert result.metrics["termination_reason"] == "error"
    assert error == ErrorEvent(error_type="sdk_error", message="invalid x-api-key")
    assert effects[-1] == Exit(1)
    assert loop.handle(UserMessage("hello?")) == []


def test_abort_returns_nothing_and_silences_the_loop() -> None:
    loop = make_loop()
    loop.start("go")
    schedule = only(Schedule, loop.handle(failure()))
    assert loop.abort() == []
    assert loop.handle(TimerFired(schedule.token)) == []
    assert loop.handle(reply("late")) == []
    assert loop.handle(UserMessage("more")) == []


def test_abort_mid_approval_emits_nothing_afterwards() -> None:
    loop = make_loop(default_mode)
    loop.start("go")
    loop.handle(reply("", call("read_file", "c1", path="a")))
    assert loop.abort() == []
    assert loop.handle(ApprovalDecided("c1", allowed=True)) == []


# --- compaction ---------------------------------------------------------------------


def test_compaction_rules() -> None:
    assert needs_compaction(901, 1000, 0.9) and not needs_compaction(900, 1000, 0.9)
    assert not needs_compaction(10**9, 0, 0.9)
    assert next_signal(blocked=True, compaction_due=True, calls_made=True) == "stop"
    assert next_signal(blocked=False, compaction_due=True, calls_made=False) == "finish"
    assert next_signal(blocked=False, compaction_due=True, calls_made=True) == "compact"
    assert next_signal(blocked=False, compaction_due=False, calls_made=True) == "continue"


def test_compaction_above_90_percent_and_not_repeated_when_it_does_not_shrink() -> None:
    loop = make_loop(full_auto, window=1000)
    loop.start("refactor everything")
    loop.handle(reply("", call("read_file", "c1", path="a"), tokens=950))
    effects = loop.handle(ToolFinished("c1", ToolResult("A" * 10)))
    compaction = only(CallModel, effects)
    assert compaction.purpose == "compaction" and compaction.request.tools == ()
    assert "[User]: refactor everything" in compaction.request.messages[0].content

    effects = loop.handle(reply("SUMMARY: read a, found A", tokens=300))
    assert only(SystemEvent, effects).subtype == "compaction"
    turn_call = only(CallModel, effects)
    assert turn_call.purpose == "turn"
    (message,) = turn_call.request.messages
    assert message.role == "user"
    assert "SUMMARY: read a, found A" in message.content
    assert "refactor everything" in message.content
    assert loop.history == [message]

    # still over the threshold after compacting: no second compaction this turn
    effects = loop.handle(reply("", call("read_file", "c2", path="b"), tokens=960))
    assert only(SystemEvent, effects).subtype == "compaction_ineffective"
    effects = loop.handle(ToolFinished("c2", ToolResult("B")))
    assert only(CallModel, effects).purpose == "turn"
    effects = loop.handle(reply("", call("read_file", "c3", path="c"), tokens=970))
    effects = loop.handle(ToolFinished("c3", ToolResult("C")))
    assert only(CallModel, effects).purpose == "turn"
    result = assert_turn_finished(loop.handle(reply("done", tokens=980)))
    assert result.metrics["compactions"] == 1


def test_over_threshold_at_end_of_turn_compacts_before_the_next_turn() -> None:
    loop = make_loop(full_auto, window=1000)
    loop.start("hi")
    effects = loop.handle(reply("long answer", tokens=950))
    assert_turn_finished(effects)
    assert not [c for c in of(CallModel, effects) if c.purpose == "compaction"]
    effects = loop.handle(UserMessage("next question"))
    assert only(CallModel, effects).purpose == "compaction"
    effects = loop.handle(reply("summary"))
    (message,) = only(CallModel, effects).request.messages
    assert message.content.endswith("next question")


def test_context_overflow_compacts_then_retries_once() -> None:
    loop = make_loop(full_auto, window=1000)
    loop.start("go")
    effects = loop.handle(failure(ErrorKind.CONTEXT_OVERFLOW, "prompt is too long"))
    assert only(CallModel, effects).purpose == "compaction"
    effects = loop.handle(reply("summary"))
    assert only(CallModel, effects).purpose == "turn"
    effects = loop.handle(failure(ErrorKind.CONTEXT_OVERFLOW, "prompt is too long"))
    assert effects[-1] == Exit(1)
    assert only(ErrorEvent, effects).message == "prompt is too long"


def test_failed_compaction_call_is_fatal() -> None:
    loop = make_loop(full_auto, window=1000)
    loop.start("go")
    loop.handle(failure(ErrorKind.CONTEXT_OVERFLOW, "prompt is too long"))
    effects = loop.handle(failure(ErrorKind.FATAL, "bad request"))
    assert only(ErrorEvent, effects).error_type == "sdk_error"
    assert effects[-1] == Exit(1)


def test_retryable_failure_of_a_compaction_call_is_retried() -> None:
    loop = make_loop(full_auto, window=1000)
    loop.start("go")
    compaction = only(CallModel, loop.handle(failure(ErrorKind.CONTEXT_OVERFLOW, "too long")))
    schedule = only(Schedule, loop.handle(failure()))
    assert loop.handle(TimerFired(schedule.token)) == [compaction]


def test_a_second_compaction_in_a_turn_does_not_nest_summaries() -> None:
    loop = make_loop(full_auto, window=1000)
    loop.start("the task")
    for n, summary in ((1, "SUMMARY-ONE"), (2, "SUMMARY-TWO")):
        loop.handle(reply("", call("read_file", f"c{n}", path=str(n)), tokens=950))
        effects = loop.handle(ToolFinished(f"c{n}", ToolResult("x")))
        assert only(CallModel, effects).purpose == "compaction"
        effects = loop.handle(reply(summary))
        # a response under the threshold in between makes the next compaction legitimate
        loop.handle(reply("", call("read_file", f"d{n}", path=str(n)), tokens=100))
        loop.handle(ToolFinished(f"d{n}", ToolResult("y")))
    (message,) = loop.history[:1]
    assert "SUMMARY-TWO" in message.content and "SUMMARY-ONE" not in message.content
    assert message.content.endswith("The request being worked on:\nthe task")
