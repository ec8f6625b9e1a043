"""EventRecorder timing assertions: "nothing at t − ε, this at t"."""

from __future__ import annotations

import pytest

from corvid_actors.testing import Turn


@pytest.fixture
def restarted(runtime, scripted, recorder):
    """A chat session that crashes at 0 and is restarted at +5 s."""
    s = runtime.create_session(source="chat", participant="alice")
    scripted.for_session(s.id, Turn.crash("down"), "up")
    runtime.start_process(s.id, "hi")
    runtime.clock.advance(60)
    return s


def test_assert_first_at_passes_at_the_exact_time(recorder, restarted):
    found = recorder.assert_first_at("session_started", 5.0, restarted.id, after=0.0)
    assert found.event.generation == 2
    recorder.assert_first_at("session_started", 0.0, restarted.id)


def test_assert_first_at_fails_for_an_event_earlier_than_t(recorder, restarted):
    # the restart came at 5: claiming it at 5.5 means "nothing at 5.5 − ε", which is false
    with pytest.raises(AssertionError, match=r"first at 5 \(all at: \[0\.0, 5\.0\]\)"):
        recorder.assert_first_at("session_started", 5.5, restarted.id, after=0.0)


def test_assert_first_at_fails_for_an_event_later_than_t(recorder, restarted):
    with pytest.raises(AssertionError, match="first at 5"):
        recorder.assert_first_at("session_started", 4.999, restarted.id, after=0.0)


def test_assert_first_at_fails_when_it_never_came(recorder, restarted):
    with pytest.raises(AssertionError, match="never"):
        recorder.assert_first_at("session_paused", 1.0, restarted.id)


def test_assert_none_between_and_windowed_reads(recorder, restarted):
    recorder.assert_none_between("session_started", 0.000001, 5.0, restarted.id)
    with pytest.raises(AssertionError, match=r"at \[5\.0\]"):
        recorder.assert_none_between("session_started", 0.000001, 5.000001, restarted.id)
    assert [r.at for r in recorder.of(restarted.id, "session_started", since=1, until=10)] == [5.0]
    assert recorder.first("session_exited", restarted.id).at == 0.0
    assert recorder.first("session_started", restarted.id, after=5.0) is None
