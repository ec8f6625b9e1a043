"""Multimodal user content through the runtime (issue 12, item 4): accepted by start_process,
send_message and resume_process, stored as given, handed to the provider as blocks."""

from __future__ import annotations

import pytest

from corvid_actors.errors import InvalidContentError

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg=="
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}


def _blocks(text):
    return [{"type": "text", "text": text}, IMAGE]


def test_start_process_with_blocks_stores_them_and_the_model_gets_them(runtime, scripted, web_session):
    pid = runtime.start_process(web_session.id, _blocks("What is this?"))
    runtime.settle()
    assert pid is not None
    [first] = [m for m in scripted.requests[0].messages if m.role == "user"]
    assert first.content == "What is this?"  # the text parts, for text-only providers
    assert list(first.blocks) == _blocks("What is this?")
    assert runtime.internals.store.message_contents(web_session.id, 5) == [
        ("user", _blocks("What is this?")), ("assistant", "ok")]


def test_send_message_with_blocks_to_a_running_session(runtime, scripted, recorder, web_session):
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    assert runtime.send_message(web_session.id, _blocks("and this picture?")) is True
    runtime.settle()
    last_user = [m for m in scripted.requests[-1].messages if m.role == "user"][-1]
    assert (last_user.content, list(last_user.blocks)) == ("and this picture?", _blocks("and this picture?"))
    assert runtime.internals.store.message_contents(web_session.id, 5)[-2] == ("user", _blocks("and this picture?"))
    assert runtime.internals.store.recent_messages(web_session.id, 5)[-2] == ("user", "and this picture?")
    assert recorder.last("result", web_session.id).subtype == "success"


def test_a_message_with_images_stores_its_text_parts_only(runtime, scripted, web_session):
    # issue 34 item 4: the text parts joined by newlines, as the original's sendMessage;
    # "[image attachment(s)]" only when there is no text; the images stay in content_blocks
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    mixed = [{"type": "text", "text": "Line one"}, IMAGE, {"type": "text", "text": "Line two"}, IMAGE]
    assert runtime.send_message(web_session.id, mixed) is True
    runtime.settle()
    assert runtime.send_message(web_session.id, [IMAGE, IMAGE]) is True
    runtime.settle()
    store = runtime.internals.store
    users = [row for row in store.recent_messages(web_session.id, 10) if row[0] == "user"]
    assert users == [("user", "hi"), ("user", "Line one\nLine two"), ("user", "[image attachment(s)]")]
    blocks = [c for role, c in store.message_contents(web_session.id, 10) if role == "user"]
    assert blocks == ["hi", mixed, [IMAGE, IMAGE]]


def test_cold_resume_with_blocks_sends_the_history_prompt_and_the_image(runtime, scripted, web_session):
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    runtime.stop_process(web_session.id)
    runtime.settle()
    assert runtime.resume_process(web_session.id, _blocks("look at this")) is not None
    runtime.settle()
    first = [m for m in scripted.requests[-1].messages if m.role == "user"][0]
    assert "<conversation_history>" in first.content and first.content.endswith("look at this")
    assert first.blocks[0] == {"type": "text", "text": first.content}
    assert first.blocks[1:] == (IMAGE,)
    # the stored message is the user's own, not the history prompt
    assert runtime.internals.store.message_contents(web_session.id, 5)[-2] == ("user", _blocks("look at this"))


def test_invalid_blocks_raise_before_anything_is_stored(runtime, scripted, web_session):
    runtime.start_process(web_session.id, "hi")
    runtime.settle()
    before = runtime.internals.store.count_messages(web_session.id)
    with pytest.raises(InvalidContentError, match="only 'text' and 'image'"):
        runtime.send_message(web_session.id, [{"type": "audio", "data": "x"}])
    with pytest.raises(InvalidContentError):
        runtime.start_process(web_session.id, [])
    assert runtime.internals.store.count_messages(web_session.id) == before
    assert runtime.is_running(web_session.id)  # the running incarnation was not replaced
