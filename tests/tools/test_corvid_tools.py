"""Which corvid_* tools a session gets: the process-manager seed's permission chain (agent base
list → agent skill bundles → project bundles only without an explicit list), the restricted
policy of agent-sourced sessions, and loops without tools — decided by the real SessionBuilder
over a real store."""

from __future__ import annotations

import pytest

from corvid_actors.config import Config
from corvid_actors.testing import arrange, sim_runtime
from corvid_actors.tools.corvid_tools import CORVID_TOOL_NAMES
from corvid_actors.tools.mcp_client import SessionTools
from corvid_actors.wiring.builder import default_tool_registry

#: the runtime's default registry (the coding tools, and whatever else it offers every session)
CODING = set(default_tool_registry().names())
CORVID = set(CORVID_TOOL_NAMES)


@pytest.fixture
def make_rt(sim_clock, scripted, tmp_path):
    made = []

    def make(config: Config | None = None, **kwargs):
        kwargs.setdefault("loop_for_provider", {"scripted": "direct"})
        rt = sim_runtime(sim_clock, scripted, config=config, workspace_dir=tmp_path / "ws", **kwargs)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.shutdown()


@pytest.fixture
def rt(make_rt):
    return make_rt()


def tools_of(rt, *, source="web", project=None, council_role=None, **agent_fields) -> set[str]:
    agent = rt.create_agent(f"agent-{len(rt.internals.store.list_agents())}", **agent_fields)
    session = rt.create_session(agent_id=agent.id, source=source, council_role=council_role,
                                project_id=project.id if project is not None else None)
    return set(rt.internals.builder.build(rt.internals.store.session_context(session.id)).tools.names())


def bundle(rt, name, tools):
    return arrange(rt).skill_bundle(name, tools=tools)


def test_without_an_explicit_list_a_session_gets_every_corvid_tool(rt):
    assert tools_of(rt) == CODING | CORVID


def test_an_explicit_list_keeps_only_the_named_tools(rt):
    assert tools_of(rt, tool_permissions=["read_file", "corvid_list_agents"]) == {"read_file", "corvid_list_agents"}


def test_agent_bundles_add_to_the_explicit_list(rt):
    agent = rt.create_agent("bundled", tool_permissions=[])
    rt.internals.store.assign_agent_skill(agent.id, bundle(rt, "messaging", ["corvid_send_message"]).id)
    session = rt.create_session(agent_id=agent.id)
    built = rt.internals.builder.build(rt.internals.store.session_context(session.id))
    assert set(built.tools.names()) == {"corvid_send_message"}


def test_project_bundles_count_only_when_the_agent_has_no_explicit_list(rt, tmp_path):
    project = rt.create_project("p", tmp_path / "p")
    rt.internals.store.assign_project_skill(project.id, bundle(rt, "reading", ["read_file", "custom_x"]).id)
    assert tools_of(rt, project=project, tool_permissions=["list_files"]) == {"list_files"}
    # With no explicit list: the default core tools plus the bundle's (a bundle naming a
    # tool nobody serves adds nothing)
    assert tools_of(rt, project=project) == CORVID | {"read_file"}


def test_an_agent_bundle_without_an_explicit_list_gives_the_core_tools_and_the_bundles(rt):
    # issue 34 item 8, seed 001 invariant 4, reference §9-§10: the core tools (the runtime's
    # own, not the coding tools) ∪ the bundle's tools, and only those
    agent = rt.internals.store.create_agent("reader")
    rt.internals.store.assign_agent_skill(agent.id, bundle(rt, "reading", ["read_file", "search_files"]).id)
    session = rt.create_session(agent_id=agent.id)
    built = rt.internals.builder.build(rt.internals.store.session_context(session.id))
    assert set(built.tools.names()) == CORVID | {"read_file", "search_files"}
    assert "write_file" not in built.tools.names() and "run_command" not in built.tools.names()


def test_agent_sourced_sessions_lose_the_messaging_tools(rt):
    assert tools_of(rt, source="agent") == CODING | CORVID - {"corvid_send_message", "corvid_list_agents"}


def test_the_restricted_policy_can_be_switched_off(make_rt):
    rt = make_rt(Config().replace(corvid_tools={"restrict_agent_sessions": False}))
    assert tools_of(rt, source="agent") == CODING | CORVID


def test_council_deliberation_roles_and_tool_less_loops_get_no_tools(make_rt, rt):
    assert tools_of(rt, council_role="member") == set()
    plain = make_rt(loop_for_provider=None)  # the scripted provider's default: the conversation loop
    assert tools_of(plain) == set()


def test_runtime_tools_can_be_left_out(make_rt):
    assert tools_of(make_rt(runtime_tools=False)) == CODING


def test_a_hosts_extra_tools_hook_is_kept_next_to_the_runtime_tools(make_rt):
    from corvid_actors.core.vocabulary import ToolKind, ToolResult, ToolSpec
    from corvid_actors.tools.base import Tool, ToolRegistry

    extra = Tool(ToolSpec("host_tool", "a host's own tool"), ToolKind.READ, lambda a, c: ToolResult("ok"))
    rt = make_rt(extra_tools=lambda ctx: ToolRegistry([extra]))
    assert tools_of(rt) == CODING | CORVID | {"host_tool"}


def test_session_tools_merge_closers_and_notices():
    closed = []
    a = SessionTools(closers=[lambda: closed.append("a")], notices=["n1"])
    a.merge(SessionTools(closers=[lambda: closed.append("b")], notices=["n2"]))
    for close in a.closers:
        close()
    assert (closed, a.notices) == (["a", "b"], ["n1", "n2"])
