"""Table tests of the supervision policies (pure functions)."""

import math
from datetime import UTC, datetime, timedelta

import pytest

from corvid_actors.errors import CorvidError, StoreUnavailableError
from corvid_actors.policy.supervision import (
    active_turns,
    auto_resume_delay,
    auto_resume_exhausted,
    completed_note,
    crashed_note,
    extended_timeout,
    failure_kind,
    fallback_check_at,
    inherited_inactivity_deadline,
    needs_context_reset,
    overdue_after,
    restart_after_crash,
    restart_count_after_uptime,
    zero_turn_breaker_trips,
)
from corvid_actors.schema.sections import SupervisorConfig

CFG = SupervisorConfig()


@pytest.mark.parametrize(
    ("source", "code", "restarts", "restart", "delay", "attempt"),
    [
        ("chat", 1, 0, True, 5.0, 1),
        ("chat", 1, 1, True, 15.0, 2),
        ("chat", 1, 2, True, 45.0, 3),
        ("chat", 1, 3, False, 0.0, 3),  # max 3 restarts
        ("chat", 0, 0, False, 0.0, 0),  # clean exit: nothing to do
        ("web", 1, 0, False, 0.0, 0),  # only chat-sourced sessions auto-restart
        ("agent", 2, 0, False, 0.0, 0),
    ],
)
def test_restart_after_crash(source, code, restarts, restart, delay, attempt):
    decision = restart_after_crash(CFG, source=source, exit_code=code, restarts_so_far=restarts)
    assert (decision.restart, decision.delay_s, decision.attempt) == (restart, delay, attempt)


@pytest.mark.parametrize(
    ("restarts", "uptime", "expected"),
    [(2, 599.9, 2), (2, 600.0, 0), (3, 3600.0, 0), (0, 0.0, 0)],
)
def test_stability_reset(restarts, uptime, expected):
    assert restart_count_after_uptime(CFG, restarts, uptime) == expected


@pytest.mark.parametrize(
    ("resumes", "exhausted", "delay_min"),
    [(0, False, 5), (1, False, 15), (2, False, 45), (3, False, 60), (4, False, 60), (9, False, 60),
     (10, True, 60), (11, True, 60)],
)
def test_auto_resume_delay_counts_resumes_and_gives_up_at_the_due_check(resumes, exhausted, delay_min):
    # the pause after the 10th resume still waits (60 min) before its due check gives up
    assert auto_resume_delay(CFG, resumes) == delay_min * 60
    assert auto_resume_exhausted(CFG, resumes) is exhausted


@pytest.mark.parametrize(
    ("requested", "expected"),
    [(600, 600), (10_000, 7200), (7200, 7200), (60, 60), (-50, 0)],
)
def test_extended_timeout_replaces_the_deadline_capped_at_four_times_the_default(requested, expected):
    assert extended_timeout(CFG, requested) == expected


@pytest.mark.parametrize(("turns", "reset"), [(0, False), (7, False), (8, True), (9, True)])
def test_context_reset_after_eight_turns(turns, reset):
    assert needs_context_reset(turns, 8) is reset


def test_policies_follow_config():
    cfg = SupervisorConfig(restart_backoff_base_s=1.0, restart_backoff_multiplier=2.0, max_restarts=5,
                           auto_resume_base_s=10.0, auto_resume_multiplier=2.0, auto_resume_cap_s=30.0)
    delays = [restart_after_crash(cfg, source="chat", exit_code=1, restarts_so_far=n).delay_s for n in range(5)]
    assert delays == [1, 2, 4, 8, 16]
    assert [auto_resume_delay(cfg, n) for n in range(4)] == [10, 20, 30, 30]


# --- exit notes, turn counts and the zero-turn breaker (reference §3) ----------------------------

Z = "Session exited unexpectedly (code 1): boom after 1s. Turns: 0. Send a message to resume."


@pytest.mark.parametrize("notes, trips", [
    ([Z, Z, Z], True),
    ([Z, "Session completed after 4s. Turns: 0.", Z], True),
    ([Z, Z], False),  # fewer than three exits
    ([Z, Z, "Session completed after 9s. Turns: 2.", Z, Z], False),  # a turn in between
    ([Z, Z, "Session completed after 9s. Turns: 10.", Z], False),  # "10" is not zero
    (["Session completed after 9s. Turns: 2.", Z, Z, Z], True),  # only the last three count
    ([Z, "Context compacted: a summary", Z, "payload note", Z], True),  # other system notes are ignored
])
def test_zero_turn_breaker_reads_the_last_three_exit_notes(notes, trips):
    assert zero_turn_breaker_trips(notes, 3) is trips


def test_exit_notes_use_the_original_wording():
    assert completed_note(12.4, 2) == "Session completed after 12s. Turns: 2."
    assert crashed_note(1, "boom", 3.0, 1) == (
        "Session exited unexpectedly (code 1): boom after 3s. Turns: 1. Send a message to resume.")
    assert crashed_note(2, "", 0.0, 0) == (
        "Session exited unexpectedly (code 2) after 0s. Turns: 0. Send a message to resume.")
    assert zero_turn_breaker_trips([crashed_note(1, "x", 1, 0)] * 3, 3)


def test_a_resumed_incarnation_counts_the_user_messages_of_its_history():
    history = [("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d")]
    assert active_turns(history, new_prompt=False) == 2
    assert active_turns(history, new_prompt=True) == 3
    assert active_turns([], new_prompt=False) == 0


# --- timeouts and failure reports ---------------------------------------------------------------


@pytest.mark.parametrize(("timeout_s", "after"), [(1800, 1800), (7200, 1800), (60, 60)])
def test_an_incarnation_may_be_overdue_after_the_shorter_of_its_timeout_and_the_default(timeout_s, after):
    assert overdue_after(CFG, timeout_s) == after


@pytest.mark.parametrize(("earliest_due", "last_check", "at"), [
    (1800, -math.inf, 1860),  # a check interval after the first incarnation could be overdue
    (1800, 1790, 1860),
    (1800, 5000, 5060),  # an old incarnation runs: every check interval
])
def test_the_safety_net_waits_a_check_interval_past_the_first_possible_deadline(earliest_due, last_check, at):
    assert fallback_check_at(CFG, earliest_due, last_check) == at


T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _t(seconds: float | None) -> datetime | None:
    return None if seconds is None else T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(("stored", "last_write", "inherited"), [
    (140, 20, 140),  # stored after the last turn: kept to the microsecond
    (310, 0, 310),  # an extension stored: kept
    (120, 31, 151),  # the owner died before storing the last turn's deadline: that turn's
    (None, 31, None),  # nothing stored: a full timeout from the takeover
    (140, None, 140),
])
def test_a_session_taken_over_keeps_its_deadline_but_never_ends_before_its_last_turn_allows(
        stored, last_write, inherited):
    assert inherited_inactivity_deadline(_t(stored), _t(last_write), 120.0) == _t(inherited)


class _DriverError(Exception):
    pass


_DriverError.__module__ = "psycopg2.errors"


@pytest.mark.parametrize(("exc", "kind"), [
    (StoreUnavailableError("down"), "store_error"),
    (_DriverError("connection lost"), "store_error"),  # a driver's own exception
    (CorvidError("bug"), "internal_error"),
    (KeyError("x"), "internal_error"),
])
def test_failure_kind_tells_store_failures_from_bugs(exc, kind):
    assert failure_kind(exc) == kind
