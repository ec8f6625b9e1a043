"""Text is data in the operator CLI: session names, commands, model and tool text are
shown exactly as stored — never parsed as rich markup, never as terminal escapes — and
text from the command line or stdin that is not UTF-8 is refused before anything is done."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corvid_actors.daemon.admin_cli import read_message_text
from corvid_actors.daemon.render import render_table, show_approvals, show_sessions
from corvid_actors.errors import CorvidError

HOSTILE = ["[/bad]", "sed -e 's/[/]//' notes.txt", "see [bold]this[/bold] and [link]", "[red]x[/red]",
           "[link=file:///etc/passwd]click[/link]"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return False


def session_row(name: str) -> dict:
    return {"id": "0123456789", "name": name, "status": "idle", "agent": "a", "source": "web", "uptime_s": None,
            "restarts": 0, "paused_until": None, "pending_approvals": 0, "cost_usd": 0.0, "turns": 0}


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize("use_rich", [None, False])
def test_markup_in_cells_is_shown_verbatim(text, use_rich):
    out = Terminal()
    render_table(["A", "B"], [[text, "ok"]], out, use_rich=use_rich)
    assert text in out.getvalue()


@pytest.mark.parametrize("name", HOSTILE)
def test_sessions_table_with_a_markup_name_does_not_crash(name):
    out = Terminal()
    show_sessions([session_row(name)], out)
    assert name[:20] in out.getvalue()  # the NAME column shows 24 characters


def test_approvals_table_shows_a_command_with_brackets():
    out = Terminal()
    show_approvals([{"id": "abcd1234", "session_id": "0123456789", "tool_name": "run_command",
                     "description": "sed -e 's/[/]//' notes.txt", "created_at": "2026-01-01T00:00:00",
                     "timeout_s": 120}], out)
    assert "sed -e 's/[/]//' notes.txt" in out.getvalue()


@pytest.mark.parametrize("use_rich", [None, False])
def test_terminal_escapes_in_cells_are_made_visible_not_executed(use_rich):
    out = Terminal()
    render_table(["A"], [["evil\x1b[2Jclear\x07bell\x9bcsi"]], out, use_rich=use_rich)
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert "evil" in text and "clear" in text


def test_dash_reads_the_message_from_stdin():
    stdin = io.TextIOWrapper(io.BytesIO(b"line one\nline two [b]\n"), encoding="utf-8")
    assert read_message_text("-", stdin) == "line one\nline two [b]\n"
    assert read_message_text("plain", stdin) == "plain"


def test_a_large_message_comes_from_stdin_whole():
    big = "x" * (5 * 1024 * 1024)
    stdin = io.TextIOWrapper(io.BytesIO(big.encode()), encoding="utf-8")
    assert read_message_text("-", stdin) == big


def test_non_utf8_stdin_is_refused_with_one_line():
    stdin = io.TextIOWrapper(io.BytesIO(b"caf\xe9\n"), encoding="utf-8")
    with pytest.raises(CorvidError, match="not valid UTF-8"):
        read_message_text("-", stdin)


def test_non_utf8_argument_is_refused_before_anything_is_created(tmp_path):
    data_dir = tmp_path / "data"
    env = {**os.environ, "CORVID_DATA_DIR": str(data_dir), "PYTHONPATH": str(Path(__file__).parents[2]),
           "LC_ALL": "C.UTF-8"}
    done = subprocess.run([sys.executable, "-m", "corvid_actors", "run", "--agent", "x",
                           "--provider", "stub", b"caf\xe9"], env=env, capture_output=True, timeout=60)
    assert done.returncode == 2
    err = done.stderr.decode()
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "not valid UTF-8" in err
    assert not data_dir.exists()  # no database, no agent: refused before anything was done


def test_cli_main_refuses_surrogate_escaped_arguments(capsys):
    from corvid_actors.daemon.cli import main

    assert main(["admin", "send", "abcd", "caf\udce9"]) == 2
    err = capsys.readouterr().err
    assert "argument 4" in err and "not valid UTF-8" in err


def test_argparse_namespace_has_the_text(monkeypatch):
    # `admin send ID -`: the parser keeps "-" for read_message_text
    from corvid_actors.daemon.cli import build_parser

    args = build_parser().parse_args(["admin", "send", "abcd", "-"])
    assert isinstance(args, argparse.Namespace) and args.text == "-"


class TtyInput(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_foreground_approval_prompt_shows_escapes_not_executes_them(sim_clock, scripted, tmp_path):
    from corvid_actors.daemon.foreground import _ask_approval
    from corvid_actors.testing import EventRecorder, sim_runtime

    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws", loop_for_provider={"scripted": "direct"})
    try:
        recorder = EventRecorder.attach(rt)
        agent = rt.create_agent("asker", permission_mode="default")
        # "\r" + text would overwrite the real command on the operator's terminal
        scripted.tool_call("run_command", {"command": "touch x \r\x1b[2Kls"}, match="tidy")
        scripted.reply("ok", match="tidy")
        s = rt.create_session(agent_id=agent.id)
        rt.start_process(s.id, "tidy up")
        rt.settle()
        [ask] = [r.event for r in recorder.of(s.id, "approval_request")]
        err = Terminal()
        _ask_approval(rt, ask, err, TtyInput("n\n"))
        rt.settle()
        prompt = err.getvalue()
        assert "touch x \\x0d\\x1b[2Kls" in prompt and "\r" not in prompt and "\x1b" not in prompt
        assert rt.list_approvals() == []  # answered: denied
    finally:
        rt.shutdown()
