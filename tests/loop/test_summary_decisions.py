"""The ``[Context Summary]``'s key decisions are found sentence by sentence: the same
sentences the former whole-text pattern found, in a time linear in the text (a long
reply with no full stop once cost seconds of CPU in an overflow recovery)."""

from __future__ import annotations

import re

import pytest

from corvid_actors.loop.summaries import _decision_sentences, summarize_conversation
from corvid_actors.providers.base import ChatMessage

#: the pattern the summaries used before (quadratic without sentence marks): the reference
FORMER = re.compile(
    r"[^.!?\n]*\b(?:I decided|decided to|I will|I'll|going to|the fix is|root cause"
    r"|instead of|chose to|the plan is)\b[^.!?\n]*[.!?]?",
    re.IGNORECASE,
)

TEXTS = [
    "",
    "Nothing decided here. Just words!",
    "I decided to use SQLite. It is simpler. The fix is a lock! Then done",
    "First line\nthe plan is: ship it\nlast line I will test",
    "We went instead of waiting?Then I'll go.And root cause found",
    "xI decided nothing; decided_to is one word. I'll",
    "going to. going to! going to? going to\n",
    " ".join(f"{1234567890 + i}" for i in range(300)) + " I decided to stop",
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_same_sentences_as_the_former_pattern(text: str) -> None:
    assert _decision_sentences(text) == FORMER.findall(text)


def test_a_long_reply_without_full_stops_is_summarized_whole() -> None:
    stamps = " ".join(str(10**15 + i) for i in range(20000))  # ~340 KB, no sentence mark
    messages = [ChatMessage(role="user", content="count"),
                ChatMessage(role="assistant", content=stamps + " counted. I decided to stop here.")]
    summary = summarize_conversation(messages)
    assert "Key decisions:" in summary and "I decided to stop here" in summary
