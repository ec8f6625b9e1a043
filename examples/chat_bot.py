"""A chat bot on corvid-actors: one session per participant, per-turn credits, tool
approvals in the chat, and the commands /help, /status, /stop, /credits.

Run it (no model needed — a stub Ollama server starts in-process):

    .venv/bin/python examples/chat_bot.py

Talk to it in the terminal: "hello", "what files are in my project" (the model asks to
use a tool; answer "yes <id>"), "/credits", "/status", "/stop"; Ctrl-D quits. With a real
Ollama, set OLLAMA_HOST (and optionally --model or OLLAMA_DEFAULT_MODEL):

    OLLAMA_HOST=http://127.0.0.1:11434 .venv/bin/python examples/chat_bot.py --model llama3.1:8b

As an HTTP webhook bot (messages POSTed to it, replies POSTed to your callback URL):

    .venv/bin/python examples/chat_bot.py --transport webhook --port 8787 \\
        --callback-url http://127.0.0.1:9000/replies

then ``curl -d '{"channel":"c","participant":"alice","text":"hello"}' http://127.0.0.1:8787/messages``.
``--owner NAME`` (repeatable) makes a participant an owner: free turns, may answer any
approval and ``/grant <participant> <amount>`` credits.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from corvid_actors.chat import BridgeSettings, ChatBridge, ConsoleTransport, WebhookTransport
from corvid_actors.config import load_config
from corvid_actors.runtime import Runtime
from corvid_actors.testing.ollama_stub import OllamaStubServer, Turn

#: the stub serves this model with native tool calls
STUB_MODEL = "llama3.1:8b"
AGENT_NAME = "chat-bot"
PROJECT_NAME = "chat-bot-project"
SYSTEM_PROMPT = ("You are a friendly assistant in a group chat. Answer briefly. You may look at the "
                 "user's project files with your tools when asked.")


def demo_responder(body: dict[str, Any]) -> Turn:
    """The stand-in model: echoes, and asks to list files when the user mentions files."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        listing = str(last.get("content", "")).strip()[:300]
        return Turn(text=f"Here is what I found:\n{listing}")
    user = next((str(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"), "")
    said = user.strip().splitlines()[-1] if user.strip() else ""
    if "file" in said.lower() and body.get("tools"):
        return Turn(tool_calls=[("list_files", {"path": "."})])
    return Turn(text=f"(stub model) You said: {said}. Mention your files to see a tool approval.")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transport", choices=("console", "webhook"), default="console")
    parser.add_argument("--participant", default=os.environ.get("USER", "you"),
                        help="your name on the console (default: $USER)")
    parser.add_argument("--owner", action="append", default=[], help="an owner participant (repeatable)")
    parser.add_argument("--model", default="", help="model name (default: the stub's, or OLLAMA_DEFAULT_MODEL)")
    parser.add_argument("--data-dir", default="", help="keep the database and project here (default: a temp dir, "
                                                       "removed at exit)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data directory at exit")
    parser.add_argument("--host", default="127.0.0.1", help="webhook: address to listen on")
    parser.add_argument("--port", type=int, default=8787, help="webhook: port (0 = any free port)")
    parser.add_argument("--callback-url", default="", help="webhook: where replies are POSTed")
    parser.add_argument("--secret", default=os.environ.get("CORVID_WEBHOOK_SECRET", ""),
                        help="webhook: HMAC secret for X-Corvid-Signature (default: $CORVID_WEBHOOK_SECRET)")
    args = parser.parse_args(argv)
    if args.transport == "webhook" and not args.callback_url:
        parser.error("--transport webhook needs --callback-url")
    return args


def prepare(runtime: Runtime, data_dir: Path, model: str) -> tuple[str, str]:
    """The bot's agent and project (created once; found again when --data-dir is reused)."""
    project_dir = data_dir / "project"
    project_dir.mkdir(parents=True, exist_ok=True)
    readme = project_dir / "README.md"
    if not readme.exists():
        readme.write_text("# My project\nA demo project the chat bot may look at.\n")
    project = runtime.project(PROJECT_NAME) or runtime.create_project(PROJECT_NAME, project_dir)
    agent = runtime.agent(AGENT_NAME) or runtime.create_agent(
        AGENT_NAME, provider="ollama", model=model, permission_mode="default", system_prompt=SYSTEM_PROMPT,
        tool_permissions=["list_files", "read_file"], kind="chat",  # converses: never nudged to act
    )
    return agent.id, project.id


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    environ = dict(os.environ)
    stub = None
    if not environ.get("OLLAMA_HOST"):
        stub = OllamaStubServer(responder=demo_responder).start()
        environ["OLLAMA_HOST"] = stub.url
    config = load_config(environ=environ)
    model = args.model or (STUB_MODEL if stub else config.providers.ollama_default_model)
    data_dir = Path(args.data_dir).expanduser() if args.data_dir else Path(tempfile.mkdtemp(prefix="corvid-chat-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        return serve(args, config, model, stub, data_dir)
    finally:
        if stub is not None:
            stub.stop()
        if not args.data_dir and not args.keep:  # our temporary directory: gone with us
            shutil.rmtree(data_dir, ignore_errors=True)


def serve(args: argparse.Namespace, config: Any, model: str, stub: Any, data_dir: Path) -> int:
    owners = set(args.owner)
    runtime = Runtime(config, store_url=f"sqlite:///{data_dir / 'chat.db'}", workspace_dir=data_dir / "workspace",
                      with_credits=True, is_owner=owners.__contains__)
    agent_id, project_id = prepare(runtime, data_dir, model)
    if args.transport == "console":
        transport: Any = ConsoleTransport(participant=args.participant)
    else:
        transport = WebhookTransport.from_config(args.callback_url, config, host=args.host, port=args.port,
                                                 secret=args.secret)
    bridge = ChatBridge(runtime, transport, agent_id=agent_id, project_id=project_id,
                        is_owner=owners.__contains__, settings=BridgeSettings(name="example"))
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM: shut down like Ctrl-C
    bridge.start()
    where = f"stub Ollama at {stub.url}" if stub else f"Ollama at {config.providers.ollama_host}"
    kept = "" if args.data_dir or args.keep else " (removed at exit; --keep keeps it)"
    print(f"corvid chat bot: model {model} on {where}; data in {data_dir}{kept}", flush=True)
    try:
        if isinstance(transport, ConsoleTransport):
            print("Type a message (/help for commands, Ctrl-D to quit).", flush=True)
            transport.finished.wait()
            runtime.settle(timeout_s=None)  # piped input: let the last replies arrive
        else:
            print(f"Listening on {transport.url} (replies go to {args.callback_url})", flush=True)
            threading.Event().wait()  # until Ctrl-C / SIGTERM
    except KeyboardInterrupt:
        pass
    finally:
        runtime.shutdown()  # first, so participants hear the shutdown notice
        bridge.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
