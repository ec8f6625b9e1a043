"""A reply streamed at a model's pace through the runtime (issue 37 item 3): the real
``ollama.AsyncClient`` on the I/O loop, the DeltaPump, the bus. Subscribers get every
character in order, in fewer ``content_block_delta`` events than tokens, all of them
before the reply's ``assistant`` and ``result``; a stop mid-stream still ends the
session, with no delta after ``session_stopped``."""

from __future__ import annotations

import threading
from typing import Any

from corvid_actors.config import Config
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing.ollama_stub import OllamaStubServer, StubModel, Turn

MODEL = "llama3.2:1b"
MODELS = {MODEL: StubModel("1.2B", 131072, "llama")}
WAIT_S = 30.0


def test_a_paced_reply_arrives_whole_in_order_in_fewer_deltas_than_tokens(make_e2e):
    words = [f"w{i}" for i in range(300)]
    reply = " ".join(words)
    with OllamaStubServer(MODELS) as stub:
        stub.add_turn(Turn(text=reply, delay_s=0.001))  # one word per write, ~1 ms apart
        cfg = Config().replace(supervisor={"delta_interval_ms": 20.0})
        e2e = make_e2e({"ollama": OllamaProvider(stub.url)}, cfg)
        s = e2e.session(provider="ollama", model=MODEL, tools=[])  # no tools: one model call
        e2e.runtime.start_process(s.id, "talk")
        e2e.runtime.settle()  # the I/O loop's call counts as work in flight
        every = [r.event for r in e2e.recorder.of(s.id)]
    kinds = [e.type for e in every]
    events = every[:kinds.index("result") + 1]  # the reply's turn
    deltas = [e for e in events if e.type == "content_block_delta"]
    assert "".join(e.text for e in deltas) == reply
    assert 1 <= len(deltas) < len(words) // 3  # the bus was not told per token
    kinds = kinds[:len(events)]
    last_delta = max(i for i, k in enumerate(kinds) if k == "content_block_delta")
    assert last_delta < kinds.index("assistant") < kinds.index("result")


def test_stopping_mid_stream_ends_the_session_with_no_delta_after_it(make_e2e):
    with OllamaStubServer(MODELS) as stub:
        stub.add_turn(Turn(text=" ".join(f"t{i}" for i in range(2000)), delay_s=0.005))
        e2e = make_e2e({"ollama": OllamaProvider(stub.url)}, Config().replace(supervisor={"delta_interval_ms": 50.0}))
        s = e2e.session(provider="ollama", model=MODEL, tools=[])
        two = threading.Event()
        seen: list[str] = []

        def on_event(_sid: str, event: Any) -> None:
            if event.type == "content_block_delta":
                seen.append(event.text)
                if len(seen) >= 2:
                    two.set()

        e2e.runtime.subscribe(s.id, on_event)
        e2e.runtime.start_process(s.id, "talk for a long time")
        assert two.wait(WAIT_S)  # mid-stream: two deltas shown, most of the reply to come
        e2e.runtime.stop_process(s.id)
        e2e.runtime.settle()  # (test_io_loop_streams checks that the stub sees the socket close)
        kinds = [r.type for r in e2e.recorder.of(s.id)]
        streamed = "".join(e.text for e in e2e.events(s.id, "content_block_delta"))
    assert "session_stopped" in kinds
    assert "content_block_delta" not in kinds[kinds.index("session_stopped"):]
    assert e2e.events(s.id, "result") == []
    # what was shown is a prefix of the reply, token by token, in order
    shown = streamed.split()
    assert shown and shown == [f"t{i}" for i in range(len(shown))]
