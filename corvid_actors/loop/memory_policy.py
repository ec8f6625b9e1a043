"""History memory policies (OpenAgent seed): "amnesia" and "dementia".

Both run on the conversation before each model call, before any trimming or
compaction, and both count age in *turns*: one turn is one model reply (the seed's
"pass"). A message's age is the number of assistant replies that came after it.

- **amnesia** (``amnesia_turns``, default 10): plan updates older than that many turns
  are forgotten — the ``update_plan`` calls and their results. The current plan is in
  the system prompt anyway, so old snapshots of it only cost context.
- **dementia** (``dementia_turns``, default 30): every message older than that many
  turns is dropped, except the first message (the original request).

0 turns a policy off. Nothing ever separates a tool call from its result: a call and
its results have the same age, and amnesia removes them together. Per agent, the
configuration's ``memory.agents`` table overrides both numbers (see
:func:`memory_policy_for`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from corvid_actors.loop.plan import PLAN_TOOL_NAME
from corvid_actors.providers.base import ChatMessage

#: what the loops accept as a history policy: the conversation in, the one to use out
HistoryPolicy = Callable[[Sequence[ChatMessage]], list[ChatMessage]]


def reply_ages(history: Sequence[ChatMessage]) -> list[int]:
    """For each message, how many assistant replies follow it."""
    ages = [0] * len(history)
    later = 0
    for index in range(len(history) - 1, -1, -1):
        ages[index] = later  # a reply's own age counts only the replies after it
        if history[index].role == "assistant":
            later += 1
    return ages


def forget_plan_updates(history: Sequence[ChatMessage], older_than: int,
                        plan_tools: frozenset[str] = frozenset({PLAN_TOOL_NAME}),
                        ages: Sequence[int] | None = None) -> list[ChatMessage]:
    """Amnesia: drop plan-tool calls older than ``older_than`` turns and their results.

    An assistant message left with neither text nor calls is dropped too. ``older_than``
    of 0 (or less) changes nothing. ``ages`` (default: :func:`reply_ages` of ``history``)
    lets a caller keep the ages of a longer conversation this one was cut from.
    """
    if older_than <= 0:
        return list(history)
    ages = reply_ages(history) if ages is None else ages
    forgotten: set[str] = set()
    out: list[ChatMessage] = []
    for message, age in zip(history, ages, strict=True):
        if age <= older_than:
            out.append(message)
            continue
        if message.role == "assistant" and message.tool_calls:
            plan_calls = [c for c in message.tool_calls if c.name in plan_tools]
            if plan_calls:
                forgotten.update(c.id for c in plan_calls)
                rest = tuple(c for c in message.tool_calls if c.name not in plan_tools)
                if not rest and not message.content.strip():
                    continue
                message = dataclasses.replace(message, tool_calls=rest)
        elif message.role == "tool" and (
            message.tool_call_id in forgotten
            or (message.tool_call_id is None and message.tool_name in plan_tools)
        ):
            continue
        out.append(message)
    return out


def _old_entries_kept(history: Sequence[ChatMessage], ages: Sequence[int], older_than: int) -> list[int]:
    """Indexes dementia keeps: the first message (and its results), and the young ones."""
    keep = [i for i in range(1, len(history)) if ages[i] <= older_than]
    first = history[0]
    if first.role == "assistant" and first.tool_calls:
        # the first message may itself be a call: keep its results with it
        ids = {c.id for c in first.tool_calls}
        answers = [i for i in range(1, len(history)) if history[i].role == "tool"
                   and history[i].tool_call_id in ids and i not in keep]
        keep = answers + keep
    return [0, *keep]


def forget_old_entries(history: Sequence[ChatMessage], older_than: int) -> list[ChatMessage]:
    """Dementia: drop every message older than ``older_than`` turns but the first.

    Ages never increase along the conversation, so this drops one contiguous stretch
    right after the first message; a call and its results share an age, so the cut
    never falls between them. ``older_than`` of 0 (or less) changes nothing.
    """
    if older_than <= 0 or len(history) < 2:
        return list(history)
    return [history[i] for i in _old_entries_kept(history, reply_ages(history), older_than)]


@dataclass(frozen=True)
class MemoryPolicy:
    """The default history policy: amnesia, then dementia (0 turns either off)."""

    amnesia_turns: int = 10
    dementia_turns: int = 30
    plan_tools: frozenset[str] = frozenset({PLAN_TOOL_NAME})

    def __call__(self, history: Sequence[ChatMessage]) -> list[ChatMessage]:
        # both policies count age in the conversation as it is: one dropping a reply must
        # not make the other's messages look younger
        ages = reply_ages(history)
        index = list(range(len(history)))
        if self.dementia_turns > 0 and len(history) >= 2:
            index = _old_entries_kept(history, ages, self.dementia_turns)
        kept = [history[i] for i in index]
        return forget_plan_updates(kept, self.amnesia_turns, self.plan_tools, [ages[i] for i in index])

    @property
    def active(self) -> bool:
        return self.amnesia_turns > 0 or self.dementia_turns > 0


def memory_policy_for(agent_name: str, amnesia_turns: int, dementia_turns: int,
                      per_agent: Mapping[str, Sequence[float]]) -> MemoryPolicy:
    """The policy for one agent: the defaults, or its ``[amnesia, dementia]`` row from
    ``per_agent`` (by agent name, case-insensitive)."""
    rows = {name.lower(): row for name, row in per_agent.items()}
    row = rows.get(agent_name.lower()) if agent_name else None
    if row is not None and len(row) >= 2:
        amnesia_turns, dementia_turns = int(row[0]), int(row[1])
    return MemoryPolicy(amnesia_turns=amnesia_turns, dementia_turns=dementia_turns)
