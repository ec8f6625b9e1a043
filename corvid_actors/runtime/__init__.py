"""The :class:`Runtime` facade and what it is made of: its lifecycle, its reads, the
actor tree it starts and the session control it hands to tools.
"""

from __future__ import annotations

from corvid_actors.runtime.facade import Runtime
from corvid_actors.runtime.tree import RuntimeInternals

__all__ = [
    "Runtime",
    "RuntimeInternals",
]
