"""The direct loop, driven by an in-test driver: each seed scenario and error case.

The driver plays the session actor: it performs the effects in order, answers each
CallModel / RunTool / AskApproval / AcquireSlot / Schedule from a script, and checks
the contract on the way (at most one outstanding request; a slot released only if
granted, and at most once).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from corvid_actors.core.vocabulary import Permission, PermissionDecision, ToolResult, ToolSpec
from corvid_actors.events import (
    Assistant,
    ContentBlockStart,
    ContextUsage,
    ContextWarning,
    ErrorEvent,
    Event,
    MessageStop,
    Result,
    RetryScheduled,
    SystemEvent,
    Thinking,
    ToolStatus,
)
from corvid_actors.loop.direct import DirectLoop
from corvid_actors.loop.direct_context import COUNCIL_REASONING_PROMPT, SUMMARY_REQUEST
from corvid_actors.loop.effects import (
    AcquireSlot,
    ApprovalDecided,
    AskApproval,
    CallModel,
    Effect,
    Emit,
    Exit,
    LoopInput,
    ModelFailed,
    ModelSucceeded,
    ReleaseSlot,
    ReportOutage,
    RunTool,
    Schedule,
    SlotGranted,
    SlotTimedOut,
    TimerFired,
    ToolFinished,
    TurnFinished,
    UserMessage,
)
from corvid_actors.loop.nudges import HALLUCINATION_NUDGE, NudgeReason, nudge_message
from corvid_actors.loop.rules import LoopRules
from corvid_actors.loop.settings import DirectLoopSettings
from corvid_actors.loop.summaries import CONTEXT_SUMMARY_HEADER
from corvid_actors.providers.base import (
    ChatMessage,
    ErrorKind,
    ModelResponse,
    ProviderError,
    ToolCall,
    Usage,
)

TOOLS = tuple(
    ToolSpec(name, f"{name} tool")
    for name in ("read_file", "list_files", "search_files", "write_file", "run_command")
)
HIGH = "claude-test"  # high tier: the seed's 25 iterations / 2 nudges / 2 mid-chain nudges
FINAL = "All done: the parser now handles nested blocks and the tests pass."

ModelStep = ModelResponse | ProviderError


def allow_all(name: str, args: dict[str, Any]) -> PermissionDecision:
    return PermissionDecision(Permission.ALLOW)


def call(name: str, call_id: str = "", **args: Any) -> ToolCall:
    return ToolCall(call_id or f"{name}-{sorted(args.items())}", name, args)


def tools(*calls: ToolCall, text: str = "") -> ModelResponse:
    return ModelResponse(text=text, tool_calls=calls)


def text(content: str, cost: float = 0.0, usage: Usage | None = None) -> ModelResponse:
    return ModelResponse(text=content, cost_usd=cost, usage=usage or Usage())


@dataclass
class Driver:
    """Plays the session actor against a DirectLoop, from scripts."""

    loop: DirectLoop
    model: deque[ModelStep] = field(default_factory=deque)
    run_tool: Callable[[ToolCall], ToolResult] = lambda c: ToolResult(f"ok: {c.name}")
    approve: Callable[[ToolCall], ApprovalDecided] = lambda c: ApprovalDecided(c.id, True)
    slot_granted: bool = True
    log: list[Effect] = field(default_factory=list)
    slot_held: bool = False

    def start(self, prompt: str, *script: ModelStep) -> list[Effect]:
        return self.send(self.loop.start, prompt, script)

    def user(self, prompt: str, *script: ModelStep) -> list[Effect]:
        return self.send(self.loop.handle, UserMessage(prompt), script)

    def send(
        self, fn: Callable[[Any], list[Effect]], arg: Any, script: Sequence[ModelStep]
    ) -> list[Effect]:
        self.model.extend(script)
        begin = len(self.log)
        effects = fn(arg)
        for _ in range(500):  # bounded: a loop that never settles fails the test
            answer = self._perform(effects)
            if answer is None:
                return self.log[begin:]
            effects = self.loop.handle(answer)
        raise AssertionError("the loop did not settle")

    def _perform(self, effects: list[Effect]) -> LoopInput | None:
        answers: list[LoopInput] = []
        for effect in effects:
            self.log.append(effect)
            match effect:
                case AcquireSlot():
                    assert not self.slot_held
                    self.slot_held = self.slot_granted
                    answers.append(SlotGranted() if self.slot_granted else SlotTimedOut())
                case ReleaseSlot():
                    assert self.slot_held, "ReleaseSlot without a granted slot"
                    self.slot_held = False
                case CallModel():
                    assert self.model, f"unscripted model call: {effect}"
                    step = self.model.popleft()
                    if isinstance(step, ProviderError):
                        answers.append(ModelFailed(step))
                    else:
                        answers.append(ModelSucceeded(step))
                case RunTool(call=c):
                    answers.append(ToolFinished(c.id, self.run_tool(c)))
                case AskApproval(call=c):
                    answers.append(self.approve(c))
                case Schedule(token=token):
                    answers.append(TimerFired(token))
        assert len(answers) <= 1, f"more than one outstanding request: {answers}"
        return answers[0] if answers else None

    # --- views of the log ------------------------------------------------------------

    def events(self, kind: type[Event] | None = None) -> list[Event]:
        found = [e.event for e in self.log if isinstance(e, Emit)]
        return [e for e in found if kind is None or isinstance(e, kind)]

    def calls(self) -> list[CallModel]:
        return [e for e in self.log if isinstance(e, CallModel)]

    def runs(self) -> list[ToolCall]:
        return [e.call for e in self.log if isinstance(e, RunTool)]

    def result(self) -> Result:
        results = self.events(Result)
        assert results, "no result event"
        return results[-1]  # type: ignore[return-value]

    def tail(self, n: int) -> list[Effect]:
        return self.log[-n:]


def make(
    model: str = HIGH,
    settings: DirectLoopSettings | None = None,
    permission: Callable[[str, dict[str, Any]], PermissionDecision] = allow_all,
    **kwargs: Any,
) -> Driver:
    loop = DirectLoop(
        model=model,
        system_prompt="You are a coding agent.",
        tools=TOOLS,
        permission_check=permission,
        context_window=kwargs.pop("context_window", 32_768),
        settings=settings or DirectLoopSettings(),
        **kwargs,
    )
    return Driver(loop)


def tool_messages(history: Sequence[ChatMessage]) -> list[ChatMessage]:
    return [m for m in history if m.role == "tool"]


# --- normal completion ---------------------------------------------------------------


def test_three_tool_calls_then_text_ends_the_turn_and_releases_the_slot() -> None:
    d = make()
    d.start(
        "Fix the parser",
        tools(call("read_file", path="src/parser.py")),
        tools(call("search_files", pattern="parse_block")),
        tools(call("write_file", path="src/parser.py", content="fixed")),
        text(FINAL),
    )
    assert isinstance(d.log[0], Emit) and d.log[0].event == Thinking(thinking=True)
    assert d.log[1] == AcquireSlot(HIGH)
    assert [c.name for c in d.runs()] == ["read_file", "search_files", "write_file"]
    assert d.tail(4) == [
        Emit(d.result()),
        Emit(Thinking(thinking=False)),
        ReleaseSlot(),
        TurnFinished(),
    ]
    result = d.result()
    assert result.subtype == "success" and result.num_turns == 4 and result.result == FINAL
    assert result.metrics["termination_reason"] == "normal"
    assert result.metrics["tool_calls"] == 3 and result.metrics["iterations"] == 4
    assert result.metrics["tier"] == "high" and result.metrics["needs_summary"] is False
    assert d.events(Assistant) == [Assistant(content=FINAL)]
    assert len(d.events(MessageStop)) == 4  # one per model iteration
    history = d.loop.history
    assert [m.role for m in history] == ["user", *["assistant", "tool"] * 3, "assistant"]
    assert [m.tool_call_id for m in tool_messages(history)] == [c.id for c in d.runs()]


def test_tool_events_in_order_and_every_call_sees_the_growing_history() -> None:
    d = make()
    first = call("read_file", "c1", path="a.py")
    d.start("go", tools(first, text="Reading."), text(FINAL))
    kinds = [type(e.event).__name__ if isinstance(e, Emit) else type(e).__name__ for e in d.log]
    assert kinds[: kinds.index("RunTool") + 1] == [
        "Thinking",
        "AcquireSlot",
        "ContextUsage",
        "CallModel",
        "Assistant",
        "ContentBlockStart",
        "ToolStatus",
        "RunTool",
    ]
    assert d.events(ContentBlockStart)[0] == ContentBlockStart(
        block_type="tool_use", name="read_file", call_id="c1", input={"path": "a.py"}
    )
    running, done = d.events(ToolStatus)
    assert (running.state, done.state) == ("running", "completed")
    assert done.status_message == "[read_file] Done" and done.output == "ok: read_file"
    second = d.calls()[1].request
    assert second.messages[-1] == ChatMessage(
        role="tool", content="ok: read_file", tool_call_id="c1", tool_name="read_file"
    )
    assert second.messages[-2].tool_calls == (first,)
    assert second.tools == TOOLS


def test_cost_and_usage_are_summed_over_the_turn() -> None:
    d = make()
    step = ModelResponse("", (call("read_file", path="a"),), cost_usd=0.25, usage=Usage(10, 2))
    d.start("go", step, text(FINAL, cost=0.5, usage=Usage(20, 5, cache_read_tokens=3)))
    result = d.result()
    assert result.total_cost_usd == pytest.approx(0.75)
    assert result.usage == {
        "input_tokens": 30,
        "output_tokens": 7,
        "cache_read_tokens": 3,
        "cache_creation_tokens": 0,
    }


def test_second_turn_acquires_the_slot_again_and_resets_turn_metrics() -> None:
    d = make()
    d.start("first", tools(call("read_file", path="a")), text(FINAL))
    d.user("second", text("Second answer, complete."))
    assert d.log.count(AcquireSlot(HIGH)) == 2 and d.log.count(ReleaseSlot()) == 2
    assert d.result().metrics["tool_calls"] == 0 and d.result().num_turns == 1
    assert [m.content for m in d.loop.history if m.role == "user"] == ["first", "second"]


def test_resumed_history_is_sent_before_the_new_prompt() -> None:
    earlier = [
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="assistant", content="hello"),
    ]
    d = make(history=earlier)
    d.start("again", text(FINAL))
    assert list(d.calls()[0].request.messages) == [
        *earlier,
        ChatMessage(role="user", content="again"),
    ]


# --- stalls and the summary epilogue -----------------------------------------------------


def test_same_call_three_times_breaks_with_a_summary_without_tools() -> None:
    d = make()
    d.start(
        "Look at index.ts",
        tools(call("read_file", "r1", path="index.ts")),
        tools(call("read_file", "r2", path=" index.ts")),  # normalised: the same call
        tools(call("read_file", "r3", path="index.ts")),
        text("Summary: I read index.ts; it exports the app."),
    )
    assert [c.id for c in d.runs()] == ["r1", "r2"]  # the third is not run
    summary_call = d.calls()[-1]
    assert summary_call.purpose == "summary" and summary_call.request.tools == ()
    assert summary_call.request.messages[-1] == ChatMessage(role="user", content=SUMMARY_REQUEST)
    assert "r3" not in {c.id for m in summary_call.request.messages for c in m.tool_calls}
    assert d.events(Assistant)[-1] == Assistant(
        content="Summary: I read index.ts; it exports the app."
    )
    metrics = d.result().metrics
    assert metrics["termination_reason"] == "stall_repeat" and metrics["needs_summary"] is True
    assert d.tail(2) == [ReleaseSlot(), TurnFinished()]


def test_summary_request_uses_the_original_wording() -> None:
    assert SUMMARY_REQUEST == (
        "Summarize what you accomplished. Be concise — state the key actions taken and their results."
    )


STALL = [tools(call("read_file", f"r{i}", path="index.ts")) for i in range(3)]


@pytest.mark.parametrize(
    "failure",
    [
        ProviderError(ErrorKind.FATAL, "model crashed"),
        ProviderError(ErrorKind.TOOLS_UNSUPPORTED, "does not support tools"),
    ],
)
def test_a_failed_summary_call_ends_the_turn_normally(failure: ProviderError) -> None:
    # issue 12 item 14: the original logs "Final summary call failed" and ends the turn
    d = make()
    d.start("Look at index.ts", *STALL, failure)
    assert not any(isinstance(e, Exit) for e in d.log)
    assert d.events(ErrorEvent) == []
    [note] = [e for e in d.events(SystemEvent) if e.subtype == "summary_failed"]
    assert note.message == f"Final summary call failed: {failure.message}"
    result = d.result()
    assert result.subtype == "success" and result.metrics["termination_reason"] == "stall_repeat"
    assert d.tail(4) == [Emit(result), Emit(Thinking(thinking=False)), ReleaseSlot(), TurnFinished()]
    assert d.loop.history[-1].role == "tool"  # the unanswered request is not kept
    d.user("and now?", text(FINAL))  # the session goes on
    assert d.result().result == FINAL


def test_a_summary_call_retries_a_retryable_error_then_ends_normally_below_the_outage() -> None:
    d = make()
    down = ProviderError(ErrorKind.RETRYABLE, "connection refused")
    d.start("Look at index.ts", *STALL, down, down, down)
    # retried while under the outage threshold (3): the third failure gives up on the summary
    assert [c.purpose for c in d.calls()][-4:] == ["turn", "summary", "summary", "summary"]
    assert not any(isinstance(e, (Exit, ReportOutage)) for e in d.log)
    assert d.result().subtype == "success"
    assert [e.subtype for e in d.events(SystemEvent)] == ["summary_failed"]
    # the failures still count: the next turn's first failure is an outage
    d.user("again", down)
    assert isinstance(d.log[-1], ReportOutage)


def test_a_summary_call_that_overflows_is_retried_once_then_ends_normally() -> None:
    d = make()
    overflow = ProviderError(ErrorKind.CONTEXT_OVERFLOW, "prompt is too long")
    d.start("Look at index.ts", *STALL, overflow, overflow)
    assert [c.purpose for c in d.calls()][-2:] == ["summary", "summary"]
    assert d.result().subtype == "success" and not any(isinstance(e, Exit) for e in d.log)


def test_same_tool_five_times_breaks() -> None:
    d = make()
    script = [tools(call("read_file", path=f"f{i}.py")) for i in range(5)]
    d.start("read everything", *script, text("Summary."))
    assert len(d.runs()) == 4
    assert d.result().metrics["termination_reason"] == "stall_same_tool"
    assert d.calls()[-1].request.tools == ()


def test_ping_pong_between_two_calls_breaks() -> None:
    d = make()
    a, b = call("read_file", path="a.py"), call("list_files", path="src")
    d.start("explore", *[tools(a), tools(b)] * 3, text("Summary."))
    assert len(d.runs()) == 5
    assert d.result().metrics["termination_reason"] == "stall_ping_pong"
    assert d.calls()[-1].purpose == "summary"


def test_repeats_are_tracked_across_turns_of_the_session() -> None:
    d = make()
    same = call("read_file", path="index.ts")
    d.start("read it", tools(same), text("It exports the app."))
    d.user("and again", tools(same), text("Still the same."))
    d.user("once more", tools(same), text("Summary."))
    assert len(d.runs()) == 2
    assert d.result().metrics["termination_reason"] == "stall_repeat"
    # after a reported stall the tracker starts afresh
    d.user("read it now please", tools(same), text("Read it."))
    assert len(d.runs()) == 3 and d.result().metrics["termination_reason"] == "normal"


def test_max_iterations_ends_with_a_summary() -> None:
    settings = DirectLoopSettings(max_tool_iterations=3, use_tier_caps=False)
    d = make(settings=settings)
    names = ["read_file", "list_files", "search_files"]
    d.start("work", *[tools(call(n, path=n)) for n in names], text("Summary of 3 steps."))
    assert len(d.runs()) == 3
    assert [c.purpose for c in d.calls()] == ["turn", "turn", "turn", "summary"]
    metrics = d.result().metrics
    assert metrics["termination_reason"] == "max_iterations" and metrics["needs_summary"]
    assert d.result().num_turns == 3


def test_seed_default_is_twenty_five_iterations() -> None:
    d = make(settings=DirectLoopSettings(use_tier_caps=False), model="qwen3:8b")
    names = ["read_file", "list_files", "search_files", "write_file", "run_command"]
    script = [tools(call(names[i % 5], path=str(i))) for i in range(25)]
    d.start("long task", *script, text("Summary."))
    assert len(d.runs()) == 25 and d.calls()[-1].purpose == "summary"


def test_tier_caps_from_the_model_name_override_the_defaults() -> None:
    d = make(model="qwen3:8b")  # limited: 8 iterations
    names = ["read_file", "list_files", "search_files", "write_file", "run_command"]
    d.start("task", *[tools(call(names[i % 5], path=str(i))) for i in range(8)], text("Summary."))
    assert len(d.runs()) == 8
    assert d.result().metrics["termination_reason"] == "max_iterations"
    assert d.result().metrics["tier"] == "limited"


# --- hallucinated tool output and nudges -----------------------------------------------


@pytest.mark.parametrize("marker", ["«tool_output»", "<<tool_output>>", "[Tool Result]"])
def test_hallucinated_tool_output_is_dropped_and_nudged(marker: str) -> None:
    d = make()
    fake = f"Let me check.\n{marker}\nfile contents here\n"
    d.start("fix it", tools(call("read_file", path="a.py")), text(fake), text(FINAL))
    assert marker not in "".join(m.content for m in d.loop.history)
    assert all(marker not in e.content for e in d.events(Assistant))  # type: ignore[attr-defined]
    retry = d.calls()[2].request
    assert retry.messages[-1] == ChatMessage(role="user", content=HALLUCINATION_NUDGE)
    assert retry.messages[-2].role == "tool"
    assert d.result().metrics["mid_chain_nudges"] == 1
    assert d.result().result == FINAL


def test_third_hallucinated_reply_ends_the_turn_as_a_normal_assistant_text() -> None:
    # issue 12 item 15: once the mid-chain nudges are spent the reply is kept and
    # emitted whole, as the original does (it is the model's answer; hiding it would
    # end the turn in silence)
    d = make()
    fake = "«tool_output»made up«/tool_output» Done."
    d.start("fix", tools(call("read_file", path="a")), text(fake), text(fake), text(fake))
    assert d.result().metrics["mid_chain_nudges"] == 2
    assert len(d.calls()) == 4
    assert d.loop.history[-1] == ChatMessage(role="assistant", content=fake)
    assert d.events(Assistant) == [Assistant(content=fake)]  # the two nudged replies never were
    assert d.result().subtype == "success" and d.result().result == fake
    assert d.tail(2) == [ReleaseSlot(), TurnFinished()]


@pytest.mark.parametrize("marker", ["[Tool Result]", "«tool_output»", "<<tool_output>>"])
def test_tool_output_markers_before_any_tool_call_are_an_ordinary_reply(marker: str) -> None:
    # issue 34 item 1, seed 000 invariant 8 ("after tools have been called"): kept whole,
    # published, no mid-chain nudge and no "too short" nudge for a cut-off remnant
    d = make()
    reply = f"Here it is:\n{marker}\nThe config file sets PORT=8080 and nothing else needs changing."
    d.start("what port does it use?", text(reply))
    assert len(d.calls()) == 1
    assert d.loop.history[-1] == ChatMessage(role="assistant", content=reply)
    assert d.events(Assistant) == [Assistant(content=reply)]
    assert d.result().result == reply
    assert d.result().metrics["mid_chain_nudges"] == 0 and d.result().metrics["nudges"] == 0


def test_promised_action_is_nudged_then_the_model_acts() -> None:
    d = make()
    d.start(
        "Update the changelog",
        text("I'll update the changelog now"),
        tools(call("write_file", path="CHANGELOG.md", content="x")),
        text(FINAL),
    )
    second = d.calls()[1].request.messages
    assert second[-2] == ChatMessage(role="assistant", content="I'll update the changelog now")
    assert second[-1] == ChatMessage(
        role="user", content=nudge_message(NudgeReason.PROMISED_ACTION)
    )
    assert d.result().metrics["nudges"] == 1 and len(d.runs()) == 1


def test_nudges_stop_at_the_budget() -> None:
    d = make()
    d.start("do it", text("Shall I do it?"), text("Should I start?"), text("Would you like me to?"))
    assert d.result().metrics["nudges"] == 2
    assert len(d.calls()) == 3 and d.result().metrics["termination_reason"] == "normal"


def test_no_nudge_on_the_final_iteration() -> None:
    d = make(settings=DirectLoopSettings(max_tool_iterations=1, use_tier_caps=False))
    d.start("do it", text("I'll do it"))
    assert len(d.calls()) == 1 and d.result().metrics["nudges"] == 0


def test_no_nudge_once_tools_were_used_in_the_turn() -> None:
    d = make()
    d.start("go", tools(call("read_file", path="a")), text("ok"))
    assert len(d.calls()) == 2 and d.result().metrics["nudges"] == 0


def test_a_complete_answer_is_not_nudged() -> None:
    d = make()
    d.start("What is 2+2?", text("2 + 2 is 4."))
    assert len(d.calls()) == 1 and d.result().metrics["nudges"] == 0


# --- council roles ------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["member", "discusser", "reviewer"])
def test_council_roles_get_no_tools_and_a_reasoning_prompt(role: str) -> None:
    d = make(council_role=role)
    d.start("Should we ship on Friday?", text("No"))  # short: a tool session would nudge
    request = d.calls()[0].request
    assert request.tools == ()
    assert request.system.startswith(COUNCIL_REASONING_PROMPT)
    assert "You are a coding agent." in request.system
    assert len(d.calls()) == 1


def test_other_council_roles_keep_their_tools() -> None:
    d = make(council_role="chairman")
    d.start("go", text(FINAL))
    assert d.calls()[0].request.tools == TOOLS
    assert d.calls()[0].request.system == "You are a coding agent."


# --- tool errors: the loop goes on ------------------------------------------------------


def test_unknown_tool_bad_arguments_and_timeout_become_results() -> None:
    d = make()
    d.run_tool = lambda c: ToolResult("Command timed out after 30 s", is_error=True)
    bad = ToolCall("b1", "read_file", {}, arguments_error="arguments are not a JSON object")
    d.start(
        "go",
        tools(call("fly_to_moon", "u1"), bad, call("run_command", "t1", command="sleep 99")),
        text(FINAL),
    )
    results = {m.tool_call_id: m for m in tool_messages(d.loop.history)}
    assert results["u1"].content == "Unknown tool: fly_to_moon" and results["u1"].is_error
    assert results["b1"].content == (
        "Invalid arguments for tool read_file: arguments are not a JSON object"
    )
    assert results["t1"].content == "Command timed out after 30 s" and results["t1"].is_error
    assert [c.id for c in d.runs()] == ["t1"]
    assert [s.state for s in d.events(ToolStatus)] == ["error", "error", "running", "error"]
    assert (
        d.events(ToolStatus)[-1].status_message
        == "[run_command] Error: Command timed out after 30 s"
    )
    assert len(d.calls()) == 2 and d.result().subtype == "success"


def test_permission_denied_by_policy_is_a_result_and_the_loop_goes_on() -> None:
    def policy(name: str, args: dict[str, Any]) -> PermissionDecision:
        if name == "run_command":
            return PermissionDecision(Permission.DENY, message="plan mode allows no commands")
        return PermissionDecision(Permission.ALLOW)

    d = make(permission=policy)
    d.start("go", tools(call("run_command", "x1", command="rm -rf /")), text(FINAL))
    assert d.runs() == []
    assert tool_messages(d.loop.history)[0].content == (
        "Permission denied for tool: run_command: plan mode allows no commands"
    )
    assert len(d.calls()) == 2


def test_approval_asked_and_denied_by_the_human() -> None:
    def ask(name: str, args: dict[str, Any]) -> PermissionDecision:
        return PermissionDecision(Permission.ASK, description=f"Run command: {args['command']}")

    d = make(permission=ask)
    d.approve = lambda c: ApprovalDecided(c.id, False)
    d.start("go", tools(call("run_command", "x1", command="make")), text(FINAL))
    assert AskApproval(call("run_command", "x1", command="make"), "Run command: make") in d.log
    assert d.runs() == []
    assert tool_messages(d.loop.history)[0].content == "Permission denied for tool: run_command"
    assert d.result().subtype == "success"


def test_approval_with_updated_input_runs_with_it() -> None:
    ask = lambda n, a: PermissionDecision(Permission.ASK)  # noqa: E731
    d = make(permission=ask)
    d.approve = lambda c: ApprovalDecided(c.id, True, updated_input={"command": "make test"})
    seen: list[ToolCall] = []
    d.run_tool = lambda c: (seen.append(c), ToolResult("passed"))[1]
    d.start("go", tools(call("run_command", "x1", command="make")), text(FINAL))
    assert seen == [ToolCall("x1", "run_command", {"command": "make test"})]
    assert [e.description for e in d.log if isinstance(e, AskApproval)] == ["Use tool: run_command"]
    assert tool_messages(d.loop.history)[0].content == "passed"


def test_stale_inputs_are_ignored() -> None:
    d = make()
    d.loop.start("go")
    d.loop.handle(SlotGranted())
    effects = d.loop.handle(ModelSucceeded(tools(call("read_file", "c1", path="a"))))
    assert isinstance(effects[-1], RunTool)
    assert d.loop.handle(ToolFinished("other", ToolResult("x"))) == []
    assert d.loop.handle(ApprovalDecided("c1", True)) == []
    assert d.loop.handle(ModelSucceeded(text("late"))) == []
    assert d.loop.handle(TimerFired("nope")) == []
    assert isinstance(d.loop.handle(ToolFinished("c1", ToolResult("x")))[-1], CallModel)


def test_tool_results_are_capped_to_the_context() -> None:
    d = make(context_window=2000)  # 30 % × 2000 × 4 = 2400 chars
    d.run_tool = lambda c: ToolResult("line of output\n" * 1000)
    d.start("go", tools(call("run_command", command="cat big")), text(FINAL))
    content = tool_messages(d.loop.history)[0].content
    assert len(content) < 2500 and content.endswith("chars omitted]")
    preview = d.events(ToolStatus)[-1].output
    assert len(preview) < 2100


def test_the_context_cap_and_the_observation_cap_are_one_cut_stating_the_tools_own_length() -> None:
    # issue 34 item 2: the 30 % cap (2400 chars here) counts the tool's own output — the
    # observation's notice states the output's lines and bytes, and no second marker
    # counts the observation
    d = make(context_window=2000, rules=LoopRules())
    d.run_tool = lambda c: ToolResult("line of output\n" * 1000)  # 15,000 bytes
    d.start("go", tools(call("run_command", command="cat big")), text(FINAL))
    content = tool_messages(d.loop.history)[0].content
    notice = ("[Output truncated: showing the last 119 of 1000 lines (1785 of 15000 bytes). The full "
              "output is kept for the operator, not shown to you. To read other parts, run the command "
              "again with tail_lines=N for the last N lines (at most 2400 bytes are shown), or narrow it: "
              "grep, head -n, sed -n 'A,Bp'.]")
    assert content == notice + "\n" + "line of output\n" * 119
    assert "chars omitted" not in content


def test_a_capped_json_result_keeps_the_outputs_real_tail() -> None:
    d = make(context_window=2000, rules=LoopRules())
    output = '{"rows": ["' + "a" * 19_962 + '"], "end": "END-OF-OUTPUT"}'
    assert len(output) == 20_000
    d.run_tool = lambda c: ToolResult(output)
    d.start("go", tools(call("search_files", pattern="x")), text(FINAL))
    content = tool_messages(d.loop.history)[0].content
    notice = ("[Output truncated: showing the first 1 and the last 1 of 1 lines (1800 of 20000 bytes) of "
              "this JSON. The full output is kept for the operator, not shown to you. To read more, "
              "narrow it (jq, grep) or ask for less at a time.]")
    assert content == output[:1400] + "\n" + notice + "\n" + output[-400:]
    assert content.endswith('"end": "END-OF-OUTPUT"}')


def test_lone_surrogates_in_tool_output_are_replaced() -> None:
    d = make()
    d.run_tool = lambda c: ToolResult("bad \udcff byte")
    d.start("go", tools(call("read_file", path="bin")), text(FINAL))
    assert tool_messages(d.loop.history)[0].content == "bad ? byte"


# --- provider and slot errors ---------------------------------------------------------


def test_slot_timeout_is_an_error_and_exit_without_release() -> None:
    d = make()
    d.slot_granted = False
    effects = d.start("go")
    assert effects[-2:] == [
        Emit(
            ErrorEvent(
                error_type="slot_timeout",
                message=f"Could not acquire model slot for {HIGH} — timed out waiting",
            )
        ),
        Exit(1),
    ]
    assert ReleaseSlot() not in d.log and d.calls() == []
    assert d.loop.handle(SlotGranted()) == [] and d.loop.handle(UserMessage("x")) == []


def test_fatal_provider_error_mid_loop_reports_and_exits_after_releasing() -> None:
    d = make()
    d.start(
        "go", tools(call("read_file", path="a")), ProviderError(ErrorKind.FATAL, "invalid api key")
    )
    assert d.tail(4) == [
        Emit(d.result()),
        Emit(ErrorEvent(error_type="direct_process_error", message="invalid api key")),
        ReleaseSlot(),
        Exit(1),
    ]
    assert d.result().subtype == "error" and d.result().metrics["termination_reason"] == "error"
    assert d.result().metrics["tool_calls"] == 1
    assert d.loop.handle(UserMessage("more")) == []


def test_tools_unsupported_disables_tools_for_the_rest_of_the_session() -> None:
    d = make()
    unsupported = ProviderError(ErrorKind.TOOLS_UNSUPPORTED, "model does not support tools")
    d.start("go", unsupported, text("I cannot use tools, but here is the answer."))
    first, retry = d.calls()
    assert first.request.tools == TOOLS and retry.request.tools == ()
    assert retry.request.messages == first.request.messages
    notes = d.events(SystemEvent)
    assert len(notes) == 1 and notes[0].subtype == "tools_disabled"
    assert d.loop.tools_disabled and d.result().metrics["nudges"] == 0
    d.user("next", text("Answer two."))
    assert d.calls()[-1].request.tools == ()


def test_tools_unsupported_without_tools_offered_is_fatal() -> None:
    d = make(council_role="member")
    d.start("go", ProviderError(ErrorKind.TOOLS_UNSUPPORTED, "no tools"))
    assert d.tail(1) == [Exit(1)]


def test_context_overflow_recovers_with_summary_and_last_four_then_retries_once() -> None:
    earlier: list[ChatMessage] = [ChatMessage(role="user", content="Refactor src/app.py")]
    for i in range(4):
        c = call("read_file", f"h{i}", path=f"src/m{i}.py")
        earlier += [
            ChatMessage(role="assistant", tool_calls=(c,)),
            ChatMessage(role="tool", content="data", tool_call_id=c.id, tool_name="read_file"),
        ]
    earlier.append(ChatMessage(role="assistant", content="Read them all."))
    d = make(history=earlier)
    overflow = ProviderError(ErrorKind.CONTEXT_OVERFLOW, "prompt is too long")
    d.start("continue", overflow, text(FINAL))
    retry = d.calls()[1].request.messages
    assert retry[0].role == "user" and retry[0].content.startswith(CONTEXT_SUMMARY_HEADER)
    assert list(retry[1:]) == list(d.calls()[0].request.messages[-4:])
    warning = d.events(ContextWarning)[-1]
    assert warning.level == "critical" and warning.usage_percent == 100.0
    assert d.result().subtype == "success"


def test_second_context_overflow_is_fatal() -> None:
    d = make()
    overflow = ProviderError(ErrorKind.CONTEXT_OVERFLOW, "prompt is too long")
    d.start("go", overflow, overflow)
    assert len(d.calls()) == 2
    assert d.tail(3) == [
        Emit(ErrorEvent(error_type="direct_process_error", message="prompt is too long")),
        ReleaseSlot(),
        Exit(1),
    ]


def test_three_retryable_failures_report_an_outage() -> None:
    d = make()
    down = ProviderError(ErrorKind.RETRYABLE, "connection refused")
    d.start("go", down, down, down)
    retries = d.events(RetryScheduled)
    assert [(r.attempt, r.delay_s, r.due_at) for r in retries] == [(1, 1.0, ""), (2, 2.0, "")]
    assert [e.delay_s for e in d.log if isinstance(e, Schedule)] == [1.0, 2.0]
    assert len(d.calls()) == 3
    assert d.tail(2) == [ReleaseSlot(), ReportOutage("connection refused")]
    assert not any(isinstance(e, Exit) for e in d.log)
    assert d.events(ErrorEvent) == [] and d.events(Result) == []


def test_a_success_resets_the_failure_counter() -> None:
    d = make()
    down = ProviderError(ErrorKind.RETRYABLE, "503")
    d.start("go", down, down, tools(call("read_file", path="a")), down, down, text(FINAL))
    assert [r.attempt for r in d.events(RetryScheduled)] == [1, 2, 1, 2]
    assert d.result().subtype == "success"


def test_retry_after_is_honoured_and_capped() -> None:
    d = make()
    d.start(
        "go",
        ProviderError(ErrorKind.RETRYABLE, "429", retry_after_s=7.0),
        ProviderError(ErrorKind.RETRYABLE, "429", retry_after_s=500.0),
        text(FINAL),
    )
    assert [r.delay_s for r in d.events(RetryScheduled)] == [7.0, 30.0]


def test_after_an_outage_a_new_message_starts_a_new_turn() -> None:
    d = make()
    down = ProviderError(ErrorKind.RETRYABLE, "down")
    d.start("go", down, down, down)
    d.user("are you back?", text("Yes, back online."))
    assert d.result().subtype == "success"


def test_abort_returns_nothing_and_nothing_follows() -> None:
    d = make()
    d.loop.start("go")
    d.loop.handle(SlotGranted())
    assert d.loop.abort() == []
    assert d.loop.handle(ModelSucceeded(text(FINAL))) == []
    assert d.loop.handle(UserMessage("again")) == []


def test_abort_during_slot_wait_ignores_a_late_grant() -> None:
    d = make()
    assert d.loop.start("go")[-1] == AcquireSlot(HIGH)
    assert d.loop.abort() == []
    assert d.loop.handle(SlotGranted()) == []  # the actor gives back a late slot itself


def test_a_message_sent_mid_turn_starts_the_next_turn_after_turn_finished() -> None:
    loop = make().loop
    loop.start("one")
    loop.handle(SlotGranted())
    assert loop.handle(UserMessage("two")) == []
    effects = loop.handle(ModelSucceeded(text(FINAL)))
    assert effects[-4:] == [
        ReleaseSlot(),
        TurnFinished(),
        Emit(Thinking(thinking=True)),
        AcquireSlot(HIGH),
    ]
    assert loop.history[-1] == ChatMessage(role="user", content="two")


# --- context management in the loop ------------------------------------------------------


def test_long_history_is_trimmed_before_the_call() -> None:
    history = [ChatMessage(role="user", content="original task")]
    for i in range(25):
        c = call("read_file", f"h{i}", path=f"f{i}")
        history += [
            ChatMessage(role="assistant", tool_calls=(c,)),
            ChatMessage(role="tool", content="x", tool_call_id=c.id, tool_name="read_file"),
        ]
    d = make(history=history)
    d.start("continue", text(FINAL))
    sent = d.calls()[0].request.messages
    assert sent[0].content == "original task"
    # one "[Previous tool result: …]" line per dropped result (seed invariant 12)
    assert sent[1] == ChatMessage(role="user", content="\n".join(["[Previous tool result: x (1 lines)]"] * 10))
    # the last 30 would start on a tool result: widened by one to keep its call
    assert len(sent) == 2 + 31 and sent[-1] == ChatMessage(role="user", content="continue")
    assert sent[2].role == "assistant" and sent[3].tool_call_id == sent[2].tool_calls[0].id
    usage = d.events(ContextUsage)[0]
    assert usage.trimmed and usage.messages_count == 33 and usage.context_window == 32_768


def test_old_tool_results_are_cut_but_the_newest_calls_stay_whole() -> None:
    d = make(context_window=1_000_000)
    big = "0123456789" * 100
    d.run_tool = lambda c: ToolResult(big)
    three = [call("read_file", f"p{i}", path=f"f{i}") for i in range(3)]
    d.start("go", tools(*three), tools(call("list_files", path=".")), text(FINAL))
    second = d.calls()[1].request.messages
    assert [m.content for m in second if m.role == "tool"] == [big] * 3  # newest group whole
    third = d.calls()[2].request.messages
    contents = [m.content for m in third if m.role == "tool"]
    # older than the last 3 messages → cut to 500 chars; the rest untouched
    assert [len(c) < 600 for c in contents] == [True, True, False, False]
    assert contents[0].startswith(big[:500]) and contents[3] == big


def test_context_warning_once_per_level_crossing() -> None:
    d = make(context_window=400)
    d.run_tool = lambda c: ToolResult("word " * 60)
    names = ("read_file", "list_files", "search_files", "write_file", "run_command", "read_file")
    d.start("go", *[tools(call(n, path="x")) for n in names], text(FINAL))
    over_half = [u for u in d.events(ContextUsage) if u.usage_percent >= 50]
    assert len(over_half) >= 3  # the level stays crossed for several iterations ...
    warnings = d.events(ContextWarning)
    assert [w.level for w in warnings] == ["info"]  # ... and is reported once
    assert warnings[0].usage_percent == over_half[0].usage_percent
