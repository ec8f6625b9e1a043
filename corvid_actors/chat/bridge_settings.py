"""What a :class:`~corvid_actors.chat.bridge.ChatBridge` is told to be: its tunables, and which
events it relays to a conversation."""

from __future__ import annotations

from dataclasses import dataclass

#: event types that may produce a message to the participant (cheap filter on the bus thread;
#: a turn's own events are :data:`corvid_actors.chat.replies.TURN_EVENT_TYPES`)
RELAYED_EVENT_TYPES = frozenset({
    "approval_request", "approval_resolved", "credits_low", "session_restarting",
    "session_resumed", "session_stopped", "error",
})


@dataclass(frozen=True)
class BridgeSettings:
    """Tunables of a :class:`ChatBridge` (defaults suit a small bot)."""

    #: tags this bridge's sessions (``sessions.name = 'chat:<name>'``); one per bot/platform
    name: str = "chat"
    #: replies waiting for a slow transport before new ones are dropped
    outbox_max_pending: int = 1000
    #: how long ``stop()`` waits for the transport to take the queued replies
    stop_timeout_s: float = 5.0
    #: transactions listed by ``/credits``
    recent_transactions: int = 5
    #: how long a platform message id is remembered to ignore redeliveries (in the
    #: runtime's database: a restarted bot still knows them)
    dedupe_window_s: float = 86400.0
    #: longest channel / participant id (the ``sessions`` columns hold 200 characters)
    max_id_chars: int = 200
    #: count queued replies as work in flight, so ``Runtime.settle()`` waits for delivery
    track_delivery: bool = True
    #: told to the participant when a turn ends without any text ("": say nothing)
    empty_turn_notice: str = "(The assistant finished without a reply.)"
    #: a reply streamed to a transport that can edit: at most one update per this many
    #: seconds per chat (Telegram's limit; the final text always lands)
    stream_interval_s: float = 1.0
    #: what a participant is told when their message is refused because the agent is still
    #: answering the previous one (its ``double_texting`` is ``reject``)
    busy_notice: str = "I'm still answering your previous message. Send this again once I've replied."
