"""Issue 12 items 1, 2, 3, 5, 6: session_error events, exit notes, refused sends, shutdown
and pruning, the zero-turn circuit breaker (reference §2 and §3)."""

from __future__ import annotations

from corvid_actors.testing import refuse_input, sim_runtime

MIN = 60.0


def _session_errors(recorder, sid):
    return [(e.event.error_type, e.event.severity, e.event.recoverable) for e in recorder.of(sid, "session_error")]


def _notes(runtime, sid):
    return [c for _, c in runtime.internals.store.recent_messages(sid, 50, roles=("system",))]


# --- 1. session_error ------------------------------------------------------------------------


def test_a_crash_is_a_warning_while_it_will_be_restarted_and_an_error_when_not(runtime, scripted, recorder,
                                                                            chat_session, web_session):
    scripted.crash("boom", match="chat")
    scripted.crash("boom", match="web")
    runtime.start_process(chat_session.id, "chat hello")
    runtime.start_process(web_session.id, "web hello")
    runtime.settle()
    assert _session_errors(recorder, chat_session.id) == [("crash", "warning", True)]
    assert _session_errors(recorder, web_session.id) == [("crash", "error", True)]
    types = recorder.types(web_session.id)
    # beside the error, before the exit event (events before cleanup)
    assert types.index("error") < types.index("session_error") < types.index("session_exited")
    assert "boom" in recorder.last("session_error", web_session.id).message


def test_the_last_crash_before_giving_up_is_an_error(runtime, scripted, recorder, chat_session):
    for _ in range(4):
        scripted.crash("down")
    runtime.start_process(chat_session.id, "hi")
    runtime.clock.advance(3600)
    severities = [s for _, s, _ in _session_errors(recorder, chat_session.id)]
    assert severities == ["warning", "warning", "warning", "error"]


def test_the_inactivity_timeout_publishes_a_timeout_session_error_before_the_stop(runtime, scripted, recorder,
                                                                                  web_session):
    scripted.reply("stuck", latency_s=10_000)
    runtime.start_process(web_session.id, "hi")
    runtime.clock.advance(30 * MIN)
    assert _session_errors(recorder, web_session.id) == [("timeout", "warning", True)]
    assert recorder.types(web_session.id)[-2:] == ["session_error", "session_stopped"]
    assert recorder.last("session_error", web_session.id).message == (
        "Session stopped after 1800s without activity. Send a message to resume.")


# --- 2. exit notes ---------------------------------------------------------------------------------


def test_exit_notes_count_the_opening_prompt_as_turn_one(sim_clock, scripted, tmp_path):
    # the clean exit after the idle wait belongs to the direct loop
    runtime = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "workspace",
                          loop_for_provider={"scripted": "direct"})
    scripted.default_reply = "Done."
    try:
        sid = runtime.create_session(source="web").id
        runtime.start_process(sid, "hi")
        runtime.settle()
        runtime.send_message(sid, "more")
        runtime.settle()
        runtime.clock.advance(300)
        assert _notes(runtime, sid) == ["Session completed after 300s. Turns: 2."]
        assert runtime.internals.store.get_session(sid).total_turns == 2
    finally:
        runtime.shutdown()


def test_a_crash_note_keeps_the_crash_message(runtime, scripted, recorder, web_session):
    scripted.crash("boom")
    runtime.start_process(web_session.id, "hi")
    runtime.clock.advance(0)
    message = recorder.last("error", web_session.id).message
    assert message.endswith("boom")
    assert _notes(runtime, web_session.id) == [
        f"Session exited unexpectedly (code 1): {message} after 0s. Turns: 1. Send a message to resume."]
    assert recorder.last("session_exited", web_session.id).num_turns == 1


# --- 3. a refused send is visible ------------------------------------------------------------------


def test_a_refused_send_returns_false_persists_nothing_and_evicts(runtime, scripted, recorder, web_session):
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    assert refuse_input(runtime, web_session.id) is True
    before = runtime.internals.store.count_messages(web_session.id)
    assert runtime.send_message(web_session.id, "are you there?") is False
    runtime.settle()
    assert runtime.internals.store.count_messages(web_session.id) == before  # nothing persisted
    assert not runtime.is_running(web_session.id)  # evicted
    row = runtime.internals.store.get_session(web_session.id)
    assert (row.status, row.pid) == ("idle", None)
    # the caller's fallback: a resume cold-starts with the history
    assert runtime.resume_process(web_session.id, "are you there?") is not None
    runtime.settle()
    assert "<conversation_history>" in scripted.requests[-1].messages[-1].content
    assert [r.event.generation for r in recorder.of(web_session.id, "session_started")] == [1, 2]
    assert refuse_input(runtime, "no-such-session") is False


def test_resume_with_a_prompt_on_a_refusing_session_says_warm_path_failed_and_cold_starts(runtime, scripted,
                                                                                       recorder, web_session):
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    refuse_input(runtime, web_session.id)
    pid = runtime.resume_process(web_session.id, "next question")
    runtime.settle()
    assert pid == 800001  # a new incarnation
    failed = [r.event for r in recorder.of(web_session.id, "system") if r.event.subtype == "warm_path_failed"]
    assert [e.message for e in failed] == ["Warm path failed, falling back to cold start"]
    prompt = scripted.requests[-1].messages[-1].content
    assert "<conversation_history>" in prompt and prompt.rstrip().endswith("next question")
    users = [c for r, c in runtime.internals.store.recent_messages(web_session.id, 10) if r == "user"]
    assert users == ["hi", "next question"]  # stored once


# --- 5. shutdown and the orphan pruner --------------------------------------------------------------


def test_shutdown_removes_the_subscribers_of_every_session_also_never_started_ones(runtime, web_session,
                                                                                 chat_session):
    runtime.start_process(chat_session.id, "hi")
    runtime.subscribe(chat_session.id, lambda sid, ev: None)
    runtime.subscribe(web_session.id, lambda sid, ev: None)  # never started here
    seen = []
    runtime.subscribe_all(lambda sid, ev: seen.append(ev.type))
    runtime.settle()
    runtime.stop_sessions()
    stats = runtime.get_memory_stats()
    assert (stats["subscribers"], stats["global_subscribers"]) == (0, 1)  # global subscribers stay
    assert "session_stopped" in seen


def test_the_orphan_pruner_resets_ghost_rows_as_at_start_up(runtime, scripted, arrange, web_session, chat_session):
    scripted.reply("a long answer", latency_s=600)
    runtime.start_process(chat_session.id, "keep me busy")  # live: left alone
    arrange.stale_running(web_session.id, pid=800777)  # a ghost
    runtime.settle()
    runtime.clock.advance(5 * MIN - 1)
    assert runtime.internals.store.get_session(web_session.id).status == "running"
    runtime.clock.advance(1)
    ghost = runtime.internals.store.get_session(web_session.id)
    assert (ghost.status, ghost.pid, ghost.restart_pending) == ("idle", None, True)
    live = runtime.internals.store.get_session(chat_session.id)
    assert (live.status, live.restart_pending) == ("running", False)


# --- 6. the zero-turn circuit breaker ----------------------------------------------------------------


def _history_with_exit_notes(runtime, sid, notes):
    store = runtime.internals.store
    store.append_message(sid, "user", "please fix the build in src/app.py")
    store.append_message(sid, "assistant", "I decided to pin the compiler version.")
    for note in notes:
        store.append_message(sid, "system", note)


ZERO = "Session exited unexpectedly (code 1): prompt is too long after 2s. Turns: 0. Send a message to resume."


def test_three_zero_turn_exits_make_the_resume_start_fresh_from_a_summary(runtime, scripted, recorder,
                                                                         web_session):
    _history_with_exit_notes(runtime, web_session.id, [ZERO, "Session completed after 5s. Turns: 0.", ZERO])
    runtime.resume_process(web_session.id, "try again")
    runtime.settle()
    assert _session_errors(recorder, web_session.id) == [("context_exhausted", "info", True)]
    assert recorder.last("session_error", web_session.id).message == (
        "Session context was bloated — restarting with fresh context.")
    row = runtime.internals.store.get_session(web_session.id)
    assert "please fix the build" in row.conversation_summary
    # the messages are gone; the new prompt and its reply are all there is
    assert runtime.internals.store.recent_messages(web_session.id, 50, roles=("user", "assistant", "system")) == [
        ("user", "try again"), ("assistant", "ok")]
    prompt = scripted.requests[-1].messages[-1].content
    assert prompt.startswith("<previous_context_summary>") and "please fix the build" in prompt
    assert "<conversation_history>" not in prompt and prompt.rstrip().endswith("try again")
    types = recorder.types(web_session.id)
    assert types.index("session_error") < types.index("session_started")


def test_the_breaker_needs_the_last_three_exit_notes_all_at_zero_turns(runtime, scripted, recorder, web_session):
    _history_with_exit_notes(runtime, web_session.id,
                             [ZERO, ZERO, "Session completed after 9s. Turns: 2.", ZERO, ZERO])
    runtime.resume_process(web_session.id, "try again")
    runtime.settle()
    assert recorder.of(web_session.id, "session_error") == []
    assert "<conversation_history>" in scripted.requests[-1].messages[-1].content
    assert runtime.internals.store.count_messages(web_session.id) == 2 + 5 + 2


def test_a_ready_session_after_the_breaker_gets_the_summary_with_its_first_message(runtime, scripted, recorder,
                                                                                 web_session):
    _history_with_exit_notes(runtime, web_session.id, [ZERO] * 3)
    runtime.resume_process(web_session.id)  # a restart: no new message
    runtime.settle()
    assert _session_errors(recorder, web_session.id) == [("context_exhausted", "info", True)]
    assert scripted.requests == []  # nothing was mid-turn: it waits for its user
    assert runtime.send_message(web_session.id, "hello again") is True
    runtime.settle()
    prompt = scripted.requests[-1].messages[-1].content
    assert prompt.startswith("<previous_context_summary>") and prompt.rstrip().endswith("hello again")
