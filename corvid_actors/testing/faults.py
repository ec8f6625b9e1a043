"""Fault hooks: make a running runtime misbehave on purpose, through its public seams.

- :func:`refuse_input`: the session's running incarnation refuses user messages from
  now on, as one does in the moment between its end and the supervisor hearing of it.
  ``send_message`` then returns False, persists nothing and evicts the incarnation;
  ``resume_process(session_id, prompt)`` publishes ``system`` ``warm_path_failed`` and
  cold-starts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["refuse_input"]


def refuse_input(runtime: Any, session_id: str) -> bool:
    """Make ``session_id``'s running incarnation refuse input; False if it is not running.

    Call it from a test thread (not an actor thread or an event callback), like any
    :class:`~corvid_actors.runtime.Runtime` method.
    """
    from corvid_actors.actors.supervisor import RefuseInput

    return bool(runtime._ask(RefuseInput(session_id)))
