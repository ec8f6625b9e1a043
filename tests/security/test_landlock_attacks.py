"""The attacks again, where namespaces are refused (issue 33): the daemon side runs under a
seccomp filter that refuses them as Docker's default profile does, so bwrap cannot work
and ``backend = "auto"`` picks the Landlock + seccomp backend. Each test runs as root and
as uid 65534 (the ``daemon_factory`` fixture), for real."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.as_user import Daemon
from tests.security.conftest import ENV, SECRET, host_processes_with


def assert_secrets_intact(project: Path) -> None:
    assert (project / ".env").read_text() == f"ANTHROPIC_API_KEY={SECRET}\n"
    assert (project / "sub" / ".env.local").read_text() == f"TOKEN={SECRET}\n"


def assert_gone(marker: str, within_s: float = 2.0) -> None:
    deadline = time.monotonic() + within_s
    while host_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes_with(marker) == []


@pytest.fixture
def docker_like(daemon_factory) -> Daemon:
    """A daemon side that cannot make namespaces, with the default ``backend = "auto"``."""
    daemon = daemon_factory(no_userns=True, arrange=lambda project: (project / "src").mkdir())
    assert daemon.status["backend"] == "landlock", daemon.status
    return daemon


@pytest.fixture
def admin_socket(docker_like: Daemon) -> Iterator[Path]:
    """A listening socket where the daemon's admin socket lies, open to every uid (so only
    the sandbox can keep a command from it)."""
    path = docker_like.data_dir / "admin.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    path.chmod(0o777)
    yield path
    server.close()


def test_auto_picks_landlock_where_namespaces_are_refused(docker_like):
    assert docker_like.status["active"] is True
    assert "namespace" in docker_like.status["reason"]  # why bwrap was not used
    result = docker_like.run("unshare -U true && echo UNSHARED; echo ran")
    assert "ran" in result.output and "UNSHARED" not in result.output


def test_protected_files_cannot_be_read_by_computed_names(docker_like):
    for command in (f"cat {ENV}", f"cat sub/{ENV}.local", "find . -type f | xargs cat",
                    "tar c . | cat", "grep -r TOKEN . ; grep -r ANTHROPIC .",
                    "python3 -c \"import os; [print(open(os.path.join(d, f)).read()) "
                    "for d, _, fs in os.walk('.') for f in fs if '.git' not in d]\""):
        result = docker_like.run(command)
        assert SECRET not in result.output, command
    assert_secrets_intact(docker_like.project)


def test_protected_files_cannot_be_changed_moved_or_linked(docker_like):
    project = docker_like.project
    for command in (f"echo x > {ENV}", f"echo x >> sub/{ENV}.local", f"rm -f {ENV}",
                    f"mv {ENV} moved", f"truncate -s0 {ENV}", "T=.env; rm -f \"$T\"",
                    f"ln {ENV} sub/hardlink", f"mv sub/{ENV}.local sub/moved",
                    f"ln {ENV} src/hardlink", f"mv {ENV} src/moved", f"cp --reflink=auto {ENV} src/copy",
                    "python3 -c \"import os; os.remove('.e'+'nv')\""):
        docker_like.run(command)
        assert_secrets_intact(project)
    assert not (project / "moved").exists() and not (project / "sub" / "moved").exists()
    assert not (project / "sub" / "hardlink").exists()
    assert not (project / "src" / "hardlink").exists() and not (project / "src" / "moved").exists()
    assert SECRET not in (project / "src" / "copy").read_text() if (project / "src" / "copy").exists() else True
    docker_like.run(f"ln -s ../{ENV} src/soft")
    assert SECRET not in docker_like.run("cat src/soft").output


def test_a_new_protected_file_is_removed_after_the_command(docker_like):
    result = docker_like.run(f"echo EVIL=1 > src/{ENV}.production; echo done")
    assert "done" in result.output and ".env.production" in result.output
    assert not (docker_like.project / "src" / ".env.production").exists()


def test_git_is_read_only(docker_like):
    project = docker_like.project
    docker_like.run("echo bad > .gi$(echo t)/HEAD; touch .gi$(echo t)/new; "
                    "mkdir .gi$(echo t)/hooks; ln -s ../../sub/x .gi$(echo t)/hooks/pre-commit")
    assert (project / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert sorted(p.name for p in (project / ".git").iterdir()) == ["HEAD"]


def test_writes_outside_the_project_fail_and_inside_work(docker_like):
    project = docker_like.project
    sibling = project.parent / f"sibling-{uuid.uuid4().hex}"
    result = docker_like.run(f"echo x > {sibling}; echo y > /usr/corvid-x; echo z > /etc/corvid-x; "
                             f"echo w > /tmp/corvid-x-{uuid.uuid4().hex}; "
                             "echo ok > src/inside.txt; mkdir src/new && echo ok > src/new/f; "
                             "echo edited > README.md; cat src/inside.txt src/new/f README.md; "
                             "echo no > at-the-root.txt")
    assert not sibling.exists() and not Path("/usr/corvid-x").exists()
    assert not Path("/etc/corvid-x").exists()
    assert (project / "src" / "inside.txt").read_text() == "ok\n"
    assert (project / "src" / "new" / "f").read_text() == "ok\n"
    assert (project / "README.md").read_text() == "edited\n"
    assert "Permission denied" in result.output
    # what Landlock cannot express: a directory that holds a protected entry (here .env and
    # .git) takes no new entries, or its protected neighbours could be replaced
    assert not (project / "at-the-root.txt").exists()


def test_data_dir_admin_socket_home_and_host_tmp_are_out_of_reach(docker_like, admin_socket):
    data = docker_like.data_dir
    host_tmp = Path("/tmp") / f"corvid-host-{uuid.uuid4().hex}"
    host_tmp.write_text("host-secret")
    host_tmp.chmod(0o644)
    try:
        result = docker_like.run(
            f"ls -la {data}; cat {data}/corvid.d$(echo b); echo x > {data}/new; cat {host_tmp}; "
            f"ls /tmp; ls /dev/shm; "
            f"python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); "
            f"s.connect('{admin_socket}'); print('CONNECTED')\"; "
            "echo mine > ~/own; cat ~/own; echo private > $TMPDIR/t; cat $TMPDIR/t")
    finally:
        host_tmp.unlink()
    assert "CONNECTED" not in result.output and "host-secret" not in result.output
    assert "admin.sock" not in result.output and "db\n" not in result.output
    assert not (data / "new").exists() and (data / "corvid.db").read_text() == "db"
    assert "mine" in result.output and "private" in result.output  # a private $HOME, $TMPDIR


def test_no_ptrace_signal_or_environ_of_the_daemon(docker_like):
    pid = docker_like._child.pid
    result = docker_like.run(
        f"cat /proc/{pid}/environ; cat /proc/$PPID/environ; "
        f"for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null; echo; done; "
        f"kill -STOP {pid} && echo SIGNALLED; kill -0 $PPID && echo SIGNALLED-SUPERVISOR; "
        f"python3 -c \"import ctypes; print('ATTACH', ctypes.CDLL(None).ptrace(16, {pid}, 0, 0))\"; "
        f"head -c 16 /proc/{pid}/mem && echo READ-MEM")
    assert "PYTHONPATH=" not in result.output  # the daemon's environment
    assert "SIGNALLED" not in result.output and "READ-MEM" not in result.output
    assert "ATTACH -1" in result.output
    assert docker_like.run("echo alive").output.strip() == "alive"  # not stopped


def test_no_controlling_terminal_to_inject_into(docker_like):
    result = docker_like.run("python3 -c \"import os; os.open('/dev/tty', os.O_RDWR); print('HAS-TTY')\"")
    assert "HAS-TTY" not in result.output


def test_namespaces_mounts_setsid_and_set_uid_bits_are_refused(docker_like):
    result = docker_like.run(
        "unshare -r true && echo UNSHARED; unshare -m true && echo UNSHARED; "
        "mount -t tmpfs x sub && echo MOUNTED; "
        "python3 -c \"import os; os.setsid(); print('SETSID')\"; "
        "python3 -c \"import os; os.setpgid(0, 0); print('SETPGID')\"; "
        "cp /bin/true sub/t && chmod u+s sub/t && echo SETUID; "
        "python3 -c \"import socket; socket.socket(socket.AF_PACKET); print('RAW')\"; echo end")
    for escaped in ("UNSHARED", "MOUNTED", "SETSID", "SETPGID", "SETUID", "RAW"):
        assert escaped not in result.output, result.output
    assert "end" in result.output


def test_no_network_when_off_and_loopback_when_on(daemon_factory):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    probe = (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2); "
             "print('CONNECTED')\"")
    try:
        off = daemon_factory(no_userns=True)
        on = daemon_factory(no_userns=True, network=True)
        assert off.status["backend"] == on.status["backend"] == "landlock"
        assert "CONNECTED" not in off.run(probe).output
        assert "CONNECTED" in on.run(probe).output  # the probe itself works
    finally:
        server.close()


def test_no_background_process_survives_the_tool(docker_like):
    marker = f"corvid-survivor-{uuid.uuid4().hex}"
    sleeper = f"bash -c 'sleep 1000; : {marker}'"
    result = docker_like.run(
        f"{sleeper} & nohup {sleeper} >/dev/null 2>&1 & setsid -f {sleeper}; "
        f"(sh -c \"{sleeper} &\" &); "
        f"python3 -c \"import os, subprocess; subprocess.Popen(['bash', '-c', 'sleep 1000; : {marker}'], "
        "start_new_session=os.fork() == 0)\" 2>/dev/null; echo started", timeout=5)
    assert "started" in result.output
    assert_gone(marker)


def test_a_process_holding_the_pipe_returns_at_the_timeout(docker_like):
    marker = f"corvid-holder-{uuid.uuid4().hex}"
    started = time.monotonic()
    result = docker_like.run(f"bash -c 'sleep 25; : {marker}' & sleep 5", timeout=2)
    assert result.is_error and "timed out after 2 s" in result.output
    assert time.monotonic() - started < 4
    assert_gone(marker)


def test_fork_bomb_and_cpu_limit_end(daemon_factory):
    daemon = daemon_factory(no_userns=True, settings={"max_processes": 64, "cpu_seconds": 1})
    marker = uuid.uuid4().hex
    started = time.monotonic()
    bomb = daemon.run(f"b(){{ b|b& }}; b; sleep 10; : {marker}", timeout=3)
    assert bomb.is_error and time.monotonic() - started < 8
    assert_gone(marker)
    spin = daemon.run("while :; do :; done", timeout=20)
    assert spin.is_error and "timed out" not in spin.output  # SIGXCPU at 1 s of CPU
