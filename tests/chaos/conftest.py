"""Chaos-suite fixtures: the seed, a fault-injecting loop wrapper, and the event-log checker.

The seed comes from ``CHAOS_SEED`` (an integer, or ``random`` for a fresh one); without it
the suite uses :data:`DEFAULT_SEED`, so CI runs the same scenario every time. The seed is
printed in pytest's header and in every failure message: replay a failing run with
``CHAOS_SEED=<seed> .venv/bin/python -m pytest tests/chaos``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from corvid_actors.loop import effects as fx
from corvid_actors.wiring.loop_factories import LoopFactory, LoopSpec

DEFAULT_SEED = 20261121
#: in a user message, makes the session's loop raise on its actor thread (an actor crash)
CRASH_AT_START = "[actor-crash-at-start]"
#: makes the loop raise when the first model reply of the turn arrives (mid-turn crash)
CRASH_ON_REPLY = "[actor-crash-on-reply]"


def chaos_seed() -> int:
    raw = os.environ.get("CHAOS_SEED", "").strip()
    if raw.lower() == "random":
        return random.SystemRandom().randrange(2**31)
    return int(raw) if raw else DEFAULT_SEED


_SEED = chaos_seed()


def pytest_report_header(config: pytest.Config) -> str:
    return f"chaos seed: {_SEED} (replay: CHAOS_SEED={_SEED})"


@pytest.fixture
def seed() -> int:
    print(f"chaos seed: {_SEED} (replay: CHAOS_SEED={_SEED})")
    return _SEED


@pytest.fixture(autouse=True)
def _scrub_provider_env(monkeypatch):
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "OLLAMA_HOST"):
        monkeypatch.delenv(var, raising=False)


class ActorFault(RuntimeError):
    """Raised on a session actor's thread by :class:`ChaoticLoop` (an injected crash)."""


class ChaoticLoop:
    """A real loop behind the runtime's loop-factory hook, raising on marked conversations.

    Not a mock: every call goes to the real loop, except that a conversation whose prompt
    carries :data:`CRASH_AT_START` raises in ``start`` and one carrying
    :data:`CRASH_ON_REPLY` raises when its first model reply arrives — an exception in the
    actor's message handler, which Pykka turns into ``on_failure``.
    """

    def __init__(self, inner: fx.Loop) -> None:
        self._inner = inner
        self._crash_on_reply = False

    def start(self, prompt: str) -> list[fx.Effect]:
        if CRASH_AT_START in prompt:
            raise ActorFault("injected crash at start")
        self._crash_on_reply = CRASH_ON_REPLY in prompt
        return self._inner.start(prompt)

    def handle(self, event: fx.LoopInput) -> list[fx.Effect]:
        if isinstance(event, fx.UserMessage) and CRASH_AT_START in event.text:
            raise ActorFault("injected crash on a user message")
        if self._crash_on_reply and isinstance(event, fx.ModelSucceeded):
            self._crash_on_reply = False
            raise ActorFault("injected crash on a model reply")
        return self._inner.handle(event)

    def abort(self) -> list[fx.Effect]:
        return self._inner.abort()

    @property
    def history(self) -> Any:
        return self._inner.history


def chaotic(factory: LoopFactory) -> LoopFactory:
    def make(spec: LoopSpec) -> fx.Loop:
        return ChaoticLoop(factory(spec))
    return make


# --- the event-log checker ------------------------------------------------------------

#: an incarnation ends with one of these; nothing of it may follow
TERMINAL = frozenset({"session_exited", "session_stopped", "session_paused"})
#: what the supervisor may publish for a session between incarnations
BETWEEN = frozenset({"session_restarting", "session_resumed", "session_stopped", "error"})


@dataclass(frozen=True)
class LogProblem:
    session_id: str
    index: int
    problem: str


def check_event_log(session_id: str, types: Iterable[str], generations: Iterable[int | None]) -> list[LogProblem]:
    """Problems with one session's event sequence (empty when well-formed).

    Well-formed: each incarnation is ``session_started`` … one terminal event; between
    incarnations only supervisor events; generations increase; the last incarnation ended.
    """
    problems: list[LogProblem] = []
    inside = False
    last_generation = 0
    for i, (kind, generation) in enumerate(zip(types, generations, strict=True)):
        if kind == "session_started":
            if inside:
                problems.append(LogProblem(session_id, i, "session_started inside a running incarnation"))
            if generation is not None and generation <= last_generation:
                problems.append(LogProblem(session_id, i, f"generation {generation} after {last_generation}"))
            last_generation = generation or last_generation
            inside = True
        elif kind in TERMINAL and inside:
            inside = False
        elif not inside and kind not in BETWEEN:
            problems.append(LogProblem(session_id, i, f"{kind} after the end of an incarnation"))
    if inside:
        problems.append(LogProblem(session_id, -1, "the last incarnation never ended"))
    return problems
