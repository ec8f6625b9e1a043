"""systemd's notify protocol (``sd_notify``), spoken directly: no libsystemd needed.

Under a unit with ``Type=notify`` systemd sets ``NOTIFY_SOCKET`` (a datagram socket; a
leading ``@`` names one in the abstract namespace). ``serve`` sends ``READY=1`` once it
answers on its admin socket, ``STOPPING=1`` when its graceful shutdown begins, and — with
``WatchdogSec=`` set, which gives it ``WATCHDOG_USEC`` — ``WATCHDOG=1`` every half of that
interval from its main loop, so a daemon whose main thread is stuck is restarted.
Without ``NOTIFY_SOCKET`` every call is a no-op. Sending never raises: a notification
that cannot be sent is logged at debug level and the daemon goes on.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from loguru import logger

#: systemd asks for a keep-alive at least this often within WATCHDOG_USEC (sd_watchdog_enabled(3))
WATCHDOG_FRACTION = 0.5


class SystemdNotifier:
    """Where and how often to notify systemd, read once from the environment."""

    def __init__(self, environ: Mapping[str, str] | None = None, pid: int | None = None) -> None:
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        #: the socket's address (abstract: starting with NUL), or None outside systemd
        self.address: str | None = ("\0" + raw[1:] if raw.startswith("@") else raw) or None
        #: seconds between WATCHDOG=1 keep-alives, or None when no watchdog is asked for
        self.watchdog_interval_s = _watchdog_interval(env, os.getpid() if pid is None else pid)

    def notify(self, *fields: str) -> bool:
        """Send ``fields`` (``"READY=1"``, ``"STATUS=…"``) as one datagram; False when
        there is no socket or it could not be sent."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto("\n".join(fields).encode(), self.address)
            return True
        except OSError as exc:
            logger.debug("sd_notify {} to {!r} failed: {}", fields, self.address, exc)
            return False


def _watchdog_interval(env: Mapping[str, str], pid: int) -> float | None:
    try:
        usec = int(env.get("WATCHDOG_USEC", "0"))
        owner = int(env.get("WATCHDOG_PID") or pid)
    except ValueError:
        return None
    if usec <= 0 or owner != pid:  # the watchdog is meant for another process of the unit
        return None
    return usec / 1e6 * WATCHDOG_FRACTION
