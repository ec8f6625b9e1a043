"""One test per attack of issue 13, each run for real in the OS sandbox: the attack fails
and nothing outside the project (nor any protected file inside it) changed."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path

from corvid_actors.tools.base import ToolContext
from corvid_actors.tools.env import safe_env
from tests.security.conftest import (
    ENV,
    SECRET,
    host_processes_with,
    make_sandbox,
    run,
    tool,
)


def assert_secrets_intact(project: Path) -> None:
    assert (project / ".env").read_text() == f"ANTHROPIC_API_KEY={SECRET}\n"
    assert (project / "sub" / ".env.local").read_text() == f"TOKEN={SECRET}\n"


# --- secrets through /proc --------------------------------------------------------------


def test_no_ancestor_environ_is_readable(ctx, project, monkeypatch):
    # the daemon's own process: its initial environ is what /proc shows
    result = run(ctx, f"cat /proc/{os.getpid()}/environ; cat /proc/$PPID/environ; "
                      "for p in /proc/[0-9]*; do cat $p/environ; echo; done")
    assert SECRET not in result.output
    for name in ("PYTEST_CURRENT_TEST", "PYTHONPATH", "VIRTUAL_ENV"):
        assert f"{name}=" not in result.output
    # the sandbox sees its own PID namespace only: a handful of processes, pid 1 its init
    listing = run(ctx, "ls /proc | grep -c '^[0-9]'")
    assert int(listing.output.strip()) < 10


# --- the admin socket and the data directory --------------------------------------------


def test_the_admin_socket_and_data_dir_are_not_present(ctx, data_dir):
    result = run(ctx, f"ls -la {data_dir}; test -e {data_dir}/admin.sock && echo SOCKET-PRESENT; "
                      f"test -e {data_dir}/corvid.db && echo DB-PRESENT; "
                      f"python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); "
                      f"s.connect('{data_dir}/admin.sock'); print('CONNECTED')\"")
    assert "SOCKET-PRESENT" not in result.output and "DB-PRESENT" not in result.output
    assert "CONNECTED" not in result.output
    assert (data_dir / "corvid.db").read_text() == "db"


def test_home_and_host_tmp_are_invisible_and_private(ctx, project, tmp_path):
    marker = tmp_path / f"host-tmp-{uuid.uuid4().hex}"
    marker.write_text("host")
    result = run(ctx, f"cat {marker}; ls -A ~ | wc -l; echo written > /tmp/inside; "
                      "echo home > ~/inside-home; cat /tmp/inside")
    assert "host" not in result.output.splitlines()[0:1]
    assert "written" in result.output
    assert not Path("/tmp/inside").exists()
    assert not Path(os.path.expanduser("~/inside-home")).exists()


# --- processes that outlive the tool ----------------------------------------------------


def test_no_background_process_survives_the_tool(ctx):
    marker = f"corvid-survivor-{uuid.uuid4().hex}"
    sleeper = f"bash -c 'sleep 1000; : {marker}'"
    result = run(ctx, f"{sleeper} & nohup {sleeper} >/dev/null 2>&1 & setsid -f {sleeper}; "
                      f"(sh -c \"{sleeper} &\" &); echo started", timeout=5)
    assert "started" in result.output
    deadline = time.monotonic() + 1.0
    while host_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes_with(marker) == []


def test_setsid_holding_the_pipe_returns_at_the_timeout(ctx):
    marker = f"corvid-holder-{uuid.uuid4().hex}"
    started = time.monotonic()
    result = run(ctx, f"setsid bash -c 'sleep 25; : {marker}' & sleep 5", timeout=2)
    elapsed = time.monotonic() - started
    assert result.is_error and "timed out after 2 s" in result.output
    assert elapsed < 4, elapsed
    deadline = time.monotonic() + 1.0
    while host_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes_with(marker) == []


# --- protected paths by computed names --------------------------------------------------


def test_computed_name_reads_see_an_empty_file(ctx, project):
    for command in (f"cat {ENV}", f"cat sub/{ENV}.local", "find . -type f | xargs cat",
                    "tar c . | cat", "python3 -c \"import os; [print(open(os.path.join(d, f)).read()) "
                                     "for d, _, fs in os.walk('.') for f in fs if '.git' not in d]\""):
        result = run(ctx, command)
        assert SECRET not in result.output, command
    assert_secrets_intact(project)


def test_computed_name_writes_and_deletes_fail(ctx, project):
    for command in (f"echo x > {ENV}", f"echo x >> sub/{ENV}.local", f"rm -f {ENV}",
                    f"mv {ENV} moved", f"truncate -s0 {ENV}", "T=.env; rm -f \"$T\"",
                    "python3 -c \"import os; os.remove('.e'+'nv')\""):
        run(ctx, command)
        assert_secrets_intact(project)
    assert not (project / "moved").exists()


def test_a_new_protected_file_is_removed_after_the_command(ctx, project):
    result = run(ctx, f"echo EVIL=1 > {ENV}.production; echo done")
    assert not (project / ".env.production").exists()
    assert ".env.production" in result.output


def test_hard_link_and_symlink_escapes(ctx, project):
    run(ctx, f"ln {ENV} hardlink; ln sub/{ENV}.local hard2")
    assert not (project / "hardlink").exists() and not (project / "hard2").exists()
    run(ctx, f"ln -s {ENV} soft")
    assert SECRET not in run(ctx, "cat soft").output
    # read_file on whatever the command left behind
    for name in ("hardlink", "hard2", "soft"):
        assert SECRET not in tool(ctx, "read_file", path=name).output
    assert_secrets_intact(project)


def test_git_is_read_only(ctx, project):
    run(ctx, "echo bad > .gi$(echo t)/HEAD; touch .gi$(echo t)/new")
    assert (project / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert not (project / ".git" / "new").exists()


def test_writes_outside_the_project_fail(ctx, project, tmp_path):
    outside = tmp_path / "outside.txt"
    result = run(ctx, f"echo x > {outside}; echo y > /usr/corvid-x; echo z > {project.parent}/sib; "
                      "echo ok > inside.txt")
    assert not outside.exists() and not Path("/usr/corvid-x").exists()
    assert not (project.parent / "sib").exists()
    assert (project / "inside.txt").read_text() == "ok\n"
    assert "Read-only file system" in result.output


# --- resource exhaustion ----------------------------------------------------------------


def _responsive_during(fn) -> tuple[object, float]:
    """Run ``fn``; return its result and the longest gap between ticks of another thread."""
    gaps: list[float] = []
    done = threading.Event()

    def ticker() -> None:
        last = time.monotonic()
        while not done.is_set():
            time.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    try:
        result = fn()
    finally:
        done.set()
        thread.join(5)
    return result, max(gaps, default=0.0)


def test_fork_bombs_end_and_the_daemon_stays_responsive(project, data_dir, timers):
    sandbox = make_sandbox(data_dir, max_processes=64)
    if os.geteuid() == 0:
        # the kernel does not apply RLIMIT_NPROC to root: the pids cgroup must bound it
        assert sandbox._cgroup_root is not None, "running as root needs a writable pids cgroup"
    ctx = ToolContext(project_dir=project, env=safe_env({}), call_later=timers, sandbox=sandbox)
    marker = uuid.uuid4().hex
    # the shell stays (sleep) so the bomb runs until the deadline, at the process limit
    for bomb in (f"b(){{ b|b& }}; b; sleep 10; : {marker}",
                 f"python3 -c 'import os\nwhile True:\n    try: os.fork()\n    except OSError: pass' {marker}"):
        started = time.monotonic()
        result, gap = _responsive_during(lambda b=bomb: run(ctx, b, timeout=3))
        assert time.monotonic() - started < 6
        assert gap < 1.0, f"another thread stalled {gap:.2f} s during {bomb!r}"
        assert result.is_error and "timed out after 3 s" in result.output, result.output[:300]
        deadline = time.monotonic() + 1.0
        while host_processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host_processes_with(marker) == []


def test_a_redos_pattern_cannot_stall_the_daemon(ctx, project):
    (project / "long.txt").write_text("a" * 50_000 + "b\n")
    result, gap = _responsive_during(lambda: tool(ctx, "search_files", pattern="(a+)+$"))
    assert gap < 1.0
    assert "No matches" in result.output
    bad = tool(ctx, "search_files", pattern=r"(a)\1")
    assert bad.is_error and "RE2" in bad.output


# --- network ----------------------------------------------------------------------------


def test_network_off_means_no_loopback_connect(project, data_dir, timers):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    probe = (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2); "
             "print('CONNECTED')\"")
    try:
        sandbox = make_sandbox(data_dir)
        off = ToolContext(project_dir=project, env=safe_env({}), call_later=timers, sandbox=sandbox,
                          sandbox_network=False)
        on = ToolContext(project_dir=project, env=safe_env({}), call_later=timers, sandbox=sandbox,
                         sandbox_network=True)
        assert "CONNECTED" not in run(off, probe).output
        assert "CONNECTED" in run(on, probe).output  # the probe itself works
    finally:
        server.close()


def test_network_follows_permission_mode_and_agent():
    sandbox = make_sandbox()
    assert sandbox.network_for("default") is True
    assert sandbox.network_for("full-auto") is False
    assert sandbox.network_for("auto-edit") is False
    allowed = make_sandbox(network_agents=("researcher",))
    assert allowed.network_for("full-auto", "researcher") is True
    assert allowed.network_for("full-auto", "coder") is False


def test_cpu_file_size_and_address_space_limits_hold(project, data_dir, timers):
    sandbox = make_sandbox(data_dir, cpu_seconds=1, max_file_bytes=1024 * 1024,
                           max_address_space_bytes=512 * 1024 * 1024)
    ctx = ToolContext(project_dir=project, env=safe_env({}), call_later=timers, sandbox=sandbox)
    started = time.monotonic()
    spin = run(ctx, "while :; do :; done", timeout=20)
    assert spin.is_error and "timed out" not in spin.output  # SIGXCPU, long before the deadline
    assert time.monotonic() - started < 15
    run(ctx, "head -c 4000000 /dev/zero > big.bin")
    assert (project / "big.bin").stat().st_size <= 1024 * 1024
    hog = run(ctx, "python3 -c \"b = bytearray(2 * 1024**3); print('ALLOCATED')\"")
    assert "ALLOCATED" not in hog.output and "MemoryError" in hog.output


def test_a_session_stop_ends_the_whole_sandbox_at_once(ctx):
    marker = f"corvid-stopped-{uuid.uuid4().hex}"
    threading.Timer(0.5, ctx.cancel.cancel).start()  # the session is stopped mid-command
    started = time.monotonic()
    result = run(ctx, f"setsid bash -c 'sleep 100; : {marker}' & bash -c 'sleep 100; : {marker}'",
                 timeout=60)
    assert result.is_error and result.output.startswith("Command cancelled")
    assert time.monotonic() - started < 3
    deadline = time.monotonic() + 1.0
    while host_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes_with(marker) == []


def test_hidden_paths_around_and_inside_the_project(project, timers):
    # the data directory inside the project is hidden; a hidden path that is the project
    # itself (or an ancestor of it, like /tmp) still leaves the project visible
    (project / "data").mkdir()
    (project / "data" / "corvid.db").write_text("db")
    sandbox = make_sandbox(None, hidden_paths=(str(project), str(project / "data")))
    ctx = ToolContext(project_dir=project, env=safe_env({}), call_later=timers, sandbox=sandbox)
    result = run(ctx, "cat README.md; ls data | wc -l")
    assert result.output.split() == ["hello", "0"]


def test_no_controlling_terminal_to_inject_into(ctx):
    # TIOCSTI needs a controlling terminal: the sandbox runs in a session without one
    result = run(ctx, "python3 -c \"import os; os.open('/dev/tty', os.O_RDWR); print('HAS-TTY')\"")
    assert "HAS-TTY" not in result.output
    assert "No such device or address" in result.output
