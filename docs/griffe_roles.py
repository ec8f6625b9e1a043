"""A Griffe extension for the API reference: the docstrings' Sphinx roles as code.

The package's docstrings cross-reference with Sphinx roles (``:class:`CorvidError```,
``:func:`section```, ``:mod:`corvid_actors.config```), which Markdown would show verbatim.
They become code spans here, so the source keeps one spelling that reads well in
``help()`` and on the site.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|const|py:\w+):`~?([^`]+)`")


class RolesToCode(griffe.Extension):
    """Rewrites ``:role:`target``` in every docstring to a ``target`` code span."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"``\1``", obj.docstring.value)


FORWARDS = ("_forward", "_forward_property")


class ForwardedMembers(griffe.Extension):
    """Shows a facade's one-line forwards (``name = _forward("_part", Part.name)``, see
    ``corvid_actors/runtime/facade.py``) as the part's own method or property: its signature and
    docstring, under the facade's name."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for cls in _classes(pkg):
            for name, member in list(cls.members.items()):
                value = getattr(member, "value", None) if not member.is_alias else None
                if not isinstance(value, griffe.ExprCall) or str(value.function) not in FORWARDS:
                    continue
                target = value.arguments[1]
                try:
                    part = pkg.modules_collection.get_member(target.canonical_path)  # type: ignore[union-attr]
                except (KeyError, AttributeError):
                    continue
                if part.is_alias:
                    part = part.final_target
                cls.set_member(name, griffe.Alias(name, part, parent=cls))


def _classes(obj: griffe.Object) -> Any:
    for member in obj.members.values():
        if member.is_alias:
            continue
        if member.is_class:
            yield member
        if member.is_module or member.is_class:
            yield from _classes(member)
