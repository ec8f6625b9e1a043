"""GlobPattern: Python's recursive glob language, one component at a time."""

from __future__ import annotations

import pytest

from corvid_actors.tools.glob_match import GlobPattern


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "src/a.py", False),
        ("src/*.py", "src/a.py", True),
        ("**/*.py", "a.py", True),
        ("**/*.py", "src/deep/a.py", True),
        ("src/**", "src", True),
        ("src/**", "src/deep/a.py", True),
        ("loop/**/x", "loop/x", True),
        ("loop/**/x", "loop/a/b/x", True),
        ("loop/**/x", "loop/a/b/y", False),
        ("*.py", ".hidden.py", False),
        (".*.py", ".hidden.py", True),
        ("**/*.py", ".git/a.py", False),
        ("src/[ab].py", "src/b.py", True),
        ("src/?.py", "src/ab.py", False),
        ("./src//a.py", "src/a.py", True),
    ],
)
def test_matches(pattern, path, matches):
    assert GlobPattern.parse(pattern).matches(path) is matches


@pytest.mark.parametrize(
    ("pattern", "directory", "descend"),
    [
        ("src/*.py", "src", True),
        ("src/*.py", "docs", False),
        ("src/*.py", "src/deep", False),
        ("**/*.py", "any/depth", True),
        ("**/*.py", ".git", False),
        ("*.py", "src", False),
        ("loop/**/x", "loop/a", True),
    ],
)
def test_may_descend_prunes_the_walk(pattern, directory, descend):
    assert GlobPattern.parse(pattern).may_descend(directory) is descend
