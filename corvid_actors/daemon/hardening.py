"""The daemon process closed to its neighbours (issue 13 item 5): no process of the same
uid reads its memory or its initial environment (where the API keys read at start-up stay
visible), nor ptraces it.

Plain functions over ``prctl``; :mod:`corvid_actors.daemon.service` calls
:func:`forbid_memory_access` before anything is read, and reports :func:`dumpable` in
``admin health``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

_PR_SET_DUMPABLE, _PR_GET_DUMPABLE = 4, 3


def forbid_memory_access() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)``: no process of the same uid may read this one's
    memory or ``/proc/<pid>/environ`` (where the API keys read at start-up stay visible
    even after they leave ``os.environ``), nor ptrace it. Linux only; False elsewhere."""
    libc = _libc()
    return libc is not None and libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def dumpable() -> bool | None:
    """Whether the process is still dumpable (readable by its uid); None off Linux."""
    libc = _libc()
    return None if libc is None else bool(libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0))


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
