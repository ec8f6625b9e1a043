"""The hand-off buffer (issue 36 item 2): messages accepted for a session that is moving.

Several daemons on one PostgreSQL: a user message sent to a session is acknowledged once
it is committed. When the daemon that accepts it does not run the session itself — the
session is another daemon's, or between owners (its daemon drains, its lease lapsed, its
adoption is pending) — the message is committed here, in ``held_messages``
(:meth:`HeldMessages.hold`), and the session's owner, whichever daemon that is when it
looks, takes it (:meth:`HeldMessages.take`) and delivers it.

Exactly once: :meth:`HeldMessages.take` runs in one transaction that reads the session's
lease ``FOR KEY SHARE`` (as the fencing trigger does, so a claim of the session waits for
it, or it for the claim) and goes on only when the caller holds the lease at that epoch;
it then deletes the held rows and inserts them into ``session_messages`` carrying the
lease's epoch (fenced: refused if a newer owner claimed the session meanwhile, and then
the delete is rolled back with it). So a held message becomes a conversation message once,
in the conversation of the owner that delivers it; from there on it is an ordinary user
message — if that owner dies before answering it, the next owner's resume answers it as
an interrupted turn (``_resume.unanswered_request``). Two takes of the same rows never
both see them (the second's ``DELETE`` finds them gone).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import peewee as pw

from corvid_actors.content import UserContent, content_blocks, stored_text
from corvid_actors.db.store_base import StoreBase, store_op


@dataclass(frozen=True)
class TakenMessage:
    """A held message now stored in the conversation: its ``session_messages`` id and its
    content (text, or the blocks of a multimodal message)."""

    message_id: int
    content: UserContent


class HeldMessages:
    """``held_messages`` of a :class:`~corvid_actors.db.store.Store` (its connection and
    lock). Each method is one transaction; thread-safe as the store is."""

    def __init__(self, store: StoreBase) -> None:
        self.store = store

    @store_op
    def hold(self, session_id: str, content: UserContent, held_by: str) -> int:
        """Commit ``content`` for ``session_id`` until its owner takes it; the row's id
        (the caller checked that the session exists)."""
        H = self.store.m.HeldMessage
        if isinstance(content, str):
            text, blocks = content, None
        else:
            parsed = content_blocks(content)
            text, blocks = stored_text(parsed), json.dumps(list(parsed), ensure_ascii=False)
        with self.store.transaction():
            return int(H.insert(session=session_id, content=text, content_blocks=blocks, held_by=held_by).execute())

    @store_op
    def take(self, session_id: str, daemon_id: str, epoch: int) -> list[TakenMessage]:
        """The session's held messages, oldest first, moved into its conversation under
        lease ``epoch`` (see the module docstring); none unless ``daemon_id`` holds the
        session's lease at that epoch now."""
        store = self.store
        H, M, L = store.m.HeldMessage, store.m.SessionMessage, store.m.SessionLease
        with store.transaction():
            lock = "" if store.is_sqlite else " FOR KEY SHARE"
            row = store.db.execute_sql(
                f'SELECT owner_id, epoch FROM "{L._meta.table_name}" WHERE session_id = {store.db.param}{lock}',
                (session_id,)).fetchone()
            if row is None or row[0] != daemon_id or int(row[1]) != int(epoch):
                return []
            held = sorted(H.delete().where(H.session == session_id)
                          .returning(H.id, H.content, H.content_blocks).tuples().execute())
            taken = []
            for _, text, blocks in held:
                message_id = M.insert(session=session_id, role="user", content=text, content_blocks=blocks,
                                      writer_epoch=int(epoch)).execute()
                taken.append(TakenMessage(int(message_id), json.loads(blocks) if blocks else text))
            return taken

    @store_op
    def sessions_of(self, daemon_id: str) -> list[str]:
        """The sessions whose lease ``daemon_id`` holds that have held messages (the
        owner's backstop, at each heartbeat: one query, empty while nothing is held)."""
        H, L = self.store.m.HeldMessage, self.store.m.SessionLease
        with self.store.transaction():
            query = (H.select(H.session).distinct().join(L, on=(L.session == H.session))
                     .where(L.owner == daemon_id).tuples())
            return sorted(str(sid) for (sid,) in query)

    @store_op
    def pending(self, session_ids: Sequence[str]) -> dict[str, int]:
        """How many messages are held for each of ``session_ids`` (those with any)."""
        if not session_ids:
            return {}
        H = self.store.m.HeldMessage
        with self.store.transaction():
            query = (H.select(H.session, pw.fn.COUNT(H.id)).where(H.session.in_(list(session_ids)))
                     .group_by(H.session).tuples())
            return {str(sid): int(n) for sid, n in query}
