"""Which session belongs to which conversation: the bridge's directory, backed by the store.

A bridge's sessions are the rows with ``source = 'chat'``, ``name = 'chat:<bridge name>'``
and the conversation's ``channel`` and ``participant``, so a restarted bot finds its
conversations again. The directory caches both directions in memory, and remembers
sessions that are *not* the bridge's, so the EventBus thread can drop their events
without a database read. What it remembers is bounded (the most recently seen
:data:`REMEMBERED_SESSIONS` sessions, and their conversations): a daemon churns through
sessions and meets new users for months, and a forgotten one costs a single store read
(an index range) when it is next seen. A conversation's lock exists while someone holds
or waits for it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from corvid_actors.runtime import Runtime

#: sessions the directory remembers by id (its own and others'), least recently seen dropped
REMEMBERED_SESSIONS = 4096


@dataclass(frozen=True)
class Conversation:
    """One participant in one channel, and the session that hosts their conversation."""

    channel: str
    participant: str
    session_id: str


class _HeldLock:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0  # holding or waiting


class ConversationDirectory:
    """Thread-safe; the store reads happen on the calling thread (never the EventBus's)."""

    def __init__(self, runtime: Runtime, tag: str, *, agent_id: str | None, project_id: str | None,
                 remembered_sessions: int = REMEMBERED_SESSIONS) -> None:
        self.runtime = runtime
        self.tag = tag
        self.agent_id = agent_id
        self.project_id = project_id
        self._lock = threading.Lock()
        #: conversation -> its lock and how many hold or wait for it (dropped at zero)
        self._locks: dict[tuple[str, str], _HeldLock] = {}
        self._by_key: dict[tuple[str, str], Conversation] = {}
        # None: not one of ours. Bounded, least recently seen first (see the module docstring).
        self._by_session: OrderedDict[str, Conversation | None] = OrderedDict()
        self._remembered_sessions = max(1, remembered_sessions)

    def find(self, channel: str, participant: str) -> Conversation | None:
        """The conversation's session, if it has one (cache, then the store)."""
        with self._lock:
            conv = self._by_key.get((channel, participant))
        if conv is not None:
            return conv
        sid = self.runtime.find_session(source="chat", name=self.tag, channel=channel, participant=participant)
        return None if sid is None else self._remember(Conversation(channel, participant, sid))

    def open(self, channel: str, participant: str) -> Conversation:
        """The conversation's session, created (source ``chat``) on first contact."""
        conv = self.find(channel, participant)
        if conv is None:
            row = self.runtime.create_session(agent_id=self.agent_id, project_id=self.project_id, source="chat",
                                              name=self.tag, channel=channel, participant=participant)
            conv = self._remember(Conversation(channel, participant, row.id))
        return conv

    def of_session(self, session_id: str) -> Conversation | None:
        """The conversation ``session_id`` hosts, or None when it is not this bridge's."""
        with self._lock:
            if session_id in self._by_session:
                self._by_session.move_to_end(session_id)
                return self._by_session[session_id]
        row = self.runtime.session(session_id)
        if row is None or row.source != "chat" or row.name != self.tag:
            with self._lock:
                self._remember_session(session_id, None)
            return None
        return self._remember(Conversation(row.channel, row.participant, row.id))

    def known_foreign(self, session_id: str) -> bool:
        """Cheap (no store read): is ``session_id`` known *not* to be this bridge's?"""
        with self._lock:
            return session_id in self._by_session and self._by_session[session_id] is None

    @contextmanager
    def lock_for(self, channel: str, participant: str) -> Iterator[None]:
        """Hold the conversation's lock: one message of a conversation at a time (two at
        once must not create two sessions). The lock is kept only while someone holds or
        waits for it."""
        key = (channel, participant)
        with self._lock:
            entry = self._locks.get(key)
            if entry is None:
                entry = self._locks[key] = _HeldLock()
            entry.users += 1
        try:
            with entry.lock:
                yield
        finally:
            with self._lock:
                entry.users -= 1
                if entry.users == 0:
                    del self._locks[key]

    @property
    def conversation_locks(self) -> int:
        """How many conversations' locks are held or waited for right now."""
        with self._lock:
            return len(self._locks)

    @property
    def remembered_conversations(self) -> int:
        """How many conversations the directory remembers by (channel, participant)."""
        with self._lock:
            return len(self._by_key)

    @property
    def remembered_sessions(self) -> int:
        """How many sessions the directory remembers by id right now."""
        with self._lock:
            return len(self._by_session)

    def _remember(self, conv: Conversation) -> Conversation:
        with self._lock:
            self._by_key[(conv.channel, conv.participant)] = conv
            self._remember_session(conv.session_id, conv)
        return conv

    def _remember_session(self, session_id: str, conv: Conversation | None) -> None:
        """Under ``_lock``."""
        self._by_session[session_id] = conv
        self._by_session.move_to_end(session_id)
        while len(self._by_session) > self._remembered_sessions:
            _, forgotten = self._by_session.popitem(last=False)
            if forgotten is not None:
                key = (forgotten.channel, forgotten.participant)
                if self._by_key.get(key) == forgotten:
                    del self._by_key[key]
