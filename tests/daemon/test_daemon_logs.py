"""Logs an operator can keep (issue 38 item 3): loguru's rotation and retention in a temp
directory, the trace id of an active OpenTelemetry span, and SIGHUP re-opening the log file
of a real daemon (as an external logrotate needs), with each session record's agent and turn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.test_daemon import READY_S, WAIT_S, Daemon, daemons  # noqa: F401 - the fixture

#: logs 300 lines of a session into DIR/corvid.log, rotated at 2 KB, 3 files kept, with a
#: span active for the last line; prints nothing (the test reads the files)
WRITER = """
import sys
from pathlib import Path
from loguru import logger
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from corvid_actors.daemon.logs import DaemonLogs
from corvid_actors.daemon.settings import load_daemon_config

data_dir = Path(sys.argv[1])
config = load_daemon_config(None, data_dir=str(data_dir), log_file="corvid.log", log_rotation="2 KB",
                            log_retention="3", log_format="json")
logs = DaemonLogs(config, data_dir)
logs.open()
logs.follow_sessions(lambda sid: {"agent": "scribe", "turn": 7})
for n in range(300):
    logger.bind(session_id="3f2a9c1e").info("line {} of a long session", n)
span = NonRecordingSpan(SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=False,
                                    trace_flags=TraceFlags(TraceFlags.SAMPLED)))
with trace.use_span(span):
    logger.bind(session_id="3f2a9c1e").info("inside a span")
logger.info("no session here")
logger.remove()
"""


def test_the_log_file_rotates_keeps_its_retention_and_names_session_agent_turn_and_trace(tmp_path):
    done = subprocess.run([sys.executable, "-c", WRITER, str(tmp_path)], capture_output=True, text=True,
                          timeout=READY_S)
    assert done.returncode == 0, done.stderr
    current = tmp_path / "corvid.log"
    rotated = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("corvid.") and p != current)
    assert len(rotated) == 3, rotated  # log_retention = 3: older rotated files were removed
    assert all(p.stat().st_size <= 2048 + 512 for p in tmp_path.iterdir() if p.name.startswith("corvid."))
    records = [json.loads(line) for line in current.read_text().splitlines()]
    span_line, plain = records[-2], records[-1]
    assert span_line["message"] == "inside a span" and span_line["trace_id"] == f"{0xABC:032x}"
    assert (span_line["session_id"], span_line["agent"], span_line["turn"]) == ("3f2a9c1e", "scribe", 7)
    assert "session_id" not in plain and "trace_id" not in plain and "turn" not in plain


def _wait_for_text(path: Path, text: str, timeout_s: float = WAIT_S) -> str:
    """``path``'s content once it holds ``text`` (bounded: the file is looked at every 50 ms)."""
    deadline = time.monotonic() + timeout_s
    while True:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        assert time.monotonic() < deadline, f"{path} holds no {text!r} after {timeout_s} s:\n{content[-2000:]}"
        time.sleep(0.05)


def test_sighup_reopens_the_log_file_so_new_lines_land_in_a_new_file(daemons, tmp_path):  # noqa: F811
    daemon = daemons(tmp_path / "data", detach=True, reply="noted", chunk_delay_s=0.01,
                     extra_config='log_file = "corvid.log"\n', args=("--log-format", "json"))
    log = daemon.data_dir / "corvid.log"
    _wait_for_text(log, "daemon ready")
    log.rename(daemon.data_dir / "corvid.log.1")  # what logrotate does, before it signals
    os.kill(daemon.pid, signal.SIGHUP)
    _wait_for_text(log, "log re-opened (SIGHUP)")
    sid = daemon.call("start", agent="logged", prompt="hello")["session"]
    content = _wait_for_text(log, "turn finished")
    old = (daemon.data_dir / "corvid.log.1").read_text()
    assert "daemon ready" in old and sid not in old
    finished = next(json.loads(line) for line in content.splitlines() if "turn finished" in line)
    assert (finished["session_id"], finished["agent"], finished["turn"]) == (sid, "logged", 1)
    started = next(json.loads(line) for line in content.splitlines() if "session started" in line)
    assert (started["agent"], started["turn"]) == ("logged", 1)
