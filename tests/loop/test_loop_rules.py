"""The OpenAgent rules inside both loops (direct and SDK), driven input by input.

Each test feeds a loop the inputs a session actor would and checks the effects: the
plan tool is answered by the loop itself, the failsafe refuses a ballooned request,
observation caps shape what the model reads, the approval policy shapes approvals,
and the history policy runs before every request.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from corvid_actors.core.vocabulary import Permission, PermissionDecision, ToolResult, ToolSpec
from corvid_actors.events import ErrorEvent, Event, PlanEvent, SessionError, SystemEvent, ToolStatus
from corvid_actors.loop.direct import DirectLoop
from corvid_actors.loop.effects import (
    ApprovalDecided,
    AskApproval,
    CallModel,
    Effect,
    Emit,
    Exit,
    ModelSucceeded,
    PersistMessage,
    RunTool,
    SlotGranted,
    ToolFinished,
    UserMessage,
)
from corvid_actors.loop.memory_policy import MemoryPolicy
from corvid_actors.loop.observation import ObservationSettings
from corvid_actors.loop.payload_guard import SNAPSHOT_ROLE, GuardSettings
from corvid_actors.loop.rules import LoopRules, LoopRulesSettings
from corvid_actors.loop.sdk import SdkLoop
from corvid_actors.loop.summaries import CONTEXT_SUMMARY_HEADER
from corvid_actors.providers.base import ChatMessage, ModelResponse, ToolCall
from corvid_actors.tools.command_policy import CommandApprovalPolicy

TOOLS = (ToolSpec("read_file", "read", {"type": "object", "properties": {"path": {"type": "string"}}}),
         ToolSpec("run_command", "run", {"type": "object", "properties": {"command": {"type": "string"}}}))
KIB = 1024
#: an answer the direct loop does not nudge (it ends the turn)
FINAL = "All done: the parser now handles nested blocks and the tests pass."


def allow(name: str, args: dict[str, Any]) -> PermissionDecision:
    return PermissionDecision(Permission.ALLOW)


def ask_commands(name: str, args: dict[str, Any]) -> PermissionDecision:
    if name == "run_command":
        return PermissionDecision(Permission.ASK, description=f"Run command: {args.get('command')}")
    return PermissionDecision(Permission.ALLOW)


def make(kind: str, rules: LoopRules, check=allow) -> DirectLoop | SdkLoop:
    if kind == "direct":
        return DirectLoop(model="claude-test", system_prompt="SYS", tools=TOOLS, permission_check=check,
                          context_window=1_000_000, rules=rules)
    return SdkLoop(model="claude-test", system_prompt="SYS", tools=TOOLS, permission_check=check,
                   context_window=1_000_000, rules=rules)


def begin(loop: DirectLoop | SdkLoop, prompt: str = "go") -> list[Effect]:
    effects = loop.start(prompt)
    if isinstance(loop, DirectLoop):
        effects += loop.handle(SlotGranted())
    return effects


def calls(*tool_calls: ToolCall, text: str = "") -> ModelSucceeded:
    return ModelSucceeded(ModelResponse(text=text, tool_calls=tool_calls))


def said(text: str) -> ModelSucceeded:
    return ModelSucceeded(ModelResponse(text=text))


def events(effects: list[Effect], kind: type[Event]) -> list[Any]:
    return [e.event for e in effects if isinstance(e, Emit) and isinstance(e.event, kind)]


def only(effects: list[Effect], kind: type) -> Any:
    found = [e for e in effects if isinstance(e, kind)]
    assert len(found) == 1, f"expected one {kind.__name__} in {effects}"
    return found[0]


def plan_call(call_id: str, *steps: dict[str, Any]) -> ToolCall:
    return ToolCall(call_id, "update_plan", {"steps": list(steps)})


LOOPS = pytest.mark.parametrize("kind", ["direct", "sdk"])


# --- offered tools ---------------------------------------------------------------------------


@LOOPS
def test_rules_offer_the_plan_tool_and_tail_lines_and_off_offers_neither(kind):
    on = only(begin(make(kind, LoopRules())), CallModel).request.tools
    assert [t.name for t in on] == ["read_file", "run_command", "update_plan"]
    assert "tail_lines" in on[1].parameters["properties"]
    assert "tail_lines" not in on[0].parameters["properties"]
    off = only(begin(make(kind, LoopRules.off())), CallModel).request.tools
    assert off == TOOLS


# --- plan tracking -----------------------------------------------------------------------------


@LOOPS
def test_plan_updates_are_answered_by_the_loop_shown_to_the_model_and_pruned(kind):
    loop = make(kind, LoopRules())
    begin(loop)
    effects = loop.handle(calls(plan_call("p1", {"id": "1", "title": "Read", "status": "running"},
                                          {"id": "2", "title": "Fix", "status": "pending",
                                           "waiting_for": ["1"]})))
    assert not [e for e in effects if isinstance(e, RunTool)]  # no worker for the plan
    [event] = events(effects, PlanEvent)
    assert [s["id"] for s in event.steps] == ["1", "2"]
    tool_message = [m for m in loop.history if m.role == "tool"][-1]
    assert tool_message.content.startswith("Plan updated: 2 steps (1 pending, 1 running)")
    request = only(effects, CallModel).request
    assert "## Current plan\n- [running] 1. Read\n- [pending] 2. Fix (waiting for: 1)" in request.system

    # step 1 completed: still shown with the next request ...
    effects = loop.handle(calls(plan_call("p2", {"id": "1", "status": "completed"})))
    assert "- [completed] 1. Read" in only(effects, CallModel).request.system
    # ... and pruned at the next reply, whose re-sent id 1 is ignored
    effects = loop.handle(calls(plan_call("p3", {"id": "1", "status": "running"},
                                          {"id": "2", "status": "running"})))
    plans = events(effects, PlanEvent)
    assert [[(s["id"], s["status"]) for s in p.steps] for p in plans] == [[("2", "pending")],
                                                                           [("2", "running")]]
    assert plans[0].steps[0]["waiting_for"] == []
    assert "Ignored (already completed and removed): 1" in [m for m in loop.history if m.role == "tool"][-1].content
    system = only(effects, CallModel).request.system
    assert "1. Read" not in system and "- [running] 2. Fix" in system


def test_a_restarted_loop_resumes_its_stored_plan():
    rules = LoopRules(initial_plan=[{"id": "a", "title": "Audit", "status": "running"}])
    request = only(begin(make("sdk", rules)), CallModel).request
    assert "- [running] a. Audit" in request.system


@LOOPS
def test_an_invalid_plan_update_is_an_error_result_and_no_event(kind):
    loop = make(kind, LoopRules())
    begin(loop)
    effects = loop.handle(calls(plan_call("p1", {"id": "1", "status": "someday"})))
    assert events(effects, PlanEvent) == []
    message = [m for m in loop.history if m.role == "tool"][-1]
    assert message.is_error and "unknown status 'someday'" in message.content


# --- payload-growth failsafe -----------------------------------------------------------------------

NO_CAPS = ObservationSettings(enabled=False)


def balloon(kind: str, on_trip: str) -> tuple[DirectLoop | SdkLoop, list[Effect]]:
    """Reply with a tool call whose result is 200 KiB (caps off, so it stays big)."""
    rules = LoopRules(LoopRulesSettings(guard=GuardSettings(on_trip=on_trip), observation=NO_CAPS))
    loop = make(kind, rules)
    begin(loop)
    run = only(loop.handle(calls(ToolCall("c1", "read_file", {"path": "big.log"}))), RunTool)
    return loop, loop.handle(ToolFinished(run.call.id, ToolResult("x" * 200 * KIB)))


@LOOPS
def test_a_ballooned_request_is_not_sent_and_leaves_a_snapshot(kind):
    loop, effects = balloon(kind, "compact")
    snapshot = only(effects, PersistMessage)
    assert snapshot.role == SNAPSHOT_ROLE
    data = json.loads(snapshot.content)
    assert data["request_bytes"] >= 5 * data["baseline_bytes"]
    assert any(len(m["content"]) == 200 * KIB for m in data["messages"])
    [error] = events(effects, ErrorEvent)
    assert error.error_type == "payload_growth" and "compacting" in error.message
    sent = only(effects, CallModel)
    assert all(len(m.content) < 10 * KIB for m in sent.request.messages)


def test_direct_compacts_to_a_plain_summary_and_goes_on():
    loop, effects = balloon("direct", "compact")
    sent = only(effects, CallModel)
    assert sent.purpose == "turn" and len(sent.request.messages) == 1
    assert sent.request.messages[0].content.startswith(CONTEXT_SUMMARY_HEADER)
    assert events(effects, SystemEvent)[0].subtype == "compaction"
    assert [(e.error_type, e.severity, e.recoverable) for e in events(effects, SessionError)] == [
        ("context_compacted", "info", True)]
    after = loop.handle(said("Summary noted; done."))
    assert events(after, ErrorEvent) == [] and not [e for e in after if isinstance(e, Exit)]


def test_sdk_compacts_through_its_summary_call_and_goes_on():
    loop, effects = balloon("sdk", "compact")
    assert only(effects, CallModel).purpose == "compaction"
    effects = loop.handle(said("The user asked to read big.log; it is 200 KiB of x."))
    sent = only(effects, CallModel)
    assert sent.purpose == "turn" and len(sent.request.messages) == 1


def test_sdk_stops_when_the_failsafe_compaction_returns_nothing():
    loop, _ = balloon("sdk", "compact")
    effects = loop.handle(said(""))
    assert only(effects, Exit).code == 1 and not [e for e in effects if isinstance(e, CallModel)]


@LOOPS
def test_stop_mode_ends_the_session_without_sending(kind):
    _, effects = balloon(kind, "stop")
    assert not [e for e in effects if isinstance(e, CallModel)]
    assert only(effects, Exit).code == 1
    assert events(effects, ErrorEvent)[0].error_type == "payload_growth"


@LOOPS
def test_a_long_user_message_at_the_start_of_a_turn_does_not_trip(kind):
    loop = make(kind, LoopRules(LoopRulesSettings(observation=NO_CAPS)))
    begin(loop, "hi")
    loop.handle(said(FINAL))
    effects = loop.handle(UserMessage("y" * 300 * KIB))
    if kind == "direct":
        effects += loop.handle(SlotGranted())
    assert only(effects, CallModel) and events(effects, ErrorEvent) == []


# --- observation caps --------------------------------------------------------------------------------


@LOOPS
def test_a_huge_output_reaches_the_model_capped_and_is_kept_for_the_operator(kind):
    loop = make(kind, LoopRules())
    begin(loop)
    run = only(loop.handle(calls(ToolCall("c1", "run_command", {"command": "yes"}))), RunTool)
    full = "0123456789abcde\n" * (1024 * 1024 // 16)
    effects = loop.handle(ToolFinished(run.call.id, ToolResult(full[:8000], full_output=full)))
    message = [m for m in loop.history if m.role == "tool"][-1]
    assert len(message.content.encode()) <= 16 * KIB and message.content.startswith("[Output omitted")
    kept = only(effects, PersistMessage)
    record = json.loads(kept.content)
    assert kept.role == "tool" and record["output"] == full and record["call_id"] == "c1"
    assert len(events(effects, ToolStatus)[-1].output) < 16 * KIB


@LOOPS
def test_tail_lines_of_the_call_choose_how_much_of_the_end_is_shown(kind):
    loop = make(kind, LoopRules())
    begin(loop)
    command = ToolCall("c1", "run_command", {"command": "seq 1000", "tail_lines": 5})
    run = only(loop.handle(calls(command)), RunTool)
    loop.handle(ToolFinished(run.call.id, ToolResult("".join(f"{i}\n" for i in range(1, 1001)))))
    content = [m for m in loop.history if m.role == "tool"][-1].content
    assert content.splitlines()[1:] == ["996", "997", "998", "999", "1000"]
    assert "showing the last 5 of 1000 lines" in content


# --- approval policy ------------------------------------------------------------------------------------


@LOOPS
def test_a_session_approval_is_remembered_by_command_signature(kind):
    rules = LoopRules(approval_policy=CommandApprovalPolicy(mode="auto-edit", sandboxed=True))
    loop = make(kind, rules, check=ask_commands)
    begin(loop)
    # allowlisted: runs without asking
    effects = loop.handle(calls(ToolCall("c1", "run_command", {"command": "ls -la"})))
    assert only(effects, RunTool) and not [e for e in effects if isinstance(e, AskApproval)]
    effects = loop.handle(ToolFinished("c1", ToolResult("a\nb")))
    # not allowlisted: a human is asked, as a command approval; "allow for the session"
    effects = loop.handle(calls(ToolCall("c2", "run_command", {"command": "make  build"})))
    assert only(effects, AskApproval).kind == "command"
    only(loop.handle(ApprovalDecided("c2", True, scope="session")), RunTool)
    loop.handle(ToolFinished("c2", ToolResult("built")))
    # the same command (other spacing) runs; another one asks again
    effects = loop.handle(calls(ToolCall("c3", "run_command", {"command": "make build"})))
    assert only(effects, RunTool).call.id == "c3"
    loop.handle(ToolFinished("c3", ToolResult("built")))
    effects = loop.handle(calls(ToolCall("c4", "run_command", {"command": "make clean"})))
    assert only(effects, AskApproval).call.id == "c4"


def test_a_human_rejection_is_told_to_the_model_and_the_direct_loop_goes_on():
    loop = make("direct", LoopRules(approval_policy=CommandApprovalPolicy()), check=ask_commands)
    begin(loop)
    loop.handle(calls(ToolCall("c1", "run_command", {"command": "rm -rf build"})))
    effects = loop.handle(ApprovalDecided("c1", False, "not now"))
    assert only(effects, CallModel)  # the model is called again, with the denial as a result
    assert "not now" in [m for m in loop.history if m.role == "tool"][-1].content


# --- history policy ------------------------------------------------------------------------------------


@LOOPS
def test_the_history_policy_runs_before_each_request(kind):
    loop = make(kind, LoopRules(history_policy=MemoryPolicy(amnesia_turns=1, dementia_turns=0)))
    begin(loop)
    loop.handle(calls(plan_call("p1", {"id": "1", "title": "Read", "status": "running"})))
    loop.handle(calls(ToolCall("c1", "read_file", {"path": "a"})))
    effects = loop.handle(ToolFinished("c1", ToolResult("A")))
    effects = loop.handle(calls(ToolCall("c2", "read_file", {"path": "b"})))
    effects = loop.handle(ToolFinished("c2", ToolResult("B")))
    sent = only(effects, CallModel).request.messages
    # the plan update is 3 replies old: forgotten, call and result; the plan is still in the prompt
    assert not any(c.name == "update_plan" for m in sent for c in m.tool_calls)
    assert not any(m.tool_name == "update_plan" for m in sent)
    assert [m.content for m in sent if m.role == "tool"] == ["A", "B"]
    assert "1. Read" in only(effects, CallModel).request.system
    assert sent[0] == ChatMessage("user", "go")


@LOOPS
def test_a_second_trip_in_the_same_turn_stops_even_when_compacting(kind):
    loop, effects = balloon(kind, "compact")
    if kind == "sdk":
        loop.handle(said("Summary: the model read big.log."))
    # after the compaction the model reads the big file again: the guard trips again
    only(loop.handle(calls(ToolCall("c2", "read_file", {"path": "big.log"}))), RunTool)
    effects = loop.handle(ToolFinished("c2", ToolResult("x" * 200 * KIB)))
    assert only(effects, Exit).code == 1 and not [e for e in effects if isinstance(e, CallModel)]
    [error] = events(effects, ErrorEvent)
    assert error.error_type == "payload_growth" and "stopping the session" in error.message


def test_plan_updates_between_repeated_calls_do_not_hide_a_stall():
    loop = make("direct", LoopRules())
    begin(loop)
    for n in range(3):
        # each step carries a different plan update and the same read
        effects = loop.handle(calls(plan_call(f"p{n}", {"id": "1", "title": f"Read, try {n}", "status": "running"}),
                                    ToolCall(f"r{n}", "read_file", {"path": "a.py"})))
        if n < 2:
            effects = loop.handle(ToolFinished(f"r{n}", ToolResult("A")))
    # the third identical read (plan updates aside) is a stall: the summary epilogue follows
    assert only(effects, CallModel).purpose == "summary"
