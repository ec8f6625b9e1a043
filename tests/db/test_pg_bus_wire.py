"""The bus's wire format, by table: channel names, packing events under the NOTIFY limit."""

from __future__ import annotations

import json

import pytest

from corvid_actors.db.pg_bus_wire import (
    MAX_NOTIFY_PAYLOAD_BYTES,
    EventsNotice,
    Oversized,
    Packed,
    check_namespace,
    command_channel,
    decode_events_payload,
    encode_event,
    events_channel,
    events_payload,
    missed_between,
    pack_events,
    reference_payload,
    reply_channel,
)


@pytest.mark.parametrize(("daemon_id", "channel"), [
    ("d1", "corvid_cmd_d1"),
    ("host_7", "corvid_cmd_host_7"),
])
def test_a_plain_daemon_id_names_its_channel(daemon_id: str, channel: str) -> None:
    assert command_channel("corvid", daemon_id) == channel


@pytest.mark.parametrize("daemon_id", ["Host-A:4242", "x" * 200, "ünï", "a b"])
def test_any_other_daemon_id_is_hashed_into_a_valid_channel(daemon_id: str) -> None:
    for channel in (command_channel("corvid", daemon_id), reply_channel("corvid", daemon_id)):
        assert len(channel.encode()) <= 63 and channel.isascii() and channel == channel.lower()
        assert '"' not in channel
    assert command_channel("corvid", daemon_id) == command_channel("corvid", daemon_id)
    assert command_channel("corvid", daemon_id) != command_channel("corvid", daemon_id + "x")


def test_channels_of_two_namespaces_never_meet() -> None:
    assert events_channel("corvid") != events_channel("other")
    assert command_channel("corvid", "d1") != command_channel("other", "d1")


@pytest.mark.parametrize("namespace", ["", "Corvid", "1abc", "a-b", "a" * 21])
def test_a_namespace_that_cannot_prefix_a_channel_is_refused(namespace: str) -> None:
    with pytest.raises(ValueError, match="must be 1-20 characters"):
        check_namespace(namespace)


def _sizes(parts: list[Packed | Oversized], origin: str = "d1") -> list[int]:
    return [len(events_payload(origin, 2**62, p).encode()) for p in parts if isinstance(p, Packed)]


def test_small_events_share_one_payload() -> None:
    encoded = [encode_event({"n": i}) for i in range(10)]

    assert pack_events("d1", encoded) == [Packed(tuple(encoded))]


def test_a_batch_over_the_limit_is_split_in_order_and_every_payload_fits() -> None:
    encoded = [encode_event({"n": i, "text": "é" * 300}) for i in range(200)]

    parts = pack_events("d1", encoded)

    assert len(parts) > 1 and all(isinstance(p, Packed) for p in parts)
    assert [e for p in parts if isinstance(p, Packed) for e in p.events] == encoded
    assert max(_sizes(parts)) <= MAX_NOTIFY_PAYLOAD_BYTES
    assert min(_sizes(parts[:-1])) > MAX_NOTIFY_PAYLOAD_BYTES - 700  # greedy: nearly full


def test_an_event_that_fits_exactly_is_packed_and_one_byte_more_is_oversized() -> None:
    room = MAX_NOTIFY_PAYLOAD_BYTES - len(events_payload("d1", 10**19, Packed(())).encode())
    exact = encode_event({"t": "x" * (room - len('{"t":""}'))})
    assert len(exact.encode()) == room

    assert pack_events("d1", [exact]) == [Packed((exact,))]
    assert pack_events("d1", [exact[:-2] + 'x"}']) == [Oversized(exact[:-2] + 'x"}')]


def test_an_oversized_event_keeps_its_place() -> None:
    small = [encode_event({"n": i}) for i in range(3)]
    big = encode_event({"text": "y" * 9000})

    parts = pack_events("d1", [small[0], small[1], big, small[2]])

    assert parts == [Packed((small[0], small[1])), Oversized(big), Packed((small[2],))]


def test_payloads_decode_to_what_was_packed() -> None:
    events = [{"session_id": "s1", "text": 'a "quoted"\n\u0000 ünï'}, {"session_id": "s2"}]
    packed = Packed(tuple(encode_event(e) for e in events))

    assert decode_events_payload(events_payload("d:1", 7, packed)) == EventsNotice("d:1", 7, events=tuple(events))
    assert decode_events_payload(reference_payload("d1", 8, 42)) == EventsNotice("d1", 8, row_id=42)
    # the form PostgreSQL's json_build_object writes (spaces) reads the same
    assert decode_events_payload('{"o" : "d1", "n" : 8, "r" : 42}') == EventsNotice("d1", 8, row_id=42)


@pytest.mark.parametrize("payload", ["[]", '{"o": "d1"}', '{"o": 1, "n": 2, "e": []}',
                                     '{"o": "d1", "n": 2, "e": [1]}', json.dumps({"o": "d", "n": 1})])
def test_a_strangers_payload_is_refused(payload: str) -> None:
    with pytest.raises(ValueError, match="not a bus events payload"):
        decode_events_payload(payload)


@pytest.mark.parametrize(("last", "seq", "missed"), [
    (None, 5, 0),   # the first seen from that publisher
    (4, 5, 0),      # the next one
    (4, 8, 3),      # 5, 6 and 7 went by while disconnected
    (9, 0, 0),      # the publisher restarted and counts again
])
def test_missed_notifications_are_the_gap_in_a_publishers_sequence(last: int | None, seq: int, missed: int) -> None:
    assert missed_between(last, seq) == missed
