"""Chat replies on Telegram (issue 35 items 2 and 3), end to end in real time: the real
Ollama client against the Ollama stub streams a reply, python-telegram-bot's client
against the Bot API stub shows it. One answer per message for both agent kinds (the
issue's probe conversation); replies stream as drafts in private chats and as one edited
message in groups, at most one update per second per chat, the final text equal to the
streamed deltas and split past 4,096 UTF-16 units; an empty turn says so."""

from __future__ import annotations

import pytest

from corvid_actors.chat import AsyncChatBridge, BridgeSettings
from corvid_actors.chat.telegram import TelegramTransport
from corvid_actors.chat.telegram_format import telegram_length
from corvid_actors.clock import RealClock
from corvid_actors.config import Config
from corvid_actors.runtime import Runtime
from corvid_actors.testing.ollama_stub import OllamaStubServer
from tests.chat.telegram.conftest import eventually
from tests.fixtures.probe_conversation import LONG, PARIS, QUESTIONS, SHORT

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")]

ALICE = 1001                 # a private chat: its id is the user's
GROUP, BOB = -100500, 1002   # a group: negative id
MODEL = "llama3.1:8b"
#: delivery jitter allowed when counting updates per second (the throttle is 1 s on the clock)
JITTER_S = 0.2
#: a streamed reply: 24 words, 0.1 s apart (2.4 s)
WORDS = [f"word{i} " for i in range(23)] + ["end."]
STREAMED = "".join(WORDS)



@pytest.fixture
def ollama():
    with OllamaStubServer() as stub:
        yield stub


@pytest.fixture
def make_bot(ollama, tg, tmp_path):
    made: list[Runtime] = []
    bridges: list[AsyncChatBridge] = []

    def make(*, kind: str = "chat", drafts: bool = True, settings: BridgeSettings | None = None):
        cfg = Config().replace(providers={"default_provider": "ollama", "ollama_host": ollama.url})
        rt = Runtime(cfg, clock=RealClock(), store_url="sqlite:///:memory:", workspace_dir=tmp_path / "ws")
        made.append(rt)
        agent = rt.create_agent("bot", provider="ollama", model=MODEL, kind=kind)
        transport = TelegramTransport(tg.token, base_url=tg.base_url, poll_timeout_s=1, drafts=drafts)
        bridges.append(AsyncChatBridge(rt, transport, agent_id=agent.id, settings=settings))
        return bridges[-1]

    yield make
    for rt in made:
        rt.shutdown()
    # every update the bridge sent was one Telegram took (no 400: too long, not modified, …)
    assert [bridge.stats.get("failed", 0) for bridge in bridges] == [0] * len(bridges)


def calls(tg, method, chat):
    return [p for p in tg.calls_of(method) if str(p.get("chat_id")) == str(chat)]


async def converse(tg, chat, questions, *, user=None):
    for n, question in enumerate(questions, start=1):
        tg.push_message(chat, question, user_id=user)
        await eventually(lambda n=n: len(tg.texts(chat)) >= n)


@pytest.mark.parametrize("kind", ["chat", "task"])
async def test_the_probe_conversation_gets_one_message_per_question(make_bot, ollama, tg, kind):
    answers = [PARIS, SHORT, LONG]
    finals = ["Paris, in France.", "I can help with that.", "That is the French Revolution in brief."]
    for answer, final in zip(answers, finals, strict=True):
        ollama.add_reply(answer)
        if kind == "task":  # each answer is nudged once; the second one ends the turn
            ollama.add_reply(final)
    async with make_bot(kind=kind):
        await converse(tg, ALICE, QUESTIONS)
        await eventually(lambda: len(ollama.chat_requests) == (3 if kind == "chat" else 6))
    assert len(ollama.chat_requests) == (3 if kind == "chat" else 6)
    assert tg.texts(ALICE) == (answers if kind == "chat" else finals)
    assert len(calls(tg, "sendMessage", ALICE)) == 3 and calls(tg, "editMessageText", ALICE) == []


async def test_a_private_chat_streams_drafts_then_sends_the_final_text(make_bot, ollama, tg):
    ollama.add_reply(STREAMED, chunks=len(WORDS), delay_s=0.1)
    async with make_bot():
        await converse(tg, ALICE, ["tell me"])
    assert tg.texts(ALICE) == [STREAMED]  # the final text is the deltas, concatenated
    drafts = [d for d in tg.drafts if d["chat_id"] == ALICE]
    assert len(drafts) >= 2, drafts  # animated while the reply was written
    assert len({d["draft_id"] for d in drafts}) == 1
    assert all(STREAMED.startswith(d["text"]) for d in drafts)
    assert tg.calls_per_second("sendMessageDraft", ALICE, window_s=1.0 - JITTER_S) == 1
    assert len(calls(tg, "sendMessage", ALICE)) == 1 and calls(tg, "editMessageText", ALICE) == []
    assert (ALICE, "typing") in tg.chat_actions


async def test_a_group_gets_one_message_edited_as_the_reply_is_written(make_bot, ollama, tg):
    ollama.add_reply(STREAMED, chunks=len(WORDS), delay_s=0.1)
    async with make_bot():
        tg.push_message(GROUP, "tell me", user_id=BOB)
        await eventually(lambda: tg.texts(GROUP) == [STREAMED])
    edits = calls(tg, "editMessageText", GROUP)
    assert len(edits) >= 2, edits  # the first delta sent it; later ones (and the final) edited it
    assert len(calls(tg, "sendMessage", GROUP)) == 1 and tg.drafts == []
    edit_times = [at for at, name, p in tg.timed_calls if name == "editMessageText"]
    # at most one update per second: the final edit always lands, at most one more in its second
    assert tg.calls_per_second("editMessageText", GROUP, window_s=1.0 - JITTER_S) <= 2
    assert all(b - a >= 1.0 - JITTER_S for a, b in zip(edit_times[:-2], edit_times[1:-1], strict=True))


async def test_drafts_off_a_private_chat_is_edited_too(make_bot, ollama, tg):
    ollama.add_reply(STREAMED, chunks=len(WORDS), delay_s=0.1)
    async with make_bot(drafts=False):
        tg.push_message(ALICE, "tell me")
        await eventually(lambda: tg.texts(ALICE) == [STREAMED])  # the first delta already sent it
    assert tg.texts(ALICE) == [STREAMED] and tg.drafts == [] and calls(tg, "editMessageText", ALICE)


@pytest.mark.parametrize("chat", [ALICE, GROUP])
async def test_a_reply_past_4096_units_goes_on_in_a_new_message(make_bot, ollama, tg, chat):
    # 2,100 emoji outside the BMP (2 UTF-16 units each): 4,200 units, streamed in 6 pieces
    text = "🦜 " * 1400
    ollama.add_reply(text, chunks=6, delay_s=0.3)
    async with make_bot():
        tg.push_message(chat, "squawk", user_id=BOB if chat == GROUP else None)
        await eventually(lambda: len(tg.texts(chat)) == 2 and "".join(tg.texts(chat)).count("🦜") == 1400)
    first, second = tg.texts(chat)
    assert telegram_length(first) <= 4096 and first.count("🦜") + second.count("🦜") == 1400


async def test_a_turn_without_text_is_told_with_the_notice(make_bot, ollama, tg):
    ollama.add_reply("")
    async with make_bot(settings=BridgeSettings(empty_turn_notice="(nothing to say)")):
        await converse(tg, ALICE, ["hm"])
    assert tg.texts(ALICE) == ["(nothing to say)"]
