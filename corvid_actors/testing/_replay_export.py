"""A journaled session written as a self-contained pytest module (issue 40).

:func:`export_test` reads the session's journal, redacts secrets (:func:`redact_text`: the
log rules — a URL's password — and secret-named assignments, secret-looking tokens, the
values of this process's secret-named environment variables; then the operator's own
``redact`` hook), and writes a module that imports only :mod:`corvid_actors.testing`: the
recording as a literal, the expected events, and one test that replays it (``--tolerate``,
``--explore N``: the pytest plugin's options).
"""

from __future__ import annotations

import importlib
import os
import pprint
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from corvid_actors.testing._recording import Recording, load_recording
from corvid_actors.tools.env import SECRET_NAME_PATTERN

Redactor = Callable[[str], str]

MASK = "***"
#: ``scheme://user:password@`` — the password, as the daemon's logs hide a database URL's
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/\s:@]*:)(?P<secret>[^@\s/]+)(?=@)", re.IGNORECASE)
#: ``NAME=value``, ``NAME: value``, ``"NAME": "value"`` with a secret-looking NAME
_ASSIGNMENT = re.compile(r"""(?P<head>\b(?P<name>[A-Za-z_][A-Za-z0-9_]*)["']?\s*[=:]\s*["']?)(?P<secret>[^\s"',;]+)""")
#: provider keys and tokens by their shape
_TOKENS = re.compile(r"\b(?:sk-ant-[A-Za-z0-9_-]{8,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
                     r"|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})\b")
_BEARER = re.compile(r"(?P<head>\b[Bb]earer\s+)(?P<secret>[A-Za-z0-9._~+/=-]{8,})")
#: an environment value shorter than this is not treated as a secret (too many false hits)
MIN_ENV_SECRET = 6


def _env_secrets() -> list[str]:
    return sorted({v for k, v in os.environ.items() if SECRET_NAME_PATTERN.search(k) and len(v) >= MIN_ENV_SECRET},
                  key=len, reverse=True)


def redact_text(text: str, env_secrets: list[str] | None = None) -> str:
    """``text`` with what looks like a secret replaced by ``***``."""
    for value in env_secrets if env_secrets is not None else _env_secrets():
        if value in text:
            text = text.replace(value, MASK)
    text = _URL_PASSWORD.sub(lambda m: m["head"] + MASK, text)
    text = _ASSIGNMENT.sub(lambda m: m["head"] + MASK if SECRET_NAME_PATTERN.search(m["name"]) else m[0], text)
    text = _BEARER.sub(lambda m: m["head"] + MASK, text)
    return _TOKENS.sub(MASK, text)


def load_redactor(spec: str) -> Redactor:
    """``module:function`` → the function (a ``str -> str``); ValueError saying what is wrong."""
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        raise ValueError(f"--redact {spec!r}: expected MODULE:FUNCTION, e.g. mycompany.redact:scrub")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--redact {spec!r}: cannot import {module_name!r} ({exc})") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ValueError(f"--redact {spec!r}: {module_name} has no function {func_name!r}")
    return func


def _walk(value: Any, fn: Redactor) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_walk(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, fn) for k, v in value.items()}
    return value


def redact_recording(recording: Recording, redact: Redactor | None = None) -> Recording:
    """A copy of ``recording`` with every text redacted (the built-in rules, then ``redact``)."""
    secrets = _env_secrets()

    def scrub(text: str) -> str:
        text = redact_text(text, secrets)
        return redact(text) if redact is not None else text

    return Recording(recording.session_id, _walk(recording.entries, scrub),
                     capture_content=recording.capture_content, started_at=recording.started_at)


TEMPLATE = '''"""Replay of session {sid} (agent {agent!r}, {provider}/{model}, {loop} loop), recorded {when}.

Written by `corvid-actors export-test`: the model's responses, the tool results (at their
durations), the user messages, the approvals (as their answerers gave them), the actor's
crashes and the outage's health probes as the session's journal kept them, replayed in
simulated time (no model, no command runs). The test fails with ReplayDivergence at the first model or
tool call that differs from the recorded one, or at the first event that differs.
{content_note}
    python -m pytest {filename}                  # replay
    python -m pytest {filename} --tolerate       # accept prompt-only changes
    python -m pytest {filename} --explore 50     # and 50 seeded interleavings
"""

from corvid_actors.testing.replay import Recording, explore, replay

#: the journal: model calls, tool calls, user messages, approvals, events (t: seconds)
RECORDING = Recording.from_dict({recording})

#: the session's events as recorded: (type, seconds since the start, key fields)
EXPECTED_EVENTS = [
{events}
]

#: how far a replayed event's time may be from the recorded one (seconds)
TIME_TOLERANCE_S = {tolerance!r}


def test_replay(replay_options):
    replay(RECORDING, tolerate=replay_options.tolerate, expected_events=EXPECTED_EVENTS,
           time_tolerance_s=TIME_TOLERANCE_S)
    if replay_options.explore:
        explore(RECORDING, replay_options.explore, tolerate=replay_options.tolerate).assert_ok()
'''

NO_CONTENT_NOTE = '''
THIS RECORDING CANNOT REPLAY TEXT: the journal kept shapes and timings only
([journal] capture_content = false). Replies, prompts and tool results are stand-ins of the
recorded lengths; the calls, tools, message counts, errors and times are checked.
'''


MANY_TEMPLATE = '''"""Replay of {count} sessions together ({provider}, {loop} loop), recorded from {when}.

Written by `corvid-actors export-test`: each session's model responses, tool results, user
messages and approvals as the journal kept them, replayed on one simulated runtime (no
model, no command runs). The test fails with ReplayDivergence at the first model or tool
call of a session that differs from its recording, or at the first event that differs.
{content_note}
    python -m pytest {filename}                  # replay
    python -m pytest {filename} --tolerate       # accept prompt-only changes
    python -m pytest {filename} --explore 5      # and 5 seeded interleavings
"""

from corvid_actors.testing.replay import Recording, explore, replay_all

#: the journals: model calls, tool calls, user messages, approvals, events (t: seconds)
RECORDINGS = [Recording.from_dict(r) for r in {recordings}]

#: each session's events as recorded: (type, seconds since its start, key fields)
EXPECTED_EVENTS = {events}

#: how far a replayed event's time may be from the recorded one (seconds)
TIME_TOLERANCE_S = {tolerance!r}


def test_replay(replay_options):
    replay_all(RECORDINGS, tolerate=replay_options.tolerate, expected_events=EXPECTED_EVENTS,
               time_tolerance_s=TIME_TOLERANCE_S)
    if replay_options.explore:
        for recording in RECORDINGS:
            explore(recording, replay_options.explore, tolerate=replay_options.tolerate).assert_ok()
'''


def _shift(recording: Recording, by: float) -> Recording:
    """``recording`` with its times moved ``by`` seconds later (sessions of one day replay
    at their places in it)."""
    moved = []
    for entry in recording.entries:
        entry = dict(entry)
        for key in ("t", "requested_at", "ended_at", "first_chunk_at"):
            if entry.get(key) is not None:
                entry[key] = round(float(entry[key]) + by, 6)
        moved.append(entry)
    return Recording(recording.session_id, moved, recording.capture_content, recording.started_at - by)


def render_many(recordings: list[Recording], *, filename: str = "test_replay.py",
                time_tolerance_s: float = 1.0) -> str:
    """One module replaying ``recordings`` (already redacted) together, each at its place in
    time relative to the first one's start."""
    t0 = min(r.started_at for r in recordings)
    placed = [_shift(r, r.started_at - t0) for r in recordings]
    start = placed[0].start
    when = datetime.fromtimestamp(t0, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    events = "[\n" + ",\n".join("    " + pprint.pformat(r.events, width=110, compact=True) for r in placed) + "\n]"
    return MANY_TEMPLATE.format(
        count=len(placed), provider=start.get("provider"), loop=start.get("loop"), when=when,
        content_note="" if all(r.capture_content for r in placed) else NO_CONTENT_NOTE, filename=filename,
        recordings=pprint.pformat([r.to_dict() for r in placed], indent=1, width=110, sort_dicts=False),
        events=events, tolerance=time_tolerance_s)


def render_test(recording: Recording, *, filename: str = "test_replay.py", time_tolerance_s: float = 1.0) -> str:
    """The pytest module for ``recording`` (already redacted)."""
    start = recording.start
    events = ",\n".join(f"    {row!r}" for row in recording.events)
    when = datetime.fromtimestamp(recording.started_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return TEMPLATE.format(
        sid=recording.session_id, agent=(start.get("agent") or {}).get("name") or "", provider=start.get("provider"),
        model=start.get("model"), loop=start.get("loop"), when=when,
        content_note="" if recording.capture_content else NO_CONTENT_NOTE, filename=filename,
        recording=pprint.pformat(recording.to_dict(), indent=1, width=110, sort_dicts=False),
        events=events, tolerance=time_tolerance_s)


def export_test(source: Any, session_id: str | Sequence[str], path: str | Path | None = None, *,
                redact: Redactor | str | None = None, time_tolerance_s: float = 1.0) -> str:
    """Write the replay test of ``session_id`` (journaled in ``source``: a ``Runtime``, a
    ``Store`` or a store URL) to ``path`` (None: only return it); returns the module's text.
    Several session ids: one module replaying them together (:func:`replay_all`), each at
    its recorded place in time. ``redact``: the operator's own redaction (a ``str -> str``
    function or ``"module:func"``), applied after the built-in rules."""
    hook = load_redactor(redact) if isinstance(redact, str) else redact
    ids = [session_id] if isinstance(session_id, str) else list(session_id)
    recordings = [redact_recording(load_recording(source, sid), hook) for sid in ids]
    filename = Path(path).name if path is not None else "test_replay.py"
    if len(recordings) == 1:
        text = render_test(recordings[0], filename=filename, time_tolerance_s=time_tolerance_s)
    else:
        text = render_many(recordings, filename=filename, time_tolerance_s=time_tolerance_s)
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text
