"""The send pacer: one message per chat per interval, so many per window overall, exact times."""

from __future__ import annotations

import pytest

from corvid_actors.chat.pacing import SendPacer, SendPacing


def send_times(pacer: SendPacer, chats, *, now: float = 0.0) -> list[float]:
    """Each send goes when its reservation says (a sequential sender: time moves to it)."""
    times = []
    for chat in chats:
        now += pacer.reserve(chat, now)
        times.append(now)
    return times


def test_five_messages_to_one_chat_go_a_second_apart():
    assert send_times(SendPacer(SendPacing()), [42] * 5) == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_forty_chats_at_once_send_thirty_now_and_ten_a_second_later():
    times = send_times(SendPacer(SendPacing()), range(40))
    assert times[:30] == [0.0] * 30
    assert times[30:] == [1.0] * 10


def test_a_chat_that_waited_long_enough_goes_at_once():
    pacer = SendPacer(SendPacing())
    assert pacer.reserve(42, 10.0) == 0.0
    assert pacer.reserve(42, 10.4) == pytest.approx(0.6)  # its next turn is at 11
    assert pacer.reserve(42, 13.0) == 0.0


def test_sends_keep_their_order_across_chats():
    # a send waiting for its chat's turn is not overtaken by the next one (one outbox, in order)
    pacer = SendPacer(SendPacing())
    assert send_times(pacer, [1, 1, 2]) == [0.0, 1.0, 1.0]


def test_the_global_window_slides():
    pacer = SendPacer(SendPacing(max_per_window=2, window_s=1.0, per_chat_interval_s=0.0))
    assert send_times(pacer, "abcde") == [0.0, 0.0, 1.0, 1.0, 2.0]


def test_forgotten_chats_are_the_least_recent():
    pacer = SendPacer(SendPacing(chats_remembered=2, per_chat_interval_s=5.0))
    send_times(pacer, [1, 2, 3])  # chat 1 is forgotten
    assert pacer.reserve(1, 0.0) == 0.0
    assert pacer.reserve(3, 0.0) == 5.0


@pytest.mark.parametrize("bad", [dict(max_per_window=0), dict(per_chat_interval_s=-1.0),
                                 dict(window_s=-0.5), dict(chats_remembered=0)])
def test_nonsense_settings_are_refused(bad):
    with pytest.raises(ValueError):
        SendPacing(**bad)
