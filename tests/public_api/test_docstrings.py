"""Every public name has a docstring: the API reference (docs/site/reference/) is generated
from them, so a name without one would be a blank entry on the site.

The public surface is ``corvid_actors.__all__``, the ``__all__`` of ``corvid_actors.aio``,
``corvid_actors.testing`` and ``corvid_actors.chat``, and every public class of
``corvid_actors.events`` and ``corvid_actors.errors``; for each class, its public methods
and properties too (a docstring inherited from a base class counts).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
from types import ModuleType

import pytest

MODULES_WITH_ALL = ("corvid_actors", "corvid_actors.aio", "corvid_actors.testing", "corvid_actors.chat")
MODULES_OF_CLASSES = ("corvid_actors.events", "corvid_actors.errors")


def public_names(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [name for name, obj in vars(module).items()
                 if not name.startswith("_") and inspect.isclass(obj) and obj.__module__ == module.__name__]
    return list(names)


def own_docstring(obj: object) -> str:
    """The object's own docstring; a dataclass's generated ``Name(field: type, …)`` is none."""
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and (doc or "").startswith(f"{obj.__name__}("):
        return ""
    return (doc or "").strip()


def undocumented(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    missing = []
    for name in public_names(module):
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not own_docstring(obj):
            missing.append(f"{module_name}.{name}")
        if not inspect.isclass(obj):
            continue
        fields = {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()
        for member, raw in vars(obj).items():
            if member.startswith("_") or member in fields:  # a field's default is not a method
                continue
            if isinstance(raw, property):
                documented = (raw.__doc__ or "").strip()
            elif inspect.isfunction(raw) or isinstance(raw, classmethod | staticmethod):
                documented = (inspect.getdoc(getattr(obj, member)) or "").strip()
            else:
                continue
            if not documented:
                missing.append(f"{module_name}.{name}.{member}")
    return missing


@pytest.mark.parametrize("module_name", MODULES_WITH_ALL + MODULES_OF_CLASSES)
def test_every_public_name_has_a_docstring(module_name):
    assert undocumented(module_name) == []


def test_the_check_sees_a_missing_docstring():
    module = ModuleType("example")

    @dataclasses.dataclass
    class Plain:
        x: int

        def method(self) -> int:
            return self.x

    class Documented:
        """Says what it is."""

        @property
        def value(self) -> int:
            """A documented property."""
            return 1

    Plain.__module__ = Documented.__module__ = "example"
    module.Plain, module.Documented = Plain, Documented
    module.__all__ = ["Plain", "Documented"]
    sys.modules["example"] = module
    try:
        assert undocumented("example") == ["example.Plain", "example.Plain.method"]
    finally:
        del sys.modules["example"]
