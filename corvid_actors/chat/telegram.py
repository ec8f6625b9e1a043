"""A Telegram transport for :class:`~corvid_actors.chat.aio_bridge.AsyncChatBridge`.

    transport = TelegramTransport(token)                        # long polling
    transport = TelegramTransport.from_application(app)         # inside your PTB Application
    transport = TelegramTransport(token, mode="webhook", webhook_url="https://bot.example/tg",
                                  listen=("0.0.0.0", 8443), secret_token=secret)
    async with AsyncChatBridge(runtime, transport, agent_id=agent.id):
        ...

Built on python-telegram-bot's :class:`telegram.Bot` (``pip install corvid-actors[telegram]``):
a maintained, fully typed asyncio client on httpx (already one of our dependencies), with
a ``base_url`` to point it at :class:`~corvid_actors.testing.telegram_stub.TelegramStubServer`.
Stand-alone, only the ``Bot`` is used, not its ``Application``: this transport owns the
update offset and the order of handling, which the bridge's guarantees depend on. A bot
that has its own ``Application`` (its commands, its handlers, its update loop) uses
:meth:`TelegramTransport.from_application`: the transport then adds two handlers to the
application and answers the conversations they route to it (see below).

- channel = the chat id, participant = the sender's user id (both as strings).
- Long polling: ``getUpdates`` with the offset of the next unhandled update; each update
  is handled (persisted by the bridge) *before* the offset moves past it, and ``stop()``
  confirms the last handled one, so a restarted bot neither repeats nor misses an update.
  With ``offset_path``, the offset is also written to a file after every update, so even a
  bot that was killed between handling an update and confirming it skips it on restart
  (polling and webhook alike; Telegram restarts its ids at random after a week without
  updates, so an offset file older than that is ignored).
- Application: the application receives (polling or webhook, as it is run) and confirms
  updates when it fetches them; in its handler group (default 0) corvid-actors' handlers
  come after the bot's own, so a command the bot handles (``/ping``) is the bot's, and
  other text messages and the approval buttons go to the bridge. ``stop()`` removes the
  handlers and leaves the application's ``Bot`` open (the application shuts it down).
- Webhook: a small asyncio HTTP server (``listen``) that checks Telegram's secret header
  and answers 200 only after the update is handled (Telegram redelivers otherwise); or
  call :meth:`TelegramTransport.handle_webhook` from your own web framework.
- Replies are split at 4,096 characters and sent as escaped MarkdownV2
  (:mod:`corvid_actors.chat.telegram_format`).
- Replies stream as they are written (``can_edit``: the bridge sends throttled
  :class:`~corvid_actors.chat.transport.ReplyUpdate` s): in private chats as a draft
  (``sendMessageDraft``) and then ``sendMessage`` with the final text; in groups (or with
  ``drafts=False``) the first update sends a message and later ones edit it
  (``editMessageText``); a new message past 4,096 UTF-16 units
  (:mod:`corvid_actors.chat._telegram_stream`).
- Approval requests carry inline buttons (Allow / Deny → ``yes <id>`` / ``no <id>``);
  typing ``yes <id>`` still works. When the approval is resolved, the request message is
  edited: the verdict is appended and the buttons removed.
- While a conversation's session thinks, ``typing`` is shown (refreshed every few seconds,
  as Telegram shows it for 5 s).
- Pacing (``pacing``, :class:`~corvid_actors.chat.pacing.SendPacing`): messages (sent or
  edited) go at most one per second to a chat and 30 per second overall, Telegram's
  documented limits; a send waits its turn (the outbox sends one at a time, so a wait
  holds the messages queued behind it). ``pacing=None`` turns it off (e.g. when the
  application has PTB's own rate limiter).
- Flood control: a 429 is retried after its ``retry_after``; a network error or 502 after
  a growing delay; both a bounded number of times, then :class:`TransportError`.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from loguru import logger

from corvid_actors.chat._telegram_offset import read_offset, write_offset
from corvid_actors.chat._telegram_stream import TelegramReplies
from corvid_actors.chat._telegram_webhook import SECRET_HEADER, serve_webhook
from corvid_actors.chat.aio_bridge import AsyncMessageHandler
from corvid_actors.chat.pacing import SendPacing
from corvid_actors.chat.telegram_format import (
    TELEGRAM_MAX_MESSAGE_CHARS,
    escape_markdown_v2,
    split_message,
)
from corvid_actors.chat.transport import (
    IncomingMessage,
    OutgoingMessage,
    ReplyUpdate,
    TransportError,
)
from corvid_actors.clock import Clock, RealClock
from corvid_actors.core.jsontypes import WireJson
from corvid_actors.errors import RuntimeStoppedError

try:
    import telegram
    from telegram.error import TelegramError
    from telegram.ext import Application
    from telegram.request import HTTPXRequest

    from corvid_actors.chat._telegram_app import ApplicationRoute
    from corvid_actors.chat._telegram_calls import BotApiCalls
    from corvid_actors.chat._telegram_typing import TypingIndicators
except ImportError as exc:  # pragma: no cover - the optional extra
    raise ImportError("the Telegram transport needs python-telegram-bot: "
                      "pip install 'corvid-actors[telegram]'") from exc

__all__ = ["TelegramTransport", "SECRET_HEADER", "SendPacing", "TELEGRAM_PACING"]

T = TypeVar("T")

_ALLOWED_UPDATES = ("message", "callback_query")
#: what a pressed button's answer says, by the bridge's outcome
_BUTTON_ANSWERS = {"approved": "Approved", "denied": "Denied", "rejected": "Only the participant who asked "
                   "(or an owner) can answer this", "expired": "This approval is no longer pending"}
#: Telegram's documented limits: about one message a second in a chat, 30 a second overall
TELEGRAM_PACING = SendPacing(per_chat_interval_s=1.0, max_per_window=30, window_s=1.0)
#: approval messages remembered, to edit them when resolved
_APPROVALS_REMEMBERED = 1000


class TelegramTransport:
    """See the module docstring.

    Args:
        token: the bot's token from @BotFather.
        base_url: the Bot API base URL without the token (a stub server's ``base_url``).
        mode: ``polling`` or ``webhook`` (``application`` is set by :meth:`from_application`).
        webhook_url: the public URL Telegram posts to (webhook mode; default: the local
            ``listen`` address and ``webhook_path``, for tests).
        listen: ``(host, port)`` of the webhook server; port 0 picks one (``webhook_port``).
        secret_token: checked on every webhook request.
        webhook_read_timeout_s: a webhook request must arrive within this (else 408).
        poll_timeout_s: the long-poll ``timeout`` of ``getUpdates``.
        max_attempts: tries per API call through 429s and network errors.
        network_retry_s: delays after a network error or 502 (the last repeats).
        typing_refresh_s: how often ``typing`` is re-sent while a session thinks.
        typing_max_s: the longest ``typing`` is shown without a new sign of thinking.
        parse_mode: ``MarkdownV2`` (text escaped) or None (plain text).
        sleep: the coroutine that waits out retry delays and pacing (tests record them).
        bot: a ready ``telegram.Bot`` instead of one built from ``token``/``base_url``. A
            stop that cancels a poll in flight gives the transport's own Bot a fresh
            ``getUpdates`` client (see :meth:`stop_receiving`); a Bot passed in keeps its own.
        offset_path: a file keeping the next update's id across crashes (see above).
        clock: dates the offset file and times the pacing (default: the real clock; a
            simulated clock needs a ``sleep`` that advances it).
        pacing: how fast messages may go (default: Telegram's limits); None: unpaced.
        drafts: stream replies in private chats as drafts (``sendMessageDraft``); False:
            send a message and edit it, as in groups.
    """

    name = "telegram"
    #: replies stream: drafts in private chats, edits elsewhere (see ``update_reply``)
    can_edit = True

    def __init__(self, token: str, *, base_url: str | None = None, mode: str = "polling",
                 webhook_url: str = "", listen: tuple[str, int] = ("127.0.0.1", 8443),
                 webhook_path: str = "/telegram", secret_token: str = "", poll_timeout_s: int = 30,
                 max_attempts: int = 5, network_retry_s: Sequence[float] = (0.5, 1.0, 2.0, 4.0),
                 typing_refresh_s: float = 4.0, typing_max_s: float = 120.0, parse_mode: str | None = "MarkdownV2",
                 max_message_chars: int = TELEGRAM_MAX_MESSAGE_CHARS,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep, bot: telegram.Bot | None = None,
                 offset_path: str | Path | None = None, clock: Clock | None = None,
                 webhook_read_timeout_s: float = 10.0, pacing: SendPacing | None = TELEGRAM_PACING,
                 drafts: bool = True) -> None:
        if mode not in ("polling", "webhook"):
            raise ValueError("mode must be 'polling' or 'webhook' (or use from_application)")
        self.mode = mode
        #: the bot's own Application's handlers, in ``application`` mode
        self._route: ApplicationRoute | None = None
        #: the getUpdates request of the Bot this transport built (None for a Bot passed in):
        #: python-telegram-bot's default for it, one connection, kept to be started afresh
        self._updates_request: HTTPXRequest | None = None
        if bot is None:
            self._updates_request = HTTPXRequest(connection_pool_size=1)
            bot = (telegram.Bot(token, base_url=base_url, get_updates_request=self._updates_request) if base_url
                   else telegram.Bot(token, get_updates_request=self._updates_request))
        self.bot = bot
        self.webhook_url = webhook_url
        self.listen = listen
        self.webhook_path = webhook_path
        self.secret_token = secret_token
        self.poll_timeout_s = poll_timeout_s
        self.webhook_read_timeout_s = webhook_read_timeout_s
        self.parse_mode = parse_mode
        self.max_message_chars = max_message_chars
        self._sleep = sleep
        self._handler: AsyncMessageHandler | None = None
        self._poller: asyncio.Task[None] | None = None
        self._waiting_for_updates = False
        self._server: asyncio.Server | None = None
        self._typing = TypingIndicators(bot, refresh_s=typing_refresh_s, max_s=typing_max_s)
        self._approvals: OrderedDict[str, tuple[int | str, int, str]] = OrderedDict()
        #: the offset of the next update to handle, and the one Telegram last confirmed
        self.offset = 0
        self._confirmed = 0
        self.offset_path = Path(offset_path) if offset_path else None
        self._clock = clock or RealClock()
        self._calls = BotApiCalls(max_attempts=max_attempts, network_retry_s=network_retry_s, sleep=sleep,
                                  clock=self._clock, pacing=pacing)
        self.network_retry_s = self._calls.network_retry_s
        self.handled_updates = 0
        self._replies = TelegramReplies(self.bot, self._calls.send, format_text=self._format, parse_mode=parse_mode,
                                        max_message_chars=max_message_chars, drafts=drafts)

    @classmethod
    def from_application(cls, application: Application[Any, Any, Any, Any, Any, Any], *, group: int = 0,
                         **options: Any) -> TelegramTransport:
        """A transport inside the bot's own python-telegram-bot ``Application``: the
        application keeps its handlers and runs its update loop (``run_polling``,
        ``run_webhook`` or ``updater.start_polling``); ``start`` adds corvid-actors'
        handlers to handler ``group`` — after the bot's own handlers of that group, so
        add those first — and replies go through ``application.bot``. ``options`` are the
        constructor's for sending (``pacing``, ``parse_mode``, ``max_attempts`` …)."""
        transport = cls(application.bot.token, bot=application.bot, **options)
        transport.mode = "application"
        transport._route = ApplicationRoute(application, group, transport.handle_update)
        return transport

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self, handler: AsyncMessageHandler) -> None:
        self._handler = handler
        if self.offset_path is not None:
            self.offset = max(self.offset, await asyncio.get_running_loop().run_in_executor(
                None, read_offset, self.offset_path, self._clock.now()))
        await self._api(self.bot.initialize)  # the application's Bot too: initializing twice is a no-op
        if self._route is not None:
            self._route.install()
        elif self.mode == "polling":
            await self._api(self.bot.delete_webhook)  # getUpdates answers 409 while a webhook is set
            self._poller = asyncio.ensure_future(self._poll())
        else:
            host, port = self.listen
            self._server = await asyncio.start_server(self._serve_webhook, host, port)
            url = self.webhook_url or f"http://{host}:{self.webhook_port}{self.webhook_path}"
            await self._api(lambda: self.bot.set_webhook(url, secret_token=self.secret_token or None,
                                                         allowed_updates=list(_ALLOWED_UPDATES)))

    @property
    def webhook_port(self) -> int:
        """The port the webhook server listens on (after ``start``)."""
        assert self._server is not None, "the webhook server is not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def stop_receiving(self) -> None:
        """Stop polling (confirming the handled updates to Telegram) or serving the webhook;
        sending still works, so the bridge can deliver its queued replies. Idempotent."""
        self._handler = None
        if self._route is not None:
            self._route.remove()
        poller, self._poller = self._poller, None
        if poller is not None:
            # Cancel a poll that waits for updates; an update being handled is finished first
            # (its offset must move past it, or the next start would handle it again).
            cancelled = self._waiting_for_updates
            if cancelled:
                poller.cancel()
            await asyncio.gather(poller, return_exceptions=True)
            if cancelled:
                await self._fresh_updates_client()
            if self.offset > self._confirmed:
                try:  # what PTB's Application does too: one short call with the next offset
                    await self._api(lambda: self.bot.get_updates(offset=self.offset, limit=1, timeout=0))
                    self._confirmed = self.offset
                except TransportError as exc:
                    logger.warning("telegram: could not confirm handled updates ({}); "
                                   "the next start may see them again", exc)
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _fresh_updates_client(self) -> None:
        """After a poll was cancelled in flight: close the getUpdates client and open a new one.

        httpcore can leave a request cancelled at the wrong moment holding its pool's
        connection (encode/httpcore#1093, open in httpcore 1.0.9); the getUpdates pool has
        one, so every later getUpdates — the confirmation first — waited for it in vain (1 s
        of pool timeout per attempt) and the handled updates went unconfirmed. Closing the
        client closes its connections, whatever state they were left in."""
        request = self._updates_request
        if request is None:
            return
        try:
            await request.shutdown()
            await request.initialize()
        except Exception as exc:  # noqa: BLE001 - the confirmation then reports what is wrong
            logger.warning("telegram: could not reopen the polling client ({})", exc)

    async def stop(self) -> None:
        """Stop receiving, stop the typing indicators, close the client. Idempotent."""
        await self.stop_receiving()
        await self._typing.stop()
        if self._route is not None:
            return  # the Bot is the application's: its shutdown closes it
        try:
            await self.bot.shutdown()
        except TelegramError:
            pass

    # --- incoming -------------------------------------------------------------------------------

    async def _poll(self) -> None:
        while self._handler is not None:
            self._waiting_for_updates = True
            try:
                updates = await self._api(lambda: self.bot.get_updates(
                    offset=self.offset or None, timeout=self.poll_timeout_s,
                    allowed_updates=list(_ALLOWED_UPDATES)), forever=True)
            except TransportError as exc:
                # 409 Conflict (another instance still polling, a webhook set behind our back),
                # 401/403: keep trying, loudly, rather than stop receiving without a word
                delay = self.network_retry_s[-1]
                logger.error("telegram: polling refused: {}; retrying in {} s", exc, delay)
                await self._sleep(delay)
                continue
            finally:
                self._waiting_for_updates = False
            self._confirmed = self.offset
            for update in updates:
                if not await self.handle_update(update):
                    return  # the bot is stopping: leave the update for the next start

    async def handle_webhook(self, data: dict[str, WireJson] | bytes, secret_token: str | None = None) -> bool:
        """Handle one webhook POST body from your own web server; True when handled (answer
        200), False when the secret is wrong or the bot is stopping (answer 403 / 503)."""
        if self.secret_token and secret_token != self.secret_token:
            return False
        payload = json.loads(data) if isinstance(data, bytes | bytearray) else data
        update = telegram.Update.de_json(payload, self.bot)
        return update is not None and await self.handle_update(update)

    async def handle_update(self, update: telegram.Update) -> bool:
        """Hand one ``telegram.Update`` to the bridge; False when the bot is stopping (the
        update was not handled and must be offered again)."""
        handler = self._handler
        if handler is None:
            return False
        own_offset = self._route is None  # an application keeps its own
        if own_offset and update.update_id < self.offset:
            return True  # handled before (a redelivery after a crash or a lost confirmation)
        try:
            if update.callback_query is not None:
                await self._button(update.callback_query, handler)
            elif (message := update.message) is not None and message.text and message.from_user is not None:
                await handler(IncomingMessage(str(message.chat.id), str(message.from_user.id), message.text,
                                              message_id=str(message.message_id)))
        except RuntimeStoppedError:
            return False
        except Exception:  # noqa: BLE001 - one bad update must not stop the bot (nor be retried forever)
            logger.opt(exception=True).error("telegram: update {} could not be handled; skipped",
                                             update.update_id)
        self.handled_updates += 1
        if not own_offset:
            return True
        self.offset = update.update_id + 1
        if self.offset_path is not None:
            await asyncio.get_running_loop().run_in_executor(
                None, write_offset, self.offset_path, self.offset, self._clock.now())
        return True

    async def _button(self, query: telegram.CallbackQuery, handler: AsyncMessageHandler) -> None:
        data = (query.data or "").strip()
        chat = query.message.chat.id if query.message is not None else query.from_user.id
        if data.split(" ")[0] not in ("yes", "no"):
            await self._api(lambda: self.bot.answer_callback_query(query.id))
            return
        outcome = await handler(IncomingMessage(str(chat), str(query.from_user.id), data,
                                                message_id=f"callback:{query.id}"))
        text = _BUTTON_ANSWERS.get(outcome, "")
        await self._api(lambda: self.bot.answer_callback_query(query.id, text=text or None))

    async def _serve_webhook(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await serve_webhook(reader, writer, path=self.webhook_path, secret_token=self.secret_token,
                            read_timeout_s=self.webhook_read_timeout_s, handle=self.handle_webhook)

    # --- outgoing -------------------------------------------------------------------------------

    async def send(self, message: OutgoingMessage) -> None:
        chat_id = _chat_id(message.channel)
        if message.kind == "notice" and message.approval_id in self._approvals:
            if await self._mark_resolved(message):
                return
        if message.kind == "approval":
            await self.typing(message.channel, message.participant, False)  # now it waits for a person
        chunks = split_message(message.text, self.max_message_chars)
        for i, chunk in enumerate(chunks):
            markup = None
            if message.kind == "approval" and message.approval_id and i == len(chunks) - 1:
                markup = telegram.InlineKeyboardMarkup([[
                    telegram.InlineKeyboardButton("Allow", callback_data=f"yes {message.approval_id}"),
                    telegram.InlineKeyboardButton("Deny", callback_data=f"no {message.approval_id}"),
                ]])
            sent = await self._calls.send(chat_id, functools.partial(
                self.bot.send_message, chat_id, self._format(chunk), parse_mode=self.parse_mode, reply_markup=markup))
            if markup is not None:
                self._approvals[message.approval_id] = (chat_id, sent.message_id, chunk)
                while len(self._approvals) > _APPROVALS_REMEMBERED:
                    self._approvals.popitem(last=False)

    async def update_reply(self, update: ReplyUpdate) -> None:
        """Show a reply as it is written (the bridge throttles; the final update persists)."""
        await self._replies.update(_chat_id(update.channel), update)

    async def _mark_resolved(self, message: OutgoingMessage) -> bool:
        chat_id, message_id, text = self._approvals.pop(message.approval_id)
        updated = f"{text}\n\n{message.text}"
        if len(updated) > self.max_message_chars:
            return False
        try:
            await self._calls.send(chat_id, lambda: self.bot.edit_message_text(
                self._format(updated), chat_id=chat_id, message_id=message_id, parse_mode=self.parse_mode))
            return True
        except TransportError:
            return False  # deleted or too old to edit: say it as a new message

    async def typing(self, channel: str, participant: str, active: bool) -> None:
        """Show (or stop showing) ``typing`` in ``channel`` while its session thinks."""
        self._typing.show(channel, _chat_id(channel), active)

    def _format(self, text: str) -> str:
        return escape_markdown_v2(text) if self.parse_mode == "MarkdownV2" else text

    async def _api(self, call: Callable[[], Awaitable[T]], *, forever: bool = False) -> T:
        """``call()`` through flood control and network errors (``_telegram_calls``)."""
        return await self._calls.call(call, forever=forever)

    @property
    def max_attempts(self) -> int:
        """Tries per API call through 429s and network errors."""
        return self._calls.max_attempts


def _chat_id(channel: str) -> int | str:
    return int(channel) if channel.lstrip("-").isdigit() else channel
