"""The Telegram transport paces its messages (Telegram's ~1/s per chat, ~30/s overall), in
simulated seconds: python-telegram-bot's client sends to the loopback Bot API stub, and
the transport's clock moves only when the transport waits. Each request is stamped with
that clock as it leaves, so the times are exact."""

from __future__ import annotations

import datetime as dt

import pytest
import telegram
from telegram.request import HTTPXRequest

from corvid_actors.chat.pacing import SendPacing
from corvid_actors.chat.telegram import TelegramTransport
from corvid_actors.chat.transport import OutgoingMessage

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class SimulatedTime:
    """The transport's clock and its sleep, in one: a wait moves the time, nothing else does."""

    def __init__(self) -> None:
        self.t = 0.0
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.t

    def now(self) -> dt.datetime:
        return START + dt.timedelta(seconds=self.t)

    async def sleep(self, delay: float) -> None:
        self.waits.append(delay)
        self.t += delay


class StampedRequest(HTTPXRequest):
    """PTB's own HTTP client, noting the simulated time each Bot API method is called at."""

    def __init__(self, time: SimulatedTime) -> None:
        super().__init__()
        self.time = time
        self.stamps: list[tuple[str, float]] = []

    async def do_request(self, url, method, request_data=None, *args, **kwargs):
        self.stamps.append((url.rsplit("/", 1)[-1], self.time.t))
        return await super().do_request(url, method, request_data, *args, **kwargs)


@pytest.fixture
async def paced(tg):
    """A transport on simulated time with the default pacing; its stamped requests."""
    time = SimulatedTime()
    request = StampedRequest(time)
    bot = telegram.Bot(tg.token, base_url=tg.base_url, request=request)
    transport = TelegramTransport(tg.token, bot=bot, sleep=time.sleep, clock=time)
    await bot.initialize()
    yield transport, request, time
    await bot.shutdown()


def send_times(request: StampedRequest) -> list[float]:
    return [t for method, t in request.stamps if method == "sendMessage"]


async def test_five_replies_to_one_chat_go_out_a_second_apart(tg, paced):
    transport, request, _ = paced
    for i in range(5):
        await transport.send(OutgoingMessage("42", "42", f"reply {i}"))
    assert send_times(request) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert tg.texts(42) == [f"reply {i}" for i in range(5)]


async def test_forty_chats_get_thirty_messages_now_and_ten_a_second_later(tg, paced):
    transport, request, _ = paced
    for chat in range(1, 41):
        await transport.send(OutgoingMessage(str(chat), str(chat), "news"))
    assert send_times(request) == [0.0] * 30 + [1.0] * 10
    assert len(tg.texts()) == 40


async def test_the_chunks_of_a_long_reply_are_paced_too(tg, paced):
    transport, request, _ = paced
    await transport.send(OutgoingMessage("42", "42", " ".join(["word."] * 2000)))  # three chunks
    assert send_times(request) == [0.0, 1.0, 2.0]


async def test_a_429_is_still_waited_out_and_pacing_goes_on_from_there(tg, paced):
    transport, request, time = paced
    tg.fail_next("sendMessage", status=429, retry_after=3)
    await transport.send(OutgoingMessage("42", "42", "first"))   # refused at 0, sent at 3
    await transport.send(OutgoingMessage("42", "42", "second"))
    assert send_times(request) == [0.0, 3.0, 4.0]
    assert time.waits == [3.0, 1.0]
    assert tg.texts(42) == ["first", "second"]


async def test_an_approval_resolved_by_editing_waits_for_its_chat_turn(tg, paced):
    transport, request, _ = paced
    await transport.send(OutgoingMessage("42", "42", "[APPROVE?:ab12] list files?", "approval",
                                         approval_id="ab12"))
    await transport.send(OutgoingMessage("42", "42", "Approval ab12 allowed.", "notice", approval_id="ab12"))
    assert [(m, t) for m, t in request.stamps if m in ("sendMessage", "editMessageText")] == [
        ("sendMessage", 0.0), ("editMessageText", 1.0)]


async def test_pacing_can_be_turned_off(tg):
    time = SimulatedTime()
    transport = TelegramTransport(tg.token, base_url=tg.base_url, sleep=time.sleep, clock=time, pacing=None)
    await transport.bot.initialize()
    try:
        for i in range(5):
            await transport.send(OutgoingMessage("42", "42", f"reply {i}"))
    finally:
        await transport.bot.shutdown()
    assert time.waits == [] and len(tg.texts(42)) == 5


async def test_custom_limits(tg):
    time = SimulatedTime()
    transport = TelegramTransport(tg.token, base_url=tg.base_url, sleep=time.sleep, clock=time,
                                  pacing=SendPacing(per_chat_interval_s=3.0, max_per_window=2, window_s=1.0))
    await transport.bot.initialize()
    try:
        for channel in ("1", "2", "3", "1"):
            await transport.send(OutgoingMessage(channel, channel, "hi"))
    finally:
        await transport.bot.shutdown()
    assert time.t == 3.0  # the third chat waited for the window (1 s), chat 1 for its 3 s
    assert time.waits == [1.0, 2.0]
