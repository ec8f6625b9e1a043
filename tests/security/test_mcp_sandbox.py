"""MCP server processes start through the same sandbox launcher as commands."""

from __future__ import annotations

import pytest

from corvid_actors.tools.mcp_client import sandboxed_argv
from corvid_actors.tools.mcp_connection import McpServerSpec
from corvid_actors.tools.sandbox import Sandbox, SandboxSettings, SandboxUnavailable
from tests.security.conftest import SECRET, make_sandbox, sandboxed_echo_server


def test_a_sandboxed_server_sees_the_sandbox_not_the_host(project, data_dir):
    sandbox = make_sandbox(data_dir)
    with sandboxed_echo_server(sandbox, project) as (conn, argv):
        assert argv[0] in (sandbox.status.binary, "/bin/sh")
        assert conn.wait_ready(), conn.error
        from corvid_actors.core.vocabulary import CancelToken

        def read(path: str) -> str:
            return conn.call("read", {"path": path}, CancelToken()).output

        assert SECRET not in read(str(project / ".env"))
        assert "error" in read(str(data_dir / "corvid.db"))
        assert b"bwrap" in read("/proc/1/cmdline").encode()  # pid 1 is the sandbox's init


def test_launch_choice_per_mode(tmp_path):
    spec = McpServerSpec("x", "server")
    assert sandboxed_argv(None, spec, str(tmp_path)) == (None, None)
    off = Sandbox(SandboxSettings(mode="off"))
    assert sandboxed_argv(off, spec, str(tmp_path)) == (None, None)
    auto_missing = Sandbox(SandboxSettings(mode="auto", bwrap_path="/nonexistent/bwrap", backend="bwrap"))
    assert sandboxed_argv(auto_missing, spec, str(tmp_path)) == (None, None)
    required_missing = Sandbox(SandboxSettings(mode="required", bwrap_path="/nonexistent/bwrap", backend="bwrap"))
    with pytest.raises(SandboxUnavailable):
        sandboxed_argv(required_missing, spec, str(tmp_path))


def test_a_server_script_under_a_hidden_path_stays_readable_but_not_its_folder(tmp_path, project, data_dir):
    """An operator's server kept under /tmp (hidden in the sandbox: a CI checkout, a scratch
    dir) still starts; only the named script is shown, not the folder it lies in."""
    import shutil as _shutil

    from tests.fixtures.mcp_servers import ECHO_SERVER

    hidden_dir = tmp_path / "servers"
    hidden_dir.mkdir()
    script = hidden_dir / "echo_server.py"
    _shutil.copy(ECHO_SERVER, script)
    (hidden_dir / "neighbour.txt").write_text("not for the server")
    sandbox = make_sandbox(data_dir)
    assert any(str(script).startswith(h) for h in sandbox.hidden)  # the premise: /tmp is hidden
    with sandboxed_echo_server(sandbox, project, script) as (conn, _):
        assert conn.wait_ready(), conn.error
        from corvid_actors.core.vocabulary import CancelToken

        assert "not for the server" not in conn.call(
            "read", {"path": str(hidden_dir / "neighbour.txt")}, CancelToken()).output
