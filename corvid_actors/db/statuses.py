"""The values of ``sessions.status``: the one definition, importable without peewee (the
command line's parser offers them as choices; :mod:`corvid_actors.db.models` stores them)."""

from __future__ import annotations

from typing import Final


class SessionStatus:
    """The values of ``sessions.status`` (plain strings, as stored): the one definition."""

    IDLE: Final = "idle"
    LOADING: Final = "loading"
    RUNNING: Final = "running"
    PAUSED: Final = "paused"
    STOPPED: Final = "stopped"
    ERROR: Final = "error"


#: every session status, in the order the admin protocol lists them
SESSION_STATUSES: tuple[str, ...] = (
    SessionStatus.IDLE, SessionStatus.LOADING, SessionStatus.RUNNING, SessionStatus.PAUSED,
    SessionStatus.STOPPED, SessionStatus.ERROR,
)
