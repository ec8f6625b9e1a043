"""An agent's ``revision`` (migration 22, issue 37 item 1): every write of the agent bumps
it, a session start reads it with the session's row, and what a process keeps of the agent
for its sessions' incarnations is keyed by it, so an agent changed through another store on
the same database (another daemon) is never served stale."""

from __future__ import annotations

import pytest

from corvid_actors.db import migrations
from corvid_actors.db.store import Store
from corvid_actors.testing import sim_runtime


def test_every_write_of_an_agent_bumps_its_revision_and_a_start_reads_it() -> None:
    store = Store()
    try:
        agent = store.create_agent("a", system_prompt="first")
        session = store.create_session(agent_id=agent.id, name="s")
        assert agent.revision == 0 and store.session_context(session.id).agent_revision == 0
        assert store.update_agent(agent.id, system_prompt="second").revision == 1
        store.assign_persona(agent.id, store.create_persona("p").id)
        store.assign_agent_skill(agent.id, store.create_skill_bundle("b", tools=["read_file"]).id)
        ctx = store.session_context(session.id)
        assert ctx.agent_revision == store.get_agent(agent.id).revision == 3
        assert ctx.agent.system_prompt == "second" and len(ctx.personas) == 1
        assert ctx.agent_bundle_tools == (("read_file",),)
    finally:
        store.close()


def test_a_start_reads_the_agents_rows_once_per_revision() -> None:
    store = Store()
    try:
        agent = store.create_agent("a", system_prompt="first")
        session = store.create_session(agent_id=agent.id, name="s")
        first = store.session_context(session.id)
        again = store.session_context(session.id, store.get_session(session.id))  # a row the caller read
        assert again.agent is first.agent and (store.agent_rows.misses, store.agent_rows.hits) == (1, 1)
        seen: list[str] = []
        store.on_agent_change(seen.append)
        store.update_agent(agent.id, system_prompt="second")
        assert seen == [agent.id] and len(store.agent_rows) == 0
        assert store.session_context(session.id).agent.system_prompt == "second"
    finally:
        store.close()


def changed_by_another_store(url: str, sim_clock, scripted, tmp_path) -> None:
    """A runtime builds a session; another Store on the database (another daemon: no
    listener of this process hears its write) changes the agent; the runtime's next
    incarnation has the new prompt."""
    rt = sim_runtime(sim_clock, scripted, store_url=url, workspace_dir=tmp_path / "ws",
                     loop_for_provider={"scripted": "sdk"})
    other = None
    try:
        agent = rt.create_agent("shared", system_prompt="You are the first.", provider="scripted")
        session = rt.create_session(agent_id=agent.id, source="web")
        scripted.reply("one")
        rt.start_process(session.id, "hi")
        rt.settle()
        rt.stop_process(session.id)
        rt.settle()
        other = Store(url)
        other.update_agent(agent.id, system_prompt="You are the second.")
        assert len(rt.internals.builder.parts) == 1  # this process heard nothing
        scripted.reply("two")
        rt.start_process(session.id, "again")
        rt.settle()
        assert scripted.requests_for(session.id)[-1].system.startswith("You are the second.")
        assert rt.internals.builder.parts.misses == 2
    finally:
        if other is not None:
            other.close()
        rt.shutdown()


def test_an_agent_changed_through_another_store_on_the_sqlite_file_is_built_afresh(sim_clock, scripted, tmp_path):
    changed_by_another_store(f"sqlite:///{tmp_path / 'corvid.db'}", sim_clock, scripted, tmp_path)


@pytest.mark.postgres
def test_an_agent_changed_through_another_store_on_postgresql_is_built_afresh(pg_url, sim_clock, scripted, tmp_path):
    changed_by_another_store(pg_url, sim_clock, scripted, tmp_path)


def test_a_version_21_database_gets_the_agents_revision(tmp_path) -> None:
    # migration 22: NOT NULL DEFAULT 0, so the previous release's writes run on
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    old = Store(url)
    agent = old.create_agent("from before")
    session = old.create_session(agent_id=agent.id, name="s")
    old.db.execute_sql('ALTER TABLE agents DROP COLUMN "revision"')
    old.m.SchemaVersion.delete().where(old.m.SchemaVersion.version >= 22).execute()
    old.close()

    store = Store(url)
    try:
        assert store.schema_version == len(migrations.MIGRATIONS) >= 22
        assert store.session_context(session.id).agent_revision == 0
        store.db.execute_sql("INSERT INTO agents (id, name, description, system_prompt, append_prompt, model, "
                             "provider, permission_mode, created_at, updated_at) VALUES "
                             "('old', 'as the previous release', '', '', '', '', '', 'default', "
                             "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)")
        assert store.get_agent("old").revision == 0
        assert store.update_agent(agent.id, description="after").revision == 1
        migrations._agent_revision(store.m, store.db)  # again: nothing changes
        assert store.get_agent(agent.id).revision == 1
    finally:
        store.close()
