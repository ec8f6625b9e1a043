"""The store's message rows: appends (group-committed, ``<conversation_history>`` blocks
stripped so a resume never nests them), reads and deletes."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import peewee as pw

from corvid_actors.content import (
    UserContent,
    content_blocks,
    stored_text,
    strip_conversation_history,
)
from corvid_actors.db.message_batches import MessageRow, insert_messages
from corvid_actors.db.store_base import StoreBase, store_op
from corvid_actors.db.writer import WriteAck

# a cheap test before the stripping walk: most messages carry no history block
_HISTORY_TAG = re.compile(r"</?conversation_history>", re.IGNORECASE)


@dataclass(frozen=True)
class StoredMessage:
    """One row of a session's messages (:meth:`Store.messages`); ``timestamp`` is aware UTC."""

    id: int
    role: str
    content: str
    timestamp: datetime
    cost_usd: float = 0.0


def _aware(value: Any) -> datetime:
    # SQLite hands back naive datetimes (or text); the store writes UTC
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class MessageRows(StoreBase):
    """Reads and writes of ``session_messages`` (a part of :class:`~corvid_actors.db.store.Store`)."""

    # --- messages -------------------------------------------------------------------------

    def append_message(self, session_id: str, role: str, content: UserContent, *, cost_usd: float = 0.0,
                       closes_turn: bool = False) -> int:
        """Persist one message (nested ``<conversation_history>`` blocks stripped); returns its id.

        ``closes_turn``: the message is the session's reply to a turn, and one of its open
        turns is closed (``open_turns`` - 1, never below 0) in the same statement — never
        the reply without the close, nor the close without the reply (db/turn_opening.py).

        ``content`` may be multimodal content blocks (:mod:`corvid_actors.content`): they
        are kept as given in ``content_blocks`` (read back with :meth:`message_contents`)
        and ``content`` holds their text, images as placeholders. Raises
        InvalidContentError for blocks that are not valid.
        """
        if not isinstance(content, str):
            return self._append_blocks(session_id, role, content_blocks(content), cost_usd, closes_turn=closes_turn)
        if _HISTORY_TAG.search(content):
            # The resume prompt's own history block must not be stored, or the next
            # resume nests it (seed). Nested and unclosed blocks go whole.
            content = strip_conversation_history(content)
        row: MessageRow = (session_id, role, content, cost_usd, closes_turn)
        return self._commit_rows((row,))[0]

    def append_user_turn(self, session_id: str, content: UserContent) -> int:
        """Persist a user message to a running session *and* count its turn open
        (``open_turns`` and ``total_turns`` + 1) in the same statement; returns its id once
        committed. The session then counts the turn in memory only (``UserInput.turn_opened``).
        Committed on the send lane (:mod:`corvid_actors.db.send_lane`): never behind the
        sessions' own writes. Content as :meth:`append_message`."""
        if not isinstance(content, str):
            return self._append_blocks(session_id, "user", content_blocks(content), 0.0, opens_turn=True)
        if _HISTORY_TAG.search(content):
            content = strip_conversation_history(content)
        return self.send_lane.append(session_id, content)

    @store_op
    def take_back_user_turn(self, session_id: str, message_id: int) -> None:
        """Undo :meth:`append_user_turn` (its delivery was refused): the message is deleted
        and its turn closed and uncounted, in one transaction."""
        M, S = self.m.SessionMessage, self.m.Session
        with self.transaction():
            if M.delete().where((M.id == message_id) & (M.opens_turn == True)).execute():  # noqa: E712
                S.update(open_turns=pw.Case(None, [(S.open_turns > 0, S.open_turns - 1)], 0),
                         total_turns=pw.Case(None, [(S.total_turns > 0, S.total_turns - 1)], 0)
                         ).where(S.id == session_id).execute()

    @store_op
    def _append_blocks(self, session_id: str, role: str, blocks: tuple[dict[str, Any], ...],
                       cost_usd: float, *, opens_turn: bool = False, closes_turn: bool = False) -> int:
        # Rare (a user's picture), so a plain insert rather than the group commit; the
        # caller waits for it as it waits for a group commit, so its order holds.
        for block in blocks:
            if block.get("type") == "text" and _HISTORY_TAG.search(block["text"]):
                block["text"] = strip_conversation_history(block["text"])
        M = self.m.SessionMessage
        with self.transaction():
            return int(M.insert(session=session_id, role=role, content=stored_text(blocks), cost_usd=cost_usd,
                                content_blocks=json.dumps(list(blocks), ensure_ascii=False),
                                opens_turn=opens_turn or None, closes_turn=closes_turn or None).execute())

    @store_op
    def message_contents(self, session_id: str, limit: int, roles: Sequence[str] = ("user", "assistant")
                         ) -> list[tuple[str, UserContent]]:
        """Like :meth:`recent_messages`, with multimodal messages as their content blocks
        (a list of dicts, as given) and the others as strings."""
        M = self.m.SessionMessage
        with self._lock:
            rows = list(
                M.select(M.role, M.content, M.content_blocks)
                .where((M.session == session_id) & (M.role.in_(list(roles))))
                .order_by(M.id.desc())
                .limit(limit)
            )
        return [(r.role, json.loads(r.content_blocks) if r.content_blocks else r.content) for r in reversed(rows)]

    def append_messages(self, messages: Sequence[tuple[str, str, str]]) -> list[int]:
        """Persist ``(session_id, role, content)`` messages atomically (all or none, e.g. a
        turn's messages); their ids in order. Group-committed like :meth:`append_message`."""
        rows: tuple[MessageRow, ...] = tuple(
            (sid, role, strip_conversation_history(content) if _HISTORY_TAG.search(content) else content, 0.0, False)
            for sid, role, content in messages)
        if not rows:
            return []
        return self._commit_rows(rows)

    def append_message_async(self, session_id: str, role: str, content: str, *,
                             cost_usd: float = 0.0, closes_turn: bool = False) -> WriteAck[list[int]]:
        """Queue one text message for the writer thread; the acknowledgement completes with ``[id]``
        once it committed (or with the error). Returns at once: attach the acknowledgement
        with ``ack.add_done_callback`` (it runs on the writer thread: keep it cheap, tell
        an actor). The messages queued by one thread commit in their order. ``closes_turn``
        as :meth:`append_message`."""
        if _HISTORY_TAG.search(content):
            content = strip_conversation_history(content)
        return self._commit_rows_async(((session_id, role, content, cost_usd, closes_turn),))

    def append_messages_async(self, messages: Sequence[tuple[str, str, str]]) -> WriteAck[list[int]]:
        """:meth:`append_messages` without waiting: all or none, acknowledged by the returned WriteAck."""
        rows: tuple[MessageRow, ...] = tuple(
            (sid, role, strip_conversation_history(content) if _HISTORY_TAG.search(content) else content, 0.0, False)
            for sid, role, content in messages)
        return self._commit_rows_async(rows)

    def _commit_rows(self, rows: tuple[MessageRow, ...]) -> list[int]:
        # A caller inside transaction() holds the store lock: its rows join its transaction
        # (the writer thread would wait for that lock, and the caller for the writer).
        if self.in_transaction() or self.message_writes == "direct":
            return self.run(insert_messages, self, rows)
        if self.message_writes == "group_commit":
            return self._message_commits.submit(rows)
        return self.writer.submit(rows)

    def _commit_rows_async(self, rows: tuple[MessageRow, ...]) -> WriteAck[list[int]]:
        if self.message_writes == "writer" and not self.in_transaction():
            return self.writer.submit_async(rows)
        ack: WriteAck[list[int]] = WriteAck(threading.Lock())  # the other modes commit now, here
        try:
            ack._complete(self._commit_rows(rows) if rows else [], None)
        except Exception as exc:  # noqa: BLE001 - handed to the acknowledgement, as the writer would
            ack._complete(None, exc)
        return ack

    @store_op
    def _commit_message_groups(self, groups: Sequence[tuple[MessageRow, ...]]) -> list[list[int]]:
        started = self._monotonic()
        ids = insert_messages(self, [row for group in groups for row in group])
        self.figures.committed(self._monotonic() - started)
        out, start = [], 0
        for group in groups:
            out.append(ids[start:start + len(group)])
            start += len(group)
        return out

    @store_op
    def recent_messages(self, session_id: str, limit: int, roles: Sequence[str] = ("user", "assistant")
                        ) -> list[tuple[str, str]]:
        """The last ``limit`` messages with these roles, oldest first, as (role, content)."""
        M = self.m.SessionMessage
        roles = tuple(roles)
        sql = self._sql(("recent_messages", len(roles)), lambda: (
            M.select(M.role, M.content).where((M.session == "") & (M.role.in_(list(roles))))
            .order_by(M.id.desc()).limit(1)))
        with self._lock:
            rows = self.db.execute_sql(sql, (session_id, *roles, limit)).fetchall()
        return [(role, content) for role, content in reversed(rows)]

    @store_op
    def recent_messages_of(self, session_id: str, reads: Sequence[tuple[Sequence[str], int]]
                           ) -> list[list[tuple[str, str]]]:
        """Several :meth:`recent_messages` reads in one statement (a resume's history and
        its exit notes): for each ``(roles, limit)``, the last ``limit`` messages with those
        roles, oldest first, as (role, content) — from one snapshot of the table."""
        if not reads:
            return []
        M, p = self.m.SessionMessage, self.db.param
        shape = tuple(len(tuple(roles)) for roles, _ in reads)
        sql = self._sql_cache.get(("recent_messages_of", shape))
        if sql is None:
            table, sid, rid = M._meta.table_name, M.session.column_name, M.id.column_name
            role, content = M.role.column_name, M.content.column_name
            parts = [f'SELECT {i} AS "k", "{rid}", "{role}", "{content}" FROM (SELECT "{rid}", "{role}", "{content}" '
                     f'FROM "{table}" WHERE "{sid}" = {p} AND "{role}" IN ({", ".join([p] * n)}) '
                     f'ORDER BY "{rid}" DESC LIMIT {p}) AS "q{i}"' for i, n in enumerate(shape)]
            sql = self._sql_cache[("recent_messages_of", shape)] = " UNION ALL ".join(parts)
        params: list[Any] = []
        for roles, limit in reads:
            params += (session_id, *roles, int(limit))
        with self._lock:
            rows = self.db.execute_sql(sql, params).fetchall()
        out: list[list[tuple[int, str, str]]] = [[] for _ in reads]
        for k, row_id, role_, content_ in rows:
            out[k].append((row_id, role_, content_))
        return [[(r, c) for _, r, c in sorted(group)] for group in out]

    @store_op
    def last_message_role(self, session_id: str, roles: Sequence[str] = ("user", "assistant")) -> str | None:
        """The role of the session's newest message among ``roles`` (None: there is none)."""
        M = self.m.SessionMessage
        roles = tuple(roles)
        sql = self._sql(("last_message_role", len(roles)), lambda: (
            M.select(M.role).where((M.session == "") & (M.role.in_(list(roles)))).order_by(M.id.desc()).limit(1)))
        with self._lock:
            row = self.db.execute_sql(sql, (session_id, *roles, 1)).fetchone()
        return row[0] if row is not None else None

    @store_op
    def delete_messages(self, session_id: str) -> int:
        """Delete every message of the session; returns how many."""
        M = self.m.SessionMessage
        with self.transaction():
            return M.delete().where(M.session == session_id).execute()

    @store_op
    def delete_message(self, message_id: int) -> int:
        """Delete one message by id (an append whose delivery was refused)."""
        M = self.m.SessionMessage
        with self.transaction():
            return M.delete().where(M.id == message_id).execute()

    @store_op
    def messages(self, session_id: str, last: int | None = None) -> list[StoredMessage]:
        """Every stored message of the session — all roles (user, assistant, system and the
        runtime's own), in the order they were written — with id, timestamp and cost;
        ``last``: only the newest that many (still oldest first)."""
        M = self.m.SessionMessage
        query = M.select(M.id, M.role, M.content, M.cost_usd, M.timestamp).where(M.session == session_id)
        with self._lock:
            if last is None:
                rows = list(query.order_by(M.id))
            else:
                rows = list(query.order_by(M.id.desc()).limit(last))[::-1]
        return [StoredMessage(r.id, r.role, r.content, _aware(r.timestamp), r.cost_usd) for r in rows]

    @store_op
    def count_messages(self, session_id: str) -> int:
        M = self.m.SessionMessage
        with self._lock:
            return M.select().where(M.session == session_id).count()
