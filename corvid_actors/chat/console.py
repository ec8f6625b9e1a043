"""A console transport: try a bot in a terminal. One participant, one channel.

Lines typed on ``input`` go to the bridge; replies are printed on ``output``, approvals
and notices with a marker. End of input (Ctrl-D) sets :attr:`ConsoleTransport.finished`.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from loguru import logger

from corvid_actors.chat.transport import IncomingMessage, MessageHandler, OutgoingMessage

#: how each kind of message is marked on the console
PREFIXES = {"reply": "bot> ", "approval": "[approval] ", "notice": "[notice] ", "command": ""}


class ConsoleTransport:
    """Reads ``input`` on its own thread; ``send`` writes to ``output`` (under a lock)."""

    name = "console"

    def __init__(self, participant: str = "you", channel: str = "console", *, input: TextIO | None = None,
                 output: TextIO | None = None) -> None:
        self.participant = participant
        self.channel = channel
        self.input = input if input is not None else sys.stdin
        self.output = output if output is not None else sys.stdout
        #: set when the input ends (EOF) or the transport stops
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._handler: MessageHandler | None = None

    def start(self, handler: MessageHandler) -> None:
        """Read lines from the terminal on a daemon thread, each one a message to ``handler``."""
        self._handler = handler
        self._thread = threading.Thread(target=self._read, name="console-transport", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop handing lines to the bridge (a thread blocked on the terminal cannot be interrupted;
        what it reads afterwards is ignored)."""
        # A thread blocked reading a terminal cannot be interrupted; it is a daemon thread
        # and ignores whatever it reads after this.
        self._handler = None
        self.finished.set()

    def send(self, message: OutgoingMessage) -> None:
        """Write the message to the output, prefixed by its kind."""
        with self._lock:
            self.output.write(f"{PREFIXES.get(message.kind, '')}{message.text}\n")
            self.output.flush()

    def _read(self) -> None:
        for line in self.input:
            handler = self._handler
            if handler is None:
                break
            if not line.strip():
                continue
            try:
                handler(IncomingMessage(self.channel, self.participant, line.rstrip("\n")))
            except Exception as exc:  # noqa: BLE001 - show the problem, keep reading
                logger.opt(exception=True).warning("console transport: message failed")
                self.send(OutgoingMessage(self.channel, self.participant, f"(not delivered: {exc})", "notice"))
        self.finished.set()
