"""Operator commands people expect (issue 38 item 5): ``admin restart``, an idempotent
``admin shutdown --wait``, systemd's notify protocol, typo suggestions, a light ``--help``
and the operator guide's unit file. A real daemon and the real CLI; every wait bounded."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from corvid_actors.daemon import cli
from tests.e2e.test_daemon import READY_S, WAIT_S, Daemon, Follower, daemons  # noqa: F401 - the fixture

OPERATOR_GUIDE = Path(__file__).resolve().parents[2] / "docs" / "site" / "operator" / "index.md"
#: what a command line must not load just to print its help
HEAVY_MODULES = ("pykka", "peewee", "ollama", "anthropic", "httpx", "corvid_actors.runtime", "corvid_actors.config")


def test_admin_restart_stops_and_resumes_a_session_in_one_command(daemons, tmp_path, capsys):  # noqa: F811
    daemon = daemons(tmp_path / "data", reply="done", chunk_delay_s=0.01)
    sid = daemon.call("start", agent="restarted", prompt="hello")["session"]
    daemon.wait_log(f"[{sid[:8]}/restarted#1] turn finished", READY_S)
    follower = Follower(daemon, sid)
    try:
        code, out, err = daemon.cli(capsys, "admin", "restart", sid[:8])
        assert code == 0, err
        assert out.strip() == f"restarted {sid[:8]} (was running): resumed with history"
        follower.wait(lambda: follower.events(sid, "session_started"))
        assert [i["event"]["type"] for i in follower.items if i["event"]["type"].startswith("session_")] == [
            "session_stopped", "session_started"]
    finally:
        follower.close()
    code, out, _ = daemon.cli(capsys, "admin", "session", sid[:8], "--json")
    assert code == 0 and '"status": "stopped"' not in out


def test_shutdown_wait_with_no_daemon_running_exits_0_and_says_not_running(tmp_path, capsys):
    assert cli.main(["admin", "shutdown", "--wait", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "not running\n"
    assert cli.main(["admin", "shutdown", "--wait", "--json", "--data-dir", str(tmp_path)]) == 0
    assert '"running": false' in capsys.readouterr().out
    # without --wait it still says that nothing listens (exit 1): it asked a daemon to act
    assert cli.main(["admin", "shutdown", "--data-dir", str(tmp_path)]) == 1


def _datagrams(sock: socket.socket, wanted: str, timeout_s: float) -> list[str]:
    """Datagrams received until one holds ``wanted`` (each wait bounded)."""
    got: list[str] = []
    sock.settimeout(timeout_s)
    while not any(wanted in g for g in got):
        try:
            got.append(sock.recv(4096).decode())
        except TimeoutError:
            raise AssertionError(f"no {wanted!r} from the daemon within {timeout_s} s; got {got}") from None
    return got


def test_serve_notifies_systemd_ready_watchdog_and_stopping(daemons, capsys):  # noqa: F811
    base = Path(tempfile.mkdtemp(prefix="corvid-sd-", dir="/tmp"))  # a short path: sun_path has 108 bytes
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(str(base / "notify"))
            daemon = daemons(base / "data", reply="hi",
                             env={"NOTIFY_SOCKET": str(base / "notify"), "WATCHDOG_USEC": "200000"})
            got = _datagrams(sock, "READY=1", READY_S)
            assert f"MAINPID={daemon.pid}" in got[-1].splitlines()
            assert _datagrams(sock, "WATCHDOG=1", WAIT_S)  # every 0.1 s: half of WATCHDOG_USEC
            code, _, err = daemon.cli(capsys, "admin", "shutdown")
            assert code == 0, err
            assert "STOPPING=1" in _datagrams(sock, "STOPPING=1", WAIT_S)[-1].splitlines()
            assert daemon.wait_exit(WAIT_S) == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_mistyped_command_suggests_the_nearest(capsys):
    assert cli.main(["admin", "restrat", "3f2a"]) == 2
    assert "did you mean 'restart'?" in capsys.readouterr().err
    assert cli.main(["sevre"]) == 2
    assert "did you mean 'serve'?" in capsys.readouterr().err
    assert cli.main(["zzzzzz"]) == 2
    assert "did you mean" not in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["admin", "--help"], ["admin", "restart", "--help"],
                                  ["admin", "credits", "grant", "--help"], ["events", "--help"], ["serve", "--help"],
                                  ["run", "--help"], ["demo", "--help"]])
def test_help_loads_no_runtime_store_or_provider(argv):
    probe = ("import sys\nfrom corvid_actors.daemon.cli import main\n"
             "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             f"print(sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=READY_S)
    assert done.stdout.strip(), done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr


def _readme_unit() -> str:
    text = OPERATOR_GUIDE.read_text()
    found = re.search(r"```ini\n(\[Unit\].*?)```", text, re.S)
    assert found, "the operator guide ships a systemd unit file in an ```ini block"
    return found.group(1)


def test_the_readme_unit_file_passes_systemd_analyze_verify(tmp_path):
    unit = _readme_unit()
    keys = dict(re.findall(r"^(\w+)=(.*)$", unit, re.M))
    assert keys["Type"] == "notify" and "serve" in keys["ExecStart"] and keys["WatchdogSec"]
    assert keys["ExecReload"].endswith("-HUP $MAINPID")
    verify = shutil.which("systemd-analyze")
    if verify is None:
        pytest.skip("systemd-analyze is not installed: the unit's keys were checked above")
    # the binary the unit names must exist for `verify`: point it at this environment's
    program = Path(sys.executable).with_name("corvid-actors")
    path = tmp_path / "corvid-actors.service"
    path.write_text(unit.replace(keys["ExecStart"].split()[0], str(program)))
    done = subprocess.run([verify, "verify", str(path)], capture_output=True, text=True, timeout=READY_S)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
