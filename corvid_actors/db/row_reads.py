"""Rows of a hand-written ``SELECT`` as peewee model objects, without peewee's per-call cost.

``list(model.raw(sql, *params))`` resolves, on every call, which field each column of the
cursor is and how its value converts; for a one-row read that resolution was most of the
cost (80 µs of a ``get_session``, 5 µs the statement). :class:`RowReader` does it once per
statement. And when every column is one of the model's plain fields (and the model keeps
peewee's constructor), a row's object is made from its values as they are (``__data__``),
not through the one attribute assignment per column that peewee's constructor makes and
then forgets (the dirty marks): the same object, for half the Python cost. Any other column
(one this code does not know, an alias) takes peewee's way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import peewee as pw


class RowReader:
    """Model objects from a cursor, with each statement's column mapping kept."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[Any, str], tuple[Any, ...]] = {}

    def read(self, cursor: Any, model: Any, sql: str) -> list[Any]:
        """Every row of ``cursor`` (the result of ``sql``) as a ``model`` object."""
        shape = self._shapes.get((model, sql))
        if shape is None:
            wrapper = pw.ModelObjectCursorWrapper(cursor, model, [], model)
            wrapper.initialize()  # reads cursor.description only
            shape = self._shapes[(model, sql)] = (
                tuple(wrapper.unique_columns), tuple(wrapper.no_convert), tuple(wrapper.convert),
                tuple(wrapper.converters), plain_columns(model, wrapper.unique_columns))
        columns, no_convert, convert, converters, plain = shape
        out = []
        for row in cursor.fetchall():
            data = {columns[i]: row[i] for i in no_convert}
            for i in convert:
                data[columns[i]] = converters[i](row[i])
            if plain:
                obj = model.__new__(model)
                obj.__data__, obj._dirty, obj.__rel__ = data, set(), {}
            else:
                obj = model(__no_default__=1, **data)
                obj._dirty.clear()
            out.append(obj)
        return out


def plain_columns(model: Any, columns: Sequence[str]) -> bool:
    """Whether peewee's constructor would only store each of ``columns`` in the row's
    ``__data__`` under its own name: the model keeps ``Model.__init__``, and every column
    is a field whose accessor is peewee's plain one or its foreign key one (given an id,
    not a model instance, which a row's value always is)."""
    if model.__init__ is not pw.Model.__init__:
        return False
    for name in columns:
        accessor = model.__dict__.get(name)
        if type(accessor) not in (pw.FieldAccessor, pw.ForeignKeyAccessor) or accessor.name != name:
            return False
    return True
