"""Issue 16 item 6: each server actor module owns its request and reply messages, and the
actor modules need no function-local imports to dodge import cycles."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import corvid_actors.actors as actors_pkg
from corvid_actors.actors import approvals, credits, slots

ACTORS = Path(actors_pkg.__file__).parent


def _imports(module_path: Path) -> tuple[set[str], list[tuple[int, str]]]:
    """(modules imported at top level, (line, module) of imports inside functions)."""
    tree = ast.parse(module_path.read_text())
    top, nested = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom | ast.Import):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if node.col_offset == 0:
                top.update(names)
            else:
                nested.extend((node.lineno, n) for n in names if n.startswith("corvid_actors"))
    return top, nested


def test_no_function_local_imports_in_actor_modules():
    found = {str(p.relative_to(ACTORS)): nested for p in sorted(ACTORS.rglob("*.py")) if (nested := _imports(p)[1])}
    assert found == {}


def test_servers_do_not_import_their_clients():
    for module in (slots, approvals, credits):
        top, _ = _imports(Path(module.__file__))
        assert not top & {"corvid_actors.actors.session", "corvid_actors.actors.supervisor"}, module.__name__


def test_reply_messages_live_with_the_actor_that_sends_them():
    assert slots.SlotAnswer.__module__ == "corvid_actors.actors.slots"
    assert slots.SlotQueued.__module__ == "corvid_actors.actors.slots"
    assert approvals.ApprovalAnswer.__module__ == "corvid_actors.actors.approvals"
    assert approvals.ApprovalAsked.__module__ == "corvid_actors.actors.approvals"
    assert credits.CreditsExhausted.__module__ == "corvid_actors.actors.credits"


def test_every_actor_module_imports_first_on_its_own():
    # an import cycle shows as an ImportError when a module is the first one imported
    for path in sorted(ACTORS.rglob("*.py")):
        name = ".".join(("corvid_actors.actors", *path.relative_to(ACTORS).with_suffix("").parts))
        done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, (name, done.stderr[-2000:])
