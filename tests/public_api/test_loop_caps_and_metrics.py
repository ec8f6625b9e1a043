"""``direct_loop.use_tier_caps`` pins the loop's caps; results carry ``stall_detected`` and
``stall_type`` — through a Runtime whose scripted provider runs the direct loop."""

from __future__ import annotations

import pytest

from corvid_actors.testing import Turn, sim_runtime

MODEL = "llama3.1:8b"  # a capable family under 20B: the "limited" tier (8 tool iterations)


@pytest.fixture
def make_runtime(sim_clock, scripted, tmp_path):
    made = []

    def make(**direct_loop):
        rt = sim_runtime(sim_clock, scripted, config={"direct_loop": direct_loop},
                         loop_for_provider={"scripted": "direct"},
                         workspace_dir=tmp_path / "ws")
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.shutdown()


def session(rt):
    agent = rt.create_agent("worker", provider="scripted", model=MODEL, permission_mode="full-auto")
    return rt.create_session(agent_id=agent.id, source="web")


def browsing(n):
    """n tool calls that are neither repeats nor the same tool twice in a row."""
    return [Turn.tool_call("list_files" if i % 2 else "read_file", {"path": f"f{i}.txt"}) for i in range(n)]


def result_metrics(rt, scripted, turns):
    from corvid_actors.testing import EventRecorder

    recorder = EventRecorder.attach(rt)
    s = session(rt)
    scripted.for_session(s.id, *turns)
    rt.start_process(s.id, "look around")
    rt.settle()
    return recorder.last("result", s.id).metrics


def test_tier_caps_override_the_configured_iteration_cap_by_default(make_runtime, scripted):
    rt = make_runtime(max_tool_iterations=3)
    metrics = result_metrics(rt, scripted, [*browsing(12), "summary"])
    assert metrics["tier"] == "limited"
    assert (metrics["iterations"], metrics["termination_reason"]) == (8, "max_iterations")


def test_use_tier_caps_false_pins_the_configured_caps(make_runtime, scripted):
    rt = make_runtime(max_tool_iterations=3, use_tier_caps=False)
    metrics = result_metrics(rt, scripted, [*browsing(12), "summary"])
    assert (metrics["iterations"], metrics["termination_reason"]) == (3, "max_iterations")
    assert (metrics["stall_detected"], metrics["stall_type"]) == (False, None)


def test_a_repeat_stall_is_reported_in_the_result_metrics(make_runtime, scripted):
    rt = make_runtime()
    same = Turn.tool_call("read_file", {"path": "same.txt"})
    metrics = result_metrics(rt, scripted, [same, same, same, "Summary: stuck on same.txt"])
    assert metrics["termination_reason"] == "stall_repeat"
    assert (metrics["stall_detected"], metrics["stall_type"]) == (True, "stall_repeat")


def test_a_normal_turn_reports_no_stall(make_runtime, scripted):
    rt = make_runtime()
    metrics = result_metrics(rt, scripted, [*browsing(2), "All done: read f0.txt and listed f1.txt."])
    assert metrics["termination_reason"] == "normal"
    assert (metrics["stall_detected"], metrics["stall_type"]) == (False, None)
