"""Model streams on the runtime's one I/O loop (issue 18 item 1): many sessions stream at
once through the real ``ollama.AsyncClient`` with no thread per stream, every text arrives
exact, and a stop closes the socket so the server sees the disconnect."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

import pytest

from corvid_actors.config import Config
from corvid_actors.core.io_loop import IoLoop
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing.ollama_stub import OllamaStubServer, StubModel, Turn

MODEL = "llama3.2:1b"
#: the stub knows the model, so ``/api/show`` answers once and the provider caches it (a
#: model it does not know 404s, is not cached, and every session start asks again: a
#: thousand blocking requests, each on a new connection, before any stream began)
MODELS = {MODEL: StubModel("1.2B", 131072, "llama")}
STREAMS = 1000
WAIT_S = 60.0


class Peak:
    """Samples, while a run goes on, the I/O loop's calls in flight and the threads alive."""

    def __init__(self, io_loop: IoLoop[Any]) -> None:
        self.io_loop = io_loop
        self.in_flight = 0
        self.worker_threads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.in_flight = max(self.in_flight, self.io_loop.in_flight)
            workers = sum(1 for t in threading.enumerate() if t.name.startswith("model-"))
            self.worker_threads = max(self.worker_threads, workers)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)


#: the stub holds every reply until the test opens the gate: all streams are in flight at once
GATE = threading.Event()


def reply_for(body: dict[str, Any]) -> Turn:
    """Each session's reply names its prompt, so a mixed-up stream would show."""
    GATE.wait(WAIT_S)
    prompt = str(body["messages"][-1]["content"])
    return Turn(text=f"Here is the whole reply to {prompt}, and it is complete.", delay_s=0.01)


@pytest.fixture
def stub():
    GATE.clear()
    with OllamaStubServer(MODELS, responder=reply_for, keep_requests=0) as server:
        server._server.socket.listen(STREAMS)  # type: ignore[union-attr]  # a burst of connections
        yield server


def test_a_thousand_concurrent_streams_complete_exactly_with_no_thread_per_stream(make_e2e, stub):
    cfg = Config().replace(slots={"max_parallel": 4 * STREAMS})
    e2e = make_e2e({"ollama": OllamaProvider(stub.url)}, cfg)
    runtime, io_loop = e2e.runtime, e2e.runtime.internals.io_loop
    sessions = [e2e.session(provider="ollama", model=MODEL, mode="full-auto") for _ in range(STREAMS)]
    with Peak(io_loop) as peak:
        for k, s in enumerate(sessions):
            runtime.start_process(s.id, f"prompt-{k}")
        assert stub.wait_for(lambda: io_loop.in_flight == STREAMS, WAIT_S)  # every call waits on the stub
        GATE.set()
        runtime.settle()
    by_session: dict[str, list[Any]] = defaultdict(list)
    for r in e2e.recorder.of():  # one pass over the events, not two per session
        by_session[r.session_id].append(r.event)
    for k, s in enumerate(sessions):
        streamed = "".join(e.text for e in by_session[s.id] if e.type == "content_block_delta")
        assert streamed == f"Here is the whole reply to prompt-{k}, and it is complete.", s.id
        assert [e for e in by_session[s.id] if e.type == "result"][-1].subtype == "success"
    assert io_loop.submitted >= STREAMS and io_loop.in_flight == 0
    assert peak.worker_threads == 0  # no model call ran on a thread of its own
    assert peak.in_flight == STREAMS  # all of them were in flight on the one loop at once


def test_stopping_a_session_mid_stream_closes_its_socket(make_e2e):
    GATE.set()
    with OllamaStubServer() as stub:
        stub.add_turn(Turn(text="one two three four five six seven eight", delay_s=0.2))
        e2e = make_e2e({"ollama": OllamaProvider(stub.url)})
        s = e2e.session(provider="ollama", model=MODEL)
        e2e.runtime.start_process(s.id, "talk slowly")
        assert stub.wait_for(lambda: stub.active_streams == 1, WAIT_S)
        e2e.runtime.stop_process(s.id)
        assert stub.wait_for(lambda: stub.disconnects == 1, WAIT_S)
        e2e.runtime.settle()
        assert e2e.runtime.internals.io_loop.in_flight == 0
        assert e2e.events(s.id, "result") == []  # the cancelled call reported nothing
