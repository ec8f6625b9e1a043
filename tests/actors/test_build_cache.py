"""What an incarnation builds from its agent is kept across incarnations (issue 37 item 1):
the agent's rows (``store.agent_rows``) and its built parts (``SessionBuilder.parts``:
routing, model, loop kind, system prompt), keyed by the agent's revision, the project, the
session's role and source and its lease epoch. A crash-restart and a reactivation reuse
them; ``update_agent`` and a new epoch do not."""

from __future__ import annotations

import pytest

from corvid_actors.testing import sim_runtime

MIN = 60.0


@pytest.fixture
def made(sim_clock, scripted, tmp_path):
    runtimes = []

    def make(**config):
        rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / f"ws{len(runtimes)}",
                         loop_for_provider={"scripted": "sdk"}, config=config)
        runtimes.append(rt)
        return rt

    yield make
    for rt in runtimes:
        rt.shutdown()


def agent_session(rt, tmp_path, prompt="You are the first."):
    """An agent's chat session (a chat session's crash is restarted)."""
    project = rt.create_project("p", tmp_path / "project")
    agent = rt.create_agent("cached", system_prompt=prompt, provider="scripted")
    return agent, rt.create_session(agent_id=agent.id, project_id=project.id, source="chat", participant="alice")


def counts(rt):
    """(builds made, builds reused, agent row reads, agent rows reused)."""
    parts, rows = rt.internals.builder.parts, rt.internals.store.agent_rows
    return parts.misses, parts.hits, rows.misses, rows.hits


def test_a_crash_restart_reuses_the_first_incarnations_build(made, scripted, tmp_path):
    rt = made()
    _, session = agent_session(rt, tmp_path)
    scripted.crash("model server fell over")
    scripted.reply("back")
    rt.start_process(session.id, "hi")
    rt.clock.advance(10)  # crashed at 0, restarted at +5
    rt.settle()
    assert scripted.starts_of(session.id) == 2
    assert counts(rt) == (1, 1, 1, 1)  # built once, reused once; the agent's rows read once
    assert scripted.requests_for(session.id)[-1].system.startswith("You are the first.")


def test_a_reactivation_reuses_the_build_of_the_passivated_incarnation(made, scripted, tmp_path):
    rt = made(session={"passivate_after_s": MIN})
    _, session = agent_session(rt, tmp_path)
    scripted.reply("one")
    rt.start_process(session.id, "hi")
    rt.settle()
    rt.clock.advance(MIN)
    rt.settle()
    assert rt.session_info(session.id)[session.id]["passivated"]
    scripted.reply("two")
    rt.send_message(session.id, "again")
    rt.settle()
    assert not rt.session_info(session.id)[session.id]["passivated"]
    assert counts(rt) == (1, 1, 1, 1)


def test_update_agent_in_process_is_built_afresh(made, scripted, tmp_path):
    rt = made()
    agent, session = agent_session(rt, tmp_path)
    scripted.reply("one")
    rt.start_process(session.id, "hi")
    rt.settle()
    rt.stop_process(session.id)
    rt.settle()
    rt.internals.store.update_agent(agent.id, system_prompt="You are the second.")
    assert len(rt.internals.builder.parts) == 0 and len(rt.internals.store.agent_rows) == 0  # dropped at once
    scripted.reply("two")
    rt.start_process(session.id, "again")
    rt.settle()
    assert scripted.requests_for(session.id)[-1].system.startswith("You are the second.")
    assert counts(rt)[0] == 2


def test_the_cache_is_bounded_by_build_cache_entries(made, scripted, tmp_path):
    rt = made(session={"build_cache_entries": 1})
    project = rt.create_project("p", tmp_path / "project")
    for name in ("a", "b", "a"):
        agent = rt.internals.store.ensure_agent(name, provider="scripted")
        session = rt.create_session(agent_id=agent.id, project_id=project.id, source="chat", participant="alice")
        scripted.reply("ok")
        rt.start_process(session.id, "hi")
        rt.settle()
    assert len(rt.internals.builder.parts) == 1
    assert counts(rt)[:2] == (3, 0)  # "a" was pushed out by "b": built again


def test_no_cache_builds_every_incarnation(made, scripted, tmp_path):
    rt = made(session={"build_cache_entries": 0})
    _, session = agent_session(rt, tmp_path)
    scripted.crash("once")
    scripted.reply("back")
    rt.start_process(session.id, "hi")
    rt.clock.advance(10)
    rt.settle()
    assert scripted.starts_of(session.id) == 2
    assert counts(rt) == (2, 0, 2, 0)


def test_a_new_lease_epoch_builds_afresh(made, scripted, tmp_path):
    rt = made()
    _, session = agent_session(rt, tmp_path)
    store, builder = rt.internals.store, rt.internals.builder
    first = builder.agent_parts(store.session_context(session.id))
    assert builder.agent_parts(store.session_context(session.id)) is first
    store.fence(session.id, 7)  # another claim of the session: session state may differ
    try:
        again = builder.agent_parts(store.session_context(session.id))
        assert again is not first and again == first
        assert builder.agent_parts(store.session_context(session.id)) is again
    finally:
        store.unfence(session.id)
