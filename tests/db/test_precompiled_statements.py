"""The store's precompiled statements (update_session, the session-start reads) write and
read exactly what peewee's generated queries do, on every backend."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from corvid_actors.db.store import Store
from corvid_actors.errors import StoreError
from corvid_actors.loop.prompts import compose_persona_prompt

_VALUES = {
    "status": ["running", "idle", "stopped", "paused", "error"],
    "pid": [None, 800001, 700002],
    "restart_pending": [True, False],
    "total_turns": [0, 3, 17],
    "open_turns": [0, 1, 2],
    "conversation_summary": ["", "a summary with 'quotes' and %s and ?"],
    "plan": ["", '[{"id": 1}]'],
    "last_context_tokens": [0, 12345],
    "name": ["x", "ünïcode"],
}


def _row(store: Store, sid: str) -> dict:
    row = store.get_session(sid)
    return {name: getattr(row, name) for name in (*_VALUES, "agent_id", "project_id", "updated_at")}


def test_update_session_matches_peewee_for_random_column_sets(store: Store) -> None:
    rnd = random.Random(7)
    agent = store.create_agent("a")
    fast = store.create_session(source="web").id
    slow = store.create_session(source="web").id
    S = store.m.Session
    for _ in range(60):
        names = rnd.sample(sorted(_VALUES), rnd.randint(1, 5))
        fields = {name: rnd.choice(_VALUES[name]) for name in names}
        if rnd.random() < 0.2:
            fields["agent_id" if rnd.random() < 0.5 else "agent"] = rnd.choice([agent.id, None])
        stamp = datetime(2026, 1, 2, 3, 4, rnd.randrange(60), tzinfo=UTC).replace(tzinfo=None)
        assert store.update_session(fast, **fields, updated_at=stamp) == 1
        with store.transaction():
            S.update(**fields, updated_at=stamp).where(S.id == slow).execute()
        assert _row(store, fast) == _row(store, slow), fields
    assert store.update_session("no-such-session", status="idle") == 0


def test_update_session_with_expressions_still_works(store: Store) -> None:
    sid = store.create_session(source="web").id
    S = store.m.Session
    store.update_session(sid, open_turns=2)
    store.update_session(sid, open_turns=S.open_turns + 1, status="running")
    row = store.get_session(sid)
    assert (row.open_turns, row.status) == (3, "running")


def test_open_turn_writes_what_the_peewee_update_wrote(store: Store) -> None:
    """open_turn's hand-written UPDATE: one more open turn, the turn count, updated_at and,
    once fenced, the writer epoch — the row the generated statement left."""
    S = store.m.Session
    fast = store.create_session(source="web").id
    slow = store.create_session(source="web").id
    for total in (1, 2, 5):
        store.open_turn(fast, total_turns=total)
        with store.transaction():
            S.update(open_turns=S.open_turns + 1, total_turns=total,
                     updated_at=S.updated_at.default()).where(S.id == slow).execute()
        a, b = store.get_session(fast), store.get_session(slow)
        assert (a.open_turns, a.total_turns, a.writer_epoch) == (b.open_turns, b.total_turns, b.writer_epoch)
    store.fence(fast, 7)  # fenced: the statement carries the epoch (PostgreSQL's trigger checks it)
    store.open_turn(fast, total_turns=6)
    with store.transaction():
        S.update(open_turns=S.open_turns + 1, total_turns=6, updated_at=S.updated_at.default(),
                 writer_epoch=7).where(S.id == slow).execute()
    a, b = store.get_session(fast), store.get_session(slow)
    assert (a.open_turns, a.total_turns, a.writer_epoch) == (b.open_turns, b.total_turns, b.writer_epoch)
    assert (a.open_turns, a.total_turns) == (4, 6)
    store.open_turn("no-such-session", total_turns=1)  # no row: nothing written, no error


def test_session_start_reads_match_the_rows(store: Store, tmp_path) -> None:
    project = store.create_project("p", tmp_path, env_vars={"K": "v"})
    agent = store.create_agent("a", tool_permissions=["read_file"])
    bundle_a = store.create_skill_bundle("ba", tools=["grep"], prompt_additions="agent skill")
    bundle_p = store.create_skill_bundle("bp", tools=["bash"], prompt_additions="project skill")
    persona = store.create_persona("Ann", traits=["calm"], background="bg")
    store.assign_persona(agent.id, persona.id)
    store.assign_agent_skill(agent.id, bundle_a.id)
    store.assign_project_skill(project.id, bundle_p.id)
    sid = store.create_session(agent_id=agent.id, project_id=project.id).id
    ctx = store.session_context(sid)
    assert (ctx.agent.id, ctx.agent.name, ctx.project.id, ctx.project_env) == (agent.id, "a", project.id, {"K": "v"})
    assert compose_persona_prompt(ctx.personas) == "## Persona\nPersonality traits: calm\nBackground: bg"
    assert ctx.skill_prompt == "agent skill\n\nproject skill"
    assert ctx.agent_bundle_tools == (("grep",),) and ctx.project_bundle_tools == (("bash",),)
    assert store.get_agent("nope") is None and store.get_project("nope") is None
    for role, text in [("user", "u1"), ("assistant", "a1"), ("system", "s1"), ("user", "u2")]:
        store.append_message(sid, role, text)
    assert store.recent_messages(sid, 2) == [("assistant", "a1"), ("user", "u2")]
    assert store.recent_messages(sid, 10, roles=("system",)) == [("system", "s1")]
    assert store.recent_messages(sid, 10, roles=("system", "user", "assistant")) == [
        ("user", "u1"), ("assistant", "a1"), ("system", "s1"), ("user", "u2")]
    assert store.last_message_role(sid) == "user"
    assert store.last_message_role(sid, roles=("system", "assistant")) == "system"
    assert store.last_message_role("nope") is None


def test_rows_read_with_the_cached_column_mapping_equal_peewees_raw_rows(store: Store, tmp_path) -> None:
    project = store.create_project("p", tmp_path, env_vars={"K": "v"}, description="d")
    agent = store.create_agent("a", tool_permissions=["read_file"], permission_mode="full-auto")
    persona = store.create_persona("Ann", traits=["calm"])
    store.assign_persona(agent.id, persona.id)
    sids = [store.create_session(agent_id=agent.id, project_id=project.id, name=f"s{i}", participant="alice").id
            for i in range(3)]
    store.update_session(sids[0], status="running", pid=800001, restart_pending=True, plan='[{"id": 1}]')
    m = store.m
    for model, sql, params in [
        (m.Session, 'SELECT * FROM "sessions" ORDER BY "id"', ()),
        (m.Session, store._sql("s", lambda: m.Session.select().where(m.Session.id == "")), (sids[0],)),
        (m.Agent, 'SELECT * FROM "agents"', ()),
        (m.Project, 'SELECT * FROM "projects"', ()),
        (m.Persona, 'SELECT * FROM "personas"', ()),
    ]:
        for _ in range(2):  # the second read uses the cached mapping
            with store.lock:
                fast = store._rows(model, sql, *params)
            slow = list(model.raw(sql, *params))
            assert [f.__data__ for f in fast] == [s.__data__ for s in slow] and fast
            assert all(not f._dirty for f in fast)
    row = store.get_session(sids[0])
    assert (row.status, row.pid, row.restart_pending, row.agent_id, row.agent.name) == (
        "running", 800001, True, agent.id, "a")
    assert store.get_session("no-such-session") is None


def test_create_session_writes_the_row_session_create_writes(store: Store, tmp_path) -> None:
    project = store.create_project("p", tmp_path)
    agent = store.create_agent("a")
    S = store.m.Session
    rnd = random.Random(11)
    for i in range(20):
        kwargs = {"agent": rnd.choice([agent.id, None]), "project": rnd.choice([project.id, None]),
                  "source": rnd.choice(["web", "chat", "agent"]), "name": rnd.choice(["", "ünïcode 'q' %s ?"]),
                  "initial_prompt": rnd.choice(["", "hi"]), "participant": rnd.choice(["", "alice"]),
                  "channel": rnd.choice(["", "c"]), "council_role": rnd.choice([None, "lead"]),
                  "depth": rnd.randint(1, 3)}
        fast = store.create_session(session_id=f"fast-{i}", agent_id=kwargs["agent"], project_id=kwargs["project"],
                                    **{k: v for k, v in kwargs.items() if k not in ("agent", "project")})
        with store.transaction():
            slow = S.create(id=f"slow-{i}", **kwargs)
        assert not fast.is_dirty() and not slow.is_dirty()
        written = {f.name: getattr(store.get_session(fast.id), f.name) for f in S._meta.sorted_fields}
        expected = {f.name: getattr(store.get_session(slow.id), f.name) for f in S._meta.sorted_fields}
        for name in ("id", "created_at", "updated_at"):
            written.pop(name), expected.pop(name)
        assert written == expected
        # the returned row holds what Session.create's holds (what callers read from it)
        returned = {f.name: getattr(fast, f.name) for f in S._meta.sorted_fields}
        created = {f.name: getattr(slow, f.name) for f in S._meta.sorted_fields}
        for name in ("id", "created_at", "updated_at"):
            returned.pop(name), created.pop(name)
        assert returned == created
    assert store.create_session().id  # a generated id


def test_recent_messages_of_gives_what_each_recent_messages_read_gives(store: Store) -> None:
    rnd = random.Random(5)
    sid = store.create_session(source="web").id
    other = store.create_session(source="web").id
    for i in range(60):
        store.append_message(rnd.choice([sid, other]), rnd.choice(["user", "assistant", "system", "tool"]), f"m{i}")
    reads = [(("system",), 50), (("user", "assistant"), 20), (("user",), 1), (("tool", "system", "user"), 7),
             (("assistant",), 0), (("nobody",), 5)]
    for session in (sid, other, "no-such-session"):
        assert store.recent_messages_of(session, reads) == [
            store.recent_messages(session, limit, roles=roles) for roles, limit in reads]
    assert store.recent_messages_of(sid, []) == []


def test_single_statement_writes_commit_join_a_transaction_and_fail_as_transactions_do(store: Store, tmp_path) -> None:
    sid = store.create_session(source="web").id
    assert store.update_session(sid, status="running", pid=800001) == 1
    if store.is_sqlite and store.url != "sqlite:///:memory:":
        other = Store(store.url)  # committed: another connection sees it at once
        try:
            assert (other.get_session(sid).status, other.get_session(sid).pid) == ("running", 800001)
        finally:
            other.close()
    # inside a transaction the statement is part of it: undone with it
    with pytest.raises(RuntimeError), store.transaction():
        store.update_session(sid, status="stopped")
        store.add_session_usage(sid, cost_usd=1.5, turns=1)
        raise RuntimeError("roll back")
    row = store.get_session(sid)
    assert (row.status, row.total_cost_usd, row.cumulative_turns) == ("running", 0.0, 0)
    store.add_session_usage(sid, cost_usd=1.5, turns=1)
    assert store.get_session(sid).cumulative_turns == 1
    # a constraint violation is a StoreError, as from a transaction
    with pytest.raises(StoreError):
        store.update_session(sid, agent="no-such-agent")
    with pytest.raises(StoreError):
        store.create_session(session_id=sid)


def test_a_row_read_is_the_object_peewee_makes(store: Store) -> None:
    # Store._rows makes a plain row's object from its values (no per-column assignment):
    # the same fields, nothing dirty, no cached relation, and it saves and reloads as
    # peewee's own object does
    agent = store.create_agent("a")
    sid = store.create_session(source="web", agent_id=agent.id).id
    store.update_session(sid, status="running", pid=800001, plan='[{"id": 1}]')
    S = store.m.Session
    fast = store.get_session(sid)
    slow = S.get_by_id(sid)
    assert fast.__data__ == slow.__data__ and isinstance(fast, S)
    assert vars(fast).keys() == vars(slow).keys()  # a peewee that sets more in __init__ shows here
    assert fast._dirty == set() and fast.__rel__ == {}
    assert (fast.agent_id, fast.agent.name) == (agent.id, "a")  # the relation resolves on demand
    fast.name = "renamed"
    assert fast._dirty == {"name"}
    fast.save()
    assert store.get_session(sid).name == "renamed"


def test_a_row_with_a_column_the_model_does_not_know_is_read_the_peewee_way(store: Store) -> None:
    # an extra column (a newer release's, or an alias) is not one of the model's fields:
    # peewee's constructor sets it as a plain attribute, and so does the read
    sid = store.create_session(source="web").id
    S = store.m.Session
    with store.lock:
        row = store._rows(S, f'SELECT *, 42 AS "future_column" FROM "sessions" WHERE "id" = {store.db.param}', sid)[0]
    assert row.future_column == 42 and "future_column" not in row.__data__
    assert row.id == sid and row._dirty == set()
