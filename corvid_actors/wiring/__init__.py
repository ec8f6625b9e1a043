"""How a session is assembled from the config: the session builder (loop, tools,
provider) and the host's loop factories.
"""

from __future__ import annotations
