"""Which sandbox backend ``[tools.sandbox]`` gets on a machine (issue 33): bwrap, then
Landlock, then none — loudly — and MCP servers confined by Landlock too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

from corvid_actors.core.vocabulary import CancelToken
from corvid_actors.tools.env import safe_env
from corvid_actors.tools.sandbox import Sandbox, SandboxSettings
from tests.security.as_user import readable_copy
from tests.security.conftest import SECRET, sandboxed_echo_server

MISSING = "/nonexistent/corvid/bwrap"


def test_auto_prefers_bwrap_where_namespaces_work():
    status = Sandbox(SandboxSettings()).status
    assert (status.active, status.backend, status.reason) == (True, "bwrap", "")
    assert status.as_dict()["backend"] == "bwrap"  # what `admin health` and `stats` show


def test_auto_falls_back_to_landlock_and_says_why():
    status = Sandbox(SandboxSettings(bwrap_path=MISSING)).status
    assert (status.active, status.backend) == (True, "landlock")
    assert "no bwrap binary" in status.reason and status.warning == ""


def test_a_backend_can_be_forced():
    assert Sandbox(SandboxSettings(backend="landlock")).status.backend == "landlock"
    only_bwrap = Sandbox(SandboxSettings(backend="bwrap", bwrap_path=MISSING, mode="required"))
    assert (only_bwrap.active, only_bwrap.status.backend) == (False, "none")
    assert only_bwrap.status.refuses_commands


#: a process where neither backend can work: namespaces refused as Docker does, and the
#: Landlock syscalls missing as on a kernel built without it (ENOSYS)
_NOTHING_WORKS = textwrap.dedent("""
    import ctypes, json, platform, struct, sys
    from daemon_child import refuse_namespaces
    refuse_namespaces()
    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[platform.machine()]
    op = lambda code, k, jt=0, jf=0: struct.pack("=HBBI", code, jt, jf, k)
    program = b"".join([op(0x20, 4), op(0x15, arch, 1, 0), op(0x06, 0x7FFF0000), op(0x20, 0),
                        op(0x35, 444, 0, 3), op(0x35, 447, 2, 0), op(0x06, 0x00050000 | 38),
                        op(0x06, 0x7FFF0000), op(0x06, 0x7FFF0000)])
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = ctypes.create_string_buffer(struct.pack("=HxxxxxxQ", len(program) // 8,
                                                    ctypes.addressof(buf)), 16)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    assert libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) == 0
    from corvid_actors.tools.sandbox import Sandbox, SandboxSettings
    status = Sandbox(SandboxSettings(**json.loads(sys.argv[1]))).status
    print(json.dumps({**status.as_dict(), "warning": status.warning}))
""")


def _status_where_nothing_works(**settings) -> dict:
    copy = readable_copy()
    done = subprocess.run([os.path.realpath(sys.executable), "-s", "-c", _NOTHING_WORKS,
                           json.dumps(settings)], capture_output=True, text=True, timeout=60,
                          cwd=str(copy), env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                              "PYTHONPATH": str(copy), "HOME": "/nonexistent"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_auto_without_either_backend_runs_unconfined_loudly():
    status = _status_where_nothing_works()
    assert (status["active"], status["backend"]) == (False, "none")
    assert "namespace" in status["reason"] and "Landlock" in status["reason"]
    assert status["warning"].startswith("SANDBOX UNAVAILABLE")


def test_a_server_runs_confined_by_landlock(project, data_dir):
    sandbox = Sandbox(SandboxSettings(backend="landlock"), hidden_paths=[str(data_dir)])
    with sandboxed_echo_server(sandbox, project) as (conn, argv):
        assert any(a.endswith("_confine.py") for a in argv)
        assert conn.wait_ready(), conn.error
        read = lambda path: conn.call("read", {"path": path}, CancelToken()).output  # noqa: E731
        assert SECRET not in read(str(project / ".env"))
        assert "error" in read(str(data_dir / "corvid.db"))
        assert "error" in read(f"/proc/{os.getpid()}/environ")
        assert "hello" in read(str(project / "README.md"))


def test_landlock_hides_a_data_dir_inside_the_project(project, timers):
    from corvid_actors.tools.base import ToolContext
    from tests.security.conftest import run

    (project / "data").mkdir()
    (project / "data" / "corvid.db").write_text("db-content")
    sandbox = Sandbox(SandboxSettings(backend="landlock"),
                      hidden_paths=(str(project), str(project / "data")))
    ctx = ToolContext(project_dir=project, env=safe_env({}), call_later=timers, sandbox=sandbox)
    result = run(ctx, "cat README.md; cat data/corvid.d$(echo b); echo x > data/new")
    assert "hello" in result.output and "db-content" not in result.output
    assert not (project / "data" / "new").exists()


def test_a_session_stop_ends_a_landlock_command_at_once(project, timers):
    import threading
    import uuid

    from corvid_actors.tools.base import ToolContext
    from tests.security.conftest import host_processes_with, run

    sandbox = Sandbox(SandboxSettings(backend="landlock"))
    ctx = ToolContext(project_dir=project, env=safe_env({}), call_later=timers, sandbox=sandbox)
    marker = f"corvid-stopped-{uuid.uuid4().hex}"
    threading.Timer(0.5, ctx.cancel.cancel).start()  # the session is stopped mid-command
    started = time.monotonic()
    result = run(ctx, f"bash -c 'sleep 100; : {marker}' & (bash -c 'sleep 100; : {marker}' &); "
                      f"bash -c 'sleep 100; : {marker}'", timeout=60)
    assert result.is_error and result.output.startswith("Command cancelled")
    assert time.monotonic() - started < 3
    deadline = time.monotonic() + 1.0
    while host_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes_with(marker) == []
