"""The README's "Testing your agents" examples, verbatim: CI runs exactly what the README shows.

``test_the_readme_shows_these_examples`` fails when the README and this file drift apart.
"""

from __future__ import annotations

import re
from pathlib import Path

from corvid_actors.testing import EventRecorder, Turn, kill_runtime, sim_runtime, stub_provider


def test_a_chat_session_restarts_after_5_then_15_seconds(runtime, scripted, recorder):
    session = runtime.create_session(source="chat", participant="alice")
    scripted.for_session(session.id,
                         Turn.crash("model server fell over"),      # exit 1 at t=0
                         Turn.crash("still down", latency_s=2),     # exit 1 at t=5+2
                         Turn.reply("I'm back.", deltas=3))         # answers at t=7+15
    runtime.start_process(session.id, "hello")
    runtime.clock.advance(60)                  # fires due timers in order, settling after each
    recorder.assert_first_at("session_started", 5.0, session.id, after=0.0)
    recorder.assert_first_at("session_started", 22.0, session.id, after=5.0)
    assert [r.event.delay_s for r in recorder.of(session.id, "session_restarting")] == [5.0, 15.0]
    assert recorder.last("assistant", session.id).content == "I'm back."
    assert [m.role for m in runtime.history(session.id)] == [
        "user", "system", "system", "assistant"]  # the prompt, two exit notes, the answer


def test_the_user_allows_a_read_and_denies_a_write(sim_clock, ollama_stub, tmp_path):
    (tmp_path / "notes.txt").write_text("the secret word is corvid\n")
    ollama_stub.add_tool_calls([("read_file", {"path": "notes.txt"})])
    ollama_stub.add_tool_calls([("write_file", {"path": "notes.txt", "content": "gone"})])
    ollama_stub.add_reply("The word is corvid.")
    with sim_runtime(sim_clock, stub_provider(ollama_stub), workspace_dir=tmp_path) as runtime:
        recorder = EventRecorder.attach(runtime)
        agent = runtime.create_agent("reader", provider="ollama", model="llama3.1:8b",
                                     permission_mode="default")  # every tool asks
        session = runtime.create_session(agent_id=agent.id, source="web")
        runtime.start_process(session.id, "what is the secret word?")
        runtime.settle()
        [read] = runtime.list_approvals(session.id)
        runtime.resolve_approval(read["id"], "allow")
        runtime.settle()
        [write] = runtime.list_approvals(session.id)
        runtime.resolve_approval(write["id"], "deny")
        runtime.settle()
        assert (read["tool_name"], write["tool_name"]) == ("read_file", "write_file")
        assert recorder.last("assistant", session.id).content == "The word is corvid."
        assert (tmp_path / "notes.txt").read_text() == "the secret word is corvid\n"
        assert runtime.approval_mode() == "normal"


def test_each_session_follows_its_own_script(runtime, scripted, recorder):
    alice, bob = (runtime.create_session(source="chat", participant=p) for p in ("alice", "bob"))
    scripted.for_session(alice.id, Turn.reply("slow hello", latency_s=30), Turn.clean_exit())
    scripted.for_session(bob.id, Turn.start_failure("model not loaded"), "hi bob")
    runtime.start_process(alice.id, "hello")
    assert runtime.start_process(bob.id, "hello") is None     # spawn_error
    assert runtime.start_process(bob.id, "hello again") is not None
    runtime.clock.advance(30)
    runtime.send_message(alice.id, "bye")                      # the clean exit: code 0
    runtime.settle()
    assert recorder.last("error", bob.id).error_type == "spawn_error"
    assert recorder.last("assistant", bob.id).content == "hi bob"
    assert recorder.last("session_exited", alice.id).code == 0
    assert [(r.session_id, r.at) for r in scripted.requests_for(alice.id)] == [(alice.id, 0.0),
                                                                               (alice.id, 30.0)]
    assert scripted.remaining(alice.id) == scripted.remaining(bob.id) == 0


def test_a_resumed_session_answers_its_unanswered_message_in_persona(runtime, scripted, arrange, tmp_path):
    project = runtime.create_project("demo", tmp_path)
    agent = runtime.create_agent("ada", system_prompt="You review code.")
    arrange.persona(agent, "Ada", archetype="technical", traits=["precise"])   # joins the system prompt
    arrange.skill_bundle("reviewer", prompt_additions="Review diffs.", agents=[agent], projects=[project])
    session = runtime.create_session(agent_id=agent.id, project_id=project.id)
    arrange.history(session.id, ("user", "earlier question"), ("assistant", "earlier answer"),
                    ("user", "the unanswered one"))                            # stored, delivered to nobody
    scripted.for_session(session.id, "the answer")
    runtime.resume_process(session.id)            # an unanswered user message: the model is called
    runtime.settle()
    [request] = scripted.requests_for(session.id)
    assert "## Persona" in request.system and "Review diffs." in request.system
    assert "earlier answer" in request.messages[-1].content                   # the history, as a resume gives it
    assert runtime.history(session.id)[-1].content == "the answer"


def test_a_turn_killed_mid_call_is_answered_after_the_restart(sim_clock, scripted, tmp_path):
    url = f"sqlite:///{tmp_path / 'corvid.db'}"
    first = sim_runtime(sim_clock, scripted, store_url=url)
    session = first.create_session(source="web")
    scripted.for_session(session.id, Turn.reply("never heard", latency_s=30),    # spent by the killed call
                         Turn.reply("answered after the restart"))              # the resume's call
    first.start_process(session.id, "what is 2+2?")
    sim_clock.advance(10)
    kill_runtime(first)                                   # first.failure says it was killed
    second = sim_runtime(sim_clock, scripted, store_url=url)
    assert second.stale_session_ids == [session.id]       # running -> idle, pid NULL, marked
    second.resume_pending_sessions()                      # mid-turn: the model is called again
    second.settle()
    assert second.history(session.id)[-1].content == "answered after the restart"
    assert [r.at for r in scripted.requests_for(session.id)] == [0.0, 10.0]
    second.shutdown()


def test_the_readme_shows_these_examples():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Testing your agents"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    # the tests; the example outside pytest runs as a script in tests/e2e/test_readme_snippets.py
    blocks = [block for block in blocks if "def test_" in block]
    assert len(blocks) == 5
    source = Path(__file__).read_text(encoding="utf-8")
    for block in blocks:
        # the imports are merged at the top of this file; the rest is copied verbatim
        body = [line for line in block.splitlines() if not line.startswith(("from ", "import "))]
        for line in body:
            assert line in source.splitlines() or not line.strip(), f"README line not in this file: {line!r}"
        assert "\n".join(body).strip() in source, "a README example differs from its copy here"
