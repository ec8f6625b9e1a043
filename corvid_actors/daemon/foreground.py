"""``corvid-actors run --agent NAME "prompt"``: one session in the foreground.

A Runtime in this process (on the configured store, without touching other processes'
sessions), one session of the agent, the reply streamed to stdout as it arrives, tool
activity and errors on stderr. Tool approvals are asked on the terminal (denied when
there is none). Before anything starts, the provider the agent routes to is probed; an
unreachable one is a one-line message naming the setting to fix, not a traceback.
"""

from __future__ import annotations

import json
import queue
import sys
from pathlib import Path
from typing import Any, TextIO

from corvid_actors.daemon.model_server import start_model_server
from corvid_actors.daemon.render import safe_text
from corvid_actors.daemon.settings import load_daemon_config
from corvid_actors.errors import ConfigError, CorvidError, NotFoundError
from corvid_actors.runtime import Runtime


class ProviderUnreachable(CorvidError):
    """The model server the session would use does not answer."""


def unreachable_message(provider_name: str, config: Any) -> str:
    """What to tell the user when ``provider_name`` does not answer: the setting to fix."""
    p = config.providers
    if provider_name == "ollama":
        return (f"cannot reach Ollama at {p.ollama_host}: start it (`ollama serve`) or set OLLAMA_HOST "
                "(config providers.ollama_host) to a running server; `--provider stub` uses the built-in stub model")
    if provider_name == "anthropic":
        return (f"the Anthropic API does not answer at {p.anthropic_base_url or 'https://api.anthropic.com'}: "
                "check ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL (config providers.anthropic_base_url)")
    return f"the model provider {provider_name!r} does not answer"


def _models(config: Any, provider: str) -> Any:
    """The model server, chosen as ``serve`` chooses it: ``auto`` falls back to the stub
    when neither ANTHROPIC_API_KEY is set nor Ollama answers."""
    if provider == "anthropic" and not config.providers.anthropic_api_key:
        raise ConfigError("--provider anthropic needs ANTHROPIC_API_KEY in the environment")
    if provider in ("ollama", "anthropic"):
        config = config.replace(providers={"default_provider": provider})
    return start_model_server(config.replace(daemon={"provider": provider}))


def run_foreground(*, agent: str, prompt: str, config_file: str | None = None, data_dir: str | None = None,
                   provider: str = "auto", out: TextIO | None = None, err: TextIO | None = None,
                   stdin: TextIO | None = None, create: bool = False, model: str | None = None,
                   json_output: bool = False) -> int:
    """Run the session; returns 0 when the turn succeeded, 1 otherwise.

    An unknown agent is an error listing the agents, unless ``create`` (then it is created,
    with ``model`` when given, and the user is told). With ``json_output`` nothing is
    streamed: one JSON object (``ok``, ``session``, ``agent``, ``reply``, ``error``) is
    printed at the end."""
    out, err, stdin = out or sys.stdout, err or sys.stderr, stdin or sys.stdin
    config = load_daemon_config(config_file, data_dir=data_dir)
    models = _models(config, provider)
    runtime = None
    sid = None
    try:
        runtime = Runtime(models.config, providers=models.providers, reset_stale=False,
                          workspace_dir=Path(models.config.store.data_dir).expanduser() / "workspace")
        row = runtime.agent(agent)
        if row is None and not create:
            names = ", ".join(a.name for a in runtime.agents()) or "none yet"
            raise NotFoundError(f"no agent {agent!r} (agents: {names}); add --create to create it")
        if row is None or model:  # a model given for an existing agent must match it (ConflictError)
            created = row is None
            row = runtime.ensure_agent(agent, **({"model": model} if model else {}))
            if created:
                err.write(f"(created agent {agent!r} {'with model ' + model if model else 'with default settings'})\n")
        name = runtime.route(row)
        if name == "anthropic" and not runtime.has_provider("anthropic"):
            raise ConfigError(f"agent {agent!r} uses Anthropic, but ANTHROPIC_API_KEY is not set")
        target = runtime.provider(name)  # ConfigError naming the setting when it is missing
        if not target.health():
            raise ProviderUnreachable(unreachable_message(name, models.config))
        session = runtime.create_session(agent_id=row.id, source="cli", name=f"run: {prompt[:40]}",
                                         initial_prompt=prompt)
        sid = session.id
        if models.stub_url:  # after every check that can fail: an error never follows the banner
            err.write(models.banner + "\n")
        code, reply, failure = _stream(runtime, sid, prompt, name, models.config, None if json_output else out,
                                       err, stdin)
        if json_output:
            out.write(json.dumps({"ok": code == 0, "session": sid, "agent": row.name, "reply": reply,
                                  **({"error": failure} if failure else {})}) + "\n")
        elif failure:
            err.write(f"corvid-actors: {failure}\n")
        return code
    finally:
        if runtime is not None:
            if sid is not None:
                # Stopped here, not by shutdown(): a shutdown marks sessions for resume,
                # and a later daemon must not pick up this terminal's session.
                runtime.stop_process(sid, "user_stop")
            runtime.shutdown("user_stop")
        models.close()


def _stream(runtime: Any, sid: str, prompt: str, provider_name: str, config: Any, out: TextIO | None,
            err: TextIO, stdin: TextIO) -> tuple[int, str, str]:
    """Run the turn, streaming its text to ``out`` (None: only collect it); returns the exit
    code, the reply's text and what went wrong ("" when nothing did)."""
    inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
    started_text = [False]
    text: list[str] = []

    def on_event(session_id: str, event: Any) -> None:  # on the EventBus thread: print or hand over
        match event.type:
            case "content_block_delta":
                started_text[0] = True
                text.append(event.text)
                if out is not None:
                    out.write(event.text)
                    out.flush()
            case "tool_status" if event.status_message:
                err.write(f"\n[{event.status_message}]\n")
            case "approval_request":
                inbox.put(("approval", event))
            case "error":
                inbox.put(("error", event))
            case "result" | "session_exited" | "session_stopped" | "session_paused":
                inbox.put((event.type, event))

    runtime.subscribe(sid, on_event)
    runtime.start_process(sid, prompt)
    failure = ""
    while True:
        kind, event = inbox.get()
        if kind == "approval":
            _ask_approval(runtime, event, err, stdin)
        elif kind == "error":
            failure = (unreachable_message(provider_name, config) if event.error_type == "api_outage"
                       else f"{event.error_type}: {event.message}")
        elif kind == "result":
            if started_text[0] and out is not None:
                out.write("\n")
            if event.subtype != "success":
                return 1, "".join(text), f"the turn ended with {event.subtype}"
            return 0, "".join(text), ""
        else:  # the session ended without a result
            return 1, "".join(text), failure or f"the session ended ({kind})"


def _ask_approval(runtime: Any, event: Any, err: TextIO, stdin: TextIO) -> None:
    if not stdin.isatty():
        runtime.resolve_approval(event.id, "deny", "No terminal to ask for approval; use an agent whose "
                                                   "permission_mode allows this tool")
        err.write(f"\n[denied {event.tool_name}: no terminal to ask]\n")
        return
    # the description quotes the model's arguments: escapes must not disguise what is asked
    err.write(f"\nAllow {safe_text(event.description)}? [y]es / [n]o / [a]lways in this session: ")
    err.flush()
    answer = stdin.readline().strip().lower()
    behavior = {"y": "allow", "yes": "allow", "a": "allow_session", "always": "allow_session"}.get(answer, "deny")
    runtime.resolve_approval(event.id, behavior)
