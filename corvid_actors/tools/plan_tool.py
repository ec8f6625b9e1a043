"""The ``update_plan`` tool as a registry entry, for hosts that list or run tools outside a loop.

Both loops offer this tool (when ``plan.enabled``) and handle its calls themselves: the
plan is the loop's state, so a call never reaches a worker thread and needs no approval —
it changes nothing outside the session. The tool's name, schema and argument parser
therefore belong to the loop (:mod:`corvid_actors.loop.plan`); the tool layer sits beside
the loop, not above it, so :func:`plan_tool` takes them as arguments:

    plan_tool(plan_tool_spec(), parse_plan_update)   # both from corvid_actors.loop.plan

Its handler only validates the arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sized
from typing import Any

from corvid_actors.core.vocabulary import ToolKind, ToolResult, ToolSpec
from corvid_actors.tools.base import Tool, ToolContext

#: ``parse(arguments) -> steps``; raises ValueError (the loop's PlanUpdateError) naming the problem
PlanParser = Callable[[Mapping[str, Any]], Sized]


def plan_tool(spec: ToolSpec, parse: PlanParser) -> Tool:
    """The ``update_plan`` tool for a registry (kind OTHER; loops intercept its calls):
    ``spec`` as the model sees it, ``parse`` the loop's parser of its arguments."""

    def validate_only(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            steps = parse(args)
        except ValueError as exc:
            return ToolResult(f"Invalid plan update: {exc}", is_error=True)
        return ToolResult(f"Plan update with {len(steps)} steps is valid (no loop is tracking it).")

    return Tool(spec, ToolKind.OTHER, validate_only)
