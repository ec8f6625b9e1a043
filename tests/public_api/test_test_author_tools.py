"""What a test author reaches for from outside the package (issue 34): a real clock while
simulated time is frozen, the scripted provider beside the configured ones, the time of
each model call, and a scripted tool call that a loop without tools cannot take."""

from __future__ import annotations

import threading
import time

import pytest

from corvid_actors.config import Config
from corvid_actors.runtime import Runtime
from corvid_actors.testing import (
    ScriptedProvider,
    ScriptError,
    Turn,
    real_monotonic,
    real_perf_counter,
    real_time,
    sim_runtime,
)

# --- real time while a SimClock is open -------------------------------------------------------


def test_an_open_sim_clock_freezes_the_test_s_own_time_but_not_real_monotonic(sim_clock):
    frozen, real, perf, wall = time.monotonic(), real_monotonic(), real_perf_counter(), real_time()
    threading.Event().wait(0.05)  # real seconds pass
    assert time.monotonic() == frozen  # what a naive bound measures: nothing
    assert time.time() == sim_clock.now().timestamp()
    assert real_monotonic() - real >= 0.05
    assert real_perf_counter() - perf >= 0.05
    assert real_time() - wall >= 0.05 and real_time() > sim_clock.now().timestamp()  # 2026-01-01 vs today


def test_real_time_is_the_plain_clock_when_no_sim_clock_is_open():
    assert abs(real_monotonic() - time.monotonic()) < 1.0
    assert abs(real_time() - time.time()) < 1.0


# --- the scripted provider beside the configured ones -------------------------------------------


def test_sim_runtime_puts_the_scripted_provider_beside_the_configured_ones(sim_clock, scripted):
    config = Config().replace(providers={"anthropic_api_key": "test-key"})
    with sim_runtime(sim_clock, scripted, config=config, configured_providers=True) as runtime:
        assert [runtime.has_provider(name) for name in ("scripted", "ollama", "anthropic")] == [True, True, True]
        assert runtime.provider("scripted") is scripted
        session = runtime.create_session(source="web")  # the default provider: scripted
        scripted.for_session(session.id, "scripted beside the others")
        runtime.start_process(session.id, "hi")
        runtime.settle()
        assert runtime.history(session.id)[-1].content == "scripted beside the others"


def test_sim_runtime_replaces_the_providers_unless_told(sim_clock, scripted):
    with sim_runtime(sim_clock, scripted) as runtime:
        assert runtime.has_provider("scripted") and not runtime.has_provider("ollama")


def test_runtime_extra_providers_add_and_never_replace(sim_clock, scripted, tmp_path):
    config = Config().replace(providers={"default_provider": "scripted"})
    with Runtime(config, clock=sim_clock, store_url="sqlite:///:memory:", extra_providers={"scripted": scripted},
                 workspace_dir=tmp_path, dispatcher="inline") as runtime:
        assert runtime.has_provider("ollama") and runtime.has_provider("scripted")
    other = ScriptedProvider(sim_clock, name="other")
    with Runtime(config, clock=sim_clock, store_url="sqlite:///:memory:", providers={"scripted": scripted},
                 extra_providers={"other": other}, workspace_dir=tmp_path, dispatcher="inline") as runtime:
        assert (runtime.has_provider("other"), runtime.has_provider("ollama")) == (True, False)
    with pytest.raises(ValueError, match="extra_providers names 'ollama'"):
        Runtime(config, clock=sim_clock, store_url="sqlite:///:memory:",
                extra_providers={"ollama": ScriptedProvider(sim_clock, name="ollama")}, dispatcher="inline")


# --- when each model call was made --------------------------------------------------------------


def test_each_model_request_carries_the_simulated_time_it_was_made_at(runtime, scripted, recorder):
    session = runtime.create_session(source="chat")
    scripted.for_session(session.id, Turn.reply("slow", latency_s=7), Turn.crash("boom"), "after the restart")
    runtime.start_process(session.id, "one")           # call at 0, answered at 7
    runtime.clock.advance(10)
    runtime.send_message(session.id, "two")            # call at 10: a crash; the restart is 5 s later
    runtime.clock.advance(10)
    requests = scripted.requests_for(session.id)
    assert [(r.at, r.generation) for r in requests] == [(0.0, 1), (10.0, 1), (15.0, 2)]
    assert recorder.times("assistant", session.id) == [7.0, 15.0]


# --- a scripted tool call on a loop without tools -----------------------------------------------


def test_a_scripted_tool_call_on_the_conversation_loop_is_an_error_naming_the_loop(runtime, scripted, recorder):
    session = runtime.create_session(source="web")
    scripted.for_session(session.id, Turn.tool_call("read_file", {"path": "notes.txt"}))
    runtime.start_process(session.id, "read it")
    runtime.settle()
    [error] = scripted.script_errors
    assert isinstance(error, ScriptError)
    assert "'read_file'" in str(error) and "the 'conversation' loop, which runs no tools" in str(error)
    event = recorder.last("error", session.id)
    assert "ScriptError" in event.message and "'conversation' loop" in event.message
    assert recorder.last("session_exited", session.id).code == 1
    assert recorder.of(session.id, "assistant") == []


def test_a_scripted_tool_call_on_a_direct_loop_without_tools_names_that_loop(sim_clock, scripted, tmp_path):
    with sim_runtime(sim_clock, scripted, loop_for_provider={"scripted": "direct"},
                     workspace_dir=tmp_path) as runtime:
        agent = runtime.create_agent("toolless", provider="scripted", tool_permissions=[])
        session = runtime.create_session(agent_id=agent.id, source="web")
        scripted.for_session(session.id, Turn.tool_call("read_file", {"path": "x"}))
        runtime.start_process(session.id, "read it")
        runtime.settle()
        assert "the 'direct' loop, which offered none to this session" in str(scripted.script_errors[0])


def test_a_scripted_tool_call_on_a_direct_loop_with_tools_runs(sim_clock, scripted, tmp_path):
    (tmp_path / "notes.txt").write_text("corvid\n")
    with sim_runtime(sim_clock, scripted, loop_for_provider={"scripted": "direct"},
                     workspace_dir=tmp_path) as runtime:
        agent = runtime.create_agent("reader", provider="scripted", permission_mode="full-auto")
        session = runtime.create_session(agent_id=agent.id, source="web")
        scripted.for_session(session.id, Turn.tool_call("read_file", {"path": "notes.txt"}), "It says corvid.")
        runtime.start_process(session.id, "read it")
        runtime.settle()
        assert scripted.script_errors == []
        assert runtime.history(session.id)[-1].content == "It says corvid."
