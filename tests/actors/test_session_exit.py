"""A provider may end its incarnation with an exit code (providers.base.SessionExit): the
session actor ends the incarnation as a process exit, bypassing the loop."""

from __future__ import annotations

from corvid_actors.providers.base import ModelInfo, ModelResponse, SessionExit
from corvid_actors.testing import EventRecorder, SimClock, sim_runtime


class ExitingProvider:
    """Answers once, then asks to exit with ``code``; records the requests it saw."""

    name = "exiting"

    def __init__(self, code: int) -> None:
        self.code = code
        self.requests = []

    def stream(self, request, on_event, cancel):
        self.requests.append(request)
        if len(self.requests) > 1:
            raise SessionExit(self.code)
        return ModelResponse(text="first")

    def health(self) -> bool:
        return True

    def model_info(self, model: str) -> ModelInfo:
        return ModelInfo(model, 8192)


def run(code: int, source: str):
    clock = SimClock()
    provider = ExitingProvider(code)
    rt = sim_runtime(clock, provider)
    recorder = EventRecorder.attach(rt)
    try:
        s = rt.create_session(source=source, participant="p")
        rt.start_process(s.id, "hi")
        rt.settle()
        rt.send_message(s.id, "again")
        clock.advance(30)
        return rt, s, recorder, provider, rt.internals.store.get_session(s.id).status
    finally:
        rt.shutdown()
        clock.close()


def test_exit_code_0_is_a_clean_exit_with_no_restart_and_no_result():
    _, s, recorder, provider, status = run(0, "chat")
    assert [r.event.code for r in recorder.of(s.id, "session_exited")] == [0]
    assert len(recorder.of(s.id, "result")) == 1  # only the first turn's
    assert recorder.times("session_started", s.id) == [0.0]
    assert status == "idle"
    assert [(r.session_id, r.generation) for r in provider.requests] == [(s.id, 1), (s.id, 1)]


def test_a_nonzero_exit_code_is_handled_as_a_crash():
    _, s, recorder, provider, _ = run(2, "chat")
    # every later call exits with 2 again: chat sessions restart at +5 s, then +15 s
    assert [r.event.code for r in recorder.of(s.id, "session_exited")] == [2, 2, 2]
    assert recorder.times("session_started", s.id) == [0.0, 5.0, 20.0]
    assert [r.generation for r in provider.requests] == [1, 1, 2, 3]
