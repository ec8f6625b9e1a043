"""A daemon's start-up resume in batches (issue 37, item 5): the rows and last speakers of
the sessions marked for resume are read in one statement per batch, not one per session
(counted on the SQLite connection, not timed); every session comes back as before, and
one that cannot start does not keep the others down."""

from __future__ import annotations

from collections import Counter

import pytest

from corvid_actors.runtime.lifecycle import RESUME_BATCH
from corvid_actors.testing import EventRecorder, sim_runtime
from corvid_actors.testing.arrangement import arrange as arrange_for


@pytest.fixture
def rt(sim_clock, scripted, tmp_path):
    runtime = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws", dispatcher="inline")
    yield runtime
    runtime.shutdown()


def marked_sessions(rt, n: int, *, mid_turn: int = 0) -> list[str]:
    """``n`` sessions with a short conversation, marked for resume; the first ``mid_turn``
    were left with the user's message unanswered."""
    store = rt.internals.store
    ids = []
    for i in range(n):
        sid = rt.create_session(source="web", name=f"s{i}").id
        store.append_message(sid, "user", f"question {i}")
        if i >= mid_turn:
            store.append_message(sid, "assistant", f"answer {i}")
        ids.append(sid)
    arrange_for(rt).marked_for_resume(*ids)
    return ids


def traced_statements(rt, action) -> Counter[str]:
    statements: list[str] = []
    connection = rt.internals.store.db.connection()  # the inline dispatcher's thread is this one
    connection.set_trace_callback(statements.append)
    try:
        action()
    finally:
        connection.set_trace_callback(None)
    return Counter(" ".join(s.split()[:6]) for s in statements)


@pytest.mark.parametrize("n", [5, 40])
def test_restart_reads_the_rows_and_last_speakers_once_per_batch(rt, n):
    ids = marked_sessions(rt, n)
    kinds = traced_statements(rt, rt.resume_pending_sessions)
    rows = sum(c for k, c in kinds.items() if k.startswith('SELECT * FROM "sessions" WHERE'))
    last_roles = sum(c for k, c in kinds.items() if k.startswith('SELECT "t1"."session_id", "t1"."role"'))
    per_session_roles = sum(c for k, c in kinds.items() if k.startswith('SELECT "t1"."role" FROM'))
    assert (rows, last_roles, per_session_roles) == (1, 1, 0), kinds
    assert sorted(rt.get_active_session_ids()) == sorted(ids)


def test_batches_are_of_resume_batch_sessions(rt, monkeypatch):
    import corvid_actors.runtime.lifecycle as lifecycle
    monkeypatch.setattr(lifecycle, "RESUME_BATCH", 4)
    assert RESUME_BATCH == 500  # the default
    ids = marked_sessions(rt, 10)
    kinds = traced_statements(rt, rt.resume_pending_sessions)
    rows = sum(c for k, c in kinds.items() if k.startswith('SELECT * FROM "sessions" WHERE'))
    assert rows == 3  # 4 + 4 + 2
    assert sorted(rt.get_active_session_ids()) == sorted(ids)


def test_bulk_resume_answers_what_was_left_unanswered_and_no_more(rt, scripted):
    ids = marked_sessions(rt, 6, mid_turn=2)
    scripted.reply("late answer")
    scripted.reply("late answer")
    rt.resume_pending_sessions()
    rt.settle()
    assert {r.session_id for r in scripted.requests} == set(ids[:2])  # the waiting ones spend no turn
    for sid in ids[:2]:
        assert rt.internals.store.messages(sid)[-1].content == "late answer"


def test_a_session_that_cannot_start_does_not_keep_the_others_down(rt):
    ids = marked_sessions(rt, 4)
    recorder = EventRecorder.attach(rt)
    arrange = arrange_for(rt)
    project = rt.create_project("p", ".")
    rt.internals.store.update_session(ids[1], project_id=project.id)
    arrange.project_deleted(ids[1])
    rt.resume_pending_sessions()
    rt.settle()
    assert sorted(rt.get_active_session_ids()) == sorted([ids[0], ids[2], ids[3]])
    assert recorder.last("error", ids[1]).error_type == "not_found"
