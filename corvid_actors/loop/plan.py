"""Plan tracking (the OpenAgent seed's plan manager) as pure functions over a frozen state.

The model keeps a plan with the ``update_plan`` tool: steps with an id, a title, a
status (pending / running / completed / blocked) and the ids of the steps each one
waits for. The loop holds a :class:`PlanState` and applies the seed's rules:

- an update is *merged*: steps it names are updated (only the fields it gives), new
  ids are appended in the order given, steps it does not name are kept;
- a completed step stays in the plan until the next assistant reply (so the model can
  read what it finished), then it is pruned: its id joins ``pruned`` and is removed
  from every ``waiting_for`` list;
- a pruned id never comes back: a later update naming it is ignored for that step;
- an explicit empty plan (``steps: []``) resets everything, the pruned ids included,
  so ids can be reused.

No I/O: the loop emits a ``plan`` event on every change and the session actor stores
the steps in ``sessions.plan`` (see :func:`plan_to_json`).

The loop handles ``update_plan`` calls itself, so the tool's name and schema live here too
(:func:`plan_tool_spec`); ``corvid_actors.tools.plan_tool`` builds a registry entry from
them for hosts that list tools outside a loop (the tool layer does not import the loop).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from corvid_actors.core.vocabulary import ToolSpec


class PlanStatus(enum.StrEnum):
    """A step's status."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    BLOCKED = "blocked"


#: spellings models use for the four statuses
STATUS_ALIASES: Mapping[str, PlanStatus] = {
    "in_progress": PlanStatus.RUNNING,
    "in-progress": PlanStatus.RUNNING,
    "active": PlanStatus.RUNNING,
    "done": PlanStatus.COMPLETED,
    "complete": PlanStatus.COMPLETED,
    "todo": PlanStatus.PENDING,
    "waiting": PlanStatus.BLOCKED,
}


class PlanUpdateError(ValueError):
    """An update_plan call the loop cannot apply; the message is told to the model."""


@dataclass(frozen=True)
class PlanStep:
    """One step of the plan."""

    id: str
    title: str
    status: PlanStatus = PlanStatus.PENDING
    waiting_for: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape used by ``plan`` events, the store and the admin surface."""
        return {"id": self.id, "title": self.title, "status": self.status.value,
                "waiting_for": list(self.waiting_for)}


@dataclass(frozen=True)
class StepUpdate:
    """One step as the model sent it; ``None`` fields leave the current value alone."""

    id: str
    title: str | None = None
    status: PlanStatus | None = None
    waiting_for: tuple[str, ...] | None = None


@dataclass(frozen=True)
class PlanState:
    """The current plan and the ids of steps already completed and pruned."""

    steps: tuple[PlanStep, ...] = ()
    pruned: frozenset[str] = field(default_factory=frozenset)

    def as_dicts(self) -> tuple[dict[str, Any], ...]:
        return tuple(step.as_dict() for step in self.steps)


@dataclass(frozen=True)
class PlanMerge:
    """The outcome of :func:`merge_plan`: the new state and the ids it ignored (pruned)."""

    state: PlanState
    ignored: tuple[str, ...] = ()


# --- the tool as the model sees it -------------------------------------------------------

PLAN_TOOL_NAME = "update_plan"

PLAN_TOOL_DESCRIPTION = (
    "Keep a plan of the work. 'steps' is a list of objects {id, title, status, waiting_for}: "
    "id is a short unique string; status is one of pending, running, completed, blocked; "
    "waiting_for lists the ids of steps that must finish first. Send only the steps that "
    "changed (others are kept); a completed step is removed after your next reply and its "
    "id cannot be reused; send an empty list to clear the plan."
)


def plan_tool_spec() -> ToolSpec:
    """The ``update_plan`` tool as the model sees it. The nested schema is also spelled
    out in the description, because some clients drop nested schema detail (FIELD-NOTES)."""
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


# --- parsing the tool's arguments ---------------------------------------------------------


def parse_status(value: Any) -> PlanStatus:
    """A status from the model's spelling (case-insensitive, common aliases accepted)."""
    text = str(value).strip().lower()
    if text in STATUS_ALIASES:
        return STATUS_ALIASES[text]
    try:
        return PlanStatus(text)
    except ValueError:
        valid = ", ".join(s.value for s in PlanStatus)
        raise PlanUpdateError(f"unknown status {value!r} (use one of: {valid})") from None


def _ids(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str | int):
        value = [value]
    if not isinstance(value, list | tuple):
        raise PlanUpdateError(f"{where}: waiting_for must be a list of step ids")
    return tuple(str(item).strip() for item in value if str(item).strip())


def parse_plan_update(arguments: Mapping[str, Any]) -> tuple[StepUpdate, ...]:
    """The steps of an ``update_plan`` call. Raises PlanUpdateError naming the problem.

    ``steps`` may come as a JSON string (models with text-based tool calls send one);
    ids may be numbers; ``waiting_for`` may be a single id.
    """
    steps = arguments.get("steps")
    if isinstance(steps, str):
        try:
            steps = json.loads(steps)
        except json.JSONDecodeError as exc:
            raise PlanUpdateError(f"'steps' is not valid JSON: {exc}") from None
    if not isinstance(steps, list):
        raise PlanUpdateError("'steps' must be a list of {id, title, status, waiting_for} objects")
    updates: list[StepUpdate] = []
    seen: set[str] = set()
    for number, raw in enumerate(steps, start=1):
        where = f"step {number}"
        if not isinstance(raw, Mapping):
            raise PlanUpdateError(f"{where} must be an object with id, title and status")
        step_id = str(raw.get("id", "")).strip()
        if not step_id:
            raise PlanUpdateError(f"{where} has no id")
        if step_id in seen:
            raise PlanUpdateError(f"step id {step_id!r} appears twice")
        seen.add(step_id)
        title = raw.get("title")
        status = raw.get("status")
        waiting = raw.get("waiting_for", raw.get("waitingFor"))
        updates.append(StepUpdate(
            id=step_id,
            title=str(title).strip() if title is not None and str(title).strip() else None,
            status=parse_status(status) if status is not None else None,
            waiting_for=_ids(waiting, where) if waiting is not None else None,
        ))
    return tuple(updates)


# --- the rules ------------------------------------------------------------------------------


def merge_plan(state: PlanState, updates: Sequence[StepUpdate]) -> PlanMerge:
    """Apply one update (see the module docstring). An empty ``updates`` resets the plan."""
    if not updates:
        return PlanMerge(PlanState())
    steps = {step.id: step for step in state.steps}
    order = [step.id for step in state.steps]
    ignored: list[str] = []
    for update in updates:
        if update.id in state.pruned:
            ignored.append(update.id)
            continue
        current = steps.get(update.id)
        if current is None:
            current = PlanStep(id=update.id, title=update.title or update.id)
            order.append(update.id)
        steps[update.id] = replace(
            current,
            title=update.title if update.title is not None else current.title,
            status=update.status if update.status is not None else current.status,
            waiting_for=_clean_waits(update.id, update.waiting_for, state.pruned)
            if update.waiting_for is not None else current.waiting_for,
        )
    merged = PlanState(tuple(steps[i] for i in order), state.pruned)
    return PlanMerge(merged, tuple(ignored))


def _clean_waits(step_id: str, waits: Iterable[str], gone: frozenset[str]) -> tuple[str, ...]:
    # a step never waits for itself, nor for a step already finished and pruned
    return tuple(dict.fromkeys(w for w in waits if w != step_id and w not in gone))


def prune_completed(state: PlanState) -> PlanState:
    """Drop completed steps (called on the next assistant reply); remember their ids."""
    done = frozenset(step.id for step in state.steps if step.status is PlanStatus.COMPLETED)
    if not done:
        return state
    pruned = state.pruned | done
    kept = tuple(
        replace(step, waiting_for=_clean_waits(step.id, step.waiting_for, pruned))
        for step in state.steps
        if step.id not in done
    )
    return PlanState(kept, pruned)


def summarize_update(before: PlanState, merge: PlanMerge) -> str:
    """The tool result the model reads after an update."""
    state = merge.state
    if not state.steps:
        return "Plan cleared." if before.steps or before.pruned else "Plan is empty."
    counts = {s: sum(1 for step in state.steps if step.status is s) for s in PlanStatus}
    parts = [f"{n} {status.value}" for status, n in counts.items() if n]
    text = f"Plan updated: {len(state.steps)} steps ({', '.join(parts)})."
    if merge.ignored:
        text += (" Ignored (already completed and removed): " + ", ".join(merge.ignored)
                 + ". Use new ids for new work, or send an empty plan to start over.")
    return text


# --- showing the plan -------------------------------------------------------------------------

PLAN_PROMPT_HEADER = "## Current plan"
PLAN_PROMPT_HINT = (
    "Keep it current with the update_plan tool: mark a step running when you start it and "
    "completed when it is done. Completed steps are removed after your next reply."
)


def render_plan(steps: Sequence[Mapping[str, Any]] | Sequence[PlanStep]) -> str:
    """The plan as plain lines (``[status] id. title (waiting for: …)``), for the model
    and for humans (chat ``/status``, admin). Empty string for an empty plan."""
    lines = []
    for raw in steps:
        step = raw.as_dict() if isinstance(raw, PlanStep) else dict(raw)
        waits = step.get("waiting_for") or []
        suffix = f" (waiting for: {', '.join(waits)})" if waits else ""
        lines.append(f"- [{step.get('status', '')}] {step.get('id', '')}. {step.get('title', '')}{suffix}")
    return "\n".join(lines)


def plan_prompt(state: PlanState) -> str:
    """The block appended to the system prompt while a plan exists ("" when empty)."""
    if not state.steps:
        return ""
    return f"{PLAN_PROMPT_HEADER}\n{render_plan(state.steps)}\n\n{PLAN_PROMPT_HINT}"


# --- storage form -------------------------------------------------------------------------------


def plan_to_json(steps: Iterable[Mapping[str, Any]]) -> str:
    """The ``sessions.plan`` column's value: a JSON list of step objects."""
    return json.dumps(list(steps), ensure_ascii=False)


def plan_from_json(text: str | None) -> list[dict[str, Any]]:
    """Step dicts from the ``sessions.plan`` column ("" or invalid JSON: no plan)."""
    if not text:
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return []
    return [dict(step) for step in data if isinstance(step, Mapping)] if isinstance(data, list) else []


def state_from_dicts(steps: Iterable[Mapping[str, Any]]) -> PlanState:
    """A state from stored step dicts (a restarted session resumes its plan); bad rows are
    skipped, since a damaged column must not stop a session from starting."""
    out: list[PlanStep] = []
    for raw in steps:
        try:
            step_id = str(raw["id"]).strip()
            if not step_id:
                continue
            status = parse_status(raw.get("status", PlanStatus.PENDING.value))
            waits = _ids(raw.get("waiting_for") or [], step_id)
        except (KeyError, PlanUpdateError):
            continue
        out.append(PlanStep(step_id, str(raw.get("title") or step_id), status, waits))
    return PlanState(tuple(out))
