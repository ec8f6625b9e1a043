"""``corvid_actors.testing.arrange``: the state a test starts from, written without running
anything — personas, skill bundles, history not delivered, a stale ``running`` row, a
session whose project was deleted."""

from __future__ import annotations

import pytest

from corvid_actors.errors import NotFoundError
from corvid_actors.testing import Turn, arrange, sim_runtime


def test_personas_and_skill_bundles_reach_the_system_prompt_in_order(runtime, scripted, arrange, tmp_path):
    project = runtime.create_project("demo", tmp_path)
    agent = runtime.create_agent("helper", provider="scripted", system_prompt="You are Corvid.")
    arrange.persona(agent, "Ada", archetype="technical", traits=["precise"], background="Ex-physicist")
    arrange.skill_bundle("tester", prompt_additions="Write tests first.", agents=[agent], sort_order=1)
    arrange.skill_bundle("reviewer", prompt_additions="Review diffs carefully.", agents=[agent.id])
    arrange.skill_bundle("rules", prompt_additions="Use the project's style.", projects=[project])
    session = runtime.create_session(agent_id=agent.id, project_id=project.id)
    runtime.start_process(session.id, "hi")
    runtime.settle()
    system = scripted.requests[-1].system
    order = ["You are Corvid.", "## Persona", "Ex-physicist", "Review diffs carefully.", "Write tests first.",
             "Use the project's style."]
    assert [system.index(part) for part in order] == sorted(system.index(part) for part in order)


def test_history_is_stored_without_being_delivered_and_a_resume_reads_it(runtime, scripted, recorder, arrange,
                                                                         ):
    session = runtime.create_session(source="web")
    ids = arrange.history(session.id, ("user", "what is the secret word?"), ("assistant", "corvid"))
    runtime.settle()
    assert len(ids) == 2
    assert recorder.of(session.id) == [] and scripted.requests == []  # delivered to nobody
    assert runtime.session(session.id).total_turns == 0
    runtime.resume_process(session.id, "and again?")
    runtime.settle()
    prompt = scripted.requests[-1].messages[-1].content
    assert "what is the secret word?" in prompt and "corvid" in prompt
    with pytest.raises(NotFoundError):
        arrange.history("no-such-session", ("user", "hi"))


def test_a_stale_running_row_is_reset_by_the_next_runtime_and_resumed_mid_turn(sim_clock, scripted, tmp_path):
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    first = sim_runtime(sim_clock, scripted, store_url=url)
    session = first.create_session(source="web")
    arrange(first).history(session.id, ("user", "unanswered question"))
    arrange(first).stale_running(session.id, mid_turn=True)
    row = first.session(session.id)
    assert (row.status, row.pid, row.open_turns) == ("running", 800000, 1)
    assert not first.is_running(session.id)  # nothing runs it
    first.shutdown()
    second = sim_runtime(sim_clock, scripted, store_url=url)
    try:
        assert second.stale_session_ids == [session.id]
        row = second.session(session.id)
        assert (row.status, row.pid, row.restart_pending) == ("idle", None, True)
        scripted.for_session(session.id, Turn.reply("the answer"))
        second.resume_pending_sessions()
        second.settle()
        assert [(m.role, m.content) for m in second.history(session.id)] == [
            ("user", "unanswered question"), ("assistant", "the answer")]  # mid-turn: the model is called
    finally:
        second.shutdown()
    with pytest.raises(NotFoundError):
        arrange(second).stale_running("no-such-session")


def test_a_session_whose_project_was_deleted_does_not_start(runtime, recorder, arrange, tmp_path):
    project = runtime.create_project("gone", tmp_path)
    session = runtime.create_session(project_id=project.id)
    assert arrange.project_deleted(session.id) == project.id
    assert runtime.project(project.id) is None
    assert runtime.session(session.id).project_id == project.id  # still pointing at it
    assert runtime.start_process(session.id, "hi") is None
    runtime.settle()
    assert [(r.type, r.event.error_type) for r in recorder.of(session.id)] == [("error", "not_found")]
    other = runtime.create_project("kept", tmp_path / "kept")  # the foreign key is back on
    kept = runtime.create_session(project_id=other.id)
    with pytest.raises(ValueError, match="has no project"):
        arrange.project_deleted(runtime.create_session().id)
    assert runtime.session(kept.id).project_id == other.id


def test_deleted_sessions_and_marks_for_resume(runtime, arrange):
    gone, marked = runtime.create_session(), runtime.create_session()
    assert arrange.session_deleted(gone.id) is True
    assert arrange.session_deleted(gone.id) is False
    assert runtime.session(gone.id) is None
    assert arrange.marked_for_resume(marked.id) == 1
    assert runtime.take_restart_pending() == [marked.id]
