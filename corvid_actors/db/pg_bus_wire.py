"""The cross-daemon bus's wire format: channel names and NOTIFY payloads (pure functions).

:mod:`corvid_actors.db.pg_bus` moves commands and events between daemons through
PostgreSQL ``LISTEN/NOTIFY``; this module decides what goes on the wire and reads it back,
with no connection, thread or clock, so it is tested by table.

Channels, per namespace (one per cluster sharing a database; NOTIFY channels are per
database, not per schema):

- ``<ns>_cmd_<daemon>``: a command for that daemon; the payload is the command's id;
- ``<ns>_reply_<daemon>``: a command that daemon forwarded has its result; payload: the id;
- ``<ns>_events``: event batches of every daemon (:func:`pack_events`).

An events payload is a JSON object: ``{"o": origin daemon, "n": sequence, "e": [events]}``,
or ``{"o": …, "n": …, "r": row id}`` for one event too large for a NOTIFY (its body is in
``cluster_events``). The sequence numbers a publisher's notifications so a receiver sees a
gap (notifications it missed while disconnected), and keeps two equal batches in one
transaction distinct (PostgreSQL delivers identical payloads of one transaction once).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from corvid_actors.core.jsontypes import JsonObject, WireJson

#: PostgreSQL refuses a NOTIFY payload of 8000 bytes or more (default build)
MAX_NOTIFY_PAYLOAD_BYTES = 7999
#: a channel is an identifier: at most 63 bytes (NAMEDATALEN - 1)
_MAX_CHANNEL_BYTES = 63
#: a daemon id used as it is in a channel name; any other id is hashed
_PLAIN_ID = re.compile(r"[a-z0-9_]{1,32}")
_NAMESPACE = re.compile(r"[a-z][a-z0-9_]{0,19}")
#: the widest sequence number an envelope is sized for (2**63 has 19 digits)
_SEQ_DIGITS = 20


def check_namespace(namespace: str) -> str:
    """``namespace`` if it can prefix channel names, else ValueError saying what is allowed."""
    if not _NAMESPACE.fullmatch(namespace):
        raise ValueError(f"bus namespace {namespace!r} must be 1-20 characters of a-z, 0-9 and _, "
                         "starting with a letter")
    return namespace


def _channel_id(daemon_id: str) -> str:
    # Readable when the id is a plain identifier; otherwise a stable digest (an id may be
    # "host:pid" or longer than a channel name allows). Both sides compute the same name.
    if _PLAIN_ID.fullmatch(daemon_id):
        return daemon_id
    return "h" + hashlib.blake2s(daemon_id.encode(), digest_size=12).hexdigest()


def command_channel(namespace: str, daemon_id: str) -> str:
    """The channel a daemon's listener takes its forwarded commands from."""
    return _bounded(f"{namespace}_cmd_{_channel_id(daemon_id)}")


def reply_channel(namespace: str, daemon_id: str) -> str:
    """The channel that tells a daemon a command it forwarded has its result."""
    return _bounded(f"{namespace}_reply_{_channel_id(daemon_id)}")


def events_channel(namespace: str) -> str:
    """The one channel every daemon publishes its event batches on."""
    return _bounded(f"{namespace}_events")


def _bounded(channel: str) -> str:
    assert len(channel.encode()) <= _MAX_CHANNEL_BYTES, channel  # namespace and id are bounded
    return channel


def encode_event(event: JsonObject) -> str:
    """One event as compact JSON text (control characters escaped: PostgreSQL text holds no NUL)."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Packed:
    """Events that travel together in one NOTIFY payload (encoded, in order)."""

    events: tuple[str, ...]


@dataclass(frozen=True)
class Oversized:
    """One event too large for any payload: it travels as a ``cluster_events`` row."""

    event: str


def pack_events(origin: str, encoded: Sequence[str],
                limit: int = MAX_NOTIFY_PAYLOAD_BYTES) -> list[Packed | Oversized]:
    """Split encoded events, in order, into as few payloads as fit in ``limit`` bytes each.

    Greedy: each payload takes events until the next would not fit. An event that does not
    fit even alone is :class:`Oversized` and keeps its place in the order.
    """
    room = limit - len(_envelope(origin, "9" * _SEQ_DIGITS, "[]").encode())
    out: list[Packed | Oversized] = []
    chunk: list[str] = []
    used = 0
    for text in encoded:
        size = len(text.encode())
        if size > room:
            if chunk:
                out.append(Packed(tuple(chunk)))
                chunk, used = [], 0
            out.append(Oversized(text))
            continue
        cost = size + (1 if chunk else 0)  # the comma
        if used + cost > room:
            out.append(Packed(tuple(chunk)))
            chunk, used, cost = [], 0, size
        chunk.append(text)
        used += cost
    if chunk:
        out.append(Packed(tuple(chunk)))
    return out


def _envelope(origin: str, seq: str, body: str) -> str:
    return f'{{"o":{json.dumps(origin, ensure_ascii=False)},"n":{seq},"e":{body}}}'


def events_payload(origin: str, seq: int, packed: Packed) -> str:
    """The NOTIFY payload carrying ``packed`` (fits the limit :func:`pack_events` sized for)."""
    return _envelope(origin, str(seq), "[" + ",".join(packed.events) + "]")


def reference_payload(origin: str, seq: int, row_id: int) -> str:
    """The NOTIFY payload pointing at one event stored in ``cluster_events``."""
    return json.dumps({"o": origin, "n": seq, "r": row_id}, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class EventsNotice:
    """A decoded events payload: who sent it, its sequence number, and either the events
    or the ``cluster_events`` row holding the one event."""

    origin: str
    seq: int
    events: tuple[JsonObject, ...] = ()
    row_id: int | None = None


def decode_events_payload(payload: str) -> EventsNotice:
    """Read an events payload back; ValueError if it is not one (a stranger on the channel)."""
    data: WireJson = json.loads(payload)
    if not isinstance(data, dict) or not isinstance(data.get("o"), str) or not isinstance(data.get("n"), int):
        raise ValueError(f"not a bus events payload: {payload[:80]!r}")
    if isinstance(data.get("r"), int):
        return EventsNotice(data["o"], data["n"], row_id=data["r"])
    events = data.get("e")
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise ValueError(f"not a bus events payload: {payload[:80]!r}")
    return EventsNotice(data["o"], data["n"], events=tuple(events))


def missed_between(last_seq: int | None, seq: int) -> int:
    """Notifications of one publisher missed between ``last_seq`` and ``seq``.

    0 for the first one seen, the next one, or a lower number (the publisher restarted
    and counts from 0 again).
    """
    if last_seq is None or seq <= last_seq:
        return 0
    return seq - last_seq - 1
