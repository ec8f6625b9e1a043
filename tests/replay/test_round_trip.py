"""Record and replay through a real daemon (issue 40 item 5).

A ``serve`` subprocess with ``[journal] enabled`` runs one session on the stub Ollama model:
a tool call the operator approves on the admin socket (journaled as answered by
``admin:<user>``), a fatal model error (the session crashes and is restarted after its
backoff), an upstream outage (paused, resumed after a passing probe), an actor crash that
is not the model's (``admin crash``, ``[daemon] allow_fault_commands``) and its restart. The session
is exported with ``corvid-actors export-test``; the exported file passes in a fresh
``python -m pytest``; a copy whose loop rule is changed reports the divergence at the step
where the rule first acts.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from corvid_actors.daemon import cli
from tests.e2e.test_daemon import Daemon, Follower

#: a fresh interpreter importing the runtime and pytest, on a loaded 2-core machine
PYTEST_S = 120.0

CONFIG = """
[supervisor]
auto_restart_sources = ["chat", "web"]
restart_backoff_base_s = 0.2
auto_resume_base_s = 0.3
auto_resume_check_interval_s = 0.1
coalesce_deltas = false
[direct_loop]
api_failure_threshold = 1
[journal]
enabled = true
"""

SCRIPT = [
    {"match": "please list", "tool_calls": [["list_files", {"path": "."}]]},
    {"match": "fail hard", "fault": "http_500", "status": 404, "error": "model exploded"},
    {"match": "go offline", "fault": "http_503"},
]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OLLAMA_", "CORVID_"))}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])  # this tree's corvid_actors, in the child too
    return env


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Daemon, str, Path]:
    """One recorded daemon session, exported (shared by the tests of this module)."""
    tmp_path = tmp_path_factory.mktemp("round-trip")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    daemon = Daemon(data_dir, chunk_delay_s=0.01, reply="All done here.", extra_config=CONFIG)
    daemon.script.write_text(json.dumps(SCRIPT))
    daemon.config.write_text(daemon.config.read_text().replace("[daemon]\n", "[daemon]\nallow_fault_commands = true\n"))
    try:
        daemon.start()
        follower = Follower(daemon)
        try:
            sid = daemon.call("start", agent="careful", prompt="please list the files")["session"]
            [asked] = follower.wait(lambda: follower.events(sid, "approval_request"))
            assert daemon.call("approve", approval=asked["id"])
            follower.wait(lambda: follower.events(sid, "result"))
            assert daemon.call("send", session=sid, text="now fail hard")["delivered"] is True
            follower.wait(lambda: len(follower.events(sid, "session_started")) == 2)
            follower.wait(lambda: len(follower.events(sid, "result")) >= 3)
            assert daemon.call("send", session=sid, text="then go offline")["delivered"] is True
            follower.wait(lambda: follower.events(sid, "session_resumed"))
            follower.wait(lambda: len([e for e in follower.events(sid, "result") if e["subtype"] == "success"]) >= 3)
            assert daemon.call("crash", session=sid) == {"session": sid, "crashed": True}
            follower.wait(lambda: len(follower.events(sid, "session_restarting")) == 2)
            follower.wait(lambda: len(follower.events(sid, "session_started")) == 4)
        finally:
            follower.close()
        out = tmp_path / "test_incident.py"
        code = cli.main(["export-test", sid[:8], "-o", str(out), "--data-dir", str(data_dir)])
        assert code == 0
    finally:
        daemon.kill()
    return daemon, sid, out


def _pytest(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path), *args],
                          cwd=path.parent, env=_env(), capture_output=True, text=True, timeout=PYTEST_S)


def test_a_daemon_session_exported_replays_in_a_fresh_pytest(recorded):
    _daemon, sid, path = recorded
    text = path.read_text()
    assert sid in text and "from corvid_actors.testing.replay import" in text
    for kind in ("'approval'", "'tool'", "'session_restarting'", "'session_paused'", "'session_resumed'",
                 "'kind': 'crash'", "'kind': 'probe'", "InjectedCrashError"):
        assert kind in text, kind
    assert f"'answered_by': 'admin:{pwd.getpwuid(os.getuid()).pw_name}'" in text  # who approved, journaled
    run = _pytest(path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


#: the copy's changed rule: the resume prompt after a crash words its instruction differently
CHANGED_RULE = """

import corvid_actors.loop.prompts as _prompts
_prompts.RESUME_INSTRUCTION_INTERRUPTED = "History of this session follows; carry on from where it stopped."
"""


def test_a_changed_loop_rule_reports_the_divergence_at_its_step(recorded):
    _daemon, _sid, path = recorded
    changed = path.with_name("test_changed_rule.py")
    changed.write_text(path.read_text() + CHANGED_RULE)
    run = _pytest(changed)
    assert run.returncode == 1, run.stdout + run.stderr
    # steps: 1 the model asks list_files, 2 the tool, 3 the reply, 4 the fatal error, 5 the
    # first call after the restart: the resume prompt, where the changed rule first acts
    assert "corvid_actors.testing.replay.ReplayDivergence: replay diverged at step 5" in run.stdout, run.stdout
    assert "a different last user message" in run.stdout
    assert "asked 'History of this session follows; carry on" in run.stdout  # what was asked
    tolerated = _pytest(changed, "--tolerate")  # a prompt-only change
    assert tolerated.returncode == 0, tolerated.stdout + tolerated.stderr


def test_the_exported_test_explores_interleavings(recorded):
    _daemon, _sid, path = recorded
    run = _pytest(path, "--explore", "3")
    assert run.returncode == 0, run.stdout + run.stderr
