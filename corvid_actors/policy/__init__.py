"""Plain decision functions with no actor, thread or clock: supervision (restart,
backoff, auto-resume), access (who may talk to an agent) and routing.
"""

from __future__ import annotations
