"""Issue 15.1: a restart spends no model turn on a session that was waiting for its user.

Only a session that was mid-turn when its runtime went away — a turn in flight, or a user
message with no answer after it — calls the model on resume; every other resumed session
comes back ready and waits for its next message. The same for a resume of an ended
session without a new message. Provider calls are counted on the scripted provider.
"""

from __future__ import annotations

from corvid_actors.db.store import Store
from corvid_actors.testing import EventRecorder, sim_runtime


def _restart(sim_clock, scripted, url, rt, *, crash: bool = False):
    """Shut ``rt`` down (graceful), or leave its rows as a killed daemon does (crash: still
    ``running``, not marked), then start a new runtime on the same database and resume
    what start-up marked."""
    running = [row.id for row in rt.internals.store.list_sessions(statuses=["running"])]
    rt.shutdown()
    if crash:
        store = Store(url)
        for sid in running:
            store.update_session(sid, status="running", pid=800999, restart_pending=False)
        store.close()
    nxt = sim_runtime(sim_clock, scripted, store_url=url)
    nxt.recorder = EventRecorder.attach(nxt)
    nxt.resume_pending_sessions()
    nxt.settle()
    return nxt


def _users_and_replies(rt, sid):
    return [(r, c) for r, c in rt.internals.store.recent_messages(sid, 50)]


def test_answered_sessions_come_back_ready_after_graceful_and_hard_restarts(sim_clock, scripted, tmp_path):
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    rt = sim_runtime(sim_clock, scripted, store_url=url)
    sid = rt.create_session(source="web").id
    rt.start_process(sid, "hello")
    rt.settle()
    assert len(scripted.requests) == 1
    rt = _restart(sim_clock, scripted, url, rt)  # SIGTERM-like
    rt = _restart(sim_clock, scripted, url, rt, crash=True)  # SIGKILL-like
    try:
        assert len(scripted.requests) == 1  # two restarts, no model call
        assert rt.is_running(sid)  # back, ready
        assert rt.internals.store.get_session(sid).status == "running"
        assert _users_and_replies(rt, sid) == [("user", "hello"), ("assistant", "ok")]
        assert rt.recorder.types(sid)[:1] == ["session_started"]
        assert "assistant" not in rt.recorder.types(sid)
        # the next message is answered once, with the stored history
        assert rt.send_message(sid, "and now?") is True
        rt.settle()
        assert len(scripted.requests) == 2
        prompt = scripted.requests[-1].messages[-1].content
        assert "<conversation_history>" in prompt and "[User]: hello" in prompt
        assert prompt.rstrip().endswith("and now?")
        assert _users_and_replies(rt, sid) == [("user", "hello"), ("assistant", "ok"),
                                               ("user", "and now?"), ("assistant", "ok")]
    finally:
        rt.shutdown()


def test_only_the_session_mid_turn_calls_the_model_after_a_hard_restart(sim_clock, scripted, tmp_path):
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    rt = sim_runtime(sim_clock, scripted, store_url=url)
    answered = rt.create_session(source="web").id
    busy = rt.create_session(source="web").id
    rt.start_process(answered, "hello")
    rt.settle()
    scripted.reply("never finished", latency_s=600, match="long job")
    rt.start_process(busy, "long job")
    rt.settle()
    assert len(scripted.requests) == 2
    rt = _restart(sim_clock, scripted, url, rt, crash=True)
    try:
        assert len(scripted.requests) == 3  # the busy one only
        request = scripted.requests[-1].messages[-1].content
        assert "interrupted" in request and "[User]: long job" in request
        assert _users_and_replies(rt, busy) == [("user", "long job"), ("assistant", "ok")]
        assert _users_and_replies(rt, answered) == [("user", "hello"), ("assistant", "ok")]
        assert rt.is_running(answered) and rt.is_running(busy)
    finally:
        rt.shutdown()


def test_an_unanswered_user_message_is_answered_once_after_a_graceful_restart(sim_clock, scripted, tmp_path):
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    rt = sim_runtime(sim_clock, scripted, store_url=url)
    sid = rt.create_session(source="web").id
    rt.start_process(sid, "first")
    rt.settle()
    scripted.reply("too slow", latency_s=600, match="second")
    assert rt.send_message(sid, "second") is True
    rt.settle()
    rt = _restart(sim_clock, scripted, url, rt)
    try:
        assert len(scripted.requests) == 3
        assert "[User]: second" in scripted.requests[-1].messages[-1].content
        rt.resume_pending_sessions()  # nothing is marked any more: no further call
        rt.settle()
        assert len(scripted.requests) == 3
    finally:
        rt.shutdown()


def test_a_turn_in_flight_after_an_assistant_note_still_counts_as_mid_turn(sim_clock, scripted, tmp_path):
    # The model said something and called a tool; the turn is not over (the tool's result
    # goes back to the model). The newest message is the assistant's, yet the turn is open.
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    (tmp_path / "workspace").mkdir()
    rt = sim_runtime(sim_clock, scripted, store_url=url, workspace_dir=tmp_path / "workspace",
                     loop_for_provider={"scripted": "direct"})
    sid = rt.create_session(source="web").id
    scripted.tool_call("list_files", {"path": "."}, text="Let me look at the files.")
    scripted.reply("still working", latency_s=600)
    rt.start_process(sid, "what is here?")
    rt.settle()
    assert rt.internals.store.recent_messages(sid, 1) == [("assistant", "Let me look at the files.")]
    assert rt.internals.store.get_session(sid).open_turns == 1
    rt = _restart(sim_clock, scripted, url, rt)
    try:
        calls = [r for r in scripted.requests if "interrupted" in r.messages[-1].content]
        assert len(calls) == 1
    finally:
        rt.shutdown()


def test_resuming_an_ended_session_without_a_message_calls_no_model(runtime, scripted, recorder, web_session):
    runtime.start_process(web_session.id, "hello")
    runtime.settle()
    runtime.stop_process(web_session.id)
    runtime.settle()
    assert runtime.resume_process(web_session.id) is not None  # the operator's `admin resume`
    runtime.settle()
    assert len(scripted.requests) == 1 and runtime.is_running(web_session.id)
    # its next message gets the history; a resume *with* a message calls the model once
    runtime.stop_process(web_session.id)
    runtime.resume_process(web_session.id, "new question")
    runtime.settle()
    assert len(scripted.requests) == 2
    assert "[User]: hello" in scripted.requests[-1].messages[-1].content


def test_a_ready_session_exits_after_the_idle_wait_with_its_turns_counted(sim_clock, scripted, tmp_path):
    # the idle exit belongs to the direct loop
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "workspace",
                     loop_for_provider={"scripted": "direct"})
    recorder = EventRecorder.attach(rt)
    scripted.default_reply = "Done."  # a complete answer: the direct loop does not nudge
    try:
        sid = rt.create_session(source="web").id
        rt.start_process(sid, "hello")
        rt.send_message(sid, "more")
        rt.settle()
        rt.stop_process(sid)
        calls = len(scripted.requests)
        rt.resume_process(sid)
        rt.settle()
        started = rt.clock.elapsed
        idle_s = rt.config.supervisor.session_idle_timeout_s
        rt.clock.advance(idle_s)
        assert not rt.is_running(sid)
        assert recorder.times("session_exited", sid) == [started + idle_s]
        # no model call, and the turns of the resumed context (2 user messages) are counted
        assert len(scripted.requests) == calls
        note = rt.internals.store.recent_messages(sid, 1, roles=("system",))[0][1]
        assert note == "Session completed after 300s. Turns: 2."
    finally:
        rt.shutdown()
