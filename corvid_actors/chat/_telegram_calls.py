"""How the Telegram transport calls the Bot API: paced (:mod:`corvid_actors.chat.pacing`),
through flood control (a 429's ``retry_after``) and network errors (502, resets, timeouts),
a bounded number of times; anything else becomes a :class:`TransportError`."""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import TypeVar

from loguru import logger
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

from corvid_actors.chat.pacing import SendPacer, SendPacing
from corvid_actors.chat.transport import TransportError
from corvid_actors.clock import Clock

T = TypeVar("T")


class BotApiCalls:
    """Retries and pacing for one bot's API calls; ``sleep`` waits, ``clock`` tells the
    time the pacing counts in (the two must agree: a test passes a simulated pair)."""

    def __init__(self, *, max_attempts: int, network_retry_s: Sequence[float],
                 sleep: Callable[[float], Awaitable[object]], clock: Clock, pacing: SendPacing | None) -> None:
        self.max_attempts = max_attempts
        self.network_retry_s = tuple(network_retry_s) or (1.0,)
        self._sleep = sleep
        self._clock = clock
        self._pacer = SendPacer(pacing) if pacing is not None else None

    async def call(self, call: Callable[[], Awaitable[T]], *, forever: bool = False) -> T:
        """``call()`` retried ``max_attempts`` times (``forever`` for the poll loop)."""
        return await self._attempts(call, forever=forever)

    async def send(self, chat: Hashable, call: Callable[[], Awaitable[T]]) -> T:
        """A call that puts a message into ``chat``: each attempt waits for its turn first."""
        async def paced() -> T:
            await self._turn(chat)
            return await call()
        return await self._attempts(paced, forever=False)

    async def _turn(self, chat: Hashable) -> None:
        if self._pacer is None:
            return
        delay = self._pacer.reserve(chat, self._clock.monotonic())
        if delay > 0:
            await self._sleep(delay)

    async def _attempts(self, call: Callable[[], Awaitable[T]], *, forever: bool) -> T:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await call()
            except RetryAfter as exc:
                delay = _retry_after_s(exc)
                what = f"flood control (429, retry after {delay:g} s)"
            except BadRequest as exc:  # our request is wrong: retrying cannot help
                raise TransportError(f"telegram refused the request: {exc.message}") from exc
            except NetworkError as exc:
                delay = self.network_retry_s[min(attempt, len(self.network_retry_s)) - 1]
                what = f"network error ({exc.message})"
            except TelegramError as exc:  # Forbidden (blocked by the user), Conflict, …
                raise TransportError(f"telegram: {exc.message}") from exc
            if not forever and attempt >= self.max_attempts:
                raise TransportError(f"telegram: gave up after {attempt} attempts: {what}")
            logger.warning("telegram: {}; retrying in {} s", what, delay)
            await self._sleep(delay)


def _retry_after_s(exc: RetryAfter) -> float:
    with warnings.catch_warnings():  # PTB 22 warns that the attribute becomes a timedelta; both are handled
        warnings.simplefilter("ignore")
        retry_after = exc.retry_after
    return retry_after.total_seconds() if isinstance(retry_after, dt.timedelta) else float(retry_after)
