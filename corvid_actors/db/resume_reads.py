"""The bulk reads of a daemon's start-up resume (issue 37, item 5): one statement per batch
of sessions instead of one per session, for what every resume reads first — the session
rows and which role spoke last. A part of :class:`~corvid_actors.db.store.Store`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import peewee as pw

from corvid_actors.db.store_base import StoreBase, store_op


class ResumeReads(StoreBase):
    """:meth:`sessions_by_id` and :meth:`last_message_roles` (see the module docstring)."""

    @store_op
    def sessions_by_id(self, session_ids: Sequence[str]) -> dict[str, Any]:
        """The rows of ``session_ids`` (unknown ids are left out), in one statement."""
        if not session_ids:
            return {}
        marks = ", ".join([self.db.param] * len(session_ids))
        with self._lock:
            rows = self._rows(self.m.Session, f'SELECT * FROM "sessions" WHERE "id" IN ({marks})', *session_ids)
        return {row.id: row for row in rows}

    @store_op
    def last_message_roles(self, session_ids: Sequence[str],
                           roles: Sequence[str] = ("user", "assistant")) -> dict[str, str]:
        """Per session, the role of its newest message among ``roles`` (sessions without
        one are left out): :meth:`~corvid_actors.db.messages.MessageRows.last_message_role`
        for many sessions, in one statement."""
        if not session_ids:
            return {}
        M = self.m.SessionMessage
        newest = (M.select(pw.fn.MAX(M.id)).where(M.session.in_(list(session_ids)) & M.role.in_(list(roles)))
                  .group_by(M.session))
        query = M.select(M.session, M.role).where(M.id.in_(newest))
        with self._lock:
            return {str(sid): str(role) for sid, role in query.tuples()}
