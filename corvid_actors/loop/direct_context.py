"""The direct loop's context rules: what each iteration sends, and what the model is told.

Pure. Before each model call the direct loop cuts stale tool results, trims the history
to the window (:mod:`.trimming`), reports ``context_usage`` and, when the usage crosses
a level, a ``context_warning``. Also here: the council roles' reasoning-only prompt and
the summary epilogue's request, in the original's wording.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from corvid_actors.events import ContextUsage, ContextWarning
from corvid_actors.loop.effects import Effect, Emit
from corvid_actors.loop.trimming import trim_messages, truncate_old_tool_results
from corvid_actors.providers.base import ChatMessage

if TYPE_CHECKING:  # the settings class lives in direct.py, which imports this module
    from corvid_actors.loop.settings import DirectLoopSettings

#: council deliberation roles that reason without tools (the seed's councilRole values)
COUNCIL_ROLES = frozenset({"member", "discusser", "reviewer"})

COUNCIL_REASONING_PROMPT = (
    "You are taking part in a council deliberation. You have no tools in this session: "
    "reason from your own knowledge and from what the discussion contains. Take a clear "
    "position, give the reasoning behind it, and say where you are uncertain. Do not claim "
    "to have read files, run commands or looked anything up."
)

#: the original's wording of the summary epilogue's request (direct-process.ts)
SUMMARY_REQUEST = (
    "Summarize what you accomplished. Be concise — state the key actions taken and their results."
)

_WARNING_TEXT = {
    "info": "Context is {pct:.0f}% full.",
    "warning": "Context is {pct:.0f}% full; older messages will be trimmed (/compact to compact now).",
    "critical": "Context is {pct:.0f}% full; the conversation will be trimmed or summarised.",
}


def council_system_prompt(role_prompt: str) -> str:
    """The reasoning-only system prompt of a council role; the agent's prompt is its role."""
    role = role_prompt.strip()
    return COUNCIL_REASONING_PROMPT + (f"\n\n## Your role\n{role}" if role else "")


def prepare_context(
    history: Sequence[ChatMessage],
    system: str,
    context_window: int,
    settings: DirectLoopSettings,
    warning_level: int,
) -> tuple[list[ChatMessage], list[Effect], int]:
    """The history the next call sends, the ``context_usage`` (and any new
    ``context_warning``) to publish, and the warning level now crossed (-1: none).

    A warning is published when the usage crosses a level above ``warning_level``;
    falling back under a level re-arms its warning.
    """
    messages = list(history)
    # the newest assistant message's tool results are never "stale", however many
    last_assistant = max(
        (i for i, m in enumerate(messages) if m.role == "assistant"), default=len(messages)
    )
    keep = max(settings.stale_tool_result_keep_last, len(messages) - last_assistant)
    messages = truncate_old_tool_results(messages, keep, settings.stale_tool_result_chars)
    trim = trim_messages(messages, system, context_window, settings)
    trimmed = list(trim.messages)
    usage = trim.estimated_tokens / context_window if context_window else 0.0
    percent = round(usage * 100, 1)
    effects: list[Effect] = [
        Emit(
            ContextUsage(
                estimated_tokens=trim.estimated_tokens,
                context_window=context_window,
                usage_percent=percent,
                messages_count=len(trimmed),
                trimmed=trim.trimmed,
            )
        )
    ]
    crossed = [i for i, (at, _) in enumerate(settings.context_warning_levels) if usage >= at]
    level = crossed[-1] if crossed else -1
    if level > warning_level:
        name = settings.context_warning_levels[level][1]
        text = _WARNING_TEXT.get(name, "Context is {pct:.0f}% full.").format(pct=percent)
        effects.append(Emit(ContextWarning(level=name, usage_percent=percent, message=text)))
    return trimmed, effects, level
