"""Replay and its divergence reports (issue 40 item 3), on sessions recorded in simulation."""

from __future__ import annotations

import copy

import pytest

from corvid_actors.testing.replay import Recording, ReplayDivergence, replay
from tests.replay.recording import record_session


@pytest.fixture(scope="module")
def recording() -> Recording:
    return record_session()[0]


def _edited(recording: Recording) -> Recording:
    return Recording.from_dict(copy.deepcopy(recording.to_dict()))


def test_a_recording_replays_with_the_same_events_at_the_same_simulated_times(recording):
    result = replay(recording, time_tolerance_s=0.0)
    assert result.events == recording.events
    assert result.steps_used == len(recording.steps) == 5  # the tool call, the tool, the reply, the crash, the reply after the restart
    assert ("session_started", 35.0, {}) in result.events  # the restart, after its 5 s backoff


def test_the_recorded_tool_result_is_served_and_no_command_runs(recording):
    edited = _edited(recording)
    tool = edited.of("tool")[0]
    tool["output"] = "README.md\nsecret-plans.txt"  # what the recorded directory held
    result = replay(edited, check_events=False)
    outputs = [e.output for _, e in result.raw if e.type == "tool_status" and e.state == "completed"]
    assert outputs == ["README.md\nsecret-plans.txt"]


def test_a_different_tool_is_a_divergence_naming_the_step(recording):
    edited = _edited(recording)
    edited.of("model")[0]["tool_calls"][0][1] = "read_file"  # the model now asks another tool
    with pytest.raises(ReplayDivergence) as caught:
        replay(edited)
    error = caught.value
    assert error.step == 2
    assert "'list_files' tool call" in error.recorded and "'read_file' tool call" in error.asked
    assert "a different tool" in str(error)


def test_a_different_message_count_is_a_divergence(recording):
    edited = _edited(recording)
    edited.of("model")[1]["messages"] = 5
    with pytest.raises(ReplayDivergence, match=r"step 3: .*5 messages.*asked a model call with 3 messages"):
        replay(edited)


def test_a_call_the_recording_does_not_have_is_a_divergence(recording):
    edited = _edited(recording)
    last = edited.of("model")[-1]
    edited.entries.remove(last)
    with pytest.raises(ReplayDivergence) as caught:
        replay(edited)
    assert caught.value.step == 5 and "no more calls" in caught.value.recorded


def test_a_recorded_call_never_made_is_a_divergence(recording):
    edited = _edited(recording)
    extra = copy.deepcopy(edited.of("model")[-1])
    extra["t"] = extra["requested_at"] = extra["ended_at"] = 80.0
    edited.entries.append(extra)
    with pytest.raises(ReplayDivergence) as caught:
        replay(edited)
    assert caught.value.step == 6 and caught.value.asked == "nothing more"


def test_a_prompt_only_change_diverges_unless_tolerated(recording):
    edited = _edited(recording)
    for user in edited.of("user"):
        if user["text"] == "again":
            user["text"] = "once more"
    with pytest.raises(ReplayDivergence, match="step 4: .*a different last user message"):
        replay(edited)
    replay(edited, tolerate=True)


def test_an_event_that_differs_is_reported_with_its_place(recording):
    edited = _edited(recording)
    for entry in edited.of("event"):
        if entry["type"] == "session_restarting":
            entry["delay_s"] = 15.0
    with pytest.raises(AssertionError, match=r"event \d+ differs: recorded session_restarting .*15\.0"):
        replay(edited)


def test_a_changed_rule_moves_a_time_beyond_the_tolerance(recording):
    def slower_restarts(config):
        return config.replace(supervisor={"restart_backoff_base_s": 7.0})

    with pytest.raises(AssertionError, match="differs: recorded session_restarting"):
        replay(recording, configure=slower_restarts)


def test_a_recording_without_content_replays_its_shapes():
    recording, _ = record_session(config={"journal": {"enabled": True, "capture_content": False}})
    result = replay(recording)
    assert [e[0] for e in result.events] == [e[0] for e in recording.events]
