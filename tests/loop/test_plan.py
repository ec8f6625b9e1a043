"""Plan tracking rules (OpenAgent seed): parsing, merging, pruning, rendering, storage."""

from __future__ import annotations

import pytest

from corvid_actors.loop.plan import (
    PLAN_TOOL_NAME,
    PlanState,
    PlanStatus,
    PlanStep,
    PlanUpdateError,
    StepUpdate,
    merge_plan,
    parse_plan_update,
    plan_from_json,
    plan_prompt,
    plan_to_json,
    plan_tool_spec,
    prune_completed,
    render_plan,
    state_from_dicts,
    summarize_update,
)
from corvid_actors.tools.base import ToolContext
from corvid_actors.tools.plan_tool import plan_tool

P, R, C, B = PlanStatus.PENDING, PlanStatus.RUNNING, PlanStatus.COMPLETED, PlanStatus.BLOCKED


def state(*steps: tuple, pruned: tuple[str, ...] = ()) -> PlanState:
    return PlanState(tuple(PlanStep(*s) for s in steps), frozenset(pruned))


def upd(step_id: str, title: str | None = None, status: PlanStatus | None = None,
        waits: tuple[str, ...] | None = None) -> StepUpdate:
    return StepUpdate(step_id, title, status, waits)


# --- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"steps": [{"id": "1", "title": "Read", "status": "pending"}]},
     (upd("1", "Read", P),)),
    ({"steps": [{"id": 2, "status": "in_progress"}]}, (upd("2", None, R),)),
    ({"steps": [{"id": "a", "status": "DONE", "waiting_for": "b"}]}, (upd("a", None, C, ("b",)),)),
    ({"steps": '[{"id": "x", "title": "T", "status": "blocked", "waiting_for": ["y"]}]'},
     (upd("x", "T", B, ("y",)),)),
    ({"steps": [{"id": "k", "waitingFor": [1, 2]}]}, (upd("k", None, None, ("1", "2")),)),
    ({"steps": []}, ()),
])
def test_parse_plan_update(arguments, expected):
    assert parse_plan_update(arguments) == expected


@pytest.mark.parametrize(("arguments", "needle"), [
    ({}, "'steps' must be a list"),
    ({"steps": "{nope"}, "not valid JSON"),
    ({"steps": ["text"]}, "must be an object"),
    ({"steps": [{"title": "no id"}]}, "has no id"),
    ({"steps": [{"id": "1", "status": "sleeping"}]}, "unknown status 'sleeping'"),
    ({"steps": [{"id": "1"}, {"id": "1"}]}, "appears twice"),
    ({"steps": [{"id": "1", "waiting_for": {"a": 1}}]}, "waiting_for must be a list"),
])
def test_parse_errors_name_the_problem(arguments, needle):
    with pytest.raises(PlanUpdateError, match=needle):
        parse_plan_update(arguments)


# --- merging -------------------------------------------------------------------------------


@pytest.mark.parametrize(("before", "updates", "after", "ignored"), [
    # new steps are appended in the order given; a missing title falls back to the id
    (state(), [upd("1", "Read", P), upd("2", None, P)],
     state(("1", "Read", P), ("2", "2", P)), ()),
    # a partial update changes only the fields it gives; unnamed steps are kept
    (state(("1", "Read", P), ("2", "Fix", P)), [upd("1", None, R)],
     state(("1", "Read", R), ("2", "Fix", P)), ()),
    (state(("1", "Read", P)), [upd("1", "Read the code", None, ("0",))],
     state(("1", "Read the code", P, ("0",))), ()),
    # a pruned id never comes back; the rest of the update still applies
    (state(("2", "Fix", P), pruned=("1",)), [upd("1", "Read", R), upd("2", None, R)],
     state(("2", "Fix", R), pruned=("1",)), ("1",)),
    # waiting_for drops the step itself and pruned ids, keeps order, no duplicates
    (state(pruned=("done",)), [upd("3", "Test", B, ("3", "done", "2", "2"))],
     state(("3", "Test", B, ("2",)), pruned=("done",)), ()),
])
def test_merge_plan(before, updates, after, ignored):
    merge = merge_plan(before, updates)
    assert merge.state == after
    assert merge.ignored == ignored


def test_an_explicit_empty_plan_resets_steps_and_pruned_ids():
    before = state(("2", "Fix", R), pruned=("1",))
    assert merge_plan(before, []).state == PlanState()
    # after the reset the old id may be used again
    again = merge_plan(PlanState(), [upd("1", "Read", P)])
    assert again.state.steps[0].id == "1" and again.ignored == ()


def test_completed_steps_stay_until_pruned_then_never_return():
    plan = merge_plan(state(("1", "Read", R), ("2", "Fix", P, ("1",))), [upd("1", None, C)]).state
    assert [s.status for s in plan.steps] == [C, P]  # still visible to the model
    pruned = prune_completed(plan)
    assert [s.id for s in pruned.steps] == ["2"]
    assert pruned.steps[0].waiting_for == ()  # dependants no longer wait for a finished step
    assert pruned.pruned == frozenset({"1"})
    assert merge_plan(pruned, [upd("1", "Read", P)]).state == pruned


def test_prune_without_completed_steps_is_the_same_state():
    plan = state(("1", "Read", R))
    assert prune_completed(plan) is plan


# --- showing and storing -----------------------------------------------------------------------


def test_render_plan_for_people_and_the_model():
    plan = state(("1", "Read", C), ("2", "Fix", B, ("1", "x")))
    assert render_plan(plan.steps) == "- [completed] 1. Read\n- [blocked] 2. Fix (waiting for: 1, x)"
    assert render_plan(plan.as_dicts()) == render_plan(plan.steps)
    prompt = plan_prompt(plan)
    assert prompt.startswith("## Current plan\n- [completed] 1. Read") and "update_plan" in prompt
    assert plan_prompt(PlanState()) == ""


def test_summary_for_the_model_mentions_ignored_ids():
    before = state(pruned=("1",))
    merge = merge_plan(before, [upd("1", "Old", P), upd("2", "New", R)])
    text = summarize_update(before, merge)
    assert text.startswith("Plan updated: 1 steps (1 running).") and "Ignored" in text and "1" in text
    assert summarize_update(state(("1", "a", P)), merge_plan(state(("1", "a", P)), [])) == "Plan cleared."


def test_storage_round_trip_and_damaged_rows():
    plan = state(("1", "Read", R, ("0",)), ("2", "Fix", P))
    text = plan_to_json(plan.as_dicts())
    assert state_from_dicts(plan_from_json(text)).steps == plan.steps
    assert plan_from_json("") == [] and plan_from_json("{not json") == [] and plan_from_json('{"a": 1}') == []
    rows = [{"id": "1", "status": "weird"}, {"title": "no id"}, {"id": " "}, {"id": "ok", "status": "done"}]
    assert state_from_dicts(rows).steps == (PlanStep("ok", "ok", C),)


# --- the tool ------------------------------------------------------------------------------------


def test_plan_tool_spec_and_validating_handler(tmp_path):
    spec = plan_tool_spec()
    assert spec.name == PLAN_TOOL_NAME == "update_plan"
    step = spec.parameters["properties"]["steps"]["items"]
    assert step["properties"]["status"]["enum"] == ["pending", "running", "completed", "blocked"]
    tool = plan_tool(spec, parse_plan_update)
    ctx = ToolContext(project_dir=tmp_path)
    assert not tool.handler({"steps": [{"id": "1", "status": "pending"}]}, ctx).is_error
    bad = tool.handler({"steps": [{"id": "1", "status": "nope"}]}, ctx)
    assert bad.is_error and "unknown status" in bad.output
