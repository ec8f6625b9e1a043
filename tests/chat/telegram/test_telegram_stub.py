"""The loopback Bot API stub speaks Telegram's JSON shapes (raw HTTP, no client library)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from corvid_actors.testing.telegram_stub import TelegramStubServer


def call(tg, method, params=None, *, token=None):
    url = f"{tg.base_url}{token or tg.token}/{method}"
    request = urllib.request.Request(url, data=json.dumps(params or {}).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_updates_offsets_and_the_bot_api_error_shapes():
    with TelegramStubServer() as tg:
        first = tg.push_message(7, "one")
        second = tg.push_message(7, "two", user_id=8)
        status, body = call(tg, "getUpdates", {"timeout": 0})
        assert status == 200 and body["ok"] is True
        assert [u["update_id"] for u in body["result"]] == [first, second]
        message = body["result"][1]["message"]
        assert message["text"] == "two" and message["from"]["id"] == 8 and message["chat"]["id"] == 7
        # an offset confirms (forgets) every update below it, as Telegram does
        assert [u["update_id"] for u in call(tg, "getUpdates", {"offset": second})[1]["result"]] == [second]
        assert tg.pending_updates == [second]
        assert call(tg, "getUpdates", {"offset": second + 1, "timeout": 0})[1]["result"] == []

        tg.fail_next("sendMessage", status=429, retry_after=7)
        assert call(tg, "sendMessage", {"chat_id": 7, "text": "hi"}) == (429, {
            "ok": False, "error_code": 429, "description": "Too Many Requests: retry after 7",
            "parameters": {"retry_after": 7}})
        tg.fail_next("sendMessage", status=502)
        assert call(tg, "sendMessage", {"chat_id": 7, "text": "hi"})[0] == 502
        status, body = call(tg, "sendMessage", {"chat_id": 7, "text": "hi",
                                                "reply_markup": {"inline_keyboard": [[
                                                    {"text": "Allow", "callback_data": "yes 1"}]]}})
        assert status == 200 and body["result"]["text"] == "hi"
        sent_id = body["result"]["message_id"]
        assert call(tg, "editMessageText", {"chat_id": 7, "message_id": sent_id, "text": "edited"})[0] == 200
        assert tg.sent(7)[0]["text"] == "edited" and "reply_markup" not in tg.sent(7)[0]
        assert call(tg, "editMessageText", {"chat_id": 7, "message_id": 999, "text": "x"})[0] == 400

        press = tg.press_button(sent_id, "yes 1", user_id=8)
        query = call(tg, "getUpdates", {"offset": press})[1]["result"][0]["callback_query"]
        assert (query["data"], query["from"]["id"], query["message"]["message_id"]) == ("yes 1", 8, sent_id)
        assert call(tg, "answerCallbackQuery", {"callback_query_id": query["id"], "text": "ok"})[1]["result"]
        assert call(tg, "sendChatAction", {"chat_id": 7, "action": "typing"})[1]["result"] is True
        assert tg.chat_actions == [(7, "typing")]

        # what a bot gets wrong, refused as Telegram refuses it
        assert call(tg, "sendMessage", {"chat_id": 7, "text": "x" * 4097})[1]["description"] == \
            "Bad Request: message is too long"
        status, body = call(tg, "sendMessage", {"chat_id": 7, "text": "1. no", "parse_mode": "MarkdownV2"})
        assert status == 400 and "Character '.' is reserved" in body["description"]
        assert call(tg, "getMe", token="999:wrong")[0] == 401

        assert call(tg, "setWebhook", {"url": "http://127.0.0.1:9/hook"})[1]["result"] is True
        assert call(tg, "getUpdates")[0] == 409  # not while a webhook is set
        assert call(tg, "getWebhookInfo")[1]["result"]["url"] == "http://127.0.0.1:9/hook"


def test_form_encoded_bodies_as_python_telegram_bot_sends_them():
    with TelegramStubServer() as tg:
        data = b"chat_id=5&text=a%20b&reply_markup=%7B%22inline_keyboard%22%3A%5B%5D%7D"
        request = urllib.request.Request(f"{tg.api_url}/sendMessage", data=data, method="POST",
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(request, timeout=5) as response:
            result = json.loads(response.read())["result"]
        assert result["chat"]["id"] == 5 and result["text"] == "a b"
        assert tg.calls_of("sendMessage")[0]["reply_markup"] == {"inline_keyboard": []}


def test_the_plugin_fixture_serves_a_stub(telegram_stub):
    telegram_stub.push_message(1, "hi")
    assert call(telegram_stub, "getMe")[1]["result"]["is_bot"] is True
    assert telegram_stub.pending_updates


def test_message_drafts_private_chats_only_and_edits_that_change_nothing_are_refused():
    with TelegramStubServer() as tg:
        tg.push_message(7, "hi")  # a private chat (the chat is the user)
        tg.push_message(-100, "hi", user_id=8)  # a group
        assert call(tg, "sendMessageDraft", {"chat_id": 7, "draft_id": 5, "text": "Hel"}) == (
            200, {"ok": True, "result": True})
        assert call(tg, "sendMessageDraft", {"chat_id": 7, "draft_id": 5})[0] == 200  # "Thinking..." placeholder
        assert tg.drafts == [{"chat_id": 7, "draft_id": 5, "text": "Hel"}, {"chat_id": 7, "draft_id": 5, "text": ""}]
        assert tg.texts(7) == []  # a draft is not a message
        status, body = call(tg, "sendMessageDraft", {"chat_id": -100, "draft_id": 5, "text": "x"})
        assert status == 400 and "private" in body["description"]
        assert call(tg, "sendMessageDraft", {"chat_id": 7, "draft_id": 0, "text": "x"})[0] == 400
        assert call(tg, "sendMessageDraft", {"chat_id": 7, "draft_id": 1, "text": "x" * 4097})[0] == 400
        assert call(tg, "sendMessageDraft", {"chat_id": 7, "draft_id": 1, "text": "a.b",
                                             "parse_mode": "MarkdownV2"})[0] == 400
        sent = call(tg, "sendMessage", {"chat_id": -100, "text": "same"})[1]["result"]
        assert sent["chat"] == {"id": -100, "type": "group"}
        status, body = call(tg, "editMessageText", {"chat_id": -100, "message_id": sent["message_id"], "text": "same"})
        assert status == 400 and body["description"].startswith("Bad Request: message is not modified")
        assert tg.calls_per_second("sendMessageDraft", 7) == 5 and tg.calls_per_second("sendMessage", 7) == 0


@pytest.mark.anyio
async def test_python_telegram_bot_sends_drafts_as_the_stub_expects():
    import telegram

    with TelegramStubServer() as tg:
        tg.push_message(7, "hi")
        async with telegram.Bot(tg.token, base_url=tg.base_url) as bot:
            assert await bot.send_message_draft(7, 3, "Hello \\*", parse_mode="MarkdownV2") is True
            with pytest.raises(telegram.error.BadRequest, match="private"):
                await bot.send_message_draft(-5, 3, "x")
        assert tg.drafts == [{"chat_id": 7, "draft_id": 3, "text": "Hello *"}]
