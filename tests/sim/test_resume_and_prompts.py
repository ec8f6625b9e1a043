"""Seed invariants 3, 5, 6, 7: prompts, provider routing, resume history, context reset."""

from __future__ import annotations

from corvid_actors.config import Config
from corvid_actors.testing import ScriptedProvider, sim_runtime


def test_resume_builds_history_from_the_last_20_messages_each_cut_to_2000_chars(runtime, scripted, arrange,
                                                                               web_session):
    arrange.history(web_session.id, *((("user" if i % 2 == 0 else "assistant"), f"message {i} " + "x" * 3000)
                                      for i in range(25)))
    runtime.resume_process(web_session.id, "new question")
    runtime.settle()
    prompt = scripted.requests[-1].messages[-1].content
    assert prompt.startswith("<conversation_history>") or "<conversation_history>" in prompt
    assert "message 4 " not in prompt  # 25 messages: only the last 20 (5..24) are kept
    assert "message 5 " in prompt and "message 24 " in prompt
    assert prompt.rstrip().endswith("new question")
    for line in prompt.splitlines():
        assert len(line) <= 2000 + len("[Assistant]: ") + 5
    # the persisted message is the user's words, not the history block
    assert runtime.internals.store.recent_messages(web_session.id, 2) == [("user", "new question"), ("assistant", "ok")]


def test_resume_of_a_session_without_history_uses_the_prompt_alone(runtime, scripted, web_session):
    runtime.resume_process(web_session.id, "just this")
    runtime.settle()
    assert scripted.requests[-1].messages[-1].content == "just this"


def test_context_reset_after_eight_user_turns_goes_through_the_resume_path(runtime, scripted, recorder,
                                                                          web_session):
    runtime.start_process(web_session.id, "turn 0")
    runtime.settle()
    for i in range(1, 9):
        assert runtime.send_message(web_session.id, f"turn {i}")
        runtime.settle()
    assert len(recorder.of(web_session.id, "session_started")) == 1
    runtime.resume_process(web_session.id, "another message")
    runtime.settle()
    starts = recorder.of(web_session.id, "session_started")
    assert len(starts) == 2  # killed and restarted
    assert recorder.last("system", web_session.id).subtype in ("context_reset", "provider_selected")
    assert any(r.event.subtype == "context_reset" for r in recorder.of(web_session.id, "system"))
    request = scripted.requests[-1]
    assert len(request.messages) == 1  # a fresh loop: capped history in one prompt
    assert "<conversation_history>" in request.messages[0].content
    assert request.messages[0].content.rstrip().endswith("another message")


def test_send_message_past_the_turn_limit_also_resets(runtime, scripted, recorder, web_session):
    runtime.start_process(web_session.id, "turn 0")
    runtime.settle()
    for i in range(1, 10):
        assert runtime.send_message(web_session.id, f"turn {i}")
        runtime.settle()
    assert len(recorder.of(web_session.id, "session_started")) == 2
    assert "turn 9" in scripted.requests[-1].messages[-1].content


def test_persona_and_skill_prompts_are_injected_in_order(runtime, scripted, arrange, tmp_path):
    project = runtime.create_project("demo", tmp_path)
    agent = runtime.create_agent("helper", system_prompt="You are Corvid.", append_prompt="Be brief.")
    arrange.persona(agent, "Ada", archetype="technical", traits=["precise"], background="Ex-physicist")
    arrange.skill_bundle("reviewer", prompt_additions="Review diffs carefully.", agents=[agent], sort_order=0)
    arrange.skill_bundle("tester", prompt_additions="Write tests first.", agents=[agent], sort_order=1)
    arrange.skill_bundle("project-rules", prompt_additions="Use the project's style.", projects=[project])
    session = runtime.create_session(agent_id=agent.id, project_id=project.id)
    runtime.start_process(session.id, "hi")
    runtime.settle()
    system = scripted.requests[-1].system
    order = ["You are Corvid.", "Be brief.", "## Persona", "## Skill Instructions", "Review diffs carefully.",
             "Write tests first.", "Use the project's style."]
    positions = [system.index(part) for part in order]
    assert positions == sorted(positions)
    assert "precise" in system and "Ex-physicist" in system


def test_provider_routing_explicit_wins_and_falls_back_to_ollama_without_anthropic_credentials(sim_clock):
    from corvid_actors.wiring.builder import SessionBuilder

    scripted = ScriptedProvider(sim_clock)
    builder = SessionBuilder(config=Config(), clock=sim_clock, providers={"scripted": scripted})

    class Agent:
        provider = ""

    assert builder.route(Agent()) == "ollama"  # no provider, no Anthropic credentials
    Agent.provider = "scripted"
    assert builder.route(Agent()) == "scripted"
    with_key = SessionBuilder(config=Config().replace(providers={"anthropic_api_key": "k"}), clock=sim_clock,
                              providers={"anthropic": scripted})
    Agent.provider = ""
    assert with_key.route(Agent()) == "anthropic"
    Agent.provider = "ollama"
    assert with_key.route(Agent()) == "ollama"


def test_council_chairman_uses_council_model(sim_clock, tmp_path):
    scripted = ScriptedProvider(sim_clock)
    rt = sim_runtime(sim_clock, scripted, config=Config().replace(supervisor={"council_model": "big-model"}))
    try:
        agent = rt.create_agent("chair", model="small-model")
        chair = rt.create_session(agent_id=agent.id, council_role="chairman")
        member = rt.create_session(agent_id=agent.id, council_role="member")
        rt.start_process(chair.id, "synthesise")
        rt.start_process(member.id, "opine")
        rt.settle()
        assert sorted(r.model for r in scripted.requests) == ["big-model", "small-model"]
    finally:
        rt.shutdown()
