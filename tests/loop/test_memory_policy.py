"""History memory policies (OpenAgent seed): amnesia and dementia, by turn age."""

from __future__ import annotations

import pytest

from corvid_actors.loop.memory_policy import (
    MemoryPolicy,
    forget_old_entries,
    forget_plan_updates,
    memory_policy_for,
    reply_ages,
)
from corvid_actors.providers.base import ChatMessage, ToolCall


def user(text: str) -> ChatMessage:
    return ChatMessage("user", text)


def said(text: str) -> ChatMessage:
    return ChatMessage("assistant", text)


def calls(*names: str, text: str = "", tag: str = "") -> list[ChatMessage]:
    """An assistant message calling ``names`` and one result per call."""
    tool_calls = tuple(ToolCall(f"{tag}{n}{i}", n, {"i": i}) for i, n in enumerate(names))
    return [ChatMessage("assistant", text, tool_calls=tool_calls),
            *(ChatMessage("tool", f"result of {c.name}", tool_call_id=c.id, tool_name=c.name)
              for c in tool_calls)]


def conversation(turns: int) -> list[ChatMessage]:
    """First request, then ``turns`` replies each planning and reading (oldest first)."""
    history = [user("original request")]
    for t in range(turns):
        history += calls("update_plan", "read_file", tag=f"t{t}-")
    history.append(said("done"))
    return history


def test_reply_ages_count_the_replies_after_each_message():
    history = [user("q"), *calls("read_file"), said("a"), user("more"), said("b")]
    #          q  call res  a  more b
    assert reply_ages(history) == [3, 2, 2, 1, 1, 0]


@pytest.mark.parametrize(("older_than", "plan_calls_left"), [
    (0, 5),    # off
    (10, 5),   # nothing that old
    (3, 3),    # the plan updates of the 3 newest call turns (ages 1..3) stay
    (1, 1),
])
def test_amnesia_drops_old_plan_updates_and_their_results(older_than, plan_calls_left):
    history = conversation(5)  # call turns have ages 5,4,3,2,1; "done" is 0
    kept = forget_plan_updates(history, older_than)
    plan_calls = [c for m in kept for c in m.tool_calls if c.name == "update_plan"]
    plan_results = [m for m in kept if m.role == "tool" and m.tool_name == "update_plan"]
    assert len(plan_calls) == len(plan_results) == plan_calls_left
    # every other call and result is still there, each result after its call
    assert sum(1 for m in kept if m.role == "tool" and m.tool_name == "read_file") == 5
    seen: set[str] = set()
    for m in kept:
        seen.update(c.id for c in m.tool_calls)
        if m.role == "tool":
            assert m.tool_call_id in seen


def test_amnesia_drops_an_assistant_message_left_empty_but_keeps_text():
    history = [user("q"), *calls("update_plan", tag="a"), *calls("update_plan", text="planning", tag="b"),
               said("x"), said("y")]
    kept = forget_plan_updates(history, 1)
    assert [(m.role, m.content) for m in kept] == [("user", "q"), ("assistant", "planning"),
                                                   ("assistant", "x"), ("assistant", "y")]


@pytest.mark.parametrize(("older_than", "expected_len"), [
    (0, 17),   # off: 1 + 5 × 3 + 1
    (30, 17),
    (2, 1 + 2 * 3 + 1),
    (1, 1 + 3 + 1),
])
def test_dementia_drops_old_entries_and_keeps_the_first_message(older_than, expected_len):
    history = conversation(5)
    kept = forget_old_entries(history, older_than)
    assert len(kept) == expected_len
    assert kept[0] == history[0] and kept[-1] == history[-1]
    # the cut never orphans a result: the message after the first is never a tool result
    if len(kept) > 1:
        assert kept[1].role != "tool"


def test_dementia_keeps_the_results_of_a_first_message_that_is_a_call():
    history = [*calls("read_file", tag="f"), said("a"), said("b"), said("c")]
    kept = forget_old_entries(history, 1)
    assert [m.role for m in kept] == ["assistant", "tool", "assistant", "assistant"]


def test_memory_policy_applies_both_and_is_off_at_zero():
    history = conversation(5)
    assert MemoryPolicy(0, 0)(history) == history and not MemoryPolicy(0, 0).active
    both = MemoryPolicy(amnesia_turns=2, dementia_turns=4)(history)
    assert both == forget_plan_updates(forget_old_entries(history, 4), 2, ages=[
        age for m, age in zip(history, reply_ages(history), strict=True) if m in forget_old_entries(history, 4)])


def test_dropping_a_plan_only_reply_does_not_make_older_messages_younger():
    # replies, oldest first: list (4 turns old), list (3), plan only (2), read (1), read (0)
    history = [user("q"), *calls("list_files", tag="a"), *calls("list_files", tag="b"),
               *calls("update_plan", tag="c"), *calls("read_file", tag="d"), *calls("read_file", tag="e")]
    kept = MemoryPolicy(amnesia_turns=1, dementia_turns=3)(history)
    names = [m.tool_calls[0].name for m in kept if m.role == "assistant"]
    # amnesia drops the plan reply (2 > 1); dementia still sees the first list as 4 > 3 old
    assert names == ["list_files", "read_file", "read_file"]
    assert [m.tool_call_id for m in kept if m.role == "tool"] == ["blist_files0", "dread_file0", "eread_file0"]


def test_per_agent_rows_override_the_defaults():
    rows = {"Researcher": (5.0, 0.0)}
    assert memory_policy_for("researcher", 10, 30, rows) == MemoryPolicy(5, 0)
    assert memory_policy_for("writer", 10, 30, rows) == MemoryPolicy(10, 30)
    assert memory_policy_for("", 10, 30, rows) == MemoryPolicy(10, 30)
