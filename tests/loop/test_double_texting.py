"""Double texting, the pure parts: which policy is in force (by table), and how the
conversation and direct loops end a turn on ``InterruptTurn`` — at a safe point only.
The actor's side and the chat bridge are in ``tests/sim/test_double_texting.py``."""

from __future__ import annotations

from typing import Any

import pytest

from corvid_actors.core.double_texting import checked_double_texting, double_texting_policy
from corvid_actors.core.vocabulary import Permission, PermissionDecision, ToolResult, ToolSpec
from corvid_actors.errors import AgentSettingError
from corvid_actors.events import Assistant, Result, Thinking
from corvid_actors.loop.conversation import ConversationLoop
from corvid_actors.loop.direct import DirectLoop
from corvid_actors.loop.effects import (
    AcquireSlot,
    ApprovalDecided,
    AskApproval,
    CallModel,
    Effect,
    Emit,
    InterruptTurn,
    ModelFailed,
    ModelStopped,
    ModelSucceeded,
    ReleaseSlot,
    RunTool,
    Schedule,
    SlotGranted,
    StopModelCall,
    ToolFinished,
    TurnFinished,
    UserMessage,
    WithdrawApproval,
)
from corvid_actors.loop.sdk import SdkLoop
from corvid_actors.loop.turn import (
    INTERRUPTED_MARKER,
    NOT_RUN_INTERRUPTED,
    Phase,
    as_said,
    interrupt_step,
    interrupted_reply,
)
from corvid_actors.providers.base import ErrorKind, ModelResponse, ProviderError, ToolCall

# --- the policy in force -----------------------------------------------------------------


@pytest.mark.parametrize(("setting", "kind", "config_default", "policy"), [
    (None, None, "", "enqueue"),            # no kind: a task agent
    (None, "task", "", "enqueue"),
    (None, "chat", "", "interrupt"),
    (None, "someday-kind", "", "enqueue"),  # a kind this release does not know: a task
    ("", "chat", "", "interrupt"),          # "" is unset, as None
    (None, "task", "reject", "reject"),     # the config's default beats the kind
    ("enqueue", "chat", "reject", "enqueue"),  # the agent's own setting beats both
    ("interrupt", None, "", "interrupt"),
    ("reject", "chat", "", "reject"),
])
def test_the_policy_in_force(setting, kind, config_default, policy):
    assert double_texting_policy(setting, kind, config_default=config_default) == policy


def test_a_setting_that_is_no_policy_is_refused_by_name():
    with pytest.raises(AgentSettingError, match="double_texting 'queue' is not one of enqueue, interrupt, reject"):
        checked_double_texting("queue")


def test_the_kept_reply_ends_with_the_marker():
    assert interrupted_reply("Paris is large,  ") == f"Paris is large,\n\n{INTERRUPTED_MARKER}"
    assert interrupted_reply(" \n") == INTERRUPTED_MARKER


# --- the conversation loop ------------------------------------------------------------------


def emitted(effects: list[Effect], kind: type) -> list[Any]:
    return [e.event for e in effects if isinstance(e, Emit) and isinstance(e.event, kind)]


def test_conversation_loop_stops_the_stream_and_answers_the_waiting_message_with_both_in_view():
    loop = ConversationLoop(model="m", system_prompt="")
    loop.start("Tell me about Paris.")
    assert loop.handle(UserMessage("Actually, Lyon.")) == []  # queued, as ever
    assert loop.handle(InterruptTurn()) == [StopModelCall()]
    effects = loop.handle(ModelStopped("Paris is large,"))
    cut = f"Paris is large,\n\n{INTERRUPTED_MARKER}"
    assert emitted(effects, Assistant) == [Assistant(content=cut, interrupted=True)]
    assert [r.subtype for r in emitted(effects, Result)] == ["interrupted"]
    assert effects.index(TurnFinished()) < next(i for i, e in enumerate(effects) if isinstance(e, CallModel))
    request = effects[-1].request  # type: ignore[union-attr]
    assert [(m.role, m.content) for m in request.messages] == [
        ("user", "Tell me about Paris."), ("assistant", cut), ("user", "Actually, Lyon.")]


def test_conversation_loop_ignores_an_interrupt_with_no_message_waiting_or_between_turns():
    loop = ConversationLoop(model="m", system_prompt="")
    loop.start("hi")
    assert loop.handle(InterruptTurn()) == []  # nothing waits: nothing to answer instead
    loop.handle(ModelSucceeded(ModelResponse(text="hello")))
    assert loop.handle(InterruptTurn()) == []  # idle


# --- the direct loop ------------------------------------------------------------------------

TOOLS = (ToolSpec("read_file", "read"), ToolSpec("write_file", "write"))


def direct(permission: Permission = Permission.ALLOW) -> DirectLoop:
    return DirectLoop(model="claude-test", system_prompt="", tools=TOOLS, context_window=100_000,
                      permission_check=lambda name, args: PermissionDecision(permission))


def granted_turn(loop: DirectLoop, prompt: str = "Fix the parser.") -> list[Effect]:
    assert loop.start(prompt)[-1] == AcquireSlot("claude-test")
    return loop.handle(SlotGranted())


def reads(*ids: str) -> ModelResponse:
    return ModelResponse(text="Reading.", tool_calls=tuple(ToolCall(i, "read_file", {"path": i}) for i in ids))


def test_direct_loop_stops_a_turns_model_stream_at_once():
    loop = direct()
    granted_turn(loop)
    loop.handle(UserMessage("Stop, do the lexer."))
    assert loop.handle(InterruptTurn()) == [StopModelCall()]
    effects = loop.handle(ModelStopped("I will start with"))
    assert emitted(effects, Assistant)[0].content == f"I will start with\n\n{INTERRUPTED_MARKER}"
    result = emitted(effects, Result)[0]
    assert (result.subtype, result.metrics["termination_reason"]) == ("interrupted", "interrupted")
    # the slot is given back with the turn, and the waiting message's turn asks anew
    assert effects[-4:] == [ReleaseSlot(), TurnFinished(), Emit(Thinking(thinking=True)), AcquireSlot("claude-test")]


def test_direct_loop_lets_the_running_tool_finish_and_does_not_run_the_next_one():
    loop = direct()
    granted_turn(loop)
    effects = loop.handle(ModelSucceeded(reads("a", "b")))
    assert [e for e in effects if isinstance(e, RunTool)] == [RunTool(ToolCall("a", "read_file", {"path": "a"}))]
    loop.handle(UserMessage("Never mind."))
    assert loop.handle(InterruptTurn()) == []  # never mid-tool: wait for it
    effects = loop.handle(ToolFinished("a", ToolResult("contents of a")))
    assert not [e for e in effects if isinstance(e, RunTool)]
    assert [r.subtype for r in emitted(effects, Result)] == ["interrupted"]
    tail = [(m.role, m.content) for m in loop.history][-4:]
    assert tail == [("tool", "contents of a"), ("tool", NOT_RUN_INTERRUPTED), ("assistant", INTERRUPTED_MARKER),
                    ("user", "Never mind.")]


def test_direct_loop_withdraws_the_approval_it_waits_for_and_runs_nothing_even_if_allowed():
    loop = direct(Permission.ASK)
    granted_turn(loop)
    effects = loop.handle(ModelSucceeded(reads("a")))
    assert isinstance(effects[-1], AskApproval)
    loop.handle(UserMessage("Never mind."))
    assert loop.handle(InterruptTurn()) == [WithdrawApproval()]
    effects = loop.handle(ApprovalDecided("a", True))  # a human's "yes" that crossed the withdrawal
    assert not [e for e in effects if isinstance(e, RunTool)]
    assert [r.subtype for r in emitted(effects, Result)] == ["interrupted"]


def test_direct_loop_ends_a_retry_wait_at_once():
    loop = direct()
    granted_turn(loop)
    effects = loop.handle(ModelFailed(ProviderError(ErrorKind.RETRYABLE, "503")))
    assert isinstance(effects[-1], Schedule)
    loop.handle(UserMessage("Never mind."))
    effects = loop.handle(InterruptTurn())
    assert [r.subtype for r in emitted(effects, Result)] == ["interrupted"]
    assert effects[-1] == AcquireSlot("claude-test")  # the waiting message's turn



# --- the SDK loop ---------------------------------------------------------------------------


def sdk(permission: Permission = Permission.ALLOW) -> SdkLoop:
    return SdkLoop(model="claude-test", system_prompt="", tools=TOOLS, context_window=200_000,
                   permission_check=lambda name, args: PermissionDecision(permission))


def test_sdk_loop_stops_a_turns_model_stream_at_once():
    loop = sdk()
    assert isinstance(loop.start("Fix the parser.")[-1], CallModel)
    loop.handle(UserMessage("Stop, do the lexer."))
    assert loop.handle(InterruptTurn()) == [StopModelCall()]
    effects = loop.handle(ModelStopped("I will start with"))
    cut = f"I will start with\n\n{INTERRUPTED_MARKER}"
    assert emitted(effects, Assistant) == [Assistant(content=cut, interrupted=True)]
    assert [r.subtype for r in emitted(effects, Result)] == ["interrupted"]
    request = effects[-1].request  # type: ignore[union-attr]
    assert [(m.role, m.content) for m in request.messages] == [
        ("user", "Fix the parser."), ("assistant", cut), ("user", "Stop, do the lexer.")]


def test_sdk_loop_lets_the_running_tool_finish_and_answers_the_rest_not_run():
    loop = sdk()
    loop.start("Fix the parser.")
    effects = loop.handle(ModelSucceeded(reads("a", "b")))
    assert [e for e in effects if isinstance(e, RunTool)] == [RunTool(ToolCall("a", "read_file", {"path": "a"}))]
    loop.handle(UserMessage("Never mind."))
    assert loop.handle(InterruptTurn()) == []
    effects = loop.handle(ToolFinished("a", ToolResult("contents of a")))
    assert not [e for e in effects if isinstance(e, RunTool)]
    assert [r.subtype for r in emitted(effects, Result)] == ["interrupted"]
    tail = [(m.role, m.content) for m in loop.history][-4:]
    assert tail == [("tool", "contents of a"), ("tool", NOT_RUN_INTERRUPTED), ("assistant", INTERRUPTED_MARKER),
                    ("user", "Never mind.")]


@pytest.mark.parametrize(("phase", "purpose", "waiting", "interrupted", "step"), [
    (Phase.IDLE, "", 1, False, "ignore"),
    (Phase.DONE, "", 1, False, "ignore"),
    (Phase.WAIT_MODEL, "turn", 0, False, "ignore"),  # nothing waits to be answered instead
    (Phase.WAIT_MODEL, "turn", 1, True, "ignore"),   # said already
    (Phase.WAIT_MODEL, "turn", 1, False, "stop"),
    (Phase.WAIT_MODEL, "summary", 1, False, "later"),
    (Phase.WAIT_MODEL, "compaction", 1, False, "later"),
    (Phase.WAIT_RETRY, "turn", 1, False, "end"),
    (Phase.WAIT_SLOT, "", 1, False, "later"),
    (Phase.WAIT_TOOL, "", 2, False, "later"),      # never mid-tool
    (Phase.WAIT_APPROVAL, "", 1, False, "withdraw"),  # nothing runs: the request goes
])
def test_the_interrupt_step_by_phase(phase, purpose, waiting, interrupted, step):
    assert interrupt_step(phase, waiting=waiting, call_purpose=purpose, interrupted=interrupted) == step


def test_a_resume_reads_the_cut_reply_before_the_message_that_cut_it():
    cut1, cut2 = interrupted_reply("Paris is"), interrupted_reply("")
    stored = [("user", "Paris?"), ("user", "No, Lyon."), ("assistant", cut1),  # stored as they came
              ("user", "Or Nice?"), ("assistant", cut2), ("assistant", "Nice it is.")]
    assert as_said(stored) == [("user", "Paris?"), ("assistant", cut1), ("user", "No, Lyon."),
                               ("assistant", cut2), ("user", "Or Nice?"), ("assistant", "Nice it is.")]
    assert as_said([("user", "hi"), ("assistant", "hello")]) == [("user", "hi"), ("assistant", "hello")]


def test_sdk_loop_withdraws_the_approval_it_waits_for():
    loop = sdk(Permission.ASK)
    loop.start("Fix the parser.")
    assert isinstance(loop.handle(ModelSucceeded(reads("a")))[-1], AskApproval)
    loop.handle(UserMessage("Never mind."))
    assert loop.handle(InterruptTurn()) == [WithdrawApproval()]
    effects = loop.handle(ApprovalDecided("a", False, "Withdrawn"))
    assert not [e for e in effects if isinstance(e, RunTool)]
    assert [r.subtype for r in emitted(effects, Result)] == ["interrupted"]
    assert ("tool", NOT_RUN_INTERRUPTED) in [(m.role, m.content) for m in loop.history]
