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
