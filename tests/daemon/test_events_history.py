"""``corvid-actors events ID`` prints the session's history first, then follows (issue 38
item 4): through the real CLI, in a subprocess, against a real daemon; every wait bounded."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from tests.e2e.test_daemon import READY_S, WAIT_S, Daemon, Follower, _env, daemons  # noqa: F401 - the fixture


def _events_command(daemon: Daemon, *args: str) -> list[str]:
    return [sys.executable, "-m", "corvid_actors", "events", *args, "--data-dir", str(daemon.data_dir)]


def _until(daemon: Daemon, sid: str, event_type: str, act: Callable[[], Any]) -> Any:
    """``act()``, then wait (bounded) for the session's next ``event_type``; returns what
    ``act`` returned."""
    follower = Follower(daemon, sid)
    try:
        done = act()
        follower.wait(lambda: follower.events(sid, event_type))
        return done
    finally:
        follower.close()


def _finished_session(daemon: Daemon, prompt: str) -> str:
    sid = daemon.call("start", agent="historian", prompt=prompt)["session"]
    daemon.wait_log(f"[{sid[:8]}/historian#1] turn finished", READY_S)
    return sid


def _lines_until(proc: subprocess.Popen[bytes], wanted: str, timeout_s: float) -> list[str]:
    """Lines of ``proc``'s stdout until one holds ``wanted`` (bounded: select on the pipe)."""
    assert proc.stdout is not None
    fd, buffer, lines = proc.stdout.fileno(), b"", []
    while not any(wanted in line for line in lines):
        ready, _, _ = select.select([fd], [], [], timeout_s)
        assert ready, f"`events` printed no {wanted!r} within {timeout_s} s; it printed {lines}"
        chunk = os.read(fd, 65536)
        assert chunk, f"`events` ended before printing {wanted!r}; it printed {lines}"
        buffer += chunk
        *done, buffer = buffer.split(b"\n")
        lines += [line.decode() for line in done]
    return lines


def test_events_of_a_finished_turn_prints_it_and_then_follows(daemons, tmp_path):  # noqa: F811
    daemon = daemons(tmp_path / "data", reply="the answer", chunk_delay_s=0.01)
    sid = _finished_session(daemon, "what is the question")
    proc = subprocess.Popen(_events_command(daemon, sid[:8]), env=_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        history = _lines_until(proc, "turn finished", WAIT_S)
        assert "user: what is the question" in history[0]
        assert any(" assistant " in line and "the answer" in line for line in history)
        assert proc.poll() is None, "a running session is followed after its history"
        daemon.call("send", session=sid, text="and the next one")  # then what happens next comes live
        live = _lines_until(proc, "turn finished", WAIT_S)
        assert any(" assistant " in line for line in live), live
    finally:
        proc.kill()
        proc.wait(WAIT_S)


def test_events_of_a_stopped_session_prints_its_history_and_exits_0(daemons, tmp_path):  # noqa: F811
    daemon = daemons(tmp_path / "data", reply="the answer", chunk_delay_s=0.01)
    sid = _finished_session(daemon, "first question")
    _until(daemon, sid, "result", lambda: daemon.call("send", session=sid, text="second question"))
    assert _until(daemon, sid, "session_stopped", lambda: daemon.call("stop", session=sid))["was_running"]
    done = subprocess.run(_events_command(daemon, sid), env=_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=READY_S)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # the default: the current turn (none: it stopped) and the last finished one
    assert "user: second question" in lines[0] and not any("first question" in line for line in lines)
    assert any(" result " in line for line in lines) and "session stopped (user_stop)" in lines[-1]

    tail = subprocess.run(_events_command(daemon, sid, "--tail", "1", "--json"), env=_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=READY_S)
    assert tail.returncode == 0 and len(tail.stdout.splitlines()) == 1
    assert '"session_stopped"' in tail.stdout

    since = subprocess.run(_events_command(daemon, sid, "--since", "10m"), env=_env(),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=READY_S)
    assert since.returncode == 0 and "user: first question" in since.stdout.splitlines()[0]
