"""MkDocs hooks: the configuration reference is generated at every build (see
config_reference.py), so the page cannot drift from config/default.toml."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import config_reference  # noqa: E402

MARKER = "<!-- config-reference -->"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Replace the marker on the configuration page with the generated tables."""
    if MARKER in markdown:
        return markdown.replace(MARKER, config_reference.markdown())
    return markdown
