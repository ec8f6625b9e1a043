"""The reply assembler (chat/replies.py), by table: a turn's events in, what the chat sees out."""

from __future__ import annotations

from corvid_actors.chat.replies import EmptyTurn, ReplyAssembler, ReplyStep
from corvid_actors.events import (
    Assistant,
    ContentBlockDelta,
    ContentBlockStart,
    ErrorEvent,
    MessageStop,
    Result,
    SessionStopped,
    ToolStatus,
)

SID, CHAT = "s1", "42"


def run(assembler: ReplyAssembler, *timed_events, sid: str = SID, chat: str = CHAT) -> list:
    out = []
    for at, event in timed_events:
        out += assembler.on_event(sid, chat, event, at)
    return out


def texts(steps) -> list[tuple[str, bool]]:
    return [(s.text, s.final) for s in steps if isinstance(s, ReplyStep)]


def whole() -> ReplyAssembler:
    return ReplyAssembler(streaming=False, interval_s=1.0)


def streamed() -> ReplyAssembler:
    return ReplyAssembler(streaming=True, interval_s=1.0)


def test_one_reply_the_last_text_when_a_nudge_made_two():
    steps = run(whole(), (0, Assistant(content="Shall I?")), (0, MessageStop()), (0, Assistant(content="Done.")),
                (0, MessageStop()), (0, Result(result="Done.")))
    assert texts(steps) == [("Done.", True)]


def test_text_before_a_tool_call_is_not_the_answer():
    steps = run(whole(), (0, Assistant(content="Let me look.")), (0, ContentBlockStart(block_type="tool_use")),
                (0, ToolStatus(state="running")), (0, Assistant(content="You have two files.")), (0, Result()))
    assert texts(steps) == [("You have two files.", True)]


def test_a_turn_without_text_is_an_empty_turn_and_a_failed_one_says_nothing():
    a = whole()
    [empty] = run(a, (0, Result(subtype="success")))
    assert isinstance(empty, EmptyTurn) and not empty.streamed
    assert run(a, (0, Assistant(content="Let me look.")), (0, ToolStatus()), (0, Result(subtype="error"))) == []


def test_each_turn_is_its_own_reply():
    a = whole()
    first = run(a, (0, Assistant(content="One.")), (0, Result()))
    second = run(a, (0, Assistant(content="Two.")), (0, Result()))
    assert texts(first) == [("One.", True)] and texts(second) == [("Two.", True)]
    assert first[0].reply_id != second[0].reply_id


def test_a_stop_mid_turn_forgets_it():
    a = whole()
    assert run(a, (0, Assistant(content="half")), (0, SessionStopped(reason="user_stop")), (0, Result())) \
        == [EmptyTurn(SID, f"{SID}:2", False)]


def test_deltas_are_ignored_without_streaming():
    assert run(whole(), (0, ContentBlockDelta(text="Hel")), (0, ContentBlockDelta(text="lo"))) == []


def test_streaming_shows_the_whole_text_at_most_once_per_interval_and_the_final_always_lands():
    deltas = [(t / 10, ContentBlockDelta(text=f"w{t} ")) for t in range(25)]  # 2.5 s of deltas
    steps = run(streamed(), *deltas, (2.5, Assistant(content="".join(d.text for _, d in deltas))), (2.5, Result()))
    shown = texts(steps)
    assert [final for _, final in shown] == [False, False, False, True]
    assert shown[0][0] == "w0 " and shown[1][0].endswith("w10 ") and shown[2][0].endswith("w20 ")
    assert shown[-1][0] == "".join(d.text for _, d in deltas)


def test_the_throttle_is_per_chat():
    a = streamed()
    assert texts(run(a, (0, ContentBlockDelta(text="a")), chat="1")) == [("a", False)]
    assert texts(run(a, (0.1, ContentBlockDelta(text="b")), sid="s2", chat="2")) == [("b", False)]
    assert run(a, (0.2, ContentBlockDelta(text="c")), sid="s3", chat="1") == []


def test_a_new_model_call_starts_the_streamed_text_again():
    steps = run(streamed(), (0, ContentBlockDelta(text="Shall I?")), (0, Assistant(content="Shall I?")),
                (0, MessageStop()), (1, ContentBlockDelta(text="Done.")), (1, Assistant(content="Done.")),
                (1, Result()))
    assert texts(steps) == [("Shall I?", False), ("Done.", False), ("Done.", True)]
    assert len({s.reply_id for s in steps}) == 1


def test_an_empty_streamed_turn_says_it_was_streamed():
    steps = run(streamed(), (0, ContentBlockDelta(text="Let me look.")), (0, ToolStatus()), (0, Result()))
    assert texts(steps) == [("Let me look.", False)] and steps[-1] == EmptyTurn(SID, f"{SID}:1", True)


def test_other_events_do_not_open_a_turn():
    assert run(whole(), (0, ErrorEvent(error_type="api_outage"))) == []


def test_update_times_stay_bounded_however_many_chats():
    from corvid_actors.chat.replies import UPDATE_TIMES_KEPT

    a = streamed()
    for n in range(3 * UPDATE_TIMES_KEPT):
        run(a, (float(n), ContentBlockDelta(text="x")), sid=f"s{n}", chat=str(n))
    assert len(a._updated_at) <= UPDATE_TIMES_KEPT + 1
