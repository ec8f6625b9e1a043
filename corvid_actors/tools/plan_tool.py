"""The ``update_plan`` tool: the model keeps a plan of steps the operator can watch.

Both loops offer this tool (when ``plan.enabled``) and handle its calls themselves: the
plan is the loop's state (:mod:`corvid_actors.loop.plan`), so a call never reaches a
worker thread and needs no approval — it changes nothing outside the session. The
:class:`~corvid_actors.tools.base.Tool` built by :func:`plan_tool` exists for hosts that
list or run tools outside a loop; its handler only validates the arguments.
"""

from __future__ import annotations

from typing import Any

from corvid_actors.loop.plan import PlanStatus, PlanUpdateError, parse_plan_update
from corvid_actors.providers.base import ToolSpec
from corvid_actors.tools.base import Tool, ToolContext, ToolKind, ToolResult

PLAN_TOOL_NAME = "update_plan"

PLAN_TOOL_DESCRIPTION = (
    "Keep a plan of the work. 'steps' is a list of objects {id, title, status, waiting_for}: "
    "id is a short unique string; status is one of pending, running, completed, blocked; "
    "waiting_for lists the ids of steps that must finish first. Send only the steps that "
    "changed (others are kept); a completed step is removed after your next reply and its "
    "id cannot be reused; send an empty list to clear the plan."
)


def plan_tool_spec() -> ToolSpec:
    """The tool as the model sees it. The nested schema is also spelled out in the
    description, because some clients drop nested schema detail (see FIELD-NOTES)."""
    step = {
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "Short unique step id, e.g. '1' or 'tests'"},
            "title": {"type": "string", "description": "What the step does"},
            "status": {"type": "string", "enum": [s.value for s in PlanStatus]},
            "waiting_for": {"type": "array", "items": {"type": "string"},
                            "description": "Ids of steps that must be completed first"},
        },
        "required": ["id", "status"],
    }
    parameters = {
        "type": "object",
        "properties": {"steps": {"type": "array", "items": step,
                                 "description": "The steps to add or update ([] clears the plan)"}},
        "required": ["steps"],
    }
    return ToolSpec(PLAN_TOOL_NAME, PLAN_TOOL_DESCRIPTION, parameters)


def _validate_only(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    try:
        steps = parse_plan_update(args)
    except PlanUpdateError as exc:
        return ToolResult(f"Invalid plan update: {exc}", is_error=True)
    return ToolResult(f"Plan update with {len(steps)} steps is valid (no loop is tracking it).")


def plan_tool() -> Tool:
    """The ``update_plan`` tool for a registry (kind OTHER; loops intercept its calls)."""
    return Tool(plan_tool_spec(), ToolKind.OTHER, _validate_only)
