"""An in-memory transport, for tests, simulations and embedding without a platform.

    transport = MemoryTransport()
    with ChatBridge(runtime, transport, agent_id=agent.id):
        transport.say("alice", "hello")          # returns the bridge's outcome
        runtime.settle()                          # replies are delivered before settle returns
        assert transport.texts("alice") == ["ok"]

``gate`` and ``fail_next`` make it a slow or failing platform, to show that neither
blocks a session.
"""

from __future__ import annotations

import threading

from corvid_actors.chat.transport import (
    IncomingMessage,
    MessageHandler,
    OutgoingMessage,
    TransportError,
)


class MemoryTransport:
    """Keeps every sent message in ``sent``; :meth:`say` plays a participant."""

    name = "memory"

    def __init__(self, channel: str = "memory") -> None:
        self.channel = channel
        self.sent: list[OutgoingMessage] = []
        #: when set, ``send`` waits for this event first (a slow platform); set it to release
        self.gate: threading.Event | None = None
        self._handler: MessageHandler | None = None
        self._fail_next = 0
        self._lock = threading.Lock()

    def start(self, handler: MessageHandler) -> None:
        """Keep ``handler``: :meth:`say` calls it."""
        self._handler = handler

    def stop(self) -> None:
        """Forget the handler: :meth:`say` refuses until the next start."""
        self._handler = None

    def send(self, message: OutgoingMessage) -> None:
        """Record the message in ``sent`` (after the ``gate``, when one is set; raising when
        :meth:`fail_next` asked for it)."""
        gate = self.gate
        if gate is not None:
            gate.wait()
        with self._lock:
            if self._fail_next > 0:
                self._fail_next -= 1
                raise TransportError("memory transport: simulated delivery failure")
            self.sent.append(message)

    # --- playing the platform --------------------------------------------------------------

    def say(self, participant: str, text: str, *, channel: str | None = None, message_id: str = "") -> str:
        """Deliver ``text`` from ``participant`` to the bridge, as the platform would."""
        handler = self._handler
        if handler is None:
            raise RuntimeError("the memory transport is not started (start the bridge first)")
        return handler(IncomingMessage(channel or self.channel, participant, text, message_id))

    def fail_next(self, count: int = 1) -> None:
        """Make the next ``count`` sends raise :class:`TransportError`."""
        with self._lock:
            self._fail_next += count

    def messages(self, participant: str | None = None, *, kind: str | None = None) -> list[OutgoingMessage]:
        """The messages sent, to one participant or all, of one kind or all."""
        with self._lock:
            return [m for m in self.sent
                    if (participant is None or m.participant == participant) and (kind is None or m.kind == kind)]

    def texts(self, participant: str | None = None, *, kind: str | None = None) -> list[str]:
        """The texts of :meth:`messages`."""
        return [m.text for m in self.messages(participant, kind=kind)]

    def clear(self) -> None:
        """Forget the messages sent so far."""
        with self._lock:
            self.sent.clear()
