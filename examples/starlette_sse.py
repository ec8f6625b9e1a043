"""A web chat on corvid-actors: a Starlette app that streams each reply over Server-Sent
Events, on the asyncio face (:class:`corvid_actors.aio.AsyncRuntime`).

    POST /chat/{conversation}      the request body is the user's message (plain text)
    → 200 text/event-stream, one JSON object per event:
        event: delta   data: {"text": "Hel"}                      as the model writes
        event: reply   data: {"text": "Hello!", "session_id": …}  the turn's answer; the stream ends
        event: error   data: {"message": …, "session_id": …}      the turn failed; the stream ends

The deltas are every piece of assistant text of the turn, so for a turn without tool calls
they join up to the reply's text. Each conversation is one session, found again on the next
POST (with its history); one reply streams per conversation at a time. A client that goes
away stops its stream, not the session: the turn completes and is stored.

Run it (no model needed: a stub Ollama server starts in-process; Starlette and uvicorn come
with corvid-actors, whose MCP client is built on them):

    .venv/bin/python examples/starlette_sse.py --port 8000
    curl -N -d 'hello' http://127.0.0.1:8000/chat/demo

With a real Ollama: ``OLLAMA_HOST=http://127.0.0.1:11434 .venv/bin/python
examples/starlette_sse.py --model llama3.1:8b``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import weakref
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from corvid_actors.aio import AsyncRuntime
from corvid_actors.config import load_config
from corvid_actors.events import ContentBlockDelta, Result
from corvid_actors.testing.ollama_stub import OllamaStubServer

#: the stored sessions' ``source``; a conversation's name is its session's ``channel``
SOURCE = "web"
#: how long one reply may take before the stream gives up on it (the session goes on)
REPLY_TIMEOUT_S = 300.0
#: events that end a session: a turn still waiting for its ``result`` will not get one
SESSION_ENDS = frozenset({"session_stopped", "session_exited", "session_paused"})


def create_app(rt: AsyncRuntime, *, agent_id: str | None = None,
               reply_timeout_s: float = REPLY_TIMEOUT_S) -> Starlette:
    """The app. Sessions run ``agent_id``'s agent (None: the default provider's model); the
    caller owns ``rt`` and closes it after the server stopped."""
    # one reply streams per conversation at a time; a lock lives while a request holds it
    locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    async def chat(request: Request) -> Response:
        conversation = request.path_params["conversation"]
        text = (await request.body()).decode("utf-8", errors="replace").strip()
        if not text:
            return PlainTextResponse("POST the message as the request body", status_code=400)
        lock = locks.setdefault(conversation, asyncio.Lock())
        async with lock:  # two first messages of a conversation make one session
            session_id = (await rt.find_session(source=SOURCE, channel=conversation, agent_id=agent_id)
                          or (await rt.create_session(agent_id=agent_id, source=SOURCE, channel=conversation)).id)
        return StreamingResponse(reply_events(rt, lock, session_id, text, reply_timeout_s),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    return Starlette(routes=[Route("/chat/{conversation}", chat, methods=["POST"])])


async def reply_events(rt: AsyncRuntime, lock: asyncio.Lock, session_id: str, text: str,
                       timeout_s: float) -> AsyncIterator[str]:
    """The SSE frames of one turn: its deltas, then ``reply`` or ``error``."""
    async with lock, rt.events(session_id) as stream:  # subscribed before the message goes in
        # a running session takes the message; an idle or new one is resumed with it
        if not await rt.send_message(session_id, text) and await rt.resume_process(session_id, text) is None:
            yield sse("error", message="the session could not start", session_id=session_id)
            return
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            try:
                # around the wait only, never around a yield (the timeout would cancel the server's send)
                async with asyncio.timeout_at(deadline):
                    event = await anext(stream)
            except TimeoutError:
                yield sse("error", message=f"no reply within {timeout_s:g} s", session_id=session_id)
                return
            if isinstance(event, ContentBlockDelta):
                yield sse("delta", text=event.text)
            elif isinstance(event, Result):  # the end of the turn: its answer, or why it failed
                if event.subtype == "success":
                    yield sse("reply", text=event.result, session_id=session_id)
                else:
                    yield sse("error", message=event.result, session_id=session_id)
                return
            elif event.type in SESSION_ENDS or event.type == "stream_overflow":  # the overflow ends the stream
                yield sse("error", message=f"{event.type} before the reply", session_id=session_id)
                return

def sse(event: str, **data: object) -> str:
    """One Server-Sent Events frame (JSON data: never a raw newline inside it)."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


async def main(args: argparse.Namespace) -> None:
    environ, stub = dict(os.environ), None
    if not environ.get("OLLAMA_HOST"):
        stub = OllamaStubServer(default_reply="(stub model) Hello! This reply was streamed to you over SSE.").start()
        environ["OLLAMA_HOST"] = stub.url
    data_dir = tempfile.mkdtemp(prefix="corvid-sse-")
    try:
        async with await AsyncRuntime.create(load_config(environ=environ), store_url=f"sqlite:///{data_dir}/web.db",
                                             workspace_dir=f"{data_dir}/workspace") as rt:
            agent = await rt.ensure_agent("web-chat", provider="ollama", model=args.model, kind="chat",
                                          system_prompt="You are a helpful assistant. Answer briefly.")
            print(f"POST a message: curl -N -d 'hello' http://{args.host}:{args.port}/chat/demo", flush=True)
            config = uvicorn.Config(create_app(rt, agent_id=agent.id), host=args.host, port=args.port,
                                    log_level="info")
            await uvicorn.Server(config).serve()  # until Ctrl-C
    finally:
        if stub is not None:
            stub.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument("--model", default="llama3.1:8b", help="the Ollama model (default: llama3.1:8b)")
    try:
        asyncio.run(main(parser.parse_args()))
    except KeyboardInterrupt:  # uvicorn stopped on Ctrl-C, then raised it again for us
        pass
