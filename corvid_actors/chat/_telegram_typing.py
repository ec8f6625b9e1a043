"""The Telegram transport's "typing…" indicators: one task per chat re-sending the chat
action while its session thinks (Telegram shows it for 5 s), best effort and bounded."""

from __future__ import annotations

import asyncio

import telegram
from loguru import logger
from telegram.error import TelegramError


class TypingIndicators:
    """``typing`` shown in chats, each until told to stop or ``max_s`` has passed."""

    def __init__(self, bot: telegram.Bot, *, refresh_s: float, max_s: float) -> None:
        self.bot = bot
        self.refresh_s = refresh_s
        self.max_s = max_s
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def show(self, channel: str, chat_id: int | str, active: bool) -> None:
        """Show (or stop showing) ``typing`` in ``chat_id`` (the conversation ``channel``)."""
        task = self._tasks.pop(channel, None)
        if task is not None:
            task.cancel()
        if active:
            self._tasks[channel] = asyncio.ensure_future(self._keep_typing(chat_id))

    async def stop(self) -> None:
        """Stop every indicator and wait for their tasks to end."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _keep_typing(self, chat_id: int | str) -> None:
        # Bounded: a session that ends without saying it stopped thinking (a crash) must not
        # leave "typing…" up for ever.
        for _ in range(max(1, int(self.max_s / self.refresh_s))):
            try:
                await self.bot.send_chat_action(chat_id, "typing")
            except TelegramError as exc:  # best effort: a missed indicator is harmless
                logger.debug("telegram: sendChatAction failed: {}", exc)
            await asyncio.sleep(self.refresh_s)
