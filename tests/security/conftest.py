"""Fixtures of the security suite: a project with secrets, a daemon-like data directory
with a live admin socket, and a real OS sandbox (never skipped: CI makes sure bwrap runs)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from corvid_actors.tools.base import ToolContext
from corvid_actors.tools.coding import coding_tools
from corvid_actors.tools.env import safe_env
from corvid_actors.tools.sandbox import Sandbox, SandboxSettings

# the end-to-end fixtures (a runtime on a simulated clock, the real clients over stubs)
from tests.e2e.conftest import _scrub_provider_env, make_e2e, project_dir  # noqa: F401
from tests.security.as_user import Daemon, chown_tree, shared_dir

SECRET = "sk-ant-SECRET-do-not-leak"
#: a computed ".env": the guard cannot see it, only the kernel stops it
ENV = "$(printf .en)v"


class RealTimers:
    """call_later on real time for the tools (threading.Timer, tests only)."""

    def __init__(self) -> None:
        self.timers: list[threading.Timer] = []

    def __call__(self, delay, fn):
        timer = threading.Timer(delay, fn)
        timer.daemon = True
        timer.start()
        self.timers.append(timer)
        return timer.cancel

    def cancel_all(self) -> None:
        for timer in self.timers:
            timer.cancel()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project")


@pytest.fixture
def data_dir(tmp_path: Path):
    """A daemon data directory with a database file and a listening admin socket."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "corvid.db").write_text("db")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(data / "admin.sock"))
    server.listen(1)
    yield data
    server.close()


def make_sandbox(data_dir: Path | None = None, **settings) -> Sandbox:
    sandbox = Sandbox(SandboxSettings(**settings), hidden_paths=[str(data_dir)] if data_dir else [])
    assert sandbox.active, f"the OS sandbox must work on this machine: {sandbox.status.reason}"
    return sandbox


@pytest.fixture
def sandbox(data_dir: Path) -> Sandbox:
    return make_sandbox(data_dir)


@pytest.fixture
def timers():
    real = RealTimers()
    yield real
    real.cancel_all()


@pytest.fixture
def ctx(project: Path, sandbox: Sandbox, timers) -> ToolContext:
    return ToolContext(project_dir=project, env=safe_env({}), call_later=timers, sandbox=sandbox)


def run(ctx: ToolContext, command: str, timeout: float = 10):
    """run_command as a session runs it; the result."""
    handler = {t.name: t for t in coding_tools()}["run_command"].handler
    return handler({"command": command, "timeout": timeout}, ctx)


def tool(ctx: ToolContext, name: str, **args):
    return {t.name: t for t in coding_tools()}[name].handler(args, ctx)


def host_processes_with(marker: str) -> list[int]:
    """Live host processes whose command line holds ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(pid))
    return found


# --- as root and as an unprivileged user (tests/security/as_user.py) --------------------


def make_project(root: Path) -> Path:
    """The project of the attacks: secrets in ``.env`` files, a ``.git``, a README."""
    (root / "sub").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".env").write_text(f"ANTHROPIC_API_KEY={SECRET}\n")
    (root / "sub" / ".env.local").write_text(f"TOKEN={SECRET}\n")
    (root / "README.md").write_text("hello\n")
    return root


@pytest.fixture(params=["root", "nobody"])
def daemon_user(request) -> str:
    """The uid the daemon side runs as: each test that takes it runs once for each."""
    return request.param


@pytest.fixture
def daemon_factory(daemon_user: str):
    """Build :class:`Daemon`\\ s as ``daemon_user`` over a fresh project and data directory
    (``settings``: ``[tools.sandbox]`` overrides; ``no_userns``: the daemon side cannot make
    namespaces, as in a Docker container); stopped and removed after the test."""
    made: list[Daemon] = []
    dirs: list[Path] = []

    def build(settings: dict | None = None, network: bool = False,
              arrange: Callable[[Path], None] | None = None, no_userns: bool = False) -> Daemon:
        base = shared_dir("corvid-sec-")
        dirs.append(base)
        project = make_project(base / "project")
        if arrange is not None:
            arrange(project)
        data = base / "data"
        data.mkdir()
        (data / "corvid.db").write_text("db")
        daemon = Daemon(daemon_user, project, data, settings or {}, network, no_userns)
        if daemon.uid:
            chown_tree(project, daemon.uid)
        made.append(daemon)
        daemon.start()
        assert daemon.status.get("active"), f"the OS sandbox must work here: {daemon.status}"
        return daemon

    yield build
    for daemon in made:
        daemon.stop()
    for base in dirs:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def daemon(daemon_factory) -> Daemon:
    """A daemon side with the default sandbox, as root and as uid 65534 (two runs)."""
    return daemon_factory()


# --- an MCP server started through the sandbox's launcher -------------------------------


@contextlib.contextmanager
def sandboxed_echo_server(sandbox: Sandbox, project: Path, script: Path | None = None):
    """The echo MCP server (``tests/fixtures/mcp_servers``; ``script``: a copy of it to run
    instead) started through ``sandbox`` as a session starts one; yields ``(connection,
    argv)``. On exit the connection is closed and no process of the server may be left
    within a second."""
    from corvid_actors.tools.mcp_client import sandboxed_argv
    from corvid_actors.tools.mcp_connection import McpConnection, McpLimits, McpServerSpec
    from tests.fixtures.mcp_servers import ECHO_SERVER, live_processes, new_tag, server_command

    tag = new_tag()
    command, args = server_command("echo", tag)
    if script is not None:
        args = [str(script) if a == str(ECHO_SERVER) else a for a in args]
    spec = McpServerSpec("echo", command, tuple(args), network=False)
    argv, on_end = sandboxed_argv(sandbox, spec, str(project))
    assert argv is not None, "the server must start through the sandbox"
    conn = McpConnection(spec, env=safe_env({}), cwd=str(project), limits=McpLimits(connect_timeout_s=20),
                         argv=argv, on_end=on_end)
    conn.start()
    try:
        yield conn, argv
    finally:
        conn.close()
    deadline = time.monotonic() + 1.0
    while live_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_processes(tag) == []
