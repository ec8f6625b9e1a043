"""Prompt composition: system prompt, persona section, resume prompt, compaction prompts.

Pure string functions (no I/O). The layouts follow the seeds: the SDK-process system
prompt order (agent system prompt, append prompt, persona, ``## Skill Instructions``),
the persona section of the session-config resolver, and the process manager's resume
prompt (a ``<conversation_history>`` block of the last 20 messages, each cut to 2000
characters).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from corvid_actors.content import strip_conversation_history
from corvid_actors.loop.doom import canonical_input
from corvid_actors.loop.turn import as_said
from corvid_actors.providers.base import ChatMessage

SKILL_HEADING = "## Skill Instructions"
PERSONA_HEADING = "## Persona"
#: the archetype that says "no archetype" (the first other one wins)
CUSTOM_ARCHETYPE = "custom"
#: appended to a message cut to the resume/transcript length limit
TRUNCATION_MARK = "..."

HISTORY_OPEN = "<conversation_history>"
HISTORY_CLOSE = "</conversation_history>"
RESUME_INSTRUCTION_NEW_MESSAGE = (
    "The following is the conversation history from this session. "
    "Use it for context when responding to the new message."
)
RESUME_INSTRUCTION_INTERRUPTED = (
    "The following is the conversation history from this session. "
    "The session was interrupted -- continue the conversation based on the history above."
)
_ROLE_LABELS = {"user": "User", "assistant": "Assistant"}

COMPACTION_SYSTEM_PROMPT = (
    "You summarise agent conversations so that the agent can continue its work "
    "from the summary alone."
)
COMPACTION_INSTRUCTION = (
    "Summarise the conversation below. Keep: the user's goals and constraints, decisions "
    "made, files and commands involved, results of tool calls that still matter, and what "
    "remains to be done. Be concise; do not call tools."
)
SUMMARY_HEADING = "Summary of the conversation so far (earlier messages were compacted):"
CURRENT_REQUEST_HEADING = "The request being worked on:"


def compose_system_prompt(
    system_prompt: str | None,
    append_prompt: str | None,
    persona_prompt: str | None,
    skill_prompt: str | None,
) -> str:
    """The session's system prompt: the non-empty parts in seed order, joined by a blank
    line; the skill prompt goes under ``## Skill Instructions``."""
    parts = [p for p in (system_prompt, append_prompt, persona_prompt) if p and p.strip()]
    if skill_prompt and skill_prompt.strip():
        parts.append(f"{SKILL_HEADING}\n{skill_prompt}")
    return "\n\n".join(parts)


# --- persona ------------------------------------------------------------------------


class PersonaLike(Protocol):
    """Anything with a persona's plain fields (a db row, :class:`PersonaFields`, …).

    ``traits`` and ``example_messages`` may be sequences of strings or their JSON text
    (as the database stores them).
    """

    name: str
    archetype: str
    traits: Any
    background: str
    voice_guidelines: str
    example_messages: Any


@dataclass(frozen=True)
class PersonaFields:
    """A persona as plain fields."""

    name: str = ""
    archetype: str = CUSTOM_ARCHETYPE
    traits: Sequence[str] = ()
    background: str = ""
    voice_guidelines: str = ""
    example_messages: Sequence[str] = ()


def _string_list(value: Any) -> list[str]:
    """A list of strings from a sequence or its JSON text; anything else is empty."""
    if not value:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [value]
        if not isinstance(value, list):
            return [str(value)]
    return [str(item) for item in value if str(item)]


def compose_persona_prompt(persona: PersonaLike | Sequence[PersonaLike] | None) -> str:
    """The ``## Persona`` section for one persona or several (in assignment order).

    Several personas merge: the first non-custom archetype, the union of traits (first
    seen order), backgrounds and voice guidelines joined by newlines, all example
    messages. The persona's ``name`` is not written (the seed's composition leaves it out).
    Returns ``""`` when there is nothing to say.
    """
    if persona is None:
        return ""
    personas: list[PersonaLike] = (
        list(persona) if isinstance(persona, Sequence) else [persona]
    )
    lines: list[str] = []
    archetype = next(
        (p.archetype for p in personas if p.archetype and p.archetype != CUSTOM_ARCHETYPE), None
    )
    if archetype:
        lines.append(f"Archetype: {archetype}")
    traits = list(dict.fromkeys(t for p in personas for t in _string_list(p.traits)))
    if traits:
        lines.append(f"Personality traits: {', '.join(traits)}")
    backgrounds = [p.background for p in personas if p.background]
    if backgrounds:
        lines.append("Background: " + "\n".join(backgrounds))
    guidelines = [p.voice_guidelines for p in personas if p.voice_guidelines]
    if guidelines:
        lines.append("Communication style: " + "\n".join(guidelines))
    examples = [m for p in personas for m in _string_list(p.example_messages)]
    if examples:
        lines += ["", "Example messages (match this tone and style):"]
        lines += [f'- "{m}"' for m in examples]
    if not lines:
        return ""
    return "\n".join([PERSONA_HEADING, *lines])


# --- resume prompt ------------------------------------------------------------------

def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + TRUNCATION_MARK


def build_resume_prompt(
    history: Sequence[tuple[str, str]],
    new_prompt: str | None,
    *,
    max_messages: int = 20,
    max_chars: int = 2000,
    interrupted: bool | None = None,
) -> str:
    """The first prompt of a cold-resumed session.

    ``history`` is the stored conversation as (role, content), oldest first. Only user
    and assistant messages count; earlier injected history blocks are stripped so resumes
    never nest; the last ``max_messages`` are each cut to ``max_chars`` and prefixed
    ``[User]:`` / ``[Assistant]:`` inside a ``<conversation_history>`` block that starts
    with an instruction line, then the new prompt follows (a reply cut by double texting
    before the message that cut it: ``turn.as_said``). ``interrupted`` picks the
    "session was interrupted, continue" instruction (default: when there is no new
    prompt). With no usable history the result is just the new prompt.
    """
    if interrupted is None:
        interrupted = not new_prompt
    usable = as_said([
        (role, stripped)
        for role, content in history
        if role in _ROLE_LABELS and (stripped := strip_conversation_history(content))
    ])
    # filter before taking the window, so system rows never crowd out real messages
    recent = usable[-max_messages:] if max_messages > 0 else []
    if not recent:
        return new_prompt or ""
    instruction = RESUME_INSTRUCTION_INTERRUPTED if interrupted else RESUME_INSTRUCTION_NEW_MESSAGE
    lines = [HISTORY_OPEN, instruction, ""]
    lines += [f"[{_ROLE_LABELS[role]}]: {_cut(content, max_chars)}" for role, content in recent]
    lines.append(HISTORY_CLOSE)
    if new_prompt:
        lines += ["", new_prompt]
    return "\n".join(lines)


SUMMARY_OPEN = "<previous_context_summary>"
SUMMARY_CLOSE = "</previous_context_summary>"


def with_context_summary(summary: str, prompt: str) -> str:
    """``prompt`` after a ``<previous_context_summary>`` block of ``summary`` (the stored
    summary of messages the zero-turn breaker deleted); just ``prompt`` without one."""
    if not summary.strip():
        return prompt
    return "\n".join([SUMMARY_OPEN, summary.strip(), SUMMARY_CLOSE, "", prompt])


# --- compaction ---------------------------------------------------------------------


def render_transcript(messages: Iterable[ChatMessage], max_entry_chars: int) -> str:
    """The conversation as plain labelled text, each entry cut to ``max_entry_chars``.

    Compaction sends the conversation as text rather than as messages: the summary call
    offers no tools, and the Messages API rejects ``tool_use``/``tool_result`` blocks in a
    request without tools.
    """
    lines: list[str] = []
    for message in messages:
        if message.role == "tool":
            label = f"Tool result ({message.tool_name or 'tool'}{', error' if message.is_error else ''})"
            lines.append(f"[{label}]: {_cut(message.content, max_entry_chars)}")
            continue
        label = message.role.capitalize()
        if message.content:
            lines.append(f"[{label}]: {_cut(message.content, max_entry_chars)}")
        for call in message.tool_calls:
            arguments = _cut(canonical_input(call.arguments), max_entry_chars)
            lines.append(f"[{label} called {call.name}]: {arguments}")
    return "\n".join(lines)


def compaction_request_text(messages: Iterable[ChatMessage], max_entry_chars: int) -> str:
    """The user message of a compaction call: the instruction, then the transcript."""
    transcript = render_transcript(messages, max_entry_chars)
    return f"{COMPACTION_INSTRUCTION}\n\n<conversation>\n{transcript}\n</conversation>"


def compacted_user_message(summary: str, current_request: str | None) -> str:
    """The single user message a compacted conversation restarts from: the summary and,
    when given, the request still being worked on (verbatim, so nothing of it is lost)."""
    text = f"{SUMMARY_HEADING}\n\n{summary}"
    if current_request:
        text += f"\n\n{CURRENT_REQUEST_HEADING}\n{current_request}"
    return text
