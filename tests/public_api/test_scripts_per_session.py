"""Per-session scripts, written only against ``corvid_actors.testing`` and ``Runtime``.

Each turn kind of :class:`Turn` — reply (text, deltas, tool calls, usage, latency), crash,
outage, API error of a kind, clean exit, start failure — drives a session, and the
session's script outlives its incarnations (restart, outage resume, manual resume).
"""

from __future__ import annotations

from corvid_actors.testing import Turn

NOISE = ("thinking", "system", "content_block_delta", "context_usage", "message_stop")


def replies(recorder, sid):
    return [r.event.content for r in recorder.of(sid, "assistant")]


def test_three_sessions_each_follow_their_own_script(runtime, scripted, recorder):
    a, b, c = (runtime.create_session(source="web", name=n) for n in "abc")
    scripted.for_session(a.id, "a1", "a2")
    scripted.for_session(b.id, Turn.reply("b1", latency_s=3))
    scripted.for_session(c.id, "c1", "c2")
    # started in an order unrelated to the scripts, b answering late
    for s in (c, b, a):
        runtime.start_process(s.id, "hello")
    runtime.settle()
    runtime.send_message(a.id, "again")
    runtime.send_message(c.id, "again")
    runtime.clock.advance(3)
    assert replies(recorder, a.id) == ["a1", "a2"]
    assert replies(recorder, b.id) == ["b1"]
    assert replies(recorder, c.id) == ["c1", "c2"]
    assert scripted.remaining(a.id) == scripted.remaining(b.id) == scripted.remaining(c.id) == 0
    # every model call names the session and incarnation that made it
    assert [r.session_id for r in scripted.requests_for(b.id)] == [b.id]
    assert {r.generation for r in scripted.requests_for(a.id)} == {runtime.session_info(a.id)[a.id]["generation"]}


def test_a_session_with_its_script_used_up_falls_back_to_the_shared_queue(runtime, scripted, recorder):
    s = runtime.create_session(source="web")
    scripted.for_session(s.id, "scripted")
    scripted.reply("shared")
    runtime.start_process(s.id, "one")
    runtime.settle()
    runtime.send_message(s.id, "two")
    runtime.settle()
    runtime.send_message(s.id, "three")
    runtime.settle()
    assert replies(recorder, s.id) == ["scripted", "shared", "ok"]  # then the default reply


def test_a_reply_streams_its_deltas_after_its_latency_with_its_usage(runtime, scripted, recorder):
    s = runtime.create_session(source="web")
    scripted.for_session(s.id, Turn.reply("Hello there, friend", deltas=3, latency_s=2.5,
                                          usage={"input_tokens": 120, "output_tokens": 40}, cost_usd=0.25))
    runtime.start_process(s.id, "hi")
    runtime.clock.advance(2.4)
    assert recorder.of(s.id, "content_block_delta") == []
    runtime.clock.advance(0.1)
    deltas = [r.event.text for r in recorder.of(s.id, "content_block_delta")]
    assert len(deltas) == 3 and "".join(deltas) == "Hello there, friend"
    recorder.assert_first_at("result", 2.5, s.id)
    result = recorder.last("result", s.id)
    assert result.total_cost_usd == 0.25
    assert (result.usage["input_tokens"], result.usage["output_tokens"]) == (120, 40)


def test_crash_restart_keeps_the_script_across_incarnations(runtime, scripted, recorder):
    s = runtime.create_session(source="chat", participant="alice")
    scripted.for_session(s.id, Turn.crash("model fell over"), "back again")
    runtime.start_process(s.id, "hi")
    runtime.clock.advance(5)
    assert recorder.times("session_started", s.id) == [0.0, 5.0]
    assert replies(recorder, s.id) == ["back again"]
    # the second incarnation took the second turn: same script, new generation
    generations = [r.generation for r in scripted.requests_for(s.id)]
    assert len(generations) == 2 and generations[1] > generations[0]
    assert scripted.starts_of(s.id) == 2


def test_outage_pause_and_auto_resume_keep_the_script(runtime, scripted, recorder):
    s = runtime.create_session(source="web")
    scripted.for_session(s.id, Turn.outage("connection refused"), "resumed fine")
    scripted.health_results = [True]
    runtime.start_process(s.id, "hi")
    runtime.settle()
    assert runtime.is_paused(s.id)
    runtime.clock.advance(300)  # the first auto-resume, after a healthy probe
    assert not runtime.is_paused(s.id)
    assert replies(recorder, s.id) == ["resumed fine"]
    assert [r.session_id for r in scripted.requests_for(s.id)] == [s.id, s.id]


def test_a_scripted_clean_exit_ends_the_session_with_code_0_and_nothing_restarts_it(runtime, scripted, recorder):
    s = runtime.create_session(source="chat", participant="alice")  # chat sessions restart on a crash
    scripted.for_session(s.id, "first", Turn.clean_exit(latency_s=1))
    runtime.start_process(s.id, "hi")
    runtime.settle()
    runtime.send_message(s.id, "please stop")
    runtime.clock.advance(1)
    [exited] = [r.event for r in recorder.of(s.id, "session_exited")]
    assert exited.code == 0
    recorder.assert_first_at("session_exited", 1.0, s.id)
    runtime.clock.advance(3600)
    assert recorder.times("session_started", s.id) == [0.0]
    assert recorder.of(s.id, "error") == []
    assert not runtime.is_running(s.id)
    assert runtime.internals.store.get_session(s.id).status == "idle"
    # the exit published nothing of the turn it ended
    assert replies(recorder, s.id) == ["first"]


def test_a_scripted_exit_with_a_code_is_a_crash_and_a_chat_session_restarts(runtime, scripted, recorder):
    s = runtime.create_session(source="chat", participant="alice")
    scripted.for_session(s.id, Turn.exit(3), "after the restart")
    runtime.start_process(s.id, "hi")
    runtime.clock.advance(5)
    assert [r.event.code for r in recorder.of(s.id, "session_exited")] == [3]
    assert recorder.times("session_started", s.id) == [0.0, 5.0]
    assert replies(recorder, s.id) == ["after the restart"]


def test_a_scripted_start_failure_is_a_spawn_error(runtime, scripted, recorder):
    s = runtime.create_session(source="web")
    scripted.for_session(s.id, Turn.start_failure("model not loaded"), "second start works")
    assert runtime.start_process(s.id, "hi") is None
    runtime.settle()
    [error] = [r.event for r in recorder.of(s.id, "error")]
    assert (error.error_type, error.message) == ("spawn_error", "model not loaded")
    assert recorder.of(s.id, "session_started") == []
    assert runtime.internals.store.get_session(s.id).status == "error"
    assert runtime.start_process(s.id, "hi again") is not None
    runtime.settle()
    assert replies(recorder, s.id) == ["second start works"]


def test_a_start_failure_after_a_crash_fails_the_restart(runtime, scripted, recorder):
    s = runtime.create_session(source="chat", participant="alice")
    scripted.for_session(s.id, Turn.crash("boom"), Turn.start_failure("still broken"))
    runtime.start_process(s.id, "hi")
    runtime.clock.advance(4.999)
    assert recorder.of(s.id, "error", since=0.001) == []
    runtime.clock.advance(0.001)
    spawn = recorder.assert_first_at("error", 5.0, s.id, after=0.0)
    assert (spawn.event.error_type, spawn.event.message) == ("spawn_error", "still broken")
    assert recorder.times("session_started", s.id) == [0.0]
    assert scripted.starts_of(s.id) == 2


def test_model_calls_never_consume_a_start_failure(runtime, scripted, recorder):
    s = runtime.create_session(source="web")
    scripted.for_session(s.id, "one", Turn.start_failure("later"))
    runtime.start_process(s.id, "hi")
    runtime.settle()
    runtime.send_message(s.id, "more")  # the start failure waits: this call gets the default
    runtime.settle()
    assert replies(recorder, s.id) == ["one", "ok"]
    assert scripted.remaining(s.id) == 1
    runtime.stop_process(s.id)
    assert runtime.resume_process(s.id) is None  # the resume is a start: it fails
    runtime.settle()
    assert recorder.last("error", s.id).error_type == "spawn_error"


def test_api_errors_of_each_kind_reach_the_session_as_classified(runtime, scripted, recorder):
    fatal, retryable = runtime.create_session(source="web"), runtime.create_session(source="web")
    scripted.for_session(fatal.id, Turn.api_error("fatal", "invalid x-api-key", status=401,
                                                  error_type="authentication_error"))
    scripted.for_session(retryable.id, Turn.api_error("retryable", "overloaded", status=529,
                                                      error_type="overloaded_error"))
    runtime.start_process(fatal.id, "hi")
    runtime.start_process(retryable.id, "hi")
    runtime.settle()
    assert recorder.last("error", fatal.id).message == "invalid x-api-key"
    assert [r.event.code for r in recorder.of(fatal.id, "session_exited")] == [1]
    assert runtime.is_paused(retryable.id)
    paused = recorder.last("error", retryable.id)
    assert (paused.error_type, paused.message) == (
        "api_outage", "Session paused due to API outage — auto-resume in 5min")


def test_a_script_survives_a_manual_resume_with_history(runtime, scripted, recorder):
    s = runtime.create_session(source="web")
    scripted.for_session(s.id, "before the stop", "after the resume")
    runtime.start_process(s.id, "hi")
    runtime.settle()
    runtime.stop_process(s.id)
    runtime.resume_process(s.id, "where were we?")
    runtime.settle()
    assert replies(recorder, s.id) == ["before the stop", "after the resume"]
    first, second = scripted.requests_for(s.id)
    assert second.generation > first.generation
    assert "before the stop" in second.messages[-1].content  # the resume prompt carries history


def test_a_script_survives_a_runtime_restart_over_the_same_store(tmp_path):
    from corvid_actors.testing import EventRecorder, ScriptedProvider, SimClock, sim_runtime

    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    scripted = ScriptedProvider()
    first_clock = SimClock()
    scripted.clock = first_clock
    with sim_runtime(first_clock, scripted, store_url=url, workspace_dir=tmp_path / "ws") as rt:
        s = rt.create_session(source="web")
        scripted.for_session(s.id, Turn.reply("never heard", latency_s=100), "after the restart")
        rt.start_process(s.id, "a long question")
        first_clock.advance(10)  # mid-turn: the shutdown marks the session for resume
    first_clock.close()
    second_clock = SimClock()
    scripted.clock = second_clock
    with sim_runtime(second_clock, scripted, store_url=url, workspace_dir=tmp_path / "ws") as rt:
        recorder = EventRecorder.attach(rt)
        assert rt.resume_pending_sessions() == [s.id]
        rt.settle()
        assert replies(recorder, s.id) == ["after the restart"]
    second_clock.close()
    assert scripted.remaining(s.id) == 0
    assert len(scripted.requests_for(s.id)) == 2
