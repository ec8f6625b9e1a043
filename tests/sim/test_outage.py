"""Seed scenario: an API outage pauses the session and auto-resumes it after a health probe."""

from __future__ import annotations

MIN = 60.0


def test_outage_pauses_without_counting_as_restart_and_resumes_after_5_min(runtime, scripted, recorder,
                                                                          chat_session):
    scripted.outage("connection refused")
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    assert runtime.is_paused(chat_session.id)
    assert runtime.get_paused_session_ids() == [chat_session.id]
    assert not runtime.is_running(chat_session.id)
    row = runtime.store.get_session(chat_session.id)
    assert (row.status, row.pid) == ("paused", None)
    error = recorder.last("error", chat_session.id)
    assert error.error_type == "api_outage"
    assert recorder.of(chat_session.id, "session_restarting") == []
    runtime.clock.advance(5 * MIN - 1)
    assert scripted.health_probes == 0 and runtime.is_paused(chat_session.id)
    runtime.clock.advance(1)
    assert scripted.health_probes == 1
    assert runtime.is_running(chat_session.id)
    assert not runtime.is_paused(chat_session.id)
    assert recorder.times("session_resumed", chat_session.id) == [5 * MIN]
    # resumed through the resume path: the model sees the interrupted conversation
    assert "<conversation_history>" in scripted.requests[-1].messages[-1].content
    assert runtime.session_info(chat_session.id)[chat_session.id]["restarts"] == 0


def test_auto_resume_attempts_back_off_5_15_45_60_60_and_give_up_after_10(runtime, scripted, recorder,
                                                                           chat_session):
    scripted.health_results = [False]  # the API never comes back
    scripted.outage("503 service unavailable")
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    probe_times = []
    last = scripted.health_probes
    for _ in range(600):  # 5+15+45+7×60 = 485 min of probing
        runtime.clock.advance(60)
        if scripted.health_probes != last:
            last = scripted.health_probes
            probe_times.append(runtime.clock.elapsed / MIN)
    gaps = [b - a for a, b in zip([0.0, *probe_times], probe_times, strict=False)]
    assert gaps == [5, 15, 45, 60, 60, 60, 60, 60, 60, 60]
    assert scripted.health_probes == 10
    assert recorder.last("error", chat_session.id).error_type == "auto_resume_exhausted"
    assert runtime.store.get_session(chat_session.id).status == "error"
    assert not runtime.is_paused(chat_session.id)
    assert runtime.get_memory_stats()["timers"] <= 2  # only the housekeeping ones, if any


def test_failed_probe_then_healthy_probe_resumes_on_the_second_attempt(runtime, scripted, recorder,
                                                                       chat_session):
    scripted.health_results = [False, True]
    scripted.outage()
    runtime.start_process(chat_session.id, "hi")
    runtime.clock.advance(5 * MIN)
    assert runtime.is_paused(chat_session.id)
    runtime.clock.advance(15 * MIN)
    assert runtime.is_running(chat_session.id)
    assert recorder.times("session_resumed", chat_session.id) == [20 * MIN]


def test_backoff_continues_across_repeated_outages_until_a_successful_turn(runtime, scripted, recorder,
                                                                          chat_session):
    scripted.outage()
    scripted.outage()  # the resumed session hits the outage again
    runtime.start_process(chat_session.id, "hi")
    runtime.clock.advance(5 * MIN)  # attempt 1: healthy → resumed → outage again
    assert runtime.is_paused(chat_session.id)
    runtime.clock.advance(15 * MIN - 1)
    assert runtime.is_paused(chat_session.id)
    runtime.clock.advance(1)  # attempt 2 at +15 min, not +5 min again
    assert runtime.is_running(chat_session.id)
    assert recorder.times("session_resumed", chat_session.id) == [5 * MIN, 20 * MIN]


def test_manual_resume_session(runtime, scripted, recorder, chat_session, web_session):
    assert runtime.resume_session(web_session.id) is False  # not paused
    scripted.outage()
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    assert runtime.resume_session(chat_session.id) is True
    runtime.settle()
    assert runtime.is_running(chat_session.id)
    assert recorder.last("session_resumed", chat_session.id).automatic is False
    runtime.clock.advance(10 * MIN)  # the cancelled auto-resume timer does nothing
    assert scripted.health_probes == 0


def test_stop_of_a_paused_session_cancels_auto_resume(runtime, scripted, chat_session):
    scripted.outage()
    runtime.start_process(chat_session.id, "hi")
    runtime.settle()
    runtime.stop_process(chat_session.id)
    runtime.clock.advance(60 * MIN)
    assert scripted.health_probes == 0
    assert not runtime.is_paused(chat_session.id)
    assert runtime.store.get_session(chat_session.id).status == "stopped"
