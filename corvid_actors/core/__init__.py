"""The bottom layer every other one may import: the JSON types, the tool vocabulary,
the double-texting modes and the shared asyncio loop thread.
"""

from __future__ import annotations
