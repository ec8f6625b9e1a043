"""Issue 33, break 1: a command holds no capability in the sandbox, as root and as an
ordinary user. With one, a root daemon's command unmounted the ``.env`` mask and the
tmpfs over the data directory, remounted ``/`` read-write and wrote to the host,
unmounted ``/proc`` and raised its own ``pids.max``. Each attack runs for real, through
``run_command`` (and an MCP server through the same launcher)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from corvid_actors.core.vocabulary import CancelToken
from tests.security.as_user import setpriv_argv, unprivileged_env
from tests.security.conftest import ENV, SECRET, make_sandbox, sandboxed_echo_server

CAP_EFF = "sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status"


def assert_secrets_intact(project: Path) -> None:
    assert (project / ".env").read_text() == f"ANTHROPIC_API_KEY={SECRET}\n"
    assert (project / "sub" / ".env.local").read_text() == f"TOKEN={SECRET}\n"


def test_a_command_holds_no_capability(daemon):
    result = daemon.run(f"{CAP_EFF}; grep -E '^Cap(Prm|Bnd|Amb):' /proc/self/status")
    lines = result.output.split()
    assert lines[0] == "0000000000000000", result.output
    assert lines[2] == lines[4] == lines[6] == "0000000000000000", result.output


def test_unmounting_the_env_mask_and_the_data_dir_tmpfs_fails(daemon):
    result = daemon.run(f"umount {ENV}; umount -l {ENV}; umount -l {daemon.data_dir}; "
                        f"cat {ENV}; ls -A {daemon.data_dir}; echo END")
    assert result.output.count("END") == 1, result.output
    assert SECRET not in result.output
    assert "corvid.db" not in result.output
    assert daemon.status["capabilities"] == "none"
    assert_secrets_intact(daemon.project)


def test_remounting_the_host_read_write_fails_and_writes_nothing(daemon):
    escape = Path("/") / f"corvid-escape-{uuid.uuid4().hex}"
    try:
        result = daemon.run(f"mount -o remount,bind,rw /; mount -o remount,rw /; "
                            f"echo x > {escape}; echo END")
        assert "END" in result.output
        assert not escape.exists()
        assert "Read-only file system" in result.output
    finally:
        escape.unlink(missing_ok=True)


def test_proc_cannot_be_unmounted(daemon):
    result = daemon.run("umount /proc; umount -l /proc; echo COUNT=$(ls /proc | grep -c '^[0-9]')")
    # still the sandbox's own /proc: a handful of processes, not the host's
    [count] = [line for line in result.output.splitlines() if line.startswith("COUNT=")]
    assert 0 < int(count[len("COUNT="):]) < 10, result.output


def test_no_nested_user_namespace(daemon):
    result = daemon.run("unshare -Ur true && echo NESTED-USERNS; unshare -U true && echo NESTED2")
    assert "NESTED" not in result.output, result.output
    assert daemon.status["userns"] == "disabled"


def test_the_pids_cgroup_cannot_be_changed(daemon_factory):
    daemon = daemon_factory(settings={"max_processes": 64})
    limits = "/sys/fs/cgroup/pids/corvid-sbx-*/pids.max"
    result = daemon.run("mount -o remount,bind,rw /sys/fs/cgroup/pids; mount -o remount,rw /sys/fs/cgroup/pids; "
                        f"for f in {limits}; do echo max > \"$f\"; done; cat {limits}; echo END")
    assert "END" in result.output
    assert "max\n" not in result.output.replace("pids.max", "")
    if daemon.uid == 0:  # root's commands run in a pids cgroup of the sandbox's making
        assert "64" in result.output.split(), result.output


def test_an_mcp_server_holds_no_capability(project, data_dir):
    with sandboxed_echo_server(make_sandbox(data_dir), project) as (conn, _):
        assert conn.wait_ready(), conn.error
        status = conn.call("read", {"path": "/proc/self/status"}, CancelToken()).output
        assert "CapEff:\t0000000000000000" in status, status
        assert "CapBnd:\t0000000000000000" in status, status


# --- the probe: a sandbox whose commands keep a capability is not called active ----------

PROBE = textwrap.dedent("""
    import json, sys
    from corvid_actors.tools.sandbox import SandboxSettings, find_bwrap, isolation_flags, sandbox_status
    omit = set(sys.argv[1:])
    flags = [f for f in isolation_flags(find_bwrap()) if f not in omit]
    if "--cap-drop" in omit:
        flags = [f for f in flags if f != "ALL"]
    # bwrap alone: with "auto", a refused bwrap would fall back to the Landlock backend
    bwrap = SandboxSettings(backend="bwrap")
    print(json.dumps({"full": sandbox_status(bwrap).as_dict(),
                      "broken": sandbox_status(bwrap, flags=flags).as_dict()}))
""")


def probe_as(user: str, *omit: str) -> dict:
    argv = [sys.executable, "-c", PROBE, *omit]
    env = None
    if user == "nobody":  # on the readable copy of the package (tests/security/as_user.py)
        argv = [*setpriv_argv(), os.path.realpath(sys.executable), "-s", "-c", PROBE, *omit]
        env = unprivileged_env()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                          cwd=env["PYTHONPATH"] if env else None)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    return json.loads(done.stdout)


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_the_probe_refuses_a_sandbox_that_allows_nested_user_namespaces(user):
    seen = probe_as(user, "--disable-userns")
    assert seen["full"]["active"] is True and seen["full"]["userns"] == "disabled", seen
    assert seen["broken"]["active"] is False, seen
    assert "user namespace" in seen["broken"]["reason"], seen


def test_the_probe_refuses_a_sandbox_that_keeps_root_capabilities():
    # only root keeps capabilities when bwrap is not told to drop them
    seen = probe_as("root", "--cap-drop")
    assert seen["full"]["active"] is True and seen["full"]["capabilities"] == "none", seen
    assert seen["broken"]["active"] is False, seen
    assert "holds capabilities" in seen["broken"]["reason"], seen
    assert seen["broken"]["capabilities"].startswith("CapEff "), seen
