"""Issue 17: the Runtime is a facade, not a bag of refs.

The store and the actors sit behind ``runtime.internals``; only the runtime's own modules,
``corvid_actors.testing`` and the daemon's admin wiring may reach it (an AST scan, as
``tests/actors/test_message_ownership.py`` does for imports). Everything else a host needs
has a method, tested here.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import corvid_actors
from corvid_actors.errors import ConfigError, ConflictError
from corvid_actors.runtime import Runtime
from corvid_actors.runtime.lifecycle import RuntimeLifecycle
from corvid_actors.runtime.reads import RuntimeReads
from corvid_actors.runtime.records import RuntimeRecords
from corvid_actors.testing import arrange, sim_runtime

PACKAGE = Path(corvid_actors.__file__).parent

#: the modules that may use ``runtime.internals`` (see corvid_actors/runtime/tree.py)
ALLOWED = ("runtime/", "testing/", "daemon/service.py")

#: what a Runtime was a bag of before: none of it is a public attribute any more
FORMER_REFS = frozenset({"store", "bus", "supervisor", "credits", "approvals", "slot_pool", "timers", "tracker",
                         "builder", "store_watch", "live", "providers"})

RUNTIME_NAMES = frozenset({"runtime", "_runtime", "rt"})


def _is_runtime(node: ast.expr) -> bool:
    """``runtime``, ``rt``, ``self.runtime``, ``self._runtime``, ``x.runtime``."""
    if isinstance(node, ast.Name):
        return node.id in RUNTIME_NAMES
    return isinstance(node, ast.Attribute) and node.attr in RUNTIME_NAMES


def reaches_in(source: str) -> list[tuple[int, str]]:
    """(line, what) of every reach into a runtime's internals in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr in ("internals", "_internals"):
            found.append((node.lineno, node.attr))
        elif node.attr in FORMER_REFS and _is_runtime(node.value):
            found.append((node.lineno, node.attr))
    return found


def _allowed(path: Path) -> bool:
    rel = path.relative_to(PACKAGE).as_posix()
    return any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in ALLOWED)


def test_package_code_outside_the_allowed_modules_uses_the_facade_only():
    found = {path.relative_to(PACKAGE).as_posix(): hits for path in sorted(PACKAGE.rglob("*.py"))
             if not _allowed(path) and (hits := reaches_in(path.read_text()))}
    assert found == {}


def test_the_scan_sees_each_way_in():
    assert reaches_in("runtime.internals.store.get_session(x)") == [(1, "internals")]
    assert reaches_in("self.runtime.store.get_session(x)") == [(1, "store")]
    assert reaches_in("tell(self._runtime.bus, m)") == [(1, "bus")]
    assert reaches_in("rt._internals") == [(1, "_internals")]
    assert reaches_in("runtime.session(x); self.store.close(); runtime.clock.now()") == []


def test_the_refs_are_no_public_attributes(runtime):
    assert not {name for name in FORMER_REFS if hasattr(runtime, name)}
    inside = runtime.internals
    assert {name for name in FORMER_REFS if getattr(inside, name, None) is None} == {"credits"}


def test_config_and_clock_are_read_only(runtime):
    with pytest.raises(AttributeError):
        runtime.config = runtime.config
    with pytest.raises(AttributeError):
        runtime.clock = runtime.clock
    assert runtime.failure is None


def test_agents_projects_sessions_and_history_through_the_facade(runtime, tmp_path):
    agent = runtime.ensure_agent("Helper", system_prompt="Be brief.")
    assert runtime.ensure_agent("helper").id == agent.id
    with pytest.raises(ConflictError):
        runtime.ensure_agent("helper", system_prompt="Be long.")
    assert runtime.update_agent(agent.id, system_prompt="Be long.").system_prompt == "Be long."
    other = runtime.create_agent("other")
    assert runtime.agent("OTHER").id == other.id and runtime.agent(agent.id).id == agent.id
    assert runtime.agent("nobody") is None
    assert {a.name for a in runtime.agents()} == {"Helper", "other"}

    project = runtime.create_project("demo", tmp_path)
    assert runtime.project("demo").id == project.id == runtime.project(project.id).id
    assert runtime.project("none") is None

    first = runtime.create_session(agent_id=agent.id, source="chat", channel="c1", name="bot", participant="p")
    second = runtime.create_session(agent_id=agent.id, source="chat", channel="c1", name="bot", participant="q")
    assert runtime.find_session(source="chat", channel="c1", participant="p") == first.id
    assert runtime.find_session(source="chat", channel="c1", agent_id=agent.id, name="bot",
                                participant="q") == second.id
    assert runtime.find_session(source="chat", channel="c2") is None
    assert runtime.session(first.id).participant == "p" and runtime.session("nope") is None

    runtime.start_process(first.id, "hello")
    runtime.settle()
    assert [m.role for m in runtime.history(first.id)][:2] == ["user", "assistant"]
    assert runtime.message_count(first.id) == len(runtime.history(first.id))

    assert runtime.add_mcp_server("echo", "python", args=["server.py"]).name == "echo"


def test_routing_sandbox_and_host_hooks(runtime):
    name = runtime.route(None)
    assert runtime.has_provider(name) and runtime.provider(name) is runtime.internals.providers[name]
    assert not runtime.has_provider("anthropic")
    with pytest.raises(ConfigError):
        runtime.provider("anthropic")
    assert runtime.database_url.startswith("sqlite")
    assert runtime.sandbox_status() is runtime.internals.builder.sandbox.status
    assert runtime.work_tracker() is runtime.internals.tracker
    replays = runtime.replay_store()
    now = runtime.clock.now()
    assert replays.first_use("k", now=now, expires_at=now) is True
    assert replays.first_use("k", now=now, expires_at=now) is False
    assert runtime.credits_enabled is False


def test_restart_pending_is_taken_once(sim_clock):
    with sim_runtime(sim_clock) as runtime:
        s = runtime.create_session(source="web")
        arrange(runtime).marked_for_resume(s.id)
        assert runtime.take_restart_pending() == [s.id]
        assert runtime.take_restart_pending() == []


def test_credits_enabled_with_the_bank(sim_clock):
    with sim_runtime(sim_clock, with_credits=True) as runtime:
        assert runtime.credits_enabled is True


def test_mark_stopping_makes_an_actor_stop_no_failure(sim_clock):
    with sim_runtime(sim_clock) as runtime:
        runtime.mark_stopping()
        runtime.internals.bus.stop(block=True)
        assert runtime.failure is None


def test_the_runtime_modules_stay_small():
    for path in sorted((PACKAGE / "runtime").glob("*.py")):
        assert len(path.read_text().splitlines()) <= 400, path.name


def test_the_runtime_holds_its_parts_instead_of_inheriting_them(runtime):
    assert Runtime.__bases__ == (object,)
    parts = {type(runtime._lifecycle), type(runtime._reads), type(runtime._records)}
    assert parts == {RuntimeLifecycle, RuntimeReads, RuntimeRecords}
    assert runtime.internals is runtime._lifecycle.internals  # one actor tree, shared by the parts


def test_a_forwarded_member_is_the_parts_own_api():
    """What a part's method says (name, signature, docstring) is what Runtime's says:
    ``inspect``, ``help()``, the aio twins and the docstring check read the forwards."""
    assert inspect.signature(Runtime.find_session) == inspect.signature(RuntimeReads.find_session)
    assert Runtime.settle.__doc__ == RuntimeLifecycle.settle.__doc__
    assert Runtime.settle.__qualname__ == "Runtime.settle"
    assert isinstance(vars(Runtime)["config"], property) and Runtime.config.__doc__ == RuntimeReads.config.__doc__
