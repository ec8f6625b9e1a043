"""Double texting: what a session does with a user message that arrives while it is still
answering the previous one (issue 35 item 6). A policy of the agent, as plain functions.

- ``enqueue`` — the message waits and is answered after the running turn (the loops'
  input queue). The default for ``task`` agents: a task runs to the end.
- ``interrupt`` — the running turn ends at its next safe point: a model stream is cut
  between two chunks, a pending approval is withdrawn, a running tool is never killed
  (the turn ends when it finishes, and the calls after it are not run). The partial reply is kept in the conversation and
  marked (``loop.turn.INTERRUPTED_MARKER``), its ``result`` has subtype ``interrupted``,
  and the next turn's model call sees the partial reply and the new message. The default
  for ``chat`` agents: a correction or a "never mind" is answered now.
- ``reject`` — the message is refused and not stored: ``Runtime.send_message`` raises
  :class:`~corvid_actors.errors.SessionBusyError`, and the chat bridge answers with its
  ``busy_notice``.

An agent's ``double_texting`` column (NULL: unset) wins; unset, ``[agents]
double_texting`` in the config; empty there too, the agent's kind decides
(:data:`KIND_DEFAULTS`; an agent without a kind, or a session without an agent, is a
``task``). The policy is resolved when an incarnation starts: an agent's change reaches
its running sessions at their next start.

Nothing here reads a clock, a store or a thread.
"""

from __future__ import annotations

from corvid_actors.errors import AgentSettingError

__all__ = ["DOUBLE_TEXTING_POLICIES", "ENQUEUE", "INTERRUPT", "KIND_DEFAULTS", "REJECT",
           "checked_double_texting", "double_texting_policy"]

ENQUEUE = "enqueue"
INTERRUPT = "interrupt"
REJECT = "reject"
#: the values of an agent's ``double_texting`` and of ``[agents] double_texting``
DOUBLE_TEXTING_POLICIES = (ENQUEUE, INTERRUPT, REJECT)
#: the policy of each agent kind when neither the agent nor the config sets one
KIND_DEFAULTS = {"task": ENQUEUE, "chat": INTERRUPT}
#: the kind of an agent that has none (agents made before kinds, sessions without an agent)
DEFAULT_KIND = "task"


def double_texting_policy(agent_setting: str | None, agent_kind: str | None = None, *,
                          config_default: str = "") -> str:
    """The policy in force: ``agent_setting`` (the agent's column; None or "" when unset),
    else ``config_default`` (``[agents] double_texting``; "" when unset), else the one of
    ``agent_kind`` (None, or a kind this module does not know: a ``task``)."""
    for chosen in (agent_setting, config_default):
        if chosen:
            return checked_double_texting(chosen)
    return KIND_DEFAULTS.get(agent_kind or DEFAULT_KIND, KIND_DEFAULTS[DEFAULT_KIND])


def checked_double_texting(value: str) -> str:
    """``value`` if it is a policy; AgentSettingError naming the choices otherwise."""
    if value not in DOUBLE_TEXTING_POLICIES:
        raise AgentSettingError(f"double_texting {value!r} is not one of {', '.join(DOUBLE_TEXTING_POLICIES)} "
                                "(None: by the agent's kind)")
    return value
