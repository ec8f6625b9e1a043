"""Issue 33, "Also" 1: as root, a session incarnation's commands share one pids cgroup,
made at its first command and removed when the incarnation ends (a cgroup joined per
command cost ~8 ms of each); its ``pids.max`` still bounds a fork bomb."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corvid_actors.config import Config
from corvid_actors.providers.anthropic import AnthropicProvider
from corvid_actors.testing.anthropic_stub import AnthropicStubServer

MODEL = "claude-sonnet-4-6"
PIDS = Path("/sys/fs/cgroup/pids")


def my_cgroups() -> set[str]:
    """This process's sandbox cgroups (``corvid-sbx-<pid>-<random>``) on the host."""
    return {p.name for p in PIDS.glob(f"corvid-sbx-{os.getpid()}-*")}


@pytest.fixture
def stub():
    with AnthropicStubServer(api_key="test-key") as server:
        yield server


def tool_outputs(stub) -> list[str]:
    body = stub.message_requests[-1].json
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    return [str(b["content"]) for b in blocks if b.get("type") == "tool_result"]


def test_a_sessions_commands_share_one_cgroup_removed_when_it_ends(make_e2e, stub, project_dir):
    assert os.geteuid() == 0, "the pids cgroup is root's process bound: run the suite as root"
    before = my_cgroups()
    # each command lists this daemon's cgroups as the host has them (/sys is bound read-only)
    listing = {"command": f"ls -d {PIDS}/corvid-sbx-{os.getpid()}-*"}
    stub.add_tool_use([("run_command", listing)])
    stub.add_tool_use([("run_command", listing)])
    stub.add_reply("ok")
    e2e = make_e2e({"anthropic": AnthropicProvider("test-key", base_url=stub.url)}, Config())
    assert e2e.runtime.internals.builder.sandbox._cgroup_root is not None
    s = e2e.session(provider="anthropic", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "go")
    e2e.runtime.settle()
    first, second = (set(out.split()) for out in tool_outputs(stub))
    new = {Path(p).name for p in first} - before
    assert len(new) == 1 and first == second, (first, second)
    assert new <= my_cgroups()  # kept between the session's commands
    e2e.runtime.stop_process(s.id)
    e2e.runtime.settle()  # waits for the incarnation's closers, the cgroup's among them
    assert my_cgroups() - before == set()


def test_a_fork_bomb_in_a_session_is_bounded(daemon_factory):
    before = my_cgroups()  # (other tests' per-command cgroups still being reaped)
    daemon = daemon_factory(settings={"max_processes": 64})
    # sleepers started one by one, each counted in a file, until the bound refuses a fork
    result = daemon.run("n=0; while [ $n -lt 400 ]; do sleep 4 & n=$((n+1)); echo $n > count; done; "
                        "echo ALL-STARTED", timeout=15)
    assert "ALL-STARTED" not in result.output, result.output[-300:]
    started = int((daemon.project / "count").read_text())
    assert 30 < started < 64, started
    # and the session's next command runs: the sleepers went with the first one's sandbox
    assert daemon.run("echo next").output.strip() == "next"
    daemon.stop()  # the session ends: nothing of it is left on the host
    assert my_cgroups() - before == set(), my_cgroups() - before
