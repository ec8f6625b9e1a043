"""``corvid-actors demo``: a real run of the runtime in simulated time, with a scripted model.

Four sessions on SQLite: two answer normally, one chat session crashes twice and is
restarted with backoff (+5 s, +15 s), one hits an API outage, is paused and is resumed
automatically after a passing health probe (+5 min). The timeline of every event is
printed. The model is scripted (no network, no GPU): the supervision is real.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import TextIO

from corvid_actors.config import Config
from corvid_actors.errors import ConfigError
from corvid_actors.events import (
    Assistant,
    ErrorEvent,
    Event,
    Result,
    SessionError,
    SessionExited,
    SessionPaused,
    SessionRestarting,
    SessionResumed,
    SessionStarted,
    SessionStopped,
    SystemEvent,
    to_dict,
)
from corvid_actors.runtime import Runtime

QUIET = {"thinking", "content_block_delta", "context_usage", "message_stop"}


def describe(event: Event) -> str:
    """One line of the demo's timeline for ``event``."""
    match event:
        case SessionStarted():
            return "started"
        case Assistant(content=content):
            return f'assistant: "{content}"'
        case Result(subtype=subtype):
            return f"turn finished ({subtype})"
        case ErrorEvent(error_type=kind, message=message):
            return f"error [{kind}] {message}"
        case SessionError(error_type=kind, severity=severity, message=message):
            return f"session_error [{kind}, {severity}] {message}"
        case SessionExited(code=code):
            return f"exited with code {code}"
        case SessionRestarting(attempt=attempt, delay_s=delay_s):
            return f"restart #{attempt} scheduled in {delay_s:g}s"
        case SessionPaused(resume_at=resume_at, attempt=attempt):
            return f"paused until {resume_at[11:19]}Z (attempt {attempt})"
        case SessionResumed(automatic=automatic):
            return "resumed " + ("automatically" if automatic else "by hand")
        case SessionStopped(reason=reason):
            return f"stopped ({reason})"
        case SystemEvent(subtype=subtype, message=message):
            return f"{subtype}: {message}"
    return event.type


def run_demo(out: TextIO, *, db_path: Path | None = None, minutes: float = 30.0, keep: bool = False,
             json_output: bool = False) -> int:
    """Run the scenario and print its timeline to ``out``; returns the number of events.

    Its temporary directory (database unless ``db_path``, workspace) is removed at the end
    unless ``keep``. Bad arguments raise :class:`ConfigError` before anything is created."""
    if not minutes > 0 or minutes != minutes or minutes == float("inf"):
        raise ConfigError(f"--minutes must be a positive number of simulated minutes, not {minutes:g}")
    if db_path is not None and not db_path.parent.is_dir():
        raise ConfigError(f"--db {db_path}: the directory {db_path.parent} does not exist (create it first, "
                          "or leave --db out for a temporary database)")
    try:
        import freezegun  # noqa: F401 - the simulated clock is built on it
    except ImportError as exc:
        raise ConfigError(f"the demo runs in simulated time, which needs the test extras: "
                          f"pip install 'corvid-actors[test]' ({exc})") from None
    workdir = Path(tempfile.mkdtemp(prefix="corvid-demo-"))
    try:
        return _run(out, workdir, db_path or workdir / "corvid.db", minutes, json_output, keep)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _run(out: TextIO, workdir: Path, db_path: Path, minutes: float, json_output: bool, keep: bool) -> int:
    # imported here: SimClock needs freezegun, an optional dependency (the test extra)
    from corvid_actors.testing import EventRecorder, ScriptedProvider, SimClock, sim_runtime

    clock = SimClock()
    model = ScriptedProvider(clock, default_reply="Noted.")
    try:
        runtime = sim_runtime(clock, model, config=Config(), store_url=f"sqlite:///{db_path}",
                              workspace_dir=workdir / "workspace")
    except BaseException:
        clock.close()
        raise
    recorder = EventRecorder.attach(runtime)
    names: dict[str, str] = {}
    try:
        agent = runtime.create_agent("corvid", system_prompt="You are Corvid, a concise assistant.")
        plans = [
            ("alice (web)", "web", "What is an actor?", [("reply", "An actor owns its state and talks by messages.")]),
            ("bob (chat)", "chat", "Summarise my day.", [("crash", "model server crashed"),
                                                        ("crash", "model server crashed again"),
                                                        ("reply", "Your day: three meetings and a walk.")]),
            ("carol (chat)", "chat", "Translate 'hello'.", [("outage", "connection refused")]),
            ("dave (web)", "web", "Pick a number.", [("reply", "Seven.")]),
        ]
        for label, source, prompt, script in plans:
            session = runtime.create_session(agent_id=agent.id, source=source, name=label)
            names[session.id] = label
            for kind, text in script:
                if kind == "reply":
                    model.reply(text, deltas=3, latency_s=2.0, match=prompt)
                elif kind == "crash":
                    model.crash(text, match=prompt, latency_s=1.0)
                else:
                    model.outage(text, match=prompt, latency_s=1.0)
            runtime.start_process(session.id, prompt)
        model.health_results = [True]
        clock.advance(minutes * 60)
        if json_output:
            out.write(json.dumps({
                "ok": True, "database": str(db_path) if keep or db_path.parent != workdir else None,
                "events": [{"at_s": r.at, "session": names.get(r.session_id, "?"), **to_dict(r.event)}
                           for r in recorder.events if r.type not in QUIET],
                "sessions": {label: {"status": _status(runtime, sid),
                                     "messages": runtime.message_count(sid)} for sid, label in names.items()},
            }) + "\n")
            return len(recorder.events)
        out.write("corvid-actors demo — scripted model (no network), real supervision, simulated time\n")
        out.write(f"database: {db_path}{'' if keep or db_path.parent != workdir else ' (removed at exit; --keep keeps it)'}\n\n")
        out.write(f"{'sim time':>9}  {'session':<13} event\n")
        for record in recorder.events:
            if record.type in QUIET:
                continue
            minutes_, seconds = divmod(record.at, 60)
            out.write(f"{int(minutes_):>5}:{seconds:06.3f}  {names.get(record.session_id, '?'):<13} "
                      f"{describe(record.event)}\n")
        out.write("\nfinal states:\n")
        for sid, label in names.items():
            out.write(f"  {label:<13} {_status(runtime, sid):<8} messages={runtime.message_count(sid)}\n")
        return len(recorder.events)
    finally:
        runtime.shutdown()
        clock.close()


def _status(runtime: Runtime, session_id: str) -> str:
    """The session's stored status (the demo deletes none; "deleted" if one went missing)."""
    row = runtime.session(session_id)
    return str(row.status) if row is not None else "deleted"
