"""Prompt composition: system prompt order, persona section, resume prompt, history stripping."""

from corvid_actors.loop.prompts import (
    PersonaFields,
    build_resume_prompt,
    compacted_user_message,
    compaction_request_text,
    compose_persona_prompt,
    compose_system_prompt,
    render_transcript,
    strip_conversation_history,
)
from corvid_actors.providers.base import ChatMessage, ToolCall

# --- system prompt ------------------------------------------------------------------


def test_system_prompt_parts_in_seed_order_joined_by_blank_lines() -> None:
    prompt = compose_system_prompt("SYS", "APPEND", "## Persona\nArchetype: formal", "Be terse.")
    assert prompt == (
        "SYS\n\nAPPEND\n\n## Persona\nArchetype: formal\n\n## Skill Instructions\nBe terse."
    )


def test_system_prompt_skips_empty_parts() -> None:
    assert compose_system_prompt("SYS", "", None, "  ") == "SYS"
    assert compose_system_prompt(None, None, "P", "S") == "P\n\n## Skill Instructions\nS"
    assert compose_system_prompt("", "", "", "") == ""


# --- persona ------------------------------------------------------------------------


def test_persona_prompt_lists_every_field() -> None:
    persona = PersonaFields(
        name="Corvid",
        archetype="technical",
        traits=("precise", "curious"),
        background="Built for code review.",
        voice_guidelines="Short sentences.",
        example_messages=("Looks good.", "Needs a test."),
    )
    assert compose_persona_prompt(persona) == "\n".join(
        [
            "## Persona",
            "Archetype: technical",
            "Personality traits: precise, curious",
            "Background: Built for code review.",
            "Communication style: Short sentences.",
            "",
            "Example messages (match this tone and style):",
            '- "Looks good."',
            '- "Needs a test."',
        ]
    )


def test_several_personas_merge() -> None:
    first = PersonaFields(archetype="custom", traits=("calm", "precise"), background="B1")
    second = PersonaFields(
        archetype="friendly", traits='["precise", "warm"]', voice_guidelines="Warm.",
        background="B2", example_messages='["Hi!"]',
    )
    third = PersonaFields(archetype="formal")
    text = compose_persona_prompt([first, second, third])
    assert "Archetype: friendly" in text  # first non-custom archetype
    assert "Personality traits: calm, precise, warm" in text  # union, first-seen order
    assert "Background: B1\nB2" in text
    assert "Communication style: Warm." in text
    assert text.endswith('- "Hi!"')


def test_empty_persona_gives_empty_prompt() -> None:
    assert compose_persona_prompt(None) == ""
    assert compose_persona_prompt([]) == ""
    assert compose_persona_prompt(PersonaFields(name="x")) == ""


# --- resume prompt ------------------------------------------------------------------


def test_resume_prompt_without_history_is_the_new_prompt() -> None:
    assert build_resume_prompt([], "hello") == "hello"
    assert build_resume_prompt([("system", "Session completed")], "hello") == "hello"
    assert build_resume_prompt([], None) == ""


def test_resume_prompt_layout() -> None:
    history = [("user", "fix the bug"), ("system", "note"), ("assistant", "done")]
    prompt = build_resume_prompt(history, "now add a test", interrupted=False)
    assert prompt == "\n".join(
        [
            "<conversation_history>",
            "The following is the conversation history from this session. "
            "Use it for context when responding to the new message.",
            "",
            "[User]: fix the bug",
            "[Assistant]: done",
            "</conversation_history>",
            "",
            "now add a test",
        ]
    )


def test_resume_prompt_interrupted_variant() -> None:
    prompt = build_resume_prompt([("user", "go")], None)
    assert "The session was interrupted" in prompt
    assert prompt.endswith("</conversation_history>")
    assert "The session was interrupted" in build_resume_prompt(
        [("user", "go")], "continue", interrupted=True
    )


def test_resume_prompt_keeps_last_messages_each_cut() -> None:
    history = [("user", f"m{i}") for i in range(30)] + [("assistant", "x" * 2500)]
    prompt = build_resume_prompt(history, "next")
    assert "[User]: m10" not in prompt  # 31 messages: only the last 20 survive
    assert "[User]: m11\n" in prompt
    assert "[Assistant]: " + "x" * 2000 + "...\n" in prompt
    small = build_resume_prompt(history, "next", max_messages=2, max_chars=5)
    assert "[User]: m29\n[Assistant]: xxxxx...\n" in small


def test_resume_prompt_never_nests_history() -> None:
    earlier = build_resume_prompt([("user", "first")], "second")
    prompt = build_resume_prompt([("user", earlier), ("assistant", "ok")], "third")
    assert prompt.count("<conversation_history>") == 1
    assert "[User]: second" in prompt


# --- stripping ----------------------------------------------------------------------


def test_strip_removes_blocks_and_following_whitespace() -> None:
    text = "<conversation_history>\nold\n</conversation_history>\n\nnew question"
    assert strip_conversation_history(text) == "new question"
    assert strip_conversation_history("a <conversation_history>x</conversation_history> b") == "a b"


def test_strip_removes_nested_blocks_whole() -> None:
    text = (
        "<conversation_history>outer <conversation_history>inner</conversation_history>"
        " tail</conversation_history>\nkeep"
    )
    assert strip_conversation_history(text) == "keep"


def test_strip_handles_unbalanced_tags() -> None:
    # an opening tag cut by a length cap: drop to the end
    assert strip_conversation_history("keep <conversation_history>[User]: x...") == "keep"
    # a stray closing tag is dropped
    assert strip_conversation_history("a</conversation_history> b") == "a b"
    assert strip_conversation_history("plain text") == "plain text"


def test_a_stray_closing_tag_goes_with_the_whitespace_after_it() -> None:
    # issue 34 item 6: the original drops the tag and the whitespace after it
    assert strip_conversation_history("some text </conversation_history> more text") == "some text more text"
    assert strip_conversation_history("some text </conversation_history>\n\n  more text") == "some text more text"
    assert strip_conversation_history("</conversation_history>  start") == "start"
    assert strip_conversation_history("a</conversation_history>b") == "ab"


# --- compaction text ----------------------------------------------------------------


def test_transcript_renders_tool_calls_and_results_as_text() -> None:
    messages = [
        ChatMessage(role="user", content="read a"),
        ChatMessage(
            role="assistant", content="", tool_calls=(ToolCall("c1", "read_file", {"path": "a"}),)
        ),
        ChatMessage(role="tool", content="A" * 50, tool_call_id="c1", tool_name="read_file",
                    is_error=True),
    ]
    text = render_transcript(messages, max_entry_chars=12)
    assert text.splitlines() == [
        "[User]: read a",
        '[Assistant called read_file]: {"path":"a"}',
        "[Tool result (read_file, error)]: AAAAAAAAAAAA...",
    ]
    request = compaction_request_text(messages, 10)
    assert request.startswith("Summarise the conversation")
    assert "<conversation>\n[User]: read a" in request


def test_compacted_message_keeps_current_request() -> None:
    assert compacted_user_message("S", "do X").endswith("S\n\nThe request being worked on:\ndo X")
    assert compacted_user_message("S", None).endswith("\n\nS")
