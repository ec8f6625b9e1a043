"""Streamed replies on Telegram: drafts in private chats, a message edited elsewhere.

The bridge hands :class:`TelegramReplies` each :class:`~corvid_actors.chat.transport.ReplyUpdate`
(the whole reply so far, already throttled to the chat's pace; the last one ``final``):

- **private chats, drafts on**: ``sendMessageDraft`` — an animated draft, updated in place
  (same ``draft_id``) while the turn runs — then ``sendMessage`` with the final text, which
  is what persists (a draft is an ephemeral preview).
- **groups (or drafts off)**: the first update sends a message, later ones edit it
  (``editMessageText``); an update that changes nothing is not sent (Telegram refuses it:
  "message is not modified"). A message that cannot be edited any more (deleted) is sent
  again.
- **past 4,096 UTF-16 units** the reply goes on in a new message: the text is split as
  :func:`~corvid_actors.chat.telegram_format.split_message` splits it; every part but the
  last is complete and is sent (drafts) or left as it is (edits), and only the last part
  is drafted or edited.

State is kept per reply until its final update (bounded: the oldest replies are forgotten
past :data:`REPLIES_REMEMBERED`). Runs on the transport's event loop, one update at a time.
"""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from corvid_actors.chat.telegram_format import split_message
from corvid_actors.chat.transport import ReplyUpdate, TransportError

T = TypeVar("T")
#: runs one Bot call for a chat through the transport's pacing and retries
Api = Callable[[int | str, Callable[[], Awaitable[T]]], Awaitable[T]]

#: replies being streamed at once that are remembered (a crash mid-turn never sends a final)
REPLIES_REMEMBERED = 1000


@dataclass
class _Shown:
    """What the chat shows of one reply."""

    #: the draft being animated (drafts), a new one for each new part
    draft_id: int = 0
    #: parts already sent as messages (drafts: the complete ones; edits: all), as
    #: (message id, text shown)
    parts: list[tuple[int, str]] = field(default_factory=list)


class TelegramReplies:
    """See the module docstring. ``api`` runs a Bot call for a chat through the transport's
    pacing and retries."""

    def __init__(self, bot: Any, api: Api[Any], *, format_text: Callable[[str], str], parse_mode: str | None,
                 max_message_chars: int, drafts: bool) -> None:
        self._bot = bot
        self._api = api
        self._format = format_text
        self._parse_mode = parse_mode
        self._max_chars = max_message_chars
        self.drafts = drafts
        self._draft_ids = itertools.count(1)  # Telegram wants a non-zero id
        self._replies: OrderedDict[str, _Shown] = OrderedDict()

    async def update(self, chat_id: int | str, update: ReplyUpdate) -> None:
        shown = self._replies.get(update.reply_id)
        if shown is None:
            shown = self._replies[update.reply_id] = _Shown()
            while len(self._replies) > REPLIES_REMEMBERED:
                self._replies.popitem(last=False)
        chunks = split_message(update.text, self._max_chars)
        try:
            if self.drafts and _is_private(chat_id):
                await self._draft(chat_id, shown, chunks, update.final)
            else:
                await self._edit(chat_id, shown, chunks)
        finally:
            if update.final:
                self._replies.pop(update.reply_id, None)

    async def _draft(self, chat_id: int | str, shown: _Shown, chunks: list[str], final: bool) -> None:
        complete = len(chunks) if final else len(chunks) - 1
        for chunk in chunks[len(shown.parts):complete]:
            sent = await self._send(chat_id, chunk)
            shown.parts.append((sent.message_id, chunk))
            shown.draft_id = 0  # the next part is a new draft
        if final or len(chunks) <= len(shown.parts):
            return
        if not shown.draft_id:
            shown.draft_id = next(self._draft_ids)
        draft_id = shown.draft_id
        await self._api(chat_id, functools.partial(self._bot.send_message_draft, chat_id, draft_id,
                                          self._format(chunks[-1]), parse_mode=self._parse_mode))

    async def _edit(self, chat_id: int | str, shown: _Shown, chunks: list[str]) -> None:
        for i, chunk in enumerate(chunks):
            if i >= len(shown.parts):
                sent = await self._send(chat_id, chunk)
                shown.parts.append((sent.message_id, chunk))
                continue
            message_id, text = shown.parts[i]
            if text == chunk:
                continue
            try:
                await self._api(chat_id, functools.partial(self._bot.edit_message_text, self._format(chunk), chat_id=chat_id,
                                                  message_id=message_id, parse_mode=self._parse_mode))
            except TransportError:  # deleted, or too old to edit: say it in a new message
                message_id = (await self._send(chat_id, chunk)).message_id
            shown.parts[i] = (message_id, chunk)

    async def _send(self, chat_id: int | str, chunk: str) -> Any:
        return await self._api(chat_id, functools.partial(self._bot.send_message, chat_id, self._format(chunk),
                                                 parse_mode=self._parse_mode))


def _is_private(chat_id: int | str) -> bool:
    # Telegram's ids: a private chat's id is its user's (positive); groups, supergroups and
    # channels have negative ids (and "@name" strings are channels)
    return isinstance(chat_id, int) and chat_id > 0
