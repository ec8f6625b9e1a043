"""The Telegram transport's handlers inside a bot's own python-telegram-bot ``Application``
(:meth:`TelegramTransport.from_application <corvid_actors.chat.telegram.TelegramTransport.from_application>`).

The application owns its update loop and its own handlers; these two route to the bridge
what no earlier handler of their group took: a text message (commands the bot does not
handle itself, such as ``/help`` and ``/status``, included) and a press of an approval
button (``yes <id>`` / ``no <id>``; the bot's own buttons stay the bot's).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from telegram import Update
from telegram.ext import Application, BaseHandler, CallbackQueryHandler, MessageHandler, filters

#: callback data of the approval buttons the transport sends
APPROVAL_BUTTON_PATTERN = r"^(yes|no) "


class ApplicationRoute:
    """The handlers that hand an application's updates to ``handle_update``; installed by
    the transport's ``start`` and removed by its ``stop_receiving``."""

    def __init__(self, application: Application[Any, Any, Any, Any, Any, Any], group: int,
                 handle_update: Callable[[Update], Awaitable[bool]]) -> None:
        self.application = application
        self.group = group
        self._handle_update = handle_update
        self.handlers: tuple[BaseHandler[Update, Any, None], ...] = (
            MessageHandler(filters.UpdateType.MESSAGE & filters.TEXT, self._on_update),
            CallbackQueryHandler(self._on_update, pattern=APPROVAL_BUTTON_PATTERN),
        )

    def install(self) -> None:
        for handler in self.handlers:
            if handler not in self.application.handlers.get(self.group, []):
                self.application.add_handler(handler, self.group)

    def remove(self) -> None:
        for handler in self.handlers:
            if handler in self.application.handlers.get(self.group, []):
                self.application.remove_handler(handler, self.group)

    async def _on_update(self, update: Update, context: object) -> None:
        # The application confirmed the update to Telegram when it fetched it: one the
        # bridge cannot take now (it is stopping) is not offered again.
        await self._handle_update(update)
