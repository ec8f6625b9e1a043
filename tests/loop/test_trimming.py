"""Context trimming tiers, summaries and overflow recovery (seed invariants 5 and 12)."""

from __future__ import annotations

import pytest

from corvid_actors.loop.settings import DirectLoopSettings
from corvid_actors.loop.summaries import (
    CONTEXT_SUMMARY_HEADER,
    TRIM_SUMMARY_HEADER,
    summarize_conversation,
)
from corvid_actors.loop.tokens import estimate_messages_tokens
from corvid_actors.loop.trimming import (
    TrimLevel,
    compress_tool_results,
    overflow_recovery,
    trim_messages,
    truncate_old_tool_results,
)
from corvid_actors.providers.base import ChatMessage, ToolCall

SETTINGS = DirectLoopSettings()
BIG_BUDGET = 10_000_000


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def tool_round(n: int, output: str = "", name: str = "read_file") -> list[ChatMessage]:
    call = ToolCall(f"c{n}", name, {"path": f"src/mod{n}.py"})
    return [
        ChatMessage(role="assistant", content="", tool_calls=(call,)),
        ChatMessage(
            role="tool",
            content=output or f"contents of src/mod{n}.py",
            tool_call_id=call.id,
            tool_name=name,
        ),
    ]


def conversation(rounds: int, output: str = "") -> list[ChatMessage]:
    messages = [user("Please refactor the parser in src/parser.py")]
    for n in range(rounds):
        messages += tool_round(n, output)
    return messages


def chat(rounds: int) -> list[ChatMessage]:
    """A talk without tools: long assistant answers and short user follow-ups."""
    messages = [user("Please refactor the parser in src/parser.py")]
    for n in range(rounds):
        messages += [assistant(f"{n}: " + "lorem ipsum dolor " * 25), user(f"and then {n}?")]
    return messages


def assert_no_orphans(messages: tuple[ChatMessage, ...] | list[ChatMessage]) -> None:
    """Every tool message answers a call of the assistant message right before its group."""
    for index, message in enumerate(messages):
        if message.role != "tool":
            continue
        owner = index - 1
        while messages[owner].role == "tool":
            owner -= 1
        assert messages[owner].role == "assistant"
        assert message.tool_call_id in {c.id for c in messages[owner].tool_calls}
    for index, message in enumerate(messages):
        answered = {
            m.tool_call_id for m in messages[index + 1 : index + 1 + len(message.tool_calls)]
        }
        assert {c.id for c in message.tool_calls} <= answered


def test_small_conversation_is_untouched() -> None:
    messages = conversation(3)
    result = trim_messages(messages, "system", BIG_BUDGET, SETTINGS)
    assert result.trimmed is False and result.level is TrimLevel.NONE
    assert list(result.messages) == messages
    assert result.estimated_tokens == estimate_messages_tokens(messages, "system")


def test_forty_messages_is_not_a_trigger_but_forty_one_is() -> None:
    at_limit = conversation(19) + [assistant("done")]  # 1 + 38 + 1 = 40
    assert len(at_limit) == 40
    assert trim_messages(at_limit, "", BIG_BUDGET, SETTINGS).trimmed is False
    over = conversation(20)  # 41
    result = trim_messages(over, "", BIG_BUDGET, SETTINGS)
    assert result.trimmed and result.level is TrimLevel.WINDOW


def test_count_trim_keeps_first_message_one_line_per_dropped_result_and_most_recent() -> None:
    # issue 34 item 3, seed 000 invariant 12: the dropped history becomes exactly one
    # "[Previous tool result: …]" line per dropped result — no header, no call lines
    messages = conversation(25)  # 51 messages, tiny token use
    result = trim_messages(messages, "", BIG_BUDGET, SETTINGS)
    kept = result.messages
    assert kept[0] == messages[0]
    assert kept[1] == user("\n".join(f"[Previous tool result: contents of src/mod{n}.py (1 lines)]"
                                     for n in range(10)))  # rounds 0-9 were dropped
    assert list(kept[2:]) == messages[-30:]  # keep_recent
    assert len(kept) == 32
    assert_no_orphans(kept)


def test_a_window_that_drops_no_tool_result_leaves_no_stand_in() -> None:
    messages = chat(25)  # 51 messages of talk
    kept = trim_messages(messages, "", BIG_BUDGET, SETTINGS).messages
    assert list(kept) == [messages[0], *messages[-30:]]


def test_trim_never_splits_a_call_from_its_results() -> None:
    messages = [user("go")]
    for n in range(10):  # assistant with 3 calls → 4-message groups
        calls = tuple(ToolCall(f"c{n}-{i}", "read_file", {"path": f"f{i}"}) for i in range(3))
        messages.append(ChatMessage(role="assistant", tool_calls=calls))
        messages += [
            ChatMessage(role="tool", content="x", tool_call_id=c.id, tool_name="read_file")
            for c in calls
        ]
    assert len(messages) == 41
    result = trim_messages(messages, "", BIG_BUDGET, SETTINGS)
    assert result.trimmed
    assert_no_orphans(result.messages)
    # the tail was widened to start at an assistant message, not cut inside a group
    assert result.messages[2].role == "assistant"
    assert len(result.messages) - 2 >= 30


def test_budget_trim_over_seventy_percent_keeps_first_and_recent() -> None:
    # 25 messages of talk: compressing tool results cannot help, a window can
    messages = chat(12)
    tokens = estimate_messages_tokens(messages)
    budget = int(tokens / 0.75)  # 75 %: compress alone cannot help
    result = trim_messages(messages, "", budget, SETTINGS)
    assert result.level is TrimLevel.WINDOW
    assert result.messages[0] == messages[0]
    assert result.estimated_tokens < 0.70 * budget
    # budget-driven window keeps 40 % of the messages (at least 6); no tool result was
    # dropped, so there is no stand-in between them
    assert list(result.messages[1:]) == messages[-10:]
    assert_no_orphans(result.messages)


def test_compress_tier_cuts_old_tool_results_when_that_is_enough() -> None:
    messages = conversation(3, output="y" * 4000) + [assistant("ok")] * 5
    tokens = estimate_messages_tokens(messages)
    result = trim_messages(messages, "", int(tokens / 0.72), SETTINGS)
    assert result.level is TrimLevel.COMPRESS
    assert len(result.messages) == len(messages)
    tool_results = [m for m in result.messages if m.role == "tool"]
    assert all(len(m.content) < 300 for m in tool_results)
    # the oldest was already digested by the proactive tier (≥ 60 %), the others cut
    assert tool_results[0].content.startswith("[Summarized tool result, was 4000 chars, 1 lines]")
    assert all(m.content == "y" * 200 + "... [compressed, was 4000 chars]" for m in tool_results[1:])


def test_proactive_tier_summarises_big_answered_tool_results() -> None:
    old = tool_round(0, output="line\n" * 300 + "see src/app/main.py")
    messages = [user("go"), *old, assistant("read it"), *[assistant("more")] * 8]
    tokens = estimate_messages_tokens(messages)
    result = trim_messages(messages, "", int(tokens / 0.62), SETTINGS)
    assert result.level is TrimLevel.PROACTIVE
    digest = result.messages[2].content
    assert digest.splitlines()[:2] == [
        f"[Summarized tool result, was {len(old[1].content)} chars, 301 lines]",
        "Files: src/app/main.py",
    ]
    assert digest.splitlines()[2] == ("line " * 30).strip()  # the 150-char preview, one line
    assert result.messages[2].tool_call_id == "c0"


def test_aggressive_tier_keeps_first_summary_and_last_eight() -> None:
    messages = conversation(10, output="z" * 300)
    tokens = estimate_messages_tokens(messages)
    result = trim_messages(messages, "", int(tokens / 0.90), SETTINGS)
    assert result.level is TrimLevel.AGGRESSIVE
    kept = result.messages
    assert kept[0] == messages[0] and kept[1].content.startswith(TRIM_SUMMARY_HEADER)
    assert len(kept) == 2 + 8
    old_results = [m for m in kept[2:-3] if m.role == "tool"]
    assert old_results and all(len(m.content) < 120 for m in old_results)
    assert kept[-1] == messages[-1]  # the newest tool result stays whole
    assert_no_orphans(kept)


def test_emergency_tier_is_a_summary_and_the_last_four() -> None:
    messages = conversation(10, output="z" * 300)
    tokens = estimate_messages_tokens(messages)
    result = trim_messages(messages, "", int(tokens / 0.95), SETTINGS)
    assert result.level is TrimLevel.EMERGENCY
    assert result.messages[0].content.startswith(CONTEXT_SUMMARY_HEADER)
    assert list(result.messages[1:]) == messages[-4:]


def test_a_window_that_leaves_no_headroom_escalates() -> None:
    # one huge recent tool result: a window cannot drop it, so usage stays over 70 %
    messages = conversation(3) + tool_round(9, output="w" * 40_000)
    tokens = estimate_messages_tokens(messages)
    result = trim_messages(messages, "", int(tokens / 0.85), SETTINGS)
    assert result.level is TrimLevel.EMERGENCY
    assert result.messages[0].content.startswith(CONTEXT_SUMMARY_HEADER)
    assert list(result.messages[-2:]) == messages[-2:]
    assert_no_orphans(result.messages)


def test_a_window_with_headroom_does_not_escalate() -> None:
    messages = chat(12)
    tokens = estimate_messages_tokens(messages)
    result = trim_messages(messages, "", int(tokens / 0.85), SETTINGS)
    assert result.level is TrimLevel.WINDOW
    assert result.estimated_tokens < 0.70 * int(tokens / 0.85)


def test_repeated_trims_carry_earlier_summary_lines() -> None:
    first = trim_messages(conversation(25), "", BIG_BUDGET, SETTINGS).messages
    grown = list(first)
    for n in range(30, 40):
        grown += tool_round(n)
    second = trim_messages(grown, "", BIG_BUDGET, SETTINGS).messages
    lines = second[1].content.splitlines()
    # the first trim's lines (rounds 0-9) are carried, not summarised as a message; then
    # this trim's (rounds 10-19; the last 30 messages are rounds 20-24 and 30-39)
    assert lines == [f"[Previous tool result: contents of src/mod{n}.py (1 lines)]" for n in range(20)]


def test_compress_tool_results_leaves_recent_ones() -> None:
    messages = conversation(3, output="q" * 900)
    out = compress_tool_results(messages, keep_last=2, max_chars=100)
    assert out[-1] == messages[-1]
    assert out[2].content == "q" * 100 + "... [compressed, was 900 chars]"
    assert out[0] == messages[0]
    assert compress_tool_results(out, keep_last=2, max_chars=100) == out  # a second pass keeps the size


def test_truncate_old_tool_results_uses_the_original_marker_and_keeps_lines() -> None:
    messages = conversation(3, output="line\n" * 200)
    out = truncate_old_tool_results(messages, keep_last=3, max_chars=500)
    assert out[2].content == ("line\n" * 100) + "... [truncated, was 1000 chars]"
    assert truncate_old_tool_results(out, keep_last=3, max_chars=500) == out


def test_window_trim_lists_dropped_tool_results_as_previous_tool_result_lines() -> None:
    messages = conversation(25, output="first line\n" + "x" * 300)
    result = trim_messages(messages, "", BIG_BUDGET, SETTINGS)
    lines = result.messages[1].content.splitlines()
    expected = "[Previous tool result: first line " + "x" * 189 + "... (2 lines)]"
    assert expected in lines
    assert not any(line.startswith("- ") and " result" in line for line in lines)


def test_overflow_recovery_is_summary_plus_last_four() -> None:
    messages = conversation(6)
    recovered = overflow_recovery(messages)
    assert recovered[0].role == "user"
    assert recovered[0].content.startswith(CONTEXT_SUMMARY_HEADER)
    assert recovered[1:] == messages[-4:]


def test_overflow_recovery_keeps_tool_groups_whole() -> None:
    calls = tuple(ToolCall(f"c{i}", "read_file", {"path": f"f{i}"}) for i in range(4))
    messages = [
        user("go"),
        assistant("thinking"),
        ChatMessage(role="assistant", tool_calls=calls),
        *[ChatMessage(role="tool", content="x", tool_call_id=c.id) for c in calls],
    ]
    recovered = overflow_recovery(messages)
    assert recovered[1:] == messages[2:]  # 5 messages: the group is not cut
    assert_no_orphans(recovered)


def test_overflow_recovery_of_a_short_conversation_changes_nothing() -> None:
    messages = conversation(1)
    assert overflow_recovery(messages) == messages


def test_summarize_conversation_sections() -> None:
    messages = [
        user("Fix the login bug in server/auth.py"),
        ChatMessage(
            role="assistant",
            content="I decided to patch the token check instead of rewriting it.",
            tool_calls=(ToolCall("c1", "edit_file", {"path": "server/auth.py", "text": "x"}),),
        ),
        ChatMessage(
            role="tool",
            content="Error: permission denied",
            tool_call_id="c1",
            tool_name="edit_file",
            is_error=True,
        ),
        user("Also set LOG_LEVEL=debug please"),
        assistant("Patched server/auth.py; tests pass."),
    ]
    summary = summarize_conversation(messages, project="corvid")
    lines = summary.splitlines()
    assert lines[0] == CONTEXT_SUMMARY_HEADER
    assert "Active project: corvid" in lines
    assert "Original request: Fix the login bug in server/auth.py" in lines
    assert "Files touched: server/auth.py" in lines
    assert any("I decided to patch the token check" in line for line in lines)
    assert "- edit_file: Error: permission denied" in lines
    assert "- LOG_LEVEL=debug" in lines
    assert "- Also set LOG_LEVEL=debug please" in lines
    assert "- Patched server/auth.py; tests pass." in lines
    assert lines[-1] == "Tool calls made so far: 1"


def test_summary_limits_long_request_and_keeps_original_across_recoveries() -> None:
    long = "word " * 400
    summary = summarize_conversation([user(long), assistant("ok")])
    request = next(line for line in summary.splitlines() if line.startswith("Original request: "))
    assert len(request) <= len("Original request: ") + 500
    again = summarize_conversation([user(summary), assistant("more")])
    assert request in again.splitlines()


@pytest.mark.parametrize("budget", [0, -1])
def test_non_positive_budget_only_counts(budget: int) -> None:
    result = trim_messages(conversation(2), "", budget, SETTINGS)
    assert result.trimmed is False
