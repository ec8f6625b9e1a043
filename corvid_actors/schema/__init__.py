"""The config's typed sections and the field checks that build them (the bottom layers
read their section; the loader in :mod:`corvid_actors.config` assembles them).
"""

from __future__ import annotations
