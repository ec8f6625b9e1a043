"""Store.ensure_agent: get-or-create by name, so a program can run it at every start;
an existing agent is never changed behind the caller's back."""

from __future__ import annotations

import pytest

from corvid_actors.db.store import Store
from corvid_actors.errors import AgentSettingError, ConflictError, NotFoundError


@pytest.fixture
def store():
    s = Store("sqlite:///:memory:")
    yield s
    s.close()


def test_creates_once_and_then_returns_the_same_agent(store):
    first = store.ensure_agent("helper", system_prompt="Be brief.", provider="ollama", model="qwen3:8b",
                               permission_mode="auto-edit", tool_permissions=["read_file"])
    again = store.ensure_agent("Helper", system_prompt="Be brief.", provider="ollama", model="qwen3:8b",
                               permission_mode="auto-edit", tool_permissions=["read_file"])
    assert again.id == first.id and [a.name for a in store.list_agents()] == ["helper"]
    assert store.ensure_agent("helper").id == first.id  # no settings given: nothing to compare


def test_different_settings_raise_and_change_nothing(store):
    agent = store.ensure_agent("helper", model="qwen3:8b", tool_permissions=["read_file"])
    with pytest.raises(ConflictError) as caught:
        store.ensure_agent("helper", model="llama3.1:8b", tool_permissions=["read_file", "write_file"])
    message = str(caught.value)
    assert "model is 'qwen3:8b', not 'llama3.1:8b'" in message and "tool_permissions" in message
    assert "update_agent" in message
    assert store.find_agent("helper").model == "qwen3:8b"
    updated = store.update_agent(agent.id, model="llama3.1:8b")
    assert updated.model == "llama3.1:8b" and store.ensure_agent("helper", model="llama3.1:8b").id == agent.id


def test_update_agent_of_a_missing_agent(store):
    with pytest.raises(NotFoundError):
        store.update_agent("no-such-id", model="x")


def test_two_stores_on_one_file_agree(tmp_path):
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    a, b = Store(url), Store(url)
    try:
        assert a.ensure_agent("shared", model="m").id == b.ensure_agent("shared", model="m").id
    finally:
        a.close()
        b.close()


def test_access_settings_are_checked_and_an_allowlist_compares_as_a_set(store):
    agent = store.ensure_agent("bot", conversation_mode="allowlist", conversation_allowlist=["bob", "alice"],
                               max_budget_usd=0.5)
    again = store.ensure_agent("bot", conversation_mode="allowlist", conversation_allowlist=["alice", "bob"],
                               max_budget_usd=0.5)
    assert again.id == agent.id
    with pytest.raises(ConflictError, match="conversation_allowlist"):
        store.ensure_agent("bot", conversation_allowlist=["alice"])
    with pytest.raises(AgentSettingError, match="conversation_mode"):
        store.create_agent("other", conversation_mode="everyone")
    with pytest.raises(AgentSettingError, match="max_total_budget_usd"):
        store.update_agent(agent.id, max_total_budget_usd=-1)
    assert store.find_agent("other") is None and store.get_agent(agent.id).max_total_budget_usd is None
