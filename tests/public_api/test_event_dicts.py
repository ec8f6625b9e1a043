"""``events.to_dict``: the JSON shape of every event is ``{"type": ..., **asdict(event)}``
(the admin socket, the cluster link and ``EventRecorder.log`` depend on it), also for the
events with nested values, which keep their deep conversion."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from corvid_actors import events
from corvid_actors.events import Assistant, Event, PlanEvent, Result, to_dict

EVENT_CLASSES = [cls for _, cls in inspect.getmembers(events, inspect.isclass)
                 if issubclass(cls, Event) and dataclasses.is_dataclass(cls)]


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda cls: cls.__name__)
def test_every_event_with_defaults_gives_its_type_and_fields(cls):
    event = cls()
    assert to_dict(event) == {"type": cls.type, **dataclasses.asdict(event)}
    assert list(to_dict(event)) == ["type", *(f.name for f in dataclasses.fields(cls))]


def test_nested_values_are_copied_deeply_as_asdict_copies_them():
    steps = ({"step": "read", "status": "done", "notes": ["a"]},)
    plan = to_dict(PlanEvent(steps=steps))
    assert plan == {"type": "plan", "steps": ({"step": "read", "status": "done", "notes": ["a"]},)}
    plan["steps"][0]["notes"].append("b")
    assert steps[0]["notes"] == ["a"]  # the event is not changed through its dict
    result = Result(usage={"input_tokens": 3}, metrics={"tiers": {"a": 1}, "n": 2})
    assert to_dict(result) == {"type": "result", **dataclasses.asdict(result)}
    assert to_dict(result)["usage"] is not result.usage  # flat dicts are copies too
    assert to_dict(result)["metrics"]["tiers"] is not result.metrics["tiers"]


def test_scalar_events_give_their_values():
    assert to_dict(Assistant(content="hi")) == {"type": "assistant", **dataclasses.asdict(Assistant(content="hi"))}
