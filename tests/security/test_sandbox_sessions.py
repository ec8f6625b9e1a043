"""The sandbox through the runtime: sessions over the real anthropic client and the stub
server, with the sandbox found, missing under ``auto``, and missing under ``required``."""

from __future__ import annotations

import pytest

from corvid_actors.config import Config
from corvid_actors.providers.anthropic import AnthropicProvider
from corvid_actors.testing.anthropic_stub import AnthropicStubServer

MODEL = "claude-sonnet-4-6"
MISSING = "/nonexistent/corvid/bwrap"


@pytest.fixture
def stub():
    with AnthropicStubServer(api_key="test-key") as server:
        yield server


def session(make_e2e, stub, permission_mode: str, **sandbox):
    provider = AnthropicProvider("test-key", base_url=stub.url)
    config = Config().replace(tools={"sandbox": sandbox}) if sandbox else Config()
    e2e = make_e2e({"anthropic": provider}, config)
    return e2e, e2e.session(provider="anthropic", model=MODEL, mode=permission_mode)


def tool_results(stub) -> list[dict]:
    body = stub.message_requests[-1].json
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    return [b for b in blocks if b.get("type") == "tool_result"]


def sandbox_notices(e2e, sid):
    return [e for e in e2e.events(sid, "system") if e.subtype == "sandbox_unavailable"]


def test_full_auto_computed_delete_of_env_fails_in_the_sandbox(make_e2e, stub, project_dir):
    stub.add_tool_use([("run_command", {"command": "rm -f $(printf .en)v; cat $(printf .en)v; echo done"})])
    stub.add_reply("ok")
    e2e, s = session(make_e2e, stub, "full-auto")
    e2e.runtime.start_process(s.id, "go")
    e2e.runtime.settle()
    assert sandbox_notices(e2e, s.id) == []
    [result] = tool_results(stub)
    assert "done" in str(result["content"]) and "do-not-touch" not in str(result["content"])
    assert (project_dir / ".env").read_text() == "SECRET=do-not-touch\n"


@pytest.mark.parametrize("mode", ["default", "auto-edit", "full-auto"])
def test_parameter_expansion_delete_is_denied_in_every_mode(make_e2e, stub, project_dir, mode):
    stub.add_tool_use([("run_command", {"command": "rm ${TARGET:-.env}"})])
    stub.add_reply("ok")
    e2e, s = session(make_e2e, stub, mode, mode="off")  # the guard alone: no sandbox behind it
    e2e.runtime.start_process(s.id, "go")
    e2e.runtime.settle()
    assert e2e.events(s.id, "approval_request") == []
    [result] = tool_results(stub)
    assert result.get("is_error") and "protected" in str(result["content"]).lower()
    assert (project_dir / ".env").read_text() == "SECRET=do-not-touch\n"


def test_auto_without_bwrap_warns_per_session_and_runs_unconfined(make_e2e, stub, project_dir):
    stub.add_tool_use([("run_command", {"command": "echo unconfined"})])
    stub.add_reply("ok")
    e2e, s = session(make_e2e, stub, "full-auto", mode="auto", bwrap_path=MISSING, backend="bwrap")
    assert e2e.runtime.internals.builder.sandbox.status.as_dict()["active"] is False
    e2e.runtime.start_process(s.id, "go")
    e2e.runtime.settle()
    [notice] = sandbox_notices(e2e, s.id)
    assert "UNCONFINED" in notice.message and MISSING in notice.message
    [result] = tool_results(stub)
    assert "unconfined" in str(result["content"]) and not result.get("is_error")


def test_required_without_bwrap_refuses_commands(make_e2e, stub, project_dir):
    stub.add_tool_use([("run_command", {"command": "echo should-not-run > ran.txt"})])
    stub.add_reply("ok")
    e2e, s = session(make_e2e, stub, "full-auto", mode="required", bwrap_path=MISSING, backend="bwrap")
    e2e.runtime.start_process(s.id, "go")
    e2e.runtime.settle()
    [notice] = sandbox_notices(e2e, s.id)
    assert "refused" in notice.message
    [result] = tool_results(stub)
    assert result.get("is_error") and "required" in str(result["content"])
    assert not (project_dir / "ran.txt").exists()


def test_auto_edit_auto_approves_only_when_sandboxed(make_e2e, stub):
    stub.add_tool_use([("run_command", {"command": "ls"})])
    stub.add_reply("ok")
    e2e, s = session(make_e2e, stub, "auto-edit")
    e2e.runtime.start_process(s.id, "go")
    e2e.runtime.settle()
    assert e2e.events(s.id, "approval_request") == []  # sandboxed and read-only: runs
    assert "README.md" in str(tool_results(stub)[0]["content"])


def test_auto_edit_asks_without_the_sandbox(make_e2e, stub):
    stub.add_tool_use([("run_command", {"command": "ls"})])
    stub.add_reply("ok")
    e2e, s = session(make_e2e, stub, "auto-edit", mode="auto", bwrap_path=MISSING, backend="bwrap")
    e2e.runtime.start_process(s.id, "go")
    e2e.runtime.settle()
    [request] = e2e.events(s.id, "approval_request")
    assert "ls" in request.description


def test_auto_edit_asks_for_a_recursive_grep_abbreviation(make_e2e, stub):
    stub.add_tool_use([("run_command", {"command": "grep --recurs SECRET ."})])
    stub.add_reply("ok")
    e2e, s = session(make_e2e, stub, "auto-edit")
    e2e.runtime.start_process(s.id, "go")
    e2e.runtime.settle()
    [request] = e2e.events(s.id, "approval_request")
    assert "--recurs" in request.description
