"""Arranging state for a test: the rows a scenario starts from, written straight to the
runtime's store, with no session running and no event published.

``arrange(runtime)`` gives an :class:`Arrangement` bound to that runtime's store (the pytest
plugin's ``arrange`` fixture is the one of the ``runtime`` fixture)::

    agent = runtime.create_agent("ada", system_prompt="You review code.")
    arrange.persona(agent, "Ada", archetype="technical", traits=["precise"])
    arrange.skill_bundle("reviewer", prompt_additions="Review diffs carefully.", agents=[agent])
    session = runtime.create_session(agent_id=agent.id, source="web")
    arrange.history(session.id, ("user", "earlier question"), ("assistant", "earlier answer"))
    arrange.stale_running(session.id, mid_turn=True)   # as a daemon killed mid-turn leaves it

What the runtime's own API already makes (agents, projects, sessions: ``create_agent``,
``create_project``, ``create_session``) is not repeated here. These are for arrangement
only: the runtime does not know of them (a session given history while it runs does not
see it until its next incarnation; a row made ``running`` here has no incarnation behind
it). Arrange before starting sessions, or between a ``stop_process`` and the next start.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from corvid_actors.content import UserContent
from corvid_actors.errors import NotFoundError

if TYPE_CHECKING:
    from corvid_actors.db.store import Store
    from corvid_actors.runtime import Runtime

__all__ = ["Arrangement", "arrange"]

#: the pid :meth:`Arrangement.stale_running` leaves by default (a direct pseudo-PID of a
#: previous run: they count from 800000)
STALE_PID = 800000


def arrange(runtime: Runtime) -> Arrangement:
    """The arrangement helpers for ``runtime``'s store (see the module docstring)."""
    return Arrangement(runtime.internals.store)


def _id(row_or_id: Any) -> str:
    """A row's ``id``, or the id itself."""
    return row_or_id if isinstance(row_or_id, str) else str(row_or_id.id)


class Arrangement:
    """State written for a test (see the module docstring). Every method returns what it
    made, so a test can refer to it."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # --- what sessions are made from --------------------------------------------------------

    def persona(self, agent: Any | None, name: str, *, archetype: str = "custom", traits: Sequence[str] = (),
                background: str = "", voice_guidelines: str = "", example_messages: Sequence[str] = (),
                sort_order: int = 0) -> Any:
        """A persona, assigned to ``agent`` (a row or an id; None: not assigned) at
        ``sort_order``. Its text joins the system prompt of the agent's next incarnation
        (personas in ``sort_order``). Returns the persona row."""
        persona = self.store.create_persona(name, archetype=archetype, traits=traits, background=background,
                                            voice_guidelines=voice_guidelines, example_messages=example_messages)
        if agent is not None:
            self.store.assign_persona(_id(agent), persona.id, sort_order)
        return persona

    def skill_bundle(self, name: str, *, tools: Sequence[str] = (), prompt_additions: str = "",
                     description: str = "", agents: Iterable[Any] = (), projects: Iterable[Any] = (),
                     sort_order: int = 0) -> Any:
        """A skill bundle (``tools`` it grants, ``prompt_additions`` for the system prompt),
        assigned to each of ``agents`` and ``projects`` (rows or ids) at ``sort_order``.
        Returns the bundle row."""
        bundle = self.store.create_skill_bundle(name, tools=tools, prompt_additions=prompt_additions,
                                                description=description)
        for agent in agents:
            self.store.assign_agent_skill(_id(agent), bundle.id, sort_order)
        for project in projects:
            self.store.assign_project_skill(_id(project), bundle.id, sort_order)
        return bundle

    # --- a session's past ---------------------------------------------------------------------

    def history(self, session_id: str, *messages: tuple[str, UserContent]) -> list[int]:
        """Stored messages of ``session_id``, ``(role, content)`` each, in order — a
        conversation that happened before the test, delivered to nobody: no turn is
        counted, no model is called, no event is published. The session's next incarnation
        (a start or a resume) reads them as its history. Returns the message ids."""
        self.store.require_session(session_id)
        return [self.store.append_message(session_id, role, content) for role, content in messages]

    def stale_running(self, session_id: str, *, pid: int = STALE_PID, mid_turn: bool = False) -> None:
        """Leave ``session_id``'s row as a daemon killed while it ran leaves it: status
        ``running`` with a ``pid``, and nothing else written (no stop, no exit note, no
        mark for resume). ``mid_turn``: a turn was in flight (a user message delivered and
        not answered), so a resume calls the model again.

        The next runtime over the store resets it at start-up (the process manager seed:
        ``running`` → ``idle``, ``pid`` NULL) and marks it for resume
        (``Runtime.stale_session_ids``, ``resume_pending_sessions()``). In the runtime this
        row is in, nothing runs it: ``is_running`` stays False; stopping it writes
        ``stopped``; the supervisor's ghost sweep resets it."""
        fields: dict[str, Any] = {"status": "running", "pid": pid}
        if mid_turn:
            fields["open_turns"] = 1
        if self.store.update_session(session_id, **fields) == 0:
            raise NotFoundError(f"no session with id {session_id!r}")

    def marked_for_resume(self, *session_ids: str) -> int:
        """Mark sessions for resume, as a shutdown leaves them (``restart_pending``; the
        rows keep their status). Returns how many rows were marked."""
        return self.store.mark_for_resume(session_ids)

    # --- rows that went away ------------------------------------------------------------------

    def project_deleted(self, session_id: str) -> str:
        """Delete ``session_id``'s project row while the session keeps pointing at it, as a
        project deleted behind the runtime's back (the store's foreign key would otherwise
        clear the session's ``project``). Starting the session then fails with an ``error``
        event of type ``not_found``. Returns the deleted project's id.

        SQLite only (the foreign key check is turned off for the one statement); a
        PostgreSQL store raises NotImplementedError."""
        session = self.store.require_session(session_id)
        project_id = session.project_id
        if project_id is None:
            raise ValueError(f"session {session_id!r} has no project")
        if not self.store.is_sqlite:
            raise NotImplementedError("project_deleted needs a SQLite store (a PostgreSQL foreign key "
                                      "cannot be turned off for one statement)")
        project = self.store.m.Project
        with self.store.lock:
            # a pragma, not a transaction's statement: SQLite ignores it inside a transaction
            self.store.db.execute_sql("PRAGMA foreign_keys=OFF")
            try:
                with self.store.transaction():
                    project.delete().where(project.id == project_id).execute()
            finally:
                self.store.db.execute_sql("PRAGMA foreign_keys=ON")
        return str(project_id)

    def session_deleted(self, session_id: str) -> bool:
        """Delete the session row and its messages, as an operator's delete does; False if
        there was none. Stop a running session first (``Runtime.stop_process``)."""
        return self.store.delete_session(session_id)
