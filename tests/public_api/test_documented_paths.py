"""Every import path the docs show a user resolves (issue 42: the package's layout moved
its machinery into subpackages; what the guides, the README and the examples import must
keep working).

The paths are read from the docs themselves, so a page that names a new path is checked
too: each ``from corvid_actors… import a, b`` line and each dotted ``corvid_actors.x.y``
name in docs/site, README.md and examples/ must import, or be an attribute of the longest
module prefix that imports.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted([REPO / "README.md", *(REPO / "docs" / "site").rglob("*.md"), *(REPO / "examples").rglob("*.py")])

FROM_IMPORT = re.compile(r"^\s*from (corvid_actors(?:\.\w+)*) import \(?([\w\s,]+?)\)?\s*(?:#.*)?$", re.M)
DOTTED = re.compile(r"(?<![\w./-])(corvid_actors(?:\.\w+)+)")


def _resolve(dotted: str) -> object:
    """The object a dotted name means: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def _documented() -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    for source in SOURCES:
        text = source.read_text()
        where = str(source.relative_to(REPO))
        for module, names in FROM_IMPORT.findall(text):
            for name in (n.strip() for n in names.replace("\n", ",").split(",")):
                if name and name.isidentifier():
                    found.setdefault(f"{module}.{name}", where)
        for dotted in DOTTED.findall(text):
            found.setdefault(dotted, where)
    return sorted(found.items())


DOCUMENTED = _documented()


def test_the_docs_name_import_paths_at_all():
    # the reader must keep finding them: a pattern that silently matched nothing would pass
    paths = {path for path, _ in DOCUMENTED}
    assert len(paths) > 50
    assert {"corvid_actors.runtime.Runtime", "corvid_actors.config.load_config", "corvid_actors.Runtime",
            "corvid_actors.testing.replay.export_test"} <= paths


@pytest.mark.parametrize(("path", "where"), DOCUMENTED, ids=[p for p, _ in DOCUMENTED])
def test_a_documented_import_path_resolves(path: str, where: str):
    try:
        _resolve(path)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{where} names {path}, which does not resolve: {exc}")
