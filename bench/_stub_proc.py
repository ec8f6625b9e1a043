"""The Ollama stub server (``corvid_actors.testing.ollama_stub``) in a child process.

Benchmarks run the stub in its own process, as a real Ollama server would be: the stub's
work then does not compete for the benchmark's GIL. A chat whose last user message reads
``BENCH chunks=N delay=S stamp=1`` is answered with N one-word chunks, S seconds apart;
with ``stamp=1`` each chunk's text is the stub's ``time.monotonic_ns()`` at the moment it
is written (CLOCK_MONOTONIC is system-wide on Linux, so the reader can subtract).

Chunks are paced on an absolute schedule: chunk *k* of a reply is written at its start +
*k* × S (after a late write, the chunks whose slots have passed follow at once: the
offered rate is kept), one chunk per network write (``send_line``: one ``write`` of one
HTTP chunk, TCP_NODELAY). A relative ``sleep(S)`` per chunk drifts by the sleep's overshoot
(~10 % at 1 ms), so "1 token/ms" would not be what the reader is offered.

    with StubProcess() as url:
        ...  # OllamaProvider(url), ollama.Client(host=url)
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: the one model the benchmarks use: 1 B parameters → slot weight 1, native tools
BENCH_MODEL = "bench:1b"
STAMP = "\u00a7"
#: listen backlog: a thousand sessions connect at once (the stdlib default is 5)
LISTEN_BACKLOG = 4096
_PROMPT = re.compile(r"BENCH chunks=(\d+) delay=([\d.]+) stamp=(\d)")


def prompt(chunks: int, delay_s: float = 0.0, stamp: bool = False) -> str:
    return f"BENCH chunks={chunks} delay={delay_s} stamp={int(stamp)}"


def _serve() -> None:
    from corvid_actors.testing._ollama_http import StubHandler
    from corvid_actors.testing.ollama_stub import OllamaStubServer, StubModel, Turn

    class StampingHandler(StubHandler):
        #: the next chunk's slot on the absolute schedule (None: the reply has not begun)
        next_at: float | None = None

        def start_stream(self) -> None:
            self.next_at = None
            super().start_stream()

        def wait(self, delay_s: float) -> None:
            if delay_s <= 0:
                return
            now = time.monotonic()
            due = now if self.next_at is None else self.next_at
            self.next_at = due + delay_s
            if due > now:
                time.sleep(due - now)

        def send_line(self, body: Any) -> None:
            message = body.get("message") if isinstance(body, dict) else None
            if message and str(message.get("content", "")).startswith(STAMP):
                body = {**body, "message": {**message, "content": f"{time.monotonic_ns()} "}}
            super().send_line(body)

    def responder(body: dict[str, Any]) -> Turn | None:
        messages = body.get("messages") or []
        for message in messages[-1:]:  # only a fresh BENCH prompt gets the long reply
            found = _PROMPT.search(str(message.get("content", "")))
            if found:
                n, delay, stamp = int(found.group(1)), float(found.group(2)), found.group(3) == "1"
                word = STAMP if stamp else "tok"
                return Turn(text=" ".join([word] * n), delay_s=delay)
        return None

    models = {BENCH_MODEL: StubModel("1.0B", 32768, "llama")}
    stub = OllamaStubServer(models, responder=responder, keep_requests=0).start()  # records nothing: it serves for hours
    server = stub._server  # the stub has no handler hook: swap the class, widen the backlog
    assert server is not None
    server.RequestHandlerClass = StampingHandler
    server.socket.listen(LISTEN_BACKLOG)
    print(stub.url, flush=True)
    sys.stdin.read()  # serve until the parent closes our stdin
    stub.stop()


@contextmanager
def StubProcess() -> Iterator[str]:  # noqa: N802 - reads as a resource
    proc = subprocess.Popen([sys.executable, "-m", "bench._stub_proc"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the stub process did not start (said {url!r})")
        yield url
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    _serve()
