"""Supervision policies as pure functions: crash backoff, stability reset, outage resume,
timeouts, context reset, the zero-turn breaker, how a failure is reported.

The SessionSupervisor asks these; they read no clock and keep no state, so the seed's
numbers are checked by table tests (tests/actors/test_supervision_policy.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from corvid_actors.errors import StoreError
from corvid_actors.schema.sections import SupervisorConfig


@dataclass(frozen=True)
class RestartDecision:
    """``restart`` with ``delay_s`` before attempt number ``attempt`` (1-based), or give up."""

    restart: bool
    delay_s: float = 0.0
    attempt: int = 0


def restart_after_crash(
    cfg: SupervisorConfig, *, source: str, exit_code: int, restarts_so_far: int
) -> RestartDecision:
    """Crash auto-restart (seed invariant 8): chat-sourced sessions, 5 s × 3^n, at most 3."""
    if exit_code == 0 or source not in cfg.auto_restart_sources:
        return RestartDecision(restart=False)
    if restarts_so_far >= cfg.max_restarts:
        return RestartDecision(restart=False, attempt=restarts_so_far)
    delay = cfg.restart_backoff_base_s * cfg.restart_backoff_multiplier**restarts_so_far
    return RestartDecision(restart=True, delay_s=delay, attempt=restarts_so_far + 1)


def restart_count_after_uptime(cfg: SupervisorConfig, restarts_so_far: int, uptime_s: float) -> int:
    """Stability reset: after ``stable_period_s`` of uptime the counter goes back to 0."""
    return 0 if uptime_s >= cfg.stable_period_s else restarts_so_far


def auto_resume_delay(cfg: SupervisorConfig, resumes_so_far: int) -> float:
    """Outage auto-resume (seed invariant 9): the wait from a pause to its due check,
    5 min × 3^n capped at 60 min, where n counts the resumes already made (probes that
    failed do not count: a failed probe is retried ``auto_resume_check_interval_s`` later)."""
    return float(min(cfg.auto_resume_base_s * cfg.auto_resume_multiplier**max(resumes_so_far, 0),
                     cfg.auto_resume_cap_s))


def auto_resume_exhausted(cfg: SupervisorConfig, resumes_so_far: int) -> bool:
    """At a due check: True when ``auto_resume_max_attempts`` resumes were made already
    (the session is given up instead of probed)."""
    return resumes_so_far >= cfg.auto_resume_max_attempts


def extended_timeout(cfg: SupervisorConfig, requested_s: float) -> float:
    """``extend_timeout``: the new inactivity deadline is ``now + this``; it *replaces* the
    pending one (not added to it) and is capped at ``timeout_extension_cap_factor`` × default."""
    cap = cfg.session_timeout_s * cfg.timeout_extension_cap_factor
    return min(max(requested_s, 0.0), cap)


def overdue_after(cfg: SupervisorConfig, timeout_s: float) -> float:
    """The least uptime after which an incarnation whose timeout is ``timeout_s`` may be
    overdue: an extension may be shorter than the default, and the default is back after
    the session's next event."""
    return min(timeout_s, cfg.session_timeout_s)


def inherited_inactivity_deadline(stored: datetime | None, last_write: datetime | None,
                                  timeout_s: float) -> datetime | None:
    """The inactivity deadline a waiting session keeps when another daemon takes it over
    (issue 20), or None for a full timeout from now.

    ``stored``: the deadline the old owner's heartbeat stored in the lease (None: none
    stored, e.g. it died before its first heartbeat of that incarnation); ``last_write``:
    when the session's row was last updated (aware UTC; a turn's end writes it). The
    heartbeat stores a deadline within ``heartbeat_s`` of a turn's end: an owner that died
    in between leaves the deadline from before that turn, which ``last_write + timeout_s``
    moves up to the one the turn set — so the session never ends earlier than its last
    turn allows. Aware times in, aware times out; no clock is read."""
    if stored is None:
        return None
    if last_write is None:
        return stored
    return max(stored, last_write + timedelta(seconds=timeout_s))


def fallback_check_at(cfg: SupervisorConfig, earliest_due: float, last_check: float) -> float:
    """When (monotonic) the timeout safety net (seed invariant 10) next runs: one check
    interval after the first incarnation could be overdue — its own timer fires at its
    deadline, so an incarnation that ends on time never needs the net — and never sooner
    than one ``timeout_fallback_check_s`` after the last run (a 60 s poll while any
    incarnation is old enough to be overdue, as the seed's)."""
    interval = cfg.timeout_fallback_check_s
    return max(earliest_due + interval, last_check + interval)


#: the database drivers whose exceptions are store failures even when not wrapped
_STORE_DRIVERS = frozenset({"peewee", "sqlite3", "psycopg2", "psycopg"})


def failure_kind(exc: BaseException) -> str:
    """How the supervisor reports a told message it could not handle: ``store_error`` for a
    failed database operation (a due restart or resume is retried then), else
    ``internal_error``."""
    module = type(exc).__module__ or ""
    if isinstance(exc, StoreError) or module.split(".")[0] in _STORE_DRIVERS:
        return "store_error"
    return "internal_error"


def needs_context_reset(turns: int, max_turns: int) -> bool:
    """Seed invariant 6: after ``max_turns`` user turns, restart through the resume path."""
    return turns >= max_turns


#: the exit notes the supervisor writes (``handle_exit``); the zero-turn breaker reads them
_EXIT_NOTE = re.compile(r"^Session (completed|exited)")
_ZERO_TURNS = re.compile(r"Turns: 0\.")


def completed_note(duration_s: float, turns: int) -> str:
    """The system message of a clean exit (the original's wording)."""
    return f"Session completed after {duration_s:.0f}s. Turns: {turns}."


def crashed_note(code: int, error: str, duration_s: float, turns: int) -> str:
    """The system message of a non-zero exit, keeping the crash's own message."""
    detail = f": {error}" if error else ""
    return (f"Session exited unexpectedly (code {code}){detail} after {duration_s:.0f}s. "
            f"Turns: {turns}. Send a message to resume.")


def zero_turn_breaker_trips(system_notes: Sequence[str], threshold: int) -> bool:
    """The zero-turn circuit breaker: the last ``threshold`` exit notes (among the session's
    system messages, oldest first) all say ``Turns: 0`` — resuming keeps dying before a
    single turn, so the context is to be replaced by a summary."""
    exits = [note for note in system_notes if _EXIT_NOTE.match(note)]
    last = exits[-threshold:]
    return len(last) >= threshold and all(_ZERO_TURNS.search(note) for note in last)


def active_turns(history: Sequence[tuple[str, str]], new_prompt: bool) -> int:
    """The turn count of a cold-resumed incarnation, as the original counts it: the user
    messages in the resume history, plus one for a new prompt."""
    return sum(1 for role, _ in history if role == "user") + (1 if new_prompt else 0)
