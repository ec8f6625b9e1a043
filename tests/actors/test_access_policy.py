"""corvid_actors/policy/access.py: the plain functions of who may talk to an agent, how often and
for how much (the chat conversations are in tests/sim/test_chat_access.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from corvid_actors.config import Config
from corvid_actors.errors import AgentSettingError
from corvid_actors.policy.access import (
    RateWindow,
    Spend,
    agent_access,
    agent_access_fields,
    duration_text,
    session_budget,
    usd,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CFG = Config().access


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_an_agents_unset_settings_take_the_configs():
    row = SimpleNamespace(conversation_mode=None, conversation_allowlist='["bob", "alice"]',
                          conversation_rate_limit_window_s=None, conversation_rate_limit_max=3,
                          max_budget_usd=None, max_total_budget_usd=2.5)
    access = agent_access(row, CFG)
    assert (access.mode, access.allowlist, access.rate_limit_window_s, access.rate_limit_max,
            access.max_budget_usd, access.max_total_budget_usd) == (
        "public", frozenset({"alice", "bob"}), 3600.0, 3, 0.0, 2.5)
    assert agent_access(None, CFG).rate_limit_max == 10


@pytest.mark.parametrize(("mode", "participant", "owner", "admitted"), [
    ("private", "alice", False, False), ("private", "olivia", True, True),
    ("allowlist", "alice", False, True), ("allowlist", "carol", False, False), ("allowlist", "olivia", True, True),
    ("public", "carol", False, True),
])
def test_who_is_admitted(mode, participant, owner, admitted):
    access = agent_access(SimpleNamespace(conversation_mode=mode, conversation_allowlist='["alice"]'), CFG)
    assert access.admits(participant, owner=owner) is admitted


@pytest.mark.parametrize(("fields", "names"), [
    ({"conversation_mode": "friends"}, "conversation_mode"),
    ({"conversation_allowlist": "alice"}, "conversation_allowlist"),
    ({"conversation_allowlist": ["alice", ""]}, "conversation_allowlist"),
    ({"conversation_rate_limit_max": -1}, "conversation_rate_limit_max"),
    ({"conversation_rate_limit_max": 2.5}, "conversation_rate_limit_max"),
    ({"conversation_rate_limit_window_s": 0}, "conversation_rate_limit_window_s"),
    ({"max_budget_usd": float("nan")}, "max_budget_usd"),
    ({"max_total_budget_usd": "5"}, "max_total_budget_usd"),
    ({"max_budget_usd": True}, "max_budget_usd"),
])
def test_out_of_range_settings_are_refused_naming_the_setting(fields, names):
    with pytest.raises(AgentSettingError, match=names):
        agent_access_fields(fields)


def test_the_allowlist_is_stored_as_sorted_json_and_none_means_the_config():
    assert agent_access_fields({"conversation_allowlist": ["bob", "alice", "bob"], "max_budget_usd": None}) == {
        "conversation_allowlist": '["alice", "bob"]', "max_budget_usd": None}


def test_the_window_slides_and_names_when_the_next_message_fits():
    window = RateWindow()
    for t in (0, 10, 20):
        assert window.admit("alice", at(t), window_s=60, limit=3) is None
    assert window.admit("alice", at(30), window_s=60, limit=3) == at(60)
    assert window.admit("alice", at(59), window_s=60, limit=3) == at(60)  # refused ones are not counted
    assert window.admit("alice", at(60), window_s=60, limit=3) is None
    assert window.admit("alice", at(61), window_s=60, limit=3) == at(70)
    # a lower limit set meanwhile: enough of the oldest must leave first
    assert window.admit("alice", at(61), window_s=60, limit=1) == at(120)
    assert window.admit("bob", at(61), window_s=60, limit=3) is None  # a count per key
    assert window.admit("carol", at(61), window_s=60, limit=0) is None  # 0: no limit


def test_the_window_forgets_participants_whose_messages_all_left_it():
    window = RateWindow()
    for n in range(100):
        window.admit(f"p{n}", at(n), window_s=60, limit=10)
    assert len(window) == 60  # p40..p99 are within the last minute at t = 99
    window.admit("late", at(1000), window_s=60, limit=10)
    assert len(window) == 1


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0 s"), (0.2, "1 s"), (59, "59 s"), (60, "1 min"), (1770, "29 min 30 s"), (3600, "1 h"), (3725, "1 h 2 min 5 s"),
])
def test_durations_read_as_people_write_them(seconds, text):
    assert duration_text(seconds) == text


def test_spend_says_which_cap_is_reached():
    assert usd(0.05) == "$0.05" and usd(0.0123) == "$0.0123" and usd(12) == "$12.00"
    assert Spend("s", 0.04, 0.05, "a", 1.0, 0.0).exceeded is None  # 0: no cap
    assert Spend("s", 0.05, 0.05, "a", 0.05, 0.0).exceeded == "session"  # reached: no new turn
    assert Spend("s", 0.01, 0.05, "a", 2.0, 2.0).exceeded == "agent"
    assert Spend("s", 0.01, 0.0, "a", 2.0, 2.0).as_dict() == {
        "session_usd": 0.01, "max_budget_usd": None, "agent_usd": 2.0, "max_total_budget_usd": 2.0,
        "exceeded": "agent"}


def test_a_session_budget_is_none_without_a_cap_and_counts_from_the_stored_spend():
    uncapped = SimpleNamespace(id="a", max_budget_usd=None, max_total_budget_usd=None)
    assert session_budget(uncapped, CFG, stored_usd=3.0, tally_usd=0.0) is None  # no check, no read
    agent = SimpleNamespace(id="a", max_budget_usd=0.05, max_total_budget_usd=None)
    # stored $0.04, of which this daemon's earlier incarnations (the tally's start) $0.01
    budget = session_budget(agent, CFG, stored_usd=0.04, tally_usd=0.01)
    assert budget is not None and budget.spent_before_usd == pytest.approx(0.03)
    assert budget.spend("s", 0.01, None).exceeded is None  # $0.04
    spend = budget.spend("s", 0.02, None)  # $0.05: reached
    assert (spend.exceeded, spend.session_usd) == ("session", pytest.approx(0.05))
    # the agent's total caps only a session with an agent
    total = SimpleNamespace(id="a", max_budget_usd=None, max_total_budget_usd=1.0)
    assert session_budget(total, CFG, stored_usd=0.0, tally_usd=0.0).spend("s", 0.0, 1.0).exceeded == "agent"
    raised = budget.with_access(agent_access(SimpleNamespace(max_budget_usd=1.0, max_total_budget_usd=None), CFG))
    assert raised.spend("s", 0.02, None).exceeded is None
