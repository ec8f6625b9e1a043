"""``Runtime.run_tool``: one tool call as a session of a permission mode makes it — the
same registry, permission check, environment, deadline and OS sandbox — through
``Runtime`` and ``corvid_actors.testing`` only."""

from __future__ import annotations

import os

import pytest

from corvid_actors.errors import RuntimeStoppedError
from corvid_actors.testing import Turn, sim_runtime


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text("the secret word is corvid\n")
    return root


def test_default_mode_asks_and_runs_only_when_approved(runtime, project):
    asked = runtime.run_tool(project, "read_file", {"path": "notes.txt"})
    assert (asked.decision, asked.reason, asked.ran, asked.output) == ("ask", "Read file: notes.txt", False, None)
    approved = runtime.run_tool(project, "read_file", {"path": "notes.txt"}, approve=True)
    assert (approved.decision, approved.ran, approved.is_error) == ("ask", True, False)
    assert approved.output == "1\tthe secret word is corvid"


def test_modes_and_protected_paths_decide_as_for_a_session(runtime, project):
    plan = runtime.run_tool(project, "write_file", {"path": "x.txt", "content": "x"}, mode="plan", approve=True)
    assert (plan.decision, plan.ran) == ("deny", False)
    assert "plan mode" in plan.reason
    assert not (project / "x.txt").exists()
    protected = runtime.run_tool(project, "write_file", {"path": ".env", "content": "KEY=1"}, mode="full-auto")
    assert (protected.decision, protected.ran) == ("deny", False)
    assert protected.reason == "Cannot modify protected file: .env"
    assert not (project / ".env").exists()
    written = runtime.run_tool(project, "write_file", {"path": "x.txt", "content": "x"}, mode="full-auto")
    assert (written.decision, written.ran, written.is_error) == ("allow", True, False)
    assert (project / "x.txt").read_text() == "x"
    edit = runtime.run_tool(project, "write_file", {"path": "y.txt", "content": "y"}, mode="auto-edit")
    assert edit.decision == "allow" and (project / "y.txt").read_text() == "y"
    command = runtime.run_tool(project, "run_command", {"command": "true"}, mode="auto-edit")
    assert (command.decision, command.ran) == ("ask", False)
    unknown = runtime.run_tool(project, "no_such_tool", {}, mode="full-auto")
    assert (unknown.decision, unknown.reason, unknown.ran) == ("deny", "Unknown tool: no_such_tool", False)


def test_commands_get_the_session_environment_and_deadline(runtime, project, monkeypatch):
    monkeypatch.setenv("CORVID_TEST_HOST_SECRET", "s3cret")
    env = runtime.run_tool(project, "run_command", {"command": "echo hi; echo \"[$CORVID_TEST_HOST_SECRET]\""},
                           mode="full-auto")
    assert (env.decision, env.is_error) == ("allow", False)
    assert env.output.split() == ["hi", "[]"]  # safe_env: the host's variables do not leak
    slow = runtime.run_tool(project, "run_command", {"command": "sleep 5", "timeout": 0.3}, mode="full-auto")
    assert slow.is_error and "timed out" in slow.output


def test_commands_run_in_the_os_sandbox_a_session_gets(sim_clock, scripted, tmp_path, project):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "key").write_text("private")
    with sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws",
                     config={"tools": {"sandbox": {"mode": "auto", "hidden_paths": (str(hidden),)}}}) as rt:
        status = rt.internals.builder.sandbox.status
        if not status.active:  # CI makes sure bwrap works (.ci/run): there it is a failure
            (pytest.fail if os.environ.get("CI") else pytest.skip)(f"no OS sandbox on this machine: {status.reason}")
        run = rt.run_tool(project, "run_command", {"command": f"cat {hidden / 'key'} || echo unreadable"},
                          mode="full-auto")
        assert run.decision == "allow"
        assert "private" not in run.output and "unreadable" in run.output


def test_run_tool_asks_what_a_session_of_the_mode_asks(sim_clock, scripted, tmp_path, project):
    with sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws",
                     loop_for_provider={"scripted": "direct"}) as rt:
        agent = rt.create_agent("reader", permission_mode="default")
        proj = rt.create_project("p", project)
        s = rt.create_session(agent_id=agent.id, project_id=proj.id, source="web")
        scripted.for_session(s.id, Turn.tool_call("read_file", {"path": "notes.txt"}), Turn.reply("done"))
        rt.start_process(s.id, "read the notes")
        rt.settle()
        [request] = rt.list_approvals(s.id)
        run = rt.run_tool(project, "read_file", {"path": "notes.txt"}, agent=agent)
        assert run.decision == "ask" and run.reason == request["description"]
        rt.resolve_approval(request["id"], "allow")
        rt.settle()
        seen = [m.content for m in scripted.requests[-1].messages if m.role == "tool"]
        approved = rt.run_tool(project, "read_file", {"path": "notes.txt"}, agent=agent, approve=True)
        assert approved.output in seen


def test_run_tool_after_shutdown_raises(runtime, project):
    runtime.shutdown()
    with pytest.raises(RuntimeStoppedError):
        runtime.run_tool(project, "read_file", {"path": "notes.txt"})


def test_run_tool_gives_what_the_tool_produced_and_what_the_model_sees_after_the_caps(sim_clock, scripted, project):
    (project / "long.txt").write_text("".join(f"{i:04d} " + "x" * 95 + "\n" for i in range(150)))  # 15,000 chars
    with sim_runtime(sim_clock, scripted, loop_for_provider={"scripted": "direct"}, workspace_dir=project,
                     config={"direct_loop": {"use_tier_caps": False}, "tools": {"output_truncate_chars": 50000}}) as rt:
        run = rt.run_tool(project, "read_file", {"path": "long.txt"}, mode="full-auto")
        assert len(run.output) > 15000 and "truncated" not in run.output  # all of it: under the tool's own cap
        # one cut (issue 34 item 2): the 30 % cap is the observation's byte cap for this
        # result, and the notice states the tool's own lines and bytes
        head, _, notice = run.model_sees.rpartition("\n[Output truncated: ")
        assert run.output.startswith(head) and len(head) > 9000
        assert notice.startswith(f"showing the first 88 of 150 lines (9143 of {len(run.output.encode())} bytes)")
        # exactly what a direct-loop session's model is given of the same call
        agent = rt.create_agent("reader", provider="scripted", permission_mode="full-auto")
        session = rt.create_session(agent_id=agent.id, source="web")
        scripted.for_session(session.id, Turn.tool_call("read_file", {"path": "long.txt"}), "done")
        rt.start_process(session.id, "read it")
        rt.settle()
        [tool_message] = [m for m in scripted.requests_for(session.id)[-1].messages if m.role == "tool"]
        assert tool_message.content == run.model_sees
        lines = rt.run_tool(project, "run_command", {"command": "seq 1 500"}, mode="full-auto")
        assert lines.output.split() == [str(i) for i in range(1, 501)]
        assert lines.model_sees.splitlines()[-200:] == [str(i) for i in range(301, 501)]  # the observation cap
        assert "1\n2\n3\n" not in lines.model_sees
        small = rt.run_tool(project, "run_command", {"command": "seq 1 500"}, mode="full-auto", context_window=100)
        assert len(small.model_sees) < 1000 + 60  # the 30 % cap's floor: 1,000 chars and the marker
        denied = rt.run_tool(project, "write_file", {"path": ".env", "content": "x"}, mode="full-auto")
        assert (denied.output, denied.model_sees) == (None, None)


def test_run_tool_applies_the_caps_in_the_loop_s_order(sim_clock, scripted, project):
    """Both caps bite here and their order matters (the observation cap keeps a command's
    tail, the 30 % cap a head): run_tool must give exactly what a session's model is given,
    whichever order the loop applies them in."""
    command = {"command": "for i in $(seq 1 150); do printf '%0150d\\n' $i; done"}  # 22,650 bytes, 150 lines
    with sim_runtime(sim_clock, scripted, loop_for_provider={"scripted": "direct"}, workspace_dir=project,
                     config={"direct_loop": {"use_tier_caps": False}, "tools": {"output_truncate_chars": 50000}}) as rt:
        run = rt.run_tool(project, "run_command", command, mode="full-auto")
        assert len(run.output) > 22000 and len(run.model_sees) < 16384
        agent = rt.create_agent("runner", provider="scripted", permission_mode="full-auto")
        session = rt.create_session(agent_id=agent.id, source="web")
        scripted.for_session(session.id, Turn.tool_call("run_command", command), "done")
        rt.start_process(session.id, "run it")
        rt.settle()
        [tool_message] = [m for m in scripted.requests_for(session.id)[-1].messages if m.role == "tool"]
        assert tool_message.content == run.model_sees
