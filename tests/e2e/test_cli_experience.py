"""The ``corvid-actors`` command as a user meets it: the real entry point in a subprocess,
its exit codes, stdout and stderr.

Every failure is one line naming the problem and the fix (JSON under ``--json``), nothing
is modified by a failed command, and a plain install (no test extras) runs the daemon on
the built-in stub. Every subprocess is bounded; every daemon is stopped in teardown.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: an interpreter start plus the runtime's imports on a loaded 2-core machine
CLI_S = 60.0

#: a no-extras install: these imports fail as if the packages were not installed
NO_EXTRAS = """
import sys
class _NotInstalled:
    blocked = ("freezegun", "pytest", "_pytest", "psycopg2", "dateutil")
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
from corvid_actors.daemon.cli import main
sys.exit(main())
"""


def entry_point() -> list[str]:
    """The installed ``corvid-actors`` script of this interpreter (its code comes from this
    tree through PYTHONPATH), or ``python -m corvid_actors`` when none is installed."""
    script = Path(sys.executable).parent / "corvid-actors"
    return [str(script)] if script.exists() else [sys.executable, "-m", "corvid_actors"]


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OLLAMA_", "CORVID_"))}
    clean["PYTHONPATH"] = str(ROOT) + os.pathsep + clean.get("PYTHONPATH", "")
    clean["OLLAMA_HOST"] = closed_port_url()  # no model server answers: the stub stands in
    return {**clean, **extra}


def cli(*args: str, timeout: float = CLI_S, **kwargs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*entry_point(), *args], env=env(**kwargs), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The failure is exactly one line on stderr, naming the problem; nothing on stdout."""
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if "WARNING" not in line]
    assert len(lines) == 1 and lines[0].startswith("corvid-actors"), result.stderr
    assert result.stdout == ""
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    return path


@pytest.fixture
def detached(tmp_path: Path) -> Iterator[dict]:
    """A daemon started as the README starts it (``serve --detach``), stopped afterwards."""
    data = private_dir(tmp_path / "data")
    started = cli("serve", "--detach", "--json", "--data-dir", str(data))
    assert started.returncode == 0, started
    about = json.loads(started.stdout)
    about["data_dir_path"] = data
    yield about
    try:
        os.kill(about["pid"], signal.SIGKILL)
    except ProcessLookupError:
        pass


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not alive: the daemon is not our child, so this only matters for tests
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


# --- consistent CLI -----------------------------------------------------------------------------


def test_version():
    result = cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("corvid-actors ") and result.stderr == ""


def test_json_is_accepted_before_and_after_the_subcommand_and_errors_are_json(tmp_path):
    nowhere = str(tmp_path / "no-daemon")
    for argv in (["--json", "admin", "sessions", "--data-dir", nowhere],
                 ["admin", "sessions", "--json", "--data-dir", nowhere]):
        result = cli(*argv)
        assert result.returncode == 1, result
        reply = json.loads(result.stdout)
        assert reply["ok"] is False and "no corvid-actors daemon is listening" in reply["error"]
        assert "corvid-actors serve" in reply["error"]  # the fix
        assert "Traceback" not in result.stderr


def test_a_bad_session_status_is_rejected_with_the_valid_values(tmp_path):
    result = cli("admin", "sessions", "--status", "bogus", "--data-dir", str(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "invalid choice: 'bogus'" in result.stderr and "running" in result.stderr and "stopped" in result.stderr
    as_json = cli("admin", "sessions", "--status", "bogus", "--json", "--data-dir", str(tmp_path))
    assert as_json.returncode == 2 and "invalid choice" in json.loads(as_json.stdout)["error"]


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    # `corvid-actors demo | head -0`: nobody reads stdout, so the first write meets a broken
    # pipe (the read end is closed before the command starts: deterministic, whatever the
    # size of its output).
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([*entry_point(), "demo", "--minutes", "1"], env=env(TMPDIR=str(tmp_path)),
                                stdout=write_end, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                timeout=CLI_S)
    finally:
        os.close(write_end)
    assert result.returncode == 141, result.stderr  # as a program that SIGPIPE ended
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []  # and its temporary directory is gone


# --- errors are one line, with the fix ---------------------------------------------------------


def test_demo_rejects_bad_arguments_before_creating_anything(tmp_path):
    one_line_error(cli("demo", "--minutes", "-5"), "--minutes must be a positive number")
    missing = tmp_path / "nonexistent" / "x.db"
    one_line_error(cli("demo", "--db", str(missing)), f"the directory {missing.parent} does not exist")
    assert not missing.parent.exists()


def test_demo_removes_its_temporary_directory_unless_kept(tmp_path):
    temp = private_dir(tmp_path / "tmp")
    result = cli("demo", "--minutes", "1", TMPDIR=str(temp))
    assert result.returncode == 0 and "started" in result.stdout and "removed at exit" in result.stdout
    assert "pid" not in result.stdout  # the runtime's pseudo-pids are not shown
    assert list(temp.iterdir()) == []
    kept = cli("demo", "--minutes", "1", "--keep", "--json", TMPDIR=str(temp))
    assert kept.returncode == 0
    [workdir] = temp.iterdir()
    assert json.loads(kept.stdout)["database"] == str(workdir / "corvid.db") and (workdir / "corvid.db").exists()


def test_a_corrupt_database_is_one_line_and_is_left_as_it_was(tmp_path):
    data = private_dir(tmp_path / "data")
    garbage = b"this is not a database, it is a shopping list\n" * 50
    (data / "corvid.db").write_bytes(garbage)
    one_line_error(cli("serve", "--data-dir", str(data)), "file is not a database", "move it away")
    one_line_error(cli("serve", "--detach", "--data-dir", str(data)), "did not start", "file is not a database")
    assert (data / "corvid.db").read_bytes() == garbage
    assert sorted(p.name for p in data.iterdir()) == ["corvid.db", "daemon.log"]


@pytest.mark.parametrize("detach", [False, True])
def test_a_data_directory_that_cannot_be_created_or_written_is_one_line(tmp_path, detach):
    flag = ["--detach"] if detach else []
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    one_line_error(cli("serve", *flag, "--data-dir", "/proc/corvid-cannot-be-here"),
                   "cannot create the data directory /proc/corvid-cannot-be-here", "--data-dir")
    one_line_error(cli("serve", *flag, "--data-dir", str(a_file / "data")), "cannot create the data directory")
    if os.geteuid() != 0:  # root writes anywhere
        read_only = tmp_path / "read-only"
        read_only.mkdir(mode=0o500)
        one_line_error(cli("serve", *flag, "--data-dir", str(read_only)), "not writable")


def test_a_config_error_is_one_line_before_any_banner(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[slots]\nmax_parallel = -3\n")
    result = cli("serve", "--config", str(bad), "--data-dir", str(private_dir(tmp_path / "data")))
    line = one_line_error(result, "max_parallel")
    assert "STUB" not in result.stderr and "corvid-actors" in line


# --- the daemon: a second one, shutdown --wait, JSON logs --------------------------------------


def test_a_second_detached_daemon_only_says_one_runs_here_and_shutdown_wait_returns_after_exit(detached):
    data = detached["data_dir_path"]
    assert detached["stub"] is True and detached["ok"] is True
    log_before = (data / "daemon.log").read_text()
    second = cli("serve", "--detach", "--data-dir", str(data))
    one_line_error(second, f"another corvid-actors daemon (pid {detached['pid']})")
    assert (data / "daemon.log").read_text() == log_before  # nothing written into the running daemon's log

    # JSON log lines are compact: time (UTC, Z), level, message; the banner is one record
    records = [json.loads(line) for line in log_before.splitlines()]
    assert all(set(r) >= {"time", "level", "message"} and r["time"].endswith("Z") for r in records)
    assert all("record" not in r for r in records)
    [banner] = [r for r in records if "NO MODEL PROVIDER IS CONFIGURED" in r["message"]]
    assert banner["level"] == "WARNING" and "STUB" in banner["message"]

    stopped = cli("admin", "shutdown", "--wait", "--data-dir", str(data))
    assert (stopped.returncode, stopped.stdout, stopped.stderr) == (0, "daemon stopped\n", "")
    assert not alive(detached["pid"])  # returned after the process exited, not before


def test_start_refuses_an_unknown_agent_and_create_makes_it(detached):
    data = str(detached["data_dir_path"])
    unknown = cli("admin", "start", "--agent", "nosuchagent", "hi", "--data-dir", data)
    one_line_error(unknown, "no agent 'nosuchagent'", "--create")
    created = cli("admin", "start", "--agent", "scribe", "--create", "--model", "qwen3:8b", "hello",
                  "--data-dir", data)
    assert created.returncode == 0, created
    first, hint = created.stdout.splitlines()
    assert first.startswith("started session ") and "agent scribe, created" in first and "pid" not in first
    sid = first.split()[2]
    assert hint == f"watch the reply: corvid-actors events {sid[:8]}"
    typo = cli("admin", "start", "--agent", "scrib", "again", "--data-dir", data)
    one_line_error(typo, "no agent 'scrib' (agents: scribe)")
    agents = json.loads(cli("admin", "agents", "--json", "--data-dir", data).stdout)
    assert [(a["name"], a["model"]) for a in agents] == [("scribe", "qwen3:8b")]
    detail = json.loads(cli("admin", "session", sid, "--json", "--data-dir", data).stdout)
    assert detail["created_at"].endswith("Z") and all(e["at"].endswith("Z") for e in detail["events"])
    shown = cli("admin", "session", sid, "--data-dir", data).stdout
    assert "\npid:" not in shown and "generation" not in shown and "uptime:" in shown


# --- run chooses its model server like serve ----------------------------------------------------


def test_run_uses_the_stub_with_the_banner_when_no_model_server_is_configured(tmp_path):
    data = str(private_dir(tmp_path / "data"))
    one_line_error(cli("run", "--agent", "helper", "hello", "--data-dir", data), "no agent 'helper'", "--create")
    result = cli("run", "--agent", "helper", "--create", "hello", "--data-dir", data)
    assert result.returncode == 0, result
    assert "NO MODEL PROVIDER IS CONFIGURED" in result.stderr and "created agent 'helper'" in result.stderr
    assert "Hello from the corvid-actors stub model" in result.stdout
    as_json = cli("--json", "run", "--agent", "helper", "again", "--data-dir", data)
    reply = json.loads(as_json.stdout)
    assert reply["ok"] is True and reply["agent"] == "helper" and "stub model" in reply["reply"]


# --- a plain install (no test extras) --------------------------------------------------------------


def test_a_plain_install_runs_the_daemon_on_the_stub(tmp_path):
    data = private_dir(tmp_path / "data")
    plain = [sys.executable, "-c", NO_EXTRAS]
    check = subprocess.run([*plain[:2], "import freezegun"], env=env(), capture_output=True, timeout=CLI_S)
    assert check.returncode == 0  # freezegun is installed here; the blocker below hides it
    started = subprocess.run([*plain, "serve", "--detach", "--json", "--data-dir", str(data)], env=env(),
                             capture_output=True, text=True, timeout=CLI_S, stdin=subprocess.DEVNULL)
    assert started.returncode == 0, started
    about = json.loads(started.stdout)
    try:
        assert about["stub"] is True
        health = subprocess.run([*plain, "admin", "health", "--json", "--data-dir", str(data)], env=env(),
                                capture_output=True, text=True, timeout=CLI_S)
        assert json.loads(health.stdout)["status"] == "ok", health
        stopped = subprocess.run([*plain, "admin", "shutdown", "--wait", "--data-dir", str(data)], env=env(),
                                 capture_output=True, text=True, timeout=CLI_S)
        assert stopped.stdout == "daemon stopped\n"
    finally:
        try:
            os.kill(about["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
    demo = subprocess.run([*plain, "demo"], env=env(), capture_output=True, text=True, timeout=CLI_S)
    one_line_error(demo, "needs the test extras", "pip install 'corvid-actors[test]'")


# --- the example chat bot ------------------------------------------------------------------------


def test_the_example_chat_bot_removes_its_temporary_directory_unless_kept(tmp_path):
    temp = private_dir(tmp_path / "tmp")
    example = [sys.executable, str(ROOT / "examples" / "chat_bot.py")]
    no_ollama = {k: v for k, v in env(TMPDIR=str(temp)).items() if k != "OLLAMA_HOST"}  # its own stub
    bounded = {"env": no_ollama, "capture_output": True, "text": True, "timeout": CLI_S}
    quit_at_once = subprocess.run(example, input="", **bounded)
    assert quit_at_once.returncode == 0, quit_at_once.stderr
    assert "removed at exit" in quit_at_once.stdout and list(temp.iterdir()) == []
    kept = subprocess.run([*example, "--keep"], input="", **bounded)
    assert kept.returncode == 0 and [p.name.startswith("corvid-chat-") for p in temp.iterdir()] == [True]
