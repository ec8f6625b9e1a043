"""The OpenAgent seed's rules through the runtime, over the real clients and the stub servers:
plan tracking, the payload-growth failsafe, observation caps, memory policies and the
command approval policy (runtime → supervisor → session actor → loop → provider → socket)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corvid_actors.config import Config
from corvid_actors.loop.plan import render_plan
from corvid_actors.providers.anthropic import AnthropicProvider
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing.anthropic_stub import AnthropicStubServer
from corvid_actors.testing.ollama_stub import OllamaStubServer

MODEL = "llama3.1:8b"  # native tools; a 128k window (num_ctx below) keeps trimming out of the way
CLAUDE = "claude-sonnet-4-6"
KIB = 1024


@pytest.fixture
def stub():
    with OllamaStubServer() as server:
        yield server


@pytest.fixture
def data_dir(tmp_path) -> Path:
    return tmp_path / "data"


def config(data_dir: Path, **sections) -> Config:
    return Config().replace(store={"data_dir": str(data_dir)}, slots={"max_parallel": 4}, **sections)


def ollama_e2e(make_e2e, stub, data_dir, **kwargs):
    sections = kwargs.pop("sections", {})
    return make_e2e({"ollama": OllamaProvider(stub.url, num_ctx=131072)}, config(data_dir, **sections), **kwargs)


def system_of(request) -> str:
    return next(m["content"] for m in request.json["messages"] if m["role"] == "system")


def tool_messages(request) -> list[dict]:
    return [m for m in request.json["messages"] if m["role"] == "tool"]


# --- plan tracking ---------------------------------------------------------------------------


def test_plan_is_tracked_shown_to_the_model_stored_and_resumed(make_e2e, stub, data_dir):
    e2e = ollama_e2e(make_e2e, stub, data_dir)
    stub.add_tool_calls([("update_plan", {"steps": [
        {"id": "1", "title": "Read the README", "status": "running"},
        {"id": "2", "title": "Summarize", "status": "pending", "waiting_for": ["1"]}]})])
    stub.add_tool_calls([("update_plan", {"steps": [{"id": "1", "status": "completed"},
                                                    {"id": "2", "status": "running"}]})])
    stub.add_reply("The project says hello.")
    s = e2e.session(provider="ollama", model=MODEL, mode="default")
    e2e.runtime.start_process(s.id, "summarize the project")
    e2e.runtime.settle()

    assert e2e.events(s.id, "approval_request") == []  # plan updates touch nothing: no approval
    plans = [[(step["id"], step["status"]) for step in p.steps] for p in e2e.events(s.id, "plan")]
    assert plans == [[("1", "running"), ("2", "pending")], [("1", "completed"), ("2", "running")],
                     [("2", "running")]]  # the completed step is pruned at the next reply
    first, second, third = stub.chat_requests
    assert "## Current plan" not in system_of(first)
    assert "- [running] 1. Read the README\n- [pending] 2. Summarize (waiting for: 1)" in system_of(second)
    assert "- [completed] 1. Read the README" in system_of(third)
    assert "update_plan" in [t["function"]["name"] for t in first.json["tools"]]

    stored = [{"id": "2", "title": "Summarize", "status": "running", "waiting_for": []}]
    assert e2e.runtime.get_plan(s.id) == stored
    assert json.loads(e2e.runtime.internals.store.get_session(s.id).plan) == stored
    assert e2e.runtime.session_info(s.id)[s.id]["plan"] == stored
    assert render_plan(e2e.runtime.get_plan(s.id)) == "- [running] 2. Summarize"

    # a new incarnation resumes the stored plan and shows it to the model
    e2e.runtime.stop_process(s.id)
    stub.add_reply("Still summarizing.")
    e2e.runtime.resume_process(s.id, "go on")
    e2e.runtime.settle()
    assert "- [running] 2. Summarize" in system_of(stub.chat_requests[-1])


def test_the_sdk_loop_tracks_the_plan_too(make_e2e, data_dir):
    with AnthropicStubServer(api_key="k") as anthropic:
        e2e = make_e2e({"anthropic": AnthropicProvider("k", base_url=anthropic.url)}, config(data_dir))
        anthropic.add_tool_use([("update_plan", {"steps": [{"id": "a", "title": "Audit", "status": "running"}]})])
        anthropic.add_reply("Auditing.")
        s = e2e.session(provider="anthropic", model=CLAUDE, mode="default")
        e2e.runtime.start_process(s.id, "audit the code")
        e2e.runtime.settle()
        first, second = anthropic.message_requests
        assert "update_plan" in [t["name"] for t in first.json["tools"]]
        assert "- [running] a. Audit" in second.json["system"]
        assert e2e.runtime.get_plan(s.id)[0]["title"] == "Audit"
        assert e2e.events(s.id, "approval_request") == []


# --- payload-growth failsafe ---------------------------------------------------------------------


def ballooning_turn(stub, project_dir: Path, files: int = 6) -> None:
    """The model reads six big files at once: their results (16 KiB each after the caps)
    make the next request many times the last one."""
    for i in range(files):
        # 400 lines of ~100 bytes: under the 50 KiB hard limit, over the 16 KiB cap
        (project_dir / f"big{i}.txt").write_text("".join(f"row {n} " + "z" * 90 + "\n" for n in range(400)))
    stub.add_tool_calls([("read_file", {"path": f"big{i}.txt"}) for i in range(files)])
    stub.add_reply("I read them all.")


def snapshots(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "snapshots").glob("payload-*.json"))


def test_a_ballooning_request_trips_the_failsafe_once_and_the_session_compacts(
        make_e2e, stub, data_dir, project_dir):
    e2e = ollama_e2e(make_e2e, stub, data_dir)
    ballooning_turn(stub, project_dir)
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "read the big files")
    e2e.runtime.settle()

    [error] = [e for e in e2e.events(s.id, "error") if e.error_type == "payload_growth"]
    assert "compacting" in error.message
    [snapshot] = snapshots(data_dir)
    data = json.loads(snapshot.read_text())
    assert snapshot.name.startswith(f"payload-{s.id}-")
    assert data["request_bytes"] >= 5 * data["baseline_bytes"]
    assert sum(1 for m in data["messages"] if m["role"] == "tool") == 6
    note = [e for e in e2e.events(s.id, "system") if e.subtype == "payload_snapshot"]
    assert [n.message for n in note] == [str(snapshot)]
    # the runaway request never reached the server: the next one is the compacted summary
    first, compacted = stub.chat_requests
    users = [m for m in compacted.json["messages"] if m["role"] != "system"]
    assert len(users) == 1 and users[0]["content"].startswith("[Context Summary]")
    # configured state "compact": the turn ends normally and the session stays up
    assert e2e.events(s.id, "result")[-1].subtype == "success"
    assert e2e.runtime.is_running(s.id)


def test_with_on_trip_stop_the_session_ends_without_sending(make_e2e, stub, data_dir, project_dir):
    e2e = ollama_e2e(make_e2e, stub, data_dir, sections={"payload_guard": {"on_trip": "stop"}})
    ballooning_turn(stub, project_dir)
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "read the big files")
    e2e.runtime.settle()
    assert len(stub.chat_requests) == 1
    assert [e.error_type for e in e2e.events(s.id, "error")].count("payload_growth") == 1
    assert len(snapshots(data_dir)) == 1
    assert [e.code for e in e2e.events(s.id, "session_exited")] == [1]
    assert not e2e.runtime.is_running(s.id)
    assert e2e.runtime.internals.store.get_session(s.id).status == "error"
    assert e2e.runtime.slot_stats()["in_use"] == 0


# --- observation caps --------------------------------------------------------------------------------

MIB_COMMAND = "yes 0123456789abcde | head -c 1048576"


def test_a_1_mib_output_reaches_the_model_as_a_notice_and_the_operator_reads_all_of_it(
        make_e2e, stub, data_dir):
    e2e = ollama_e2e(make_e2e, stub, data_dir)  # the default tools: run_command keeps up to 8 MiB
    stub.add_tool_calls([("run_command", {"command": MIB_COMMAND})])
    stub.add_reply("That was a lot of output.")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "print a lot")
    e2e.runtime.settle()

    [seen] = tool_messages(stub.chat_requests[-1])
    assert len(seen["content"].encode()) <= 16 * KIB
    assert seen["content"].startswith("[Output omitted: 1048576 bytes in 65536 lines")
    [kept] = e2e.runtime.get_tool_outputs(s.id)
    assert kept["output"] == "0123456789abcde\n" * 65536 and kept["bytes"] == 1024 * KIB
    assert kept["tool_name"] == "run_command" and not kept["is_error"]
    [status] = [t for t in e2e.events(s.id, "tool_status") if t.state == "completed"]
    assert len(status.output) < 16 * KIB


def test_long_output_shows_its_tail_and_tail_lines_picks_how_much(make_e2e, stub, data_dir):
    e2e = ollama_e2e(make_e2e, stub, data_dir)
    stub.add_tool_calls([("run_command", {"command": "seq 1 6000"})])
    stub.add_tool_calls([("run_command", {"command": "seq 1 6000", "tail_lines": 10})])
    stub.add_reply("6000 numbers.")
    s = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(s.id, "count")
    e2e.runtime.settle()
    default, tailed = (m["content"] for m in tool_messages(stub.chat_requests[-1]))
    assert default.startswith("[Output truncated: showing the last 200 of 6000 lines")
    assert default.splitlines()[1] == "5801" and default.splitlines()[-1] == "6000"
    assert tailed.splitlines()[1:] == [str(n) for n in range(5991, 6001)]
    outputs = e2e.runtime.get_tool_outputs(s.id)
    assert [o["output"] for o in outputs] == ["".join(f"{n}\n" for n in range(1, 6001))] * 2


# --- history memory policies -----------------------------------------------------------------------------


def test_memory_policies_apply_per_agent_before_each_request(make_e2e, stub, data_dir):
    # agent-0 forgets plan updates after 1 turn and everything after 3; agent-1 keeps the defaults
    e2e = ollama_e2e(make_e2e, stub, data_dir, sections={"memory": {"agents": {"agent-0": [1, 3]}}})
    script = [("list_files", {"path": "."})] * 2 + [
        ("update_plan", {"steps": [{"id": "1", "title": "Look", "status": "running"}]})] + [
        ("read_file", {"path": "README.md"})] * 2
    for sid_prompt in ("look around", "look again"):
        for name, args in script:
            stub.add_tool_calls([(name, args)], match=sid_prompt)
        stub.add_reply("Looked.", match=sid_prompt)
    forgetful = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    normal = e2e.session(provider="ollama", model=MODEL, mode="full-auto")
    e2e.runtime.start_process(forgetful.id, "look around")
    e2e.runtime.settle()
    e2e.runtime.start_process(normal.id, "look again")
    e2e.runtime.settle()

    def last_request(prompt):
        return [r for r in stub.chat_requests if any(m.get("content") == prompt for m in r.json["messages"])][-1]

    kept = [m for m in last_request("look around").json["messages"] if m["role"] != "system"]
    assert kept[0] == {"role": "user", "content": "look around"}  # the first message is kept
    # at the last request the replies are 4 (list), 3 (list), 2 (plan), 1 and 0 (read) turns old:
    # amnesia drops the plan update (2 > 1), dementia the oldest reply (4 > 3)
    calls = [m["tool_calls"][0]["function"]["name"] for m in kept if m["role"] == "assistant"]
    assert calls == ["list_files", "read_file", "read_file"]
    assert not any(m.get("tool_name") == "update_plan" for m in kept)
    full = [m for m in last_request("look again").json["messages"] if m["role"] != "system"]
    assert len([m for m in full if m["role"] == "assistant"]) == 5
    assert any(m.get("tool_name") == "update_plan" for m in full)


# --- command approval policy ------------------------------------------------------------------------------


def test_allowlist_session_signatures_and_a_human_rejection(make_e2e, stub, data_dir, project_dir):
    e2e = ollama_e2e(make_e2e, stub, data_dir)
    for command in ("ls", "touch made.txt", "touch  made.txt", "touch other.txt"):
        stub.add_tool_calls([("run_command", {"command": command})])
    stub.add_reply("Made one file; the other was refused.")
    s = e2e.session(provider="ollama", model=MODEL, mode="auto-edit")
    e2e.runtime.start_process(s.id, "make files")
    e2e.runtime.settle()
    # "ls" is allowlisted: it ran; "touch made.txt" is not: a human is asked
    [ask] = e2e.events(s.id, "approval_request")
    # auto-edit's commands get no network ([tools.sandbox] network), and the prompt says so
    assert (ask.kind, ask.description) == ("command", "Run command: touch made.txt [network: none]")
    e2e.runtime.resolve_approval(ask.id, "allow_session")
    e2e.runtime.settle()
    # the same command again (other spacing) runs without asking; another command asks
    asks = e2e.events(s.id, "approval_request")
    assert len(asks) == 2 and asks[1].description == "Run command: touch other.txt [network: none]"
    e2e.runtime.resolve_approval(asks[1].id, "deny", "not that one")
    e2e.runtime.settle()
    results = [m["content"] for m in tool_messages(stub.chat_requests[-1])]
    assert "README.md" in results[0] and "not that one" in results[3]
    assert (project_dir / "made.txt").exists() and not (project_dir / "other.txt").exists()
    # a rejection is a normal outcome: the model is told and the turn ends in success
    assert e2e.events(s.id, "result")[-1].subtype == "success"
    assert e2e.events(s.id, "assistant")[-1].content.startswith("Made one file")


def test_sdk_loop_goes_on_after_a_rejection_by_default(make_e2e, data_dir):
    # seed 004: the denial goes back to the model (sdk_loop.stop_on_denial defaults to false)
    with AnthropicStubServer(api_key="k") as anthropic:
        cfg = config(data_dir)
        e2e = make_e2e({"anthropic": AnthropicProvider("k", base_url=anthropic.url)}, cfg)
        anthropic.add_tool_use([("run_command", {"command": "rm -rf build"})])
        anthropic.add_reply("Understood, I left build alone.")
        s = e2e.session(provider="anthropic", model=CLAUDE, mode="auto-edit")
        e2e.runtime.start_process(s.id, "clean up")
        e2e.runtime.settle()
        [ask] = e2e.events(s.id, "approval_request")
        assert ask.kind == "command"
        e2e.runtime.resolve_approval(ask.id, "deny")
        e2e.runtime.settle()
        assert len(anthropic.message_requests) == 2
        assert e2e.events(s.id, "result")[-1].subtype == "success"
