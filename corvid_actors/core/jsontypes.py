"""JSON type aliases shared by every layer.

``JsonValue`` is a JSON document the runtime builds itself (a stub's reply, a wire body
it sends); ``JsonObject`` is a JSON object of them. ``WireJson`` is ``Any`` on purpose:
a document just decoded from the wire (a provider's reply, a webhook update, a request a
test stub received, a tool's model-written arguments) whose shape nobody has checked yet.
It is the one place ``Any`` stays, named so a reader sees the boundary.
"""

from __future__ import annotations

from typing import Any, TypeAlias

JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = JsonScalar | list["JsonValue"] | dict[str, "JsonValue"]
JsonObject: TypeAlias = dict[str, JsonValue]
WireJson: TypeAlias = Any

__all__ = ["JsonObject", "JsonScalar", "JsonValue", "WireJson"]
