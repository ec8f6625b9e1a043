"""Exploring a recording's interleavings (issue 40 item 4) and exporting it as a test
(item 2): the invariants, the module written, the redaction and the command line's errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from corvid_actors.config import Config
from corvid_actors.daemon import cli
from corvid_actors.events import (
    CreditsLow,
    Result,
    SessionRestarting,
    SessionStarted,
    SessionStopped,
    ToolStatus,
)
from corvid_actors.testing._replay_checks import invariant_breaches
from corvid_actors.testing._replay_export import load_redactor, redact_text, render_test
from corvid_actors.testing.replay import Recording, explore, export_test
from tests.replay.recording import record_session

SUP = Config().supervisor


@pytest.fixture(scope="module")
def recording() -> Recording:
    return record_session()[0]


def test_explored_interleavings_of_a_recording_keep_the_invariants(recording):
    report = explore(recording, 8)
    assert report.seeds == 8 and report.failures == {}
    report.assert_ok()


@pytest.mark.parametrize(("events", "breach"), [
    ([(1.0, Result()), (2.0, Result()), (3.0, Result()), (4.0, Result())], "4 results for 3 user turns"),
    ([(1.0, SessionStopped()), (2.0, ToolStatus())], "tool_status at 2.000s after session_stopped"),
    ([(1.0, CreditsLow(remaining=-2))], "credits went negative (-2)"),
    ([(1.0, SessionRestarting(attempt=1, delay_s=9.0))], "restart 1 after 9.0s, beyond the backoff 5.0s"),
    ([(1.0, SessionRestarting(attempt=4, delay_s=5.0))], "restart attempt 4 beyond max_restarts 3"),
    ([(1.0, SessionRestarting(attempt=1, delay_s=5.0)), (3.0, SessionStarted())],
     "restart 1 started at 3.000s, before its backoff ended (6.000s)"),
])
def test_each_invariant_names_what_broke(recording, events, breach):
    assert any(breach in b for b in invariant_breaches(events, recording, SUP)), invariant_breaches(
        events, recording, SUP)


def test_a_good_sequence_breaks_no_invariant(recording):
    events = [(0.0, SessionStarted()), (1.0, Result()), (2.0, SessionRestarting(attempt=1, delay_s=5.0)),
              (7.0, SessionStarted()), (8.0, SessionStopped()), (9.0, SessionStarted())]
    assert invariant_breaches(events, recording, SUP) == []


@pytest.mark.parametrize(("text", "kept", "gone"), [
    ("postgresql://corvid:hunter2@db:5432/x", "postgresql://corvid:***@db", "hunter2"),
    ("export OPENAI_API_KEY=abcd1234efgh", "OPENAI_API_KEY=***", "abcd1234efgh"),
    ('{"github_token": "zzyyxx998877"}', '"github_token": "***"', "zzyyxx998877"),
    ("key sk-ant-api03-AbCdEfGhIjKlMn here", "key *** here", "sk-ant-api03"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1", "Bearer ***", "eyJhbGciOiJIUzI1"),
    ("GIT_AUTHOR_NAME=alice", "GIT_AUTHOR_NAME=alice", "***"),
])
def test_secrets_are_redacted_as_in_the_logs(text, kept, gone):
    redacted = redact_text(text, [])
    assert kept in redacted and gone not in redacted


def test_this_processs_secret_environment_values_are_redacted(monkeypatch):
    monkeypatch.setenv("CORVID_TEST_SECRET_TOKEN", "very-private-value")
    assert redact_text("the value is very-private-value.") == "the value is ***."


def test_the_exported_module_is_self_contained_and_redacted(tmp_path):
    rec, _ = record_session()
    path = tmp_path / "test_exported.py"

    text = render_test(rec)
    assert "from corvid_actors.testing.replay import" in text
    imports = [line for line in text.splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["from corvid_actors.testing.replay import Recording, explore, replay"]
    assert "token=abc123" in text  # the hook below is what removes it
    from corvid_actors.testing._replay_export import redact_recording

    scrubbed = render_test(redact_recording(rec, lambda s: s.replace("Done here", "Finished")))
    assert "token=***" in scrubbed and "abc123" not in scrubbed and "Finished" in scrubbed
    path.write_text(scrubbed)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_recording_without_content_says_it_cannot_replay_text():
    rec, _ = record_session(config={"journal": {"enabled": True, "capture_content": False}})
    assert "THIS RECORDING CANNOT REPLAY TEXT" in render_test(rec)
    assert "CANNOT REPLAY TEXT" not in render_test(record_session()[0])


@pytest.mark.parametrize(("spec", "message"), [
    ("nocolon", "expected MODULE:FUNCTION"),
    ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
    ("os.path:no_such_function", "has no function 'no_such_function'"),
])
def test_a_bad_redact_hook_is_a_clear_error(spec, message):
    with pytest.raises(ValueError, match=message):
        load_redactor(spec)


def test_export_test_on_the_command_line_refuses_an_unknown_session(tmp_path, capsys):
    code = cli.main(["export-test", "deadbeef", "--data-dir", str(tmp_path)])
    assert code == 1
    err = capsys.readouterr().err
    assert "'deadbeef' is not a journaled session" in err and "[journal]" in err


def test_export_test_writes_a_file_from_a_store(tmp_path):
    db = tmp_path / "corvid.db"
    from corvid_actors.db.store import Store

    store = Store(f"sqlite:///{db}")
    try:
        rec, facts = record_session(store=store)
        path = tmp_path / "test_x.py"
        text = export_test(store, facts["session_id"], path, redact="tests.replay.test_explore_and_export:shout")
    finally:
        store.close()
    assert path.read_text() == text and "LIST PLEASE" in text


def shout(text: str) -> str:
    """A ``--redact`` hook for the test above."""
    return text.upper() if text == "list please" else text
