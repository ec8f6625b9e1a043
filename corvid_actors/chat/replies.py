"""One answer per user message: what a turn's events become for a chat (pure, no I/O).

A session's turn may call the model several times — a task agent's text nudged away, text
before a tool call, the summary epilogue — and each reply is an ``assistant`` event: the
history keeps them all (the model needs them), but a chat participant asked one question
and gets one answer. :class:`ReplyAssembler` follows the turn's events and says what to
deliver:

- the turn's *final* assistant text, once, when the turn ends (``result``): the text of
  the last model reply, never one the loop went on from (a nudge, a tool call: text
  before a tool's ``content_block_start`` / ``tool_status`` is not the answer);
- a turn that ends successfully with no text: :class:`EmptyTurn` (the bridge says so with
  a short notice, never silence); a failed turn's error is its own notice; a turn cut
  short by the participant's next message (double texting ``interrupt``) delivers
  nothing more: the next turn's answer, with both messages in view, is the reply;
- with ``streaming``, the text as it is written: each model call's streamed deltas
  (``content_block_delta``) as the whole text so far, at most one update per
  ``interval_s`` per chat (the platform's limit); a new model call starts the text again
  (its deltas replace the previous call's). The final text always lands, unthrottled.

The bridge feeds it from its outbox thread only, with the time from the runtime's clock,
and performs the steps it returns. A turn that ends without ``result`` (a stop, a crash
mid-turn) is forgotten; its restart starts a new turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corvid_actors.events import (
    Assistant,
    ContentBlockDelta,
    ContentBlockStart,
    Event,
    MessageStop,
    Result,
    SessionExited,
    SessionRestarting,
    SessionStopped,
    ToolStatus,
)

#: event types the assembler reads (the bridge relays them to its outbox)
TURN_EVENT_TYPES = frozenset({"assistant", "content_block_start", "tool_status", "message_stop", "result",
                              "session_stopped", "session_exited", "session_restarting"})
#: streamed text: relayed only to transports that stream replies
DELTA_EVENT_TYPE = "content_block_delta"
#: chats whose last update time is kept before the stale ones (older than the interval,
#: which no longer throttle anything) are dropped: bounded however many chats a bot meets
UPDATE_TIMES_KEPT = 1024


@dataclass(frozen=True)
class ReplyStep:
    """Show ``text`` (the whole reply so far) as the reply ``reply_id``; ``final``: the
    turn is over and this is the answer that persists."""

    session_id: str
    reply_id: str
    text: str
    final: bool


@dataclass(frozen=True)
class EmptyTurn:
    """The turn ended successfully without any text for the participant."""

    session_id: str
    reply_id: str
    #: whether stream updates were shown for it (a transport may have a message to clear)
    streamed: bool


@dataclass
class _Turn:
    reply_id: str
    #: the deltas of the model call being streamed
    segment: list[str] = field(default_factory=list)
    #: a model call ended (or a tool started): the next delta starts a new text
    new_segment: bool = False
    #: the text of the last model reply (cleared when it led to a tool call)
    final: str = ""
    #: the last text shown by an update, and whether there was one
    shown: str = ""
    streamed: bool = False


class ReplyAssembler:
    """Per-session turn state (see the module docstring). Not thread-safe: one caller."""

    def __init__(self, *, streaming: bool, interval_s: float) -> None:
        self.streaming = streaming
        self.interval_s = interval_s
        self._turns: dict[str, _Turn] = {}
        self._replies = 0
        #: when each chat was last updated (clock seconds), for the throttle
        self._updated_at: dict[str, float] = {}

    def on_event(self, session_id: str, chat: str, event: Event, now: float) -> list[ReplyStep | EmptyTurn]:
        """What ``event`` of ``session_id`` (a conversation in ``chat``) at ``now`` leads to."""
        if isinstance(event, SessionStopped | SessionExited | SessionRestarting):
            self._turns.pop(session_id, None)
            return []
        turn = self._turns.get(session_id)
        if turn is None:
            if not isinstance(event, ContentBlockDelta | Assistant | ContentBlockStart | ToolStatus | Result):
                return []
            self._replies += 1
            turn = self._turns[session_id] = _Turn(reply_id=f"{session_id}:{self._replies}")
        match event:
            case ContentBlockDelta(text=text) if self.streaming and text:
                return self._delta(session_id, chat, turn, text, now)
            case Assistant(content=content):
                if content.strip():
                    turn.final = content
                turn.new_segment = True
            case MessageStop():
                turn.new_segment = True
            case ContentBlockStart() | ToolStatus():
                turn.final = ""
                turn.new_segment = True
            case Result(subtype="interrupted"):
                # the participant wrote again (double texting: interrupt): the next turn
                # answers with both in view, and that answer is the one they get
                del self._turns[session_id]
            case Result(subtype=subtype):
                del self._turns[session_id]
                if turn.final.strip():
                    self._updated(chat, now)
                    return [ReplyStep(session_id, turn.reply_id, turn.final, final=True)]
                if subtype == "success":
                    return [EmptyTurn(session_id, turn.reply_id, turn.streamed)]
        return []

    def _delta(self, session_id: str, chat: str, turn: _Turn, text: str, now: float) -> list[ReplyStep | EmptyTurn]:
        if turn.new_segment:
            turn.segment, turn.new_segment = [], False
        turn.segment.append(text)
        last = self._updated_at.get(chat)
        if last is not None and now - last < self.interval_s:
            return []
        whole = "".join(turn.segment)
        if not whole.strip() or whole == turn.shown:
            return []
        self._updated(chat, now)
        turn.shown, turn.streamed = whole, True
        return [ReplyStep(session_id, turn.reply_id, whole, final=False)]

    def _updated(self, chat: str, now: float) -> None:
        times = self._updated_at
        times[chat] = now
        if len(times) > UPDATE_TIMES_KEPT:
            for stale in [c for c, at in times.items() if now - at >= self.interval_s]:
                del times[stale]
