"""A loopback Telegram Bot API server (stdlib only), for testing bots without Telegram.

    with TelegramStubServer() as tg:
        bot = telegram.Bot(tg.token, base_url=tg.base_url)      # any client with a base URL
        tg.push_message(chat_id=42, text="hello")                # a participant writes
        tg.wait_for(lambda: tg.texts(42), timeout_s=5)           # bounded wait for the reply

It speaks the real JSON shapes (``{"ok": true, "result": …}`` / ``{"ok": false,
"error_code": …, "description": …, "parameters": {"retry_after": n}}``) for the methods a
chat bot uses: ``getMe``, ``getUpdates`` (long polling with ``offset``: updates below the
offset are confirmed and forgotten, as Telegram does), ``sendMessage``, ``editMessageText``,
``sendMessageDraft`` (private chats only; the drafts are recorded in ``drafts``, they are not
messages), ``answerCallbackQuery``, ``sendChatAction``, ``setWebhook`` / ``deleteWebhook`` /
``getWebhookInfo`` (with a webhook set, updates are POSTed to it with the secret header and
``getUpdates`` answers 409, as Telegram does). Bodies may be JSON or form-encoded (the
python-telegram-bot client sends JSON-encoded values in form fields).

It checks what Telegram checks and a bot gets wrong: a message over 4,096 characters (UTF-16
units), with ``parse_mode=MarkdownV2`` a reserved character that is not escaped, an edit
that changes nothing ("message is not modified"), a draft for a chat that is not private,
all answered with Telegram's 400. ``timed_calls`` has every call with its arrival time, to
count what a bot does per second. :meth:`fail_next` makes the next calls of a method answer 429 with
``retry_after`` (flood control) or 502 (a flaky network).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import TypeVar

from corvid_actors.core.jsontypes import WireJson
from corvid_actors.testing._telegram_http import handler_class
from corvid_actors.testing._telegram_wire import (
    MARKDOWN_V2_RESERVED,
    api_error,
    now,
    parse_markdown_v2,
    plain_text,
)

T = TypeVar("T")

__all__ = ["TelegramStubServer", "MAX_MESSAGE_CHARS", "MARKDOWN_V2_RESERVED"]

#: Telegram's limit on a message's text (after entity parsing)
MAX_MESSAGE_CHARS = 4096
#: a command at the start of a message, which Telegram marks with a ``bot_command`` entity
_LEADING_COMMAND = re.compile(r"/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{5,32})?(?![A-Za-z0-9_@])")
#: longest a getUpdates long poll is held, whatever timeout the client asks for (tests stay short)
MAX_POLL_S = 1.0


class TelegramStubServer:
    """See the module docstring. Thread-safe; every wait is bounded."""

    def __init__(self, token: str = "123456:TEST-TOKEN", *, bot_username: str = "corvid_test_bot") -> None:
        self.token = token
        self.bot_username = bot_username
        self._cond = threading.Condition()
        self._updates: list[dict[str, WireJson]] = []
        self._next_update_id = 1000
        self._next_message_id = 1
        self._next_callback_id = 1
        #: every message the bot sent, by id (``text`` is the latest after edits)
        self.messages: dict[int, dict[str, WireJson]] = {}
        self.chat_actions: list[tuple[int, str]] = []
        self.answered_callbacks: list[dict[str, WireJson]] = []
        #: every API call as (method, params), in order
        self.calls: list[tuple[str, dict[str, WireJson]]] = []
        #: every API call as (time.monotonic() at arrival, method, params), in order
        self.timed_calls: list[tuple[float, str, dict[str, WireJson]]] = []
        #: every draft the bot streamed (``chat_id``, ``draft_id``, plain ``text``), in order
        self.drafts: list[dict[str, WireJson]] = []
        #: chat id -> type ("private", "group"), from the chats participants wrote in
        self._chat_types: dict[int, str] = {}
        self.webhook_url = ""
        self.webhook_secret = ""
        self._faults: dict[str, list[tuple[int, int | None]]] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler_class(self.token, self._call))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._stopped = False

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The Bot API base URL *without* the token (python-telegram-bot's ``base_url``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/bot"

    @property
    def api_url(self) -> str:
        """``base_url`` with the token: ``<api_url>/<method>`` is a method's URL."""
        return self.base_url + self.token

    def start(self) -> TelegramStubServer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                            name="telegram-stub", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> TelegramStubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- playing the participants --------------------------------------------------------------

    def push_message(self, chat_id: int, text: str, *, user_id: int | None = None,
                     first_name: str = "Tester") -> int:
        """A participant (``user_id``, default the chat's id: a private chat) writes ``text``;
        returns the update id. A leading ``/command`` carries its ``bot_command`` entity."""
        user = {"id": user_id if user_id is not None else chat_id, "is_bot": False, "first_name": first_name}
        chat_type = "private" if user["id"] == chat_id else "group"
        with self._cond:
            message_id = self._take_message_id()
            self._chat_types[chat_id] = chat_type
        message: dict[str, WireJson] = {"message_id": message_id, "date": now(), "text": text, "from": user,
                                        "chat": {"id": chat_id, "type": chat_type}}
        if command := _LEADING_COMMAND.match(text):  # what clients' command handlers look for
            message["entities"] = [{"type": "bot_command", "offset": 0, "length": command.end()}]
        return self._push({"message": message})

    def press_button(self, message_id: int, data: str, *, user_id: int | None = None) -> int:
        """A participant presses an inline button with ``callback_data`` ``data`` under the
        bot's message ``message_id``; returns the update id."""
        with self._cond:
            message = dict(self.messages[message_id])
            callback_id = str(self._next_callback_id)
            self._next_callback_id += 1
        chat_id = message["chat"]["id"]
        user = {"id": user_id if user_id is not None else chat_id, "is_bot": False, "first_name": "Tester"}
        return self._push({"callback_query": {"id": callback_id, "from": user, "message": message,
                                              "chat_instance": str(chat_id), "data": data}})

    def fail_next(self, method: str, *, status: int = 429, retry_after: int | None = None,
                  count: int = 1) -> None:
        """The next ``count`` calls of ``method`` answer ``status`` (429 carries
        ``retry_after`` seconds, default 1; 502 is a bad gateway)."""
        if status == 429 and retry_after is None:
            retry_after = 1
        with self._cond:
            self._faults.setdefault(method, []).extend([(status, retry_after)] * count)

    def clear_faults(self) -> None:
        """Forget the faults :meth:`fail_next` queued and no call consumed yet."""
        with self._cond:
            self._faults.clear()

    # --- what the bot did -----------------------------------------------------------------------

    def sent(self, chat_id: int | None = None) -> list[dict[str, WireJson]]:
        """The bot's messages (to ``chat_id``), oldest first, as they are now (after edits)."""
        with self._cond:
            return [dict(m) for _, m in sorted(self.messages.items())
                    if chat_id is None or m["chat"]["id"] == chat_id]

    def texts(self, chat_id: int | None = None) -> list[str]:
        return [m["text"] for m in self.sent(chat_id)]

    def calls_of(self, method: str) -> list[dict[str, WireJson]]:
        with self._cond:
            return [params for name, params in self.calls if name == method]

    @property
    def pending_updates(self) -> list[int]:
        """Ids of the updates not yet confirmed by a ``getUpdates`` offset (or a webhook 2xx)."""
        with self._cond:
            return [u["update_id"] for u in self._updates]

    def wait_for(self, predicate: Callable[[], T], timeout_s: float) -> T:
        """Wait (at most ``timeout_s`` real seconds) until ``predicate()`` is truthy; returns it."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                value = predicate()
                remaining = deadline - time.monotonic()
                if value or remaining <= 0:
                    return value
                self._cond.wait(min(remaining, 0.05))

    # --- internals --------------------------------------------------------------------------------

    def _take_message_id(self) -> int:
        message_id = self._next_message_id
        self._next_message_id += 1
        return message_id

    def _push(self, body: dict[str, WireJson]) -> int:
        with self._cond:
            update = {"update_id": self._next_update_id, **body}
            self._next_update_id += 1
            self._updates.append(update)
            self._cond.notify_all()
            webhook = self.webhook_url
        if webhook:
            threading.Thread(target=self._post_to_webhook, name="telegram-stub-webhook", daemon=True).start()
        return int(update["update_id"])

    def _post_to_webhook(self) -> None:
        """Deliver pending updates in order to the webhook (one at a time, as Telegram does)."""
        with self._cond:
            if getattr(self, "_posting", False):
                return
            self._posting = True
        try:
            while True:
                with self._cond:
                    if not self._updates or not self.webhook_url or self._stopped:
                        return
                    update, url, secret = self._updates[0], self.webhook_url, self.webhook_secret
                request = urllib.request.Request(url, data=json.dumps(update).encode(), method="POST", headers={
                    "Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": secret})
                try:
                    with urllib.request.urlopen(request, timeout=5) as response:
                        ok = 200 <= response.status < 300
                except OSError:
                    ok = False
                with self._cond:
                    if not ok:
                        return  # kept; delivered again with the next update
                    if self._updates and self._updates[0]["update_id"] == update["update_id"]:
                        self._updates.pop(0)
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._posting = False

    def _call(self, method: str, params: dict[str, WireJson]) -> tuple[int, dict[str, WireJson]]:
        with self._cond:
            self.calls.append((method, params))
            self.timed_calls.append((time.monotonic(), method, params))
            faults = self._faults.get(method)
            if faults:
                status, retry_after = faults.pop(0)
                self._cond.notify_all()
                if status == 429:
                    return 429, api_error(429, f"Too Many Requests: retry after {retry_after}",
                                       {"retry_after": retry_after})
                return status, api_error(status, "Bad Gateway" if status == 502 else f"Error {status}")
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            return 404, api_error(404, "Not Found: method not found")
        result = handler(params)
        if isinstance(result, tuple):
            return result
        with self._cond:
            self._cond.notify_all()
        return 200, {"ok": True, "result": result}

    def _api_getMe(self, params: dict[str, WireJson]) -> object:  # noqa: N802 - the Bot API's names
        return {"id": int(self.token.split(":")[0]), "is_bot": True, "first_name": "Corvid",
                "username": self.bot_username, "can_join_groups": True, "can_read_all_group_messages": False,
                "supports_inline_queries": False}

    def _api_getUpdates(self, params: dict[str, WireJson]) -> object:  # noqa: N802
        offset = int(params.get("offset") or 0)
        limit = int(params.get("limit") or 100)
        deadline = time.monotonic() + min(float(params.get("timeout") or 0), MAX_POLL_S)
        with self._cond:
            if self.webhook_url:
                return 409, api_error(409, "Conflict: can't use getUpdates method while webhook is active; "
                                        "use deleteWebhook to delete the webhook first")
            if offset:
                self._updates = [u for u in self._updates if u["update_id"] >= offset]
            while not self._updates and not self._stopped and time.monotonic() < deadline:
                self._cond.wait(min(deadline - time.monotonic(), 0.05))
            return [dict(u) for u in self._updates[:limit]]

    def calls_per_second(self, method: str, chat_id: int, *, window_s: float = 1.0) -> int:
        """The most calls of ``method`` for ``chat_id`` that arrived within any ``window_s``
        (a test allowing for delivery jitter passes a little less than the second it checks)."""
        with self._cond:
            times = [at for at, name, params in self.timed_calls
                     if name == method and str(params.get("chat_id")) == str(chat_id)]
        return max((sum(1 for t in times if start <= t < start + window_s) for start in times), default=0)

    def _chat_type(self, chat_id: int) -> str:
        # Telegram's ids: a private chat's is its user's (positive), a group's is negative
        return self._chat_types.get(chat_id) or ("private" if chat_id > 0 else "group")

    def _check_text(self, params: dict[str, WireJson], *,
                    may_be_empty: bool = False) -> tuple[int, dict[str, WireJson]] | None:
        text = str(params.get("text") or "")
        plain = text
        if params.get("parse_mode") == "MarkdownV2":
            plain, bad = parse_markdown_v2(text)
            if bad is not None:
                return 400, api_error(400, f"Bad Request: can't parse entities: Character '{bad}' is reserved "
                                        "and must be escaped with the preceding '\\'")
        if not plain.strip() and not may_be_empty:
            return 400, api_error(400, "Bad Request: message text is empty")
        if len(plain.encode("utf-16-le")) // 2 > MAX_MESSAGE_CHARS:  # Telegram counts UTF-16 units
            return 400, api_error(400, "Bad Request: message is too long")
        return None

    def _api_sendMessage(self, params: dict[str, WireJson]) -> object:  # noqa: N802
        if (problem := self._check_text(params)) is not None:
            return problem
        chat_id = int(params["chat_id"])
        with self._cond:
            message: dict[str, WireJson] = {"message_id": self._take_message_id(), "date": now(),
                       "chat": {"id": chat_id, "type": self._chat_type(chat_id)},
                       "from": self._api_getMe({}), "text": plain_text(params)}
            if params.get("reply_markup"):
                message["reply_markup"] = params["reply_markup"]
            self.messages[message["message_id"]] = message
            return dict(message)

    def _api_editMessageText(self, params: dict[str, WireJson]) -> object:  # noqa: N802
        if (problem := self._check_text(params)) is not None:
            return problem
        with self._cond:
            message = self.messages.get(int(params.get("message_id", 0)))
            if message is None or message["chat"]["id"] != int(params.get("chat_id", 0)):
                return 400, api_error(400, "Bad Request: message to edit not found")
            if message["text"] == plain_text(params) and message.get("reply_markup") == params.get("reply_markup"):
                return 400, api_error(400, "Bad Request: message is not modified: specified new message content "
                                        "and reply markup are exactly the same as a current content and reply "
                                        "markup of the message")
            message["text"] = plain_text(params)
            message["edit_date"] = now()
            if params.get("reply_markup"):
                message["reply_markup"] = params["reply_markup"]
            else:
                message.pop("reply_markup", None)
            return dict(message)

    def _api_sendMessageDraft(self, params: dict[str, WireJson]) -> object:  # noqa: N802
        # Bot API 9.3+: stream a partial message to a private chat; an empty text shows a
        # "Thinking..." placeholder (Bot API 10). Answers True; the draft is not a message.
        draft_id = params.get("draft_id")
        if not isinstance(draft_id, int) or isinstance(draft_id, bool) or draft_id == 0:
            return 400, api_error(400, "Bad Request: draft_id must be a non-zero integer")
        chat_id = int(params["chat_id"])
        if self._chat_type(chat_id) != "private":
            return 400, api_error(400, "Bad Request: message drafts can be sent only to private chats")
        if (problem := self._check_text(params, may_be_empty=True)) is not None:
            return problem
        with self._cond:
            self.drafts.append({"chat_id": chat_id, "draft_id": draft_id, "text": plain_text(params)})
        return True

    def _api_answerCallbackQuery(self, params: dict[str, WireJson]) -> object:  # noqa: N802
        with self._cond:
            self.answered_callbacks.append(dict(params))
        return True

    def _api_sendChatAction(self, params: dict[str, WireJson]) -> object:  # noqa: N802
        with self._cond:
            self.chat_actions.append((int(params["chat_id"]), str(params.get("action", ""))))
        return True

    def _api_setWebhook(self, params: dict[str, WireJson]) -> object:  # noqa: N802
        with self._cond:
            self.webhook_url = str(params.get("url", ""))
            self.webhook_secret = str(params.get("secret_token", ""))
            if params.get("drop_pending_updates"):
                self._updates.clear()
            pending = bool(self._updates)
        if pending and self.webhook_url:
            threading.Thread(target=self._post_to_webhook, daemon=True).start()
        return True

    def _api_deleteWebhook(self, params: dict[str, WireJson]) -> object:  # noqa: N802
        with self._cond:
            self.webhook_url = self.webhook_secret = ""
            if params.get("drop_pending_updates"):
                self._updates.clear()
        return True

    def _api_getWebhookInfo(self, params: dict[str, WireJson]) -> object:  # noqa: N802
        with self._cond:
            return {"url": self.webhook_url, "has_custom_certificate": False,
                    "pending_update_count": len(self._updates)}
