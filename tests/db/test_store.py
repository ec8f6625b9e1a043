"""Store behaviour on every backend: SQLite in memory, SQLite WAL file, PostgreSQL.

The ``store`` fixture (tests/db/conftest.py) runs each test once per backend; PostgreSQL
runs are marked ``postgres``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time

from corvid_actors.db.session_context import resolve_tool_permissions
from corvid_actors.db.store import Store
from corvid_actors.errors import NotFoundError, StoreError
from corvid_actors.loop.prompts import PERSONA_HEADING, compose_persona_prompt

FROZEN = datetime(2030, 1, 2, 3, 4, 5)


# --- projects, agents, personas, bundles -------------------------------------------------


def test_project_round_trip(store: Store) -> None:
    project = store.create_project("Alpha", "/srv/alpha", env_vars={"TOKEN": "x"}, description="d")

    loaded = store.get_project(project.id)
    assert loaded is not None
    assert (loaded.name, loaded.working_dir, loaded.description) == ("Alpha", "/srv/alpha", "d")
    assert json.loads(loaded.env_vars) == {"TOKEN": "x"}
    assert store.get_project("no-such-id") is None


def test_agent_fields_round_trip(store: Store) -> None:
    project = store.create_project("P", "/p")
    agent = store.create_agent(
        "Coder", system_prompt="You code.", append_prompt="Be brief.", model="qwen3:8b",
        provider="ollama", permission_mode="plan", tool_permissions=["read_file", "corvid_send_message"],
        default_project=project.id, description="writes code",
    )

    loaded = store.get_agent(agent.id)
    assert loaded is not None
    assert (loaded.system_prompt, loaded.append_prompt, loaded.model, loaded.provider,
            loaded.permission_mode, loaded.description) == (
        "You code.", "Be brief.", "qwen3:8b", "ollama", "plan", "writes code")
    assert json.loads(loaded.tool_permissions) == ["read_file", "corvid_send_message"]
    assert loaded.default_project_id == project.id


def test_agent_without_tool_list_stores_null(store: Store) -> None:
    agent = store.create_agent("Plain")

    loaded = store.get_agent(agent.id)
    assert loaded.tool_permissions is None  # NULL = "the defaults" (seed invariant 4)
    assert (loaded.permission_mode, loaded.provider, loaded.model) == ("default", "", "")


def test_find_agent_by_id_or_case_insensitive_name(store: Store) -> None:
    agent = store.create_agent("CodeReviewer")

    assert store.find_agent(agent.id).id == agent.id
    assert store.find_agent("codereviewer").id == agent.id
    assert store.find_agent("CODEREVIEWER").id == agent.id
    assert store.find_agent("Code") is None


def test_list_agents_is_sorted_by_name(store: Store) -> None:
    for name in ("charlie", "alpha", "bravo"):
        store.create_agent(name)

    assert [a.name for a in store.list_agents()] == ["alpha", "bravo", "charlie"]


def test_duplicate_names_raise_store_error(store: Store) -> None:
    store.create_agent("Twin")
    with pytest.raises(StoreError, match="database error"):
        store.create_agent("Twin")
    # the failed transaction left the store usable
    assert [a.name for a in store.list_agents()] == ["Twin"]


def test_duplicate_persona_assignment_raises_store_error(store: Store) -> None:
    agent = store.create_agent("A")
    persona = store.create_persona("P")
    store.assign_persona(agent.id, persona.id)
    with pytest.raises(StoreError):
        store.assign_persona(agent.id, persona.id)


def test_transaction_rolls_back_every_write_on_error(store: Store) -> None:
    with pytest.raises(ValueError), store.transaction():
        store.create_project("Doomed", "/d")
        store.create_agent("Doomed agent")
        raise ValueError("abort")

    assert store.list_agents() == []
    assert store.m.Project.select().count() == 0


# --- sessions ------------------------------------------------------------------------------


def test_session_defaults(store: Store) -> None:
    session = store.create_session()

    row = store.get_session(session.id)
    assert (row.status, row.source, row.pid, row.total_cost_usd, row.total_turns,
            row.cumulative_turns, row.restart_pending, row.council_role, row.depth) == (
        "idle", "web", None, 0.0, 0, 0, False, None, 1)
    assert row.agent_id is None and row.project_id is None


def test_session_links_and_fields(store: Store) -> None:
    project = store.create_project("P", "/p")
    agent = store.create_agent("A")
    session = store.create_session(
        agent_id=agent.id, project_id=project.id, source="chat", name="chat with bob",
        initial_prompt="hello", participant="bob", channel="general", council_role="chairman",
        depth=2, session_id="fixed-id",
    )

    row = store.require_session("fixed-id")
    assert session.id == "fixed-id"
    assert (row.agent_id, row.project_id, row.source, row.name, row.initial_prompt,
            row.participant, row.channel, row.council_role, row.depth) == (
        agent.id, project.id, "chat", "chat with bob", "hello", "bob", "general", "chairman", 2)


def test_require_session_names_the_missing_id(store: Store) -> None:
    assert store.get_session("ghost") is None
    with pytest.raises(NotFoundError, match="'ghost'"):
        store.require_session("ghost")


def test_update_session_changes_fields_and_touches_updated_at(store: Store) -> None:
    with freeze_time(FROZEN):
        session = store.create_session()
    with freeze_time(FROZEN + timedelta(minutes=5)):
        changed = store.update_session(session.id, status="running", pid=800001,
                                       last_context_tokens=1234)

    row = store.get_session(session.id)
    assert changed == 1
    assert (row.status, row.pid, row.last_context_tokens) == ("running", 800001, 1234)
    assert row.created_at == FROZEN
    assert row.updated_at == FROZEN + timedelta(minutes=5)
    assert store.update_session("ghost", status="running") == 0


def test_timestamps_follow_frozen_time(store: Store) -> None:
    with freeze_time(FROZEN):
        project = store.create_project("P", "/p")
        agent = store.create_agent("A")
        session = store.create_session(agent_id=agent.id, project_id=project.id)
        store.append_message(session.id, "user", "hi")

    assert store.get_project(project.id).created_at == FROZEN
    assert store.get_agent(agent.id).created_at == FROZEN
    assert store.get_session(session.id).created_at == FROZEN
    message = store.m.SessionMessage.get(store.m.SessionMessage.session == session.id)
    assert message.timestamp == FROZEN


def test_a_store_given_a_clock_dates_every_row_by_it(store: Store) -> None:
    """A runtime's store dates rows by the runtime's clock (``now``), not by ``datetime.now``:
    a simulation's rows carry simulated times even where freezegun is not running."""
    at = [FROZEN]
    dated = Store(store.url, now=lambda: at[0].replace(tzinfo=UTC))  # the same backend
    try:
        session = dated.create_session()
        at[0] += timedelta(minutes=1)
        dated.append_message(session.id, "user", "hi")
        at[0] += timedelta(minutes=1)
        dated.update_session(session.id, status="running")
        updated = dated.get_session(session.id).updated_at
        at[0] += timedelta(minutes=1)
        dated.add_session_usage(session.id, cost_usd=0.5, turns=1)
        row = dated.get_session(session.id)
        message = dated.m.SessionMessage.get(dated.m.SessionMessage.session == session.id)
    finally:
        dated.close()
    assert row.created_at == FROZEN
    assert message.timestamp == FROZEN + timedelta(minutes=1)
    assert updated == FROZEN + timedelta(minutes=2)
    assert row.updated_at == FROZEN + timedelta(minutes=3)
    assert abs(datetime.now() - FROZEN) > timedelta(days=1)  # the wall clock says otherwise


def test_add_session_usage_accumulates(store: Store) -> None:
    session = store.create_session()
    store.add_session_usage(session.id, cost_usd=0.25, turns=1)
    store.add_session_usage(session.id, cost_usd=0.5, turns=2)

    row = store.get_session(session.id)
    assert row.total_cost_usd == pytest.approx(0.75)
    assert row.cumulative_turns == 3
    assert row.total_turns == 0  # the supervisor counts turns of the current process itself


def test_reset_stale_sessions_only_touches_running_and_loading(store: Store) -> None:
    ids = {}
    for status in ("idle", "loading", "running", "paused", "stopped", "error"):
        session = store.create_session(name=status)
        store.update_session(session.id, status=status, pid=800000 + len(ids))
        ids[status] = session.id

    reset = store.reset_stale_sessions()

    assert sorted(reset) == sorted([ids["running"], ids["loading"]])
    for status in ("running", "loading"):
        row = store.get_session(ids[status])
        assert (row.status, row.pid, row.restart_pending) == ("idle", None, True)
    for status in ("idle", "paused", "stopped", "error"):
        row = store.get_session(ids[status])
        assert (row.status, row.restart_pending) == (status, False)
        assert row.pid is not None
    assert store.reset_stale_sessions() == []


def test_take_restart_pending_returns_marks_once(store: Store) -> None:
    marked = store.create_session()
    store.update_session(marked.id, status="running")
    also_marked = store.create_session()
    store.update_session(also_marked.id, restart_pending=True)
    store.create_session()  # never marked
    store.reset_stale_sessions()

    assert sorted(store.take_restart_pending()) == sorted([marked.id, also_marked.id])
    assert store.take_restart_pending() == []
    assert store.get_session(marked.id).restart_pending is False


def test_list_sessions_filters_orders_and_limits(store: Store) -> None:
    ids = []
    for minute, status in enumerate(("idle", "running", "paused", "running")):
        with freeze_time(FROZEN + timedelta(minutes=minute)):
            ids.append(store.create_session(name=str(minute)).id)
            store.update_session(ids[-1], status=status)

    assert [s.id for s in store.list_sessions()] == list(reversed(ids))
    assert [s.id for s in store.list_sessions(statuses=["running"])] == [ids[3], ids[1]]
    assert [s.id for s in store.list_sessions(limit=2)] == [ids[3], ids[2]]


# --- messages ------------------------------------------------------------------------------


def test_recent_messages_oldest_first_with_limit(store: Store) -> None:
    session = store.create_session()
    other = store.create_session()
    ids = [store.append_message(session.id, "user" if i % 2 == 0 else "assistant", f"m{i}")
           for i in range(6)]
    store.append_message(other.id, "user", "elsewhere")

    assert ids == sorted(ids) and len(set(ids)) == 6
    assert store.recent_messages(session.id, 3) == [
        ("assistant", "m3"), ("user", "m4"), ("assistant", "m5")]
    assert len(store.recent_messages(session.id, 100)) == 6
    assert store.count_messages(session.id) == 6
    assert store.count_messages(other.id) == 1


def test_recent_messages_role_filter(store: Store) -> None:
    session = store.create_session()
    for role, text in [("system", "s1"), ("user", "u1"), ("tool", "t1"), ("assistant", "a1"),
                       ("system", "s2")]:
        store.append_message(session.id, role, text)

    # default: user and assistant only; a window of 2 is not crowded out by system rows
    assert store.recent_messages(session.id, 2) == [("user", "u1"), ("assistant", "a1")]
    assert store.recent_messages(session.id, 10, roles=("system",)) == [
        ("system", "s1"), ("system", "s2")]
    assert store.recent_messages(session.id, 10, roles=("tool", "user")) == [
        ("user", "u1"), ("tool", "t1")]


HISTORY_STRIPPING = [
    ("plain text", "plain text"),
    ("  keeps its whitespace\n", "  keeps its whitespace\n"),
    ("<conversation_history>\n[User]: old\n</conversation_history>\n\nnew question",
     "new question"),
    ("before <conversation_history>x</conversation_history> after", "before after"),
    # nested blocks go whole (a non-greedy regex would leave "tail </conversation_history>")
    ("<conversation_history>a <conversation_history>b</conversation_history> tail"
     "</conversation_history>\nnew", "new"),
    ("<CONVERSATION_HISTORY>upper</Conversation_History> kept", "kept"),
    # cut by a length cap: the unclosed block is dropped to the end
    ("question <conversation_history>[User]: trunc", "question"),
    ("<conversation_history>only history</conversation_history>", ""),
]


def test_history_blocks_are_stripped_at_insert(store: Store) -> None:
    session = store.create_session()
    for content, _ in HISTORY_STRIPPING:
        store.append_message(session.id, "user", content)

    stored = [content for _, content in store.recent_messages(session.id, 100)]
    assert stored == [expected for _, expected in HISTORY_STRIPPING]


# --- session context -----------------------------------------------------------------------


def test_session_context_composes_persona_and_skill_prompts(store: Store) -> None:
    project = store.create_project("P", "/p", env_vars={"API_URL": "http://x"})
    agent = store.create_agent("A")
    # assigned out of order: sort_order decides
    second = store.create_persona("Second", archetype="technical", traits=["precise", "kind"],
                                  background="Ex-sysadmin.")
    first = store.create_persona("First", archetype="custom", traits=["kind"],
                                 voice_guidelines="Short sentences.",
                                 example_messages=["Done. Next?"])
    store.assign_persona(agent.id, second.id, sort_order=2)
    store.assign_persona(agent.id, first.id, sort_order=1)
    a2 = store.create_skill_bundle("Agent 2", tools=["t2"], prompt_additions="AGENT-SKILL-2")
    a1 = store.create_skill_bundle("Agent 1", tools=["t1"], prompt_additions="AGENT-SKILL-1")
    silent = store.create_skill_bundle("Silent", tools=["t3"])
    p1 = store.create_skill_bundle("Project 1", tools=["p1"], prompt_additions="PROJECT-SKILL-1")
    store.assign_agent_skill(agent.id, a2.id, sort_order=2)
    store.assign_agent_skill(agent.id, a1.id, sort_order=1)
    store.assign_agent_skill(agent.id, silent.id, sort_order=3)
    store.assign_project_skill(project.id, p1.id)
    session = store.create_session(agent_id=agent.id, project_id=project.id)

    ctx = store.session_context(session.id)
    persona_prompt = compose_persona_prompt(ctx.personas)  # the store returns rows; the loop composes

    assert ctx.session.id == session.id and ctx.agent.id == agent.id
    assert ctx.project.id == project.id
    assert ctx.project_env == {"API_URL": "http://x"}
    # one merged persona section: first non-custom archetype, traits united in order
    assert persona_prompt.startswith(PERSONA_HEADING)
    assert persona_prompt.count(PERSONA_HEADING) == 1
    assert "Archetype: technical" in persona_prompt
    assert "Personality traits: kind, precise" in persona_prompt
    assert "Ex-sysadmin." in persona_prompt and "Short sentences." in persona_prompt
    assert '- "Done. Next?"' in persona_prompt
    # agent bundles by sort order, then project bundles; empty additions skipped
    assert ctx.skill_prompt == "AGENT-SKILL-1\n\nAGENT-SKILL-2\n\nPROJECT-SKILL-1"
    assert ctx.agent_bundle_tools == (("t1",), ("t2",), ("t3",))
    assert ctx.project_bundle_tools == (("p1",),)


def test_session_context_without_agent_or_project(store: Store) -> None:
    session = store.create_session()

    ctx = store.session_context(session.id)

    assert (ctx.agent, ctx.project, compose_persona_prompt(ctx.personas), ctx.skill_prompt) == (None, None, "", "")
    assert ctx.project_env == {}
    assert ctx.tool_permissions(defaults=["read_file"]) is None


def test_session_context_of_missing_session_raises_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.session_context("ghost")


DEFAULTS = ("read_file", "list_files")

# (agent explicit list, agent bundle tools, project bundle tools, resolved)
TOOL_CHAIN = [
    pytest.param(["run_command"], [["t1"]], [["p1"]], ("run_command", "t1"),
                 id="explicit+agent-bundles, project bundles ignored"),
    pytest.param(["run_command"], [], [["p1"]], ("run_command",),
                 id="explicit list alone ignores project bundles"),
    pytest.param(None, [["t1"]], [["p1"]], (*DEFAULTS, "t1", "p1"),
                 id="no list: defaults + agent bundles + project bundles"),
    pytest.param(None, [], [["p1"]], (*DEFAULTS, "p1"), id="no list: project bundles only"),
    pytest.param(None, [], [], None, id="nothing: None (all defaults)"),
    pytest.param(None, [[]], [[]], None, id="empty bundles: still None"),
    pytest.param([], [], [["p1"]], (), id="explicit empty list: no tools"),
    pytest.param(["a", "b"], [["b", "c"], ["c", "a", "d"]], [], ("a", "b", "c", "d"),
                 id="union keeps first-seen order, no duplicates"),
]


@pytest.mark.parametrize(("explicit", "agent_bundles", "project_bundles", "resolved"), TOOL_CHAIN)
def test_resolve_tool_permissions_chain(explicit, agent_bundles, project_bundles, resolved) -> None:
    assert resolve_tool_permissions(explicit, agent_bundles, project_bundles, DEFAULTS) == resolved


def test_session_context_resolves_tool_permissions(store: Store) -> None:
    # The whole table against one database: every case gets its own agent and project.
    for case, param in enumerate(TOOL_CHAIN):
        explicit, agent_bundles, project_bundles, resolved = param.values
        project = store.create_project(f"P{case}", "/p")
        agent = store.create_agent(f"A{case}", tool_permissions=explicit)
        for i, tools in enumerate(agent_bundles):
            bundle = store.create_skill_bundle(f"agent-{case}-{i}", tools=tools)
            store.assign_agent_skill(agent.id, bundle.id, sort_order=i)
        for i, tools in enumerate(project_bundles):
            bundle = store.create_skill_bundle(f"project-{case}-{i}", tools=tools)
            store.assign_project_skill(project.id, bundle.id, sort_order=i)
        session = store.create_session(agent_id=agent.id, project_id=project.id)

        ctx = store.session_context(session.id)

        assert ctx.agent_tool_base == (tuple(explicit) if explicit is not None else None), param.id
        assert ctx.tool_permissions(defaults=DEFAULTS) == resolved, param.id


# --- opening -------------------------------------------------------------------------------


def test_file_database_uses_wal(tmp_path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'nested' / 'dir' / 'corvid.db'}")
    try:
        assert store.db.execute_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.db.execute_sql("PRAGMA foreign_keys").fetchone()[0] == 1
        assert store.db.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 30000
    finally:
        store.close()
    assert (tmp_path / "nested" / "dir" / "corvid.db").exists()


def test_busy_timeout_is_configurable(tmp_path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'corvid.db'}", busy_timeout_ms=1234)
    try:
        assert store.db.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 1234
    finally:
        store.close()


def test_memory_databases_are_separate() -> None:
    one, two = Store(), Store("sqlite:///:memory:")
    try:
        one.create_agent("only-in-one")
        assert [a.name for a in one.list_agents()] == ["only-in-one"]
        assert two.list_agents() == []
    finally:
        one.close()
        two.close()


def test_close_is_idempotent() -> None:
    store = Store()
    store.close()
    store.close()
    assert store.db.is_closed()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://root@127.0.0.1/corvid", "unsupported database URL 'mysql://root@127.0.0.1/corvid'"),
        ("redis://127.0.0.1:6379/0", "use sqlite:///PATH or postgresql://"),
        ("", "unsupported database URL ''"),
        ("sqlite://", "SQLite URL needs a path"),
        ("sqlite:///", "SQLite URL needs a path"),
        ("sqlite:////dev/null/corvid.db", "cannot create the directory"),
    ],
)
def test_bad_urls_raise_store_error(url: str, message: str) -> None:
    with pytest.raises(StoreError) as info:
        Store(url)
    assert message in str(info.value)


def test_unreachable_postgres_raises_store_error_without_password() -> None:
    # port 1 on loopback: refused at once, no server needed
    with pytest.raises(StoreError) as info:
        Store("postgresql://corvid:s3cret-pw@127.0.0.1:1/corvid")
    text = str(info.value)
    assert text.startswith("cannot open database postgresql://corvid:***@127.0.0.1:1/corvid")
    assert "s3cret-pw" not in text


def test_ghost_rows_are_reset_and_single_messages_deleted(store) -> None:
    live = store.create_session(name="live")
    ghost = store.create_session(name="ghost")
    idle = store.create_session(name="idle")
    store.update_session(live.id, status="running", pid=800001)
    store.update_session(ghost.id, status="running", pid=800002)
    assert store.reset_ghost_sessions([live.id]) == [ghost.id]
    rows = {s.id: (s.status, s.pid, s.restart_pending) for s in (store.get_session(x.id) for x in (live, ghost, idle))}
    assert rows == {live.id: ("running", 800001, False), ghost.id: ("idle", None, True),
                    idle.id: ("idle", None, False)}
    keep = store.append_message(live.id, "user", "kept")
    gone = store.append_message(live.id, "user", "refused")
    assert store.delete_message(gone) == 1
    assert store.recent_messages(live.id, 5) == [("user", "kept")] and keep != gone
    assert store.last_message_role(live.id) == "user"
    assert store.delete_messages(live.id) == 1 and store.messages(live.id) == []
    assert store.last_message_role(live.id) is None
