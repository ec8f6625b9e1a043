"""tool_walk.py: the walk, its checks, the permission gate and the status texts — and
that both agent loops walk tool calls the same way through it."""

from __future__ import annotations

from typing import Any

import pytest

from corvid_actors.core.vocabulary import Permission, PermissionDecision, ToolResult, ToolSpec
from corvid_actors.events import ContentBlockStart, ToolStatus
from corvid_actors.loop.direct import DirectLoop
from corvid_actors.loop.effects import (
    Effect,
    Emit,
    ModelSucceeded,
    RunTool,
    SlotGranted,
    ToolFinished,
)
from corvid_actors.loop.rules import LoopRules
from corvid_actors.loop.sdk import SdkLoop
from corvid_actors.loop.tool_walk import (
    ToolWalk,
    announce,
    check_call,
    finished_status,
    gate,
    pending_status,
    running_status,
)
from corvid_actors.providers.base import ChatMessage, ModelResponse, ToolCall

READ = ToolCall("c1", "read_file", {"path": "a.py"})
LIST = ToolCall("c2", "list_files", {"path": "."})


def decide(permission: Permission, **kw: str) -> Any:
    return lambda name, args: PermissionDecision(permission, **kw)


# --- the cursor --------------------------------------------------------------------------


def test_the_walk_goes_through_the_calls_in_order() -> None:
    walk = ToolWalk([READ, LIST])
    assert walk.current == READ and walk.is_current("c1") and not walk.is_current("c2")
    walk.advance()
    assert walk.current == LIST and walk.remaining() == [LIST]
    walk.advance()
    assert walk.current is None and not walk.is_current("c2")
    walk.advance()  # past the end stays at the end
    assert walk.current is None and walk.calls == (READ, LIST)


def test_an_empty_walk_has_no_current_call() -> None:
    assert ToolWalk().current is None and ToolWalk().remaining() == []


def test_replace_current_keeps_the_walk_on_the_same_call() -> None:
    walk = ToolWalk([READ, LIST])
    edited = ToolCall("c1", "read_file", {"path": "b.py"})
    walk.replace_current(edited)
    assert walk.current == edited and walk.calls == (edited, LIST)


# --- checks and gate -------------------------------------------------------------------------


def test_an_unknown_tool_is_an_error_result_in_the_originals_words() -> None:
    result = check_call(ToolCall("c9", "fly_to_moon", {}), {"read_file"})
    assert result == ToolResult("Unknown tool: fly_to_moon", is_error=True)


def test_bad_arguments_are_an_error_result_naming_the_tool() -> None:
    bad = ToolCall("c3", "read_file", {}, arguments_error="arguments are not a JSON object")
    assert check_call(bad, {"read_file"}) == ToolResult(
        "Invalid arguments for tool read_file: arguments are not a JSON object", is_error=True)


def test_a_known_call_with_good_arguments_passes_the_checks() -> None:
    assert check_call(READ, {"read_file"}) is None


def test_the_gate_follows_the_permission_check() -> None:
    rules = LoopRules.off()
    assert gate(READ, decide(Permission.ALLOW), rules).action == "run"
    denied = gate(READ, decide(Permission.DENY, message="plan mode"), rules)
    assert (denied.action, denied.message) == ("deny", "plan mode")
    asked = gate(READ, decide(Permission.ASK), rules)
    assert (asked.action, asked.description, asked.kind) == ("ask", "Use tool: read_file", "tool")
    custom = gate(READ, decide(Permission.ASK, description="Read a.py?"), rules)
    assert custom.description == "Read a.py?"


def test_the_gate_passes_the_calls_own_arguments_to_the_check() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def check(name: str, args: dict[str, Any]) -> PermissionDecision:
        seen.append((name, args))
        return PermissionDecision(Permission.ALLOW)

    gate(READ, check, LoopRules.off())
    assert seen == [("read_file", {"path": "a.py"})]


# --- events -------------------------------------------------------------------------------------


def test_status_texts_are_the_originals() -> None:
    assert running_status(READ).event == ToolStatus(
        status_message="[read_file] Running tool...", tool_name="read_file", call_id="c1",
        state="running")
    done = finished_status(READ, "ok", is_error=False, preview="ok").event
    assert (done.status_message, done.state, done.output) == ("[read_file] Done", "completed", "ok")
    failed = finished_status(READ, "\n  No such file\nmore", is_error=True, preview="p").event
    assert (failed.status_message, failed.state) == ("[read_file] Error: No such file", "error")
    assert pending_status(READ).event.state == "pending"
    assert pending_status(READ).event.status_message == "[read_file] Waiting to run..."


def test_the_error_status_shows_only_the_head_of_the_first_line() -> None:
    failed = finished_status(READ, "x" * 500, is_error=True, preview="", error_chars=10).event
    assert failed.status_message == "[read_file] Error: " + "x" * 10


def test_announce_publishes_the_tool_use_block_with_its_input() -> None:
    assert announce(READ) == Emit(ContentBlockStart(
        block_type="tool_use", name="read_file", call_id="c1", input={"path": "a.py"}))


# --- both loops walk the same way -------------------------------------------------------------

TOOLS = (ToolSpec("read_file", "read"),)


def direct_loop() -> tuple[DirectLoop, list[Effect]]:
    loop = DirectLoop(model="qwen3:32b", system_prompt="S", tools=TOOLS,
                      permission_check=decide(Permission.ALLOW), context_window=32_768)
    loop.start("go")
    return loop, loop.handle(SlotGranted())


def sdk_loop() -> tuple[SdkLoop, list[Effect]]:
    loop = SdkLoop(model="claude-test", system_prompt="S", tools=TOOLS,
                   permission_check=decide(Permission.ALLOW), context_window=100_000)
    return loop, loop.start("go")


def tool_reply(*calls: ToolCall) -> ModelSucceeded:
    return ModelSucceeded(ModelResponse(text="", tool_calls=calls))


def statuses(effects: list[Effect]) -> list[tuple[str, str, str]]:
    return [(e.event.call_id, e.event.state, e.event.status_message)
            for e in effects if isinstance(e, Emit) and isinstance(e.event, ToolStatus)
            and e.event.state != "pending"]


def tool_results(history: list[ChatMessage]) -> list[tuple[str, str, bool]]:
    return [(m.tool_call_id or "", m.content, m.is_error) for m in history if m.role == "tool"]


@pytest.mark.parametrize("make", [direct_loop, sdk_loop], ids=["direct", "sdk"])
def test_both_loops_answer_an_unknown_tool_with_the_same_error_and_go_on(make: Any) -> None:
    loop, _ = make()
    effects = loop.handle(tool_reply(ToolCall("u1", "fly_to_moon", {}), READ))
    # the unknown call never reaches the worker; the known one does
    assert [e.call.id for e in effects if isinstance(e, RunTool)] == ["c1"]
    assert tool_results(loop.history) == [("u1", "Unknown tool: fly_to_moon", True)]
    assert statuses(effects) == [
        ("u1", "error", "[fly_to_moon] Error: Unknown tool: fly_to_moon"),
        ("c1", "running", "[read_file] Running tool..."),
    ]
    effects = loop.handle(ToolFinished("c1", ToolResult("contents")))
    assert statuses(effects)[0] == ("c1", "completed", "[read_file] Done")


@pytest.mark.parametrize("make", [direct_loop, sdk_loop], ids=["direct", "sdk"])
def test_both_loops_report_a_failed_tool_with_the_same_status_text(make: Any) -> None:
    loop, _ = make()
    loop.handle(tool_reply(READ))
    effects = loop.handle(ToolFinished("c1", ToolResult("No such file: a.py\ntrace", is_error=True)))
    assert statuses(effects)[0] == ("c1", "error", "[read_file] Error: No such file: a.py")
