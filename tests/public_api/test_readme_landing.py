"""The README is the landing page (issue 41): short, its first code block the two commands
``.ci/run`` runs, and every link into the docs pointing at a page that exists (the site's
own links are checked by ``mkdocs build --strict``; the README is not part of the site)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_first_code_block_holds_exactly_the_two_commands():
    first = README.split("```", 2)[1]
    commands = [line for line in first.splitlines()[1:] if line.strip() and not line.lstrip().startswith("#")]
    assert len(commands) == 2
    assert commands[0].startswith("python3 -m venv .venv && ") and "pytest" in commands[1]


def test_it_stays_a_landing_page():
    assert len(README.splitlines()) <= 200


def test_every_relative_link_reaches_a_file():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert len(local) > 20
    assert [link for link in local if not (ROOT / link).is_file()] == []
