"""Text-based tool calling for models that cannot take Ollama's native ``tools`` parameter.

Pure functions, no I/O. For such models (some families, and every cloud model) the
provider puts :func:`tool_instructions` into the system prompt, sends tool results back
as user messages wrapped by :func:`wrap_tool_output`, and reads calls out of the reply
with :func:`parse_tool_calls`.

Small models rarely follow the format exactly, so the parser is tolerant: it accepts a
JSON array or object of ``{"name", "arguments"}`` (bare, fenced, or embedded in prose),
``<tool_call>…</tool_call>`` tags and ``name({json})``, and it repairs near-miss tool
names and argument names (:func:`repair_tool_name`, :func:`repair_arguments`). The
parser and the repair rules live in private modules beside this one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence

from corvid_actors.core.vocabulary import ToolSpec
from corvid_actors.providers._text_tool_parser import parse_tool_calls
from corvid_actors.providers._text_tool_repair import (
    ARGUMENT_ALIASES,
    COMMAND_TOOL,
    CORVID_PREFIX,
    MIN_FUZZY_MATCH_CHARS,
    repair_arguments,
    repair_native_call,
    repair_tool_name,
)
from corvid_actors.providers.base import StreamCallback, TextDelta, ToolCall

#: Families that never get the native ``tools`` parameter (reference §6).
DEFAULT_TEXT_TOOL_FAMILIES: tuple[str, ...] = (
    "qwen3",
    "qwen3.5",
    "qwen3next",
    "qwen3moe",
    "kimi",
    "minimax",
    "gemini",
    "glm",
    "devstral",
    "nemotron",
    "deepseek3.2",
    "gpt-oss",
)

TOOL_OUTPUT_OPEN = "«tool_output»"
TOOL_OUTPUT_CLOSE = "«/tool_output»"

#: How many trailing characters the stream gate holds back, so an opener split across
#: chunks (``[`` then ``{"name"``) is still recognised before it is shown.
STREAM_HOLDBACK_CHARS = 16


# --- family detection ------------------------------------------------------------------


def is_cloud_model(model: str) -> bool:
    """Ollama cloud models are named ``…:cloud`` or ``…-cloud``."""
    lowered = model.lower()
    return ":cloud" in lowered or lowered.endswith("-cloud")


def _normalise_family(name: str) -> str:
    # "deepseek-v3.2" and "deepseek3.2", "gpt-oss" and "gptoss" name the same family
    squashed = re.sub(r"[-_\s]", "", name.lower())
    return re.sub(r"v(?=\d)", "", squashed)


def model_family(model: str) -> str:
    """The model's base name without registry path and tag: ``hf.co/x/Qwen3-8B:Q4`` → ``qwen3-8b``."""
    base = model.rsplit("/", 1)[-1].split(":", 1)[0]
    return base.lower()


def uses_text_tools(model: str, families: Iterable[str] = DEFAULT_TEXT_TOOL_FAMILIES) -> bool:
    """True when ``model`` gets tools through the prompt instead of the native parameter.

    Cloud models always do; local models do when their name starts with one of
    ``families`` (compared without separators, so ``gpt-oss:20b`` matches ``gpt-oss``).
    """
    if is_cloud_model(model):
        return True
    base = _normalise_family(model_family(model))
    return any(base.startswith(_normalise_family(family)) for family in families if family)


# --- prompt side -----------------------------------------------------------------------


def tool_instructions(specs: Sequence[ToolSpec]) -> str:
    """Instructions and JSON schemas to append to the system prompt of a text-tools model."""
    lines = [
        "## Tools",
        "You can call the tools listed below. To call tools, reply with ONLY a JSON array of",
        'calls and nothing else, for example: [{"name": "tool_name", "arguments": {"arg": "value"}}]',
        "- Use the exact tool names and argument names from the schemas.",
        "- You may put several calls in one array; they run in order.",
        f"- Each result comes back in a user message between {TOOL_OUTPUT_OPEN} and "
        f"{TOOL_OUTPUT_CLOSE}.",
        "- Never write those markers or invent tool results yourself: wait for the real result.",
        "- When you are finished, answer in plain text without any tool call.",
        "",
        "Available tools:",
    ]
    for spec in specs:
        lines.append(f"### {spec.name}")
        if spec.description:
            lines.append(spec.description)
        lines.append("Arguments (JSON schema): " + json.dumps(spec.parameters, sort_keys=True))
    return "\n".join(lines)


def wrap_tool_output(name: str, text: str, *, is_error: bool = False) -> str:
    """A tool result as the model sees it in text-tools mode."""
    status = "failed" if is_error else "returned"
    return f"{TOOL_OUTPUT_OPEN}\n{name} {status}:\n{text}\n{TOOL_OUTPUT_CLOSE}"


def format_tool_calls(calls: Sequence[ToolCall]) -> str:
    """Calls in the JSON-array format the instructions ask for (for replaying history)."""
    return json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls])


# --- streaming -------------------------------------------------------------------------


class CallTextGate:
    """Streams reply text but holds back anything that may be a text-format tool call.

    Feed chunks with :meth:`feed`; once the text shows a call opener (a fence, a tag,
    ``[{``, ``{"``, ``tool_name(``, a tool name ending its line, or a ReAct ``Action:``
    line) nothing more is streamed. :meth:`finish` then emits
    whatever of the final, call-free text was not shown yet. Runs on the stream thread.
    """

    def __init__(
        self, emit: StreamCallback | Callable[[TextDelta], None], tool_names: Sequence[str]
    ) -> None:
        self._emit = emit
        names = "|".join(re.escape(n) for n in tool_names if n)
        opener = r"```|<tool_call|<\|python_tag\|>|\[\s*\{|\{\s*\"|(?m:^[ \t]*Action[ \t]*:)"
        self._opener = re.compile(
            opener + (rf"|(?<![\w.])(?:{names})(?:\s*\(|[ \t]*\n)" if names else ""), re.IGNORECASE
        )
        self._buffer = ""
        self._sent = 0
        self._holding = False

    def feed(self, chunk: str) -> None:
        """Add streamed text; emits the part that cannot be the start of a call."""
        self._buffer += chunk
        if self._holding:
            return
        match = self._opener.search(self._buffer, max(0, self._sent - STREAM_HOLDBACK_CHARS))
        if match is not None:
            limit, self._holding = match.start(), True
        else:
            limit = len(self._buffer) - STREAM_HOLDBACK_CHARS
        if limit > self._sent:
            self._emit(TextDelta(self._buffer[self._sent : limit]))
            self._sent = limit

    def finish(self, final_text: str) -> None:
        """Emit the rest of ``final_text`` (the reply with calls stripped) not yet shown."""
        shown = self._buffer[: self._sent]
        if final_text.startswith(shown):
            rest = final_text[len(shown) :]
        else:
            # the final text was stripped: match what was shown without its outer spaces
            core = shown.strip()
            if not final_text.startswith(core):
                return  # never repeat or contradict text the user has already seen
            rest = final_text[len(core) :]
            trailing = shown[len(shown.rstrip()) :]
            rest = rest[len(trailing) :] if trailing and rest.startswith(trailing) else rest
            if not core:
                rest = rest.lstrip()
        if rest:
            self._emit(TextDelta(rest))


__all__ = [
    "ARGUMENT_ALIASES",
    "COMMAND_TOOL",
    "CORVID_PREFIX",
    "DEFAULT_TEXT_TOOL_FAMILIES",
    "MIN_FUZZY_MATCH_CHARS",
    "TOOL_OUTPUT_CLOSE",
    "TOOL_OUTPUT_OPEN",
    "CallTextGate",
    "format_tool_calls",
    "is_cloud_model",
    "model_family",
    "parse_tool_calls",
    "repair_arguments",
    "repair_native_call",
    "repair_tool_name",
    "tool_instructions",
    "uses_text_tools",
    "wrap_tool_output",
]
