"""The Telegram transport's offset file: the next update's id, kept across crashes
(written atomically after every handled update, ignored once older than Telegram's
week after which it may restart its update ids at random).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

from loguru import logger

#: Telegram picks update ids at random again after a week without updates
_OFFSET_FILE_MAX_AGE = dt.timedelta(days=6)


def read_offset(path: Path, now: dt.datetime) -> int:
    """The offset saved in ``path``; 0 if missing, unreadable or too old."""
    try:
        saved = json.loads(path.read_text())
        saved_at = dt.datetime.fromisoformat(saved["saved_at"])
        offset = int(saved["offset"])
    except FileNotFoundError:
        return 0
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("telegram: ignoring unreadable offset file {}: {}", path, exc)
        return 0
    if now - saved_at > _OFFSET_FILE_MAX_AGE:
        return 0  # Telegram may have restarted its update ids at random since
    return offset


def write_offset(path: Path, offset: int, now: dt.datetime) -> None:
    """Save ``offset`` (dated ``now``) in ``path``, atomically."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({"offset": offset, "saved_at": now.isoformat()}))
    os.replace(temporary, path)  # atomic: a crash leaves the old offset or the new one
