"""``python bench/run.py [--quick] [--only NAME ...]``: the same as ``python -m bench``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.__main__ import main  # noqa: E402 - the path must be set first

if __name__ == "__main__":
    sys.exit(main())
