"""peewee models: projects, agents, personas, skill bundles, sessions, messages, credits.

Models are built per database by :func:`build_models`, so two stores in one process
(two runtimes in a test, a daemon and its benchmark) never share a binding.
Timestamps are written from Python: a store's models date their rows by the runtime's clock
(``build_models(database, now=clock.now)``), so database times follow simulated time in a
simulation without going through freezegun's patched ``datetime``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from types import SimpleNamespace
from typing import Final

import peewee as pw

from corvid_actors.clock import wall_now

# in a module of their own, without peewee: the CLI's parser offers them as choices
from corvid_actors.db.statuses import SESSION_STATUSES, SessionStatus  # noqa: F401 - re-exported


def new_id() -> str:
    return str(uuid.uuid4())


def _now() -> datetime:
    # Naive UTC: portable across SQLite and PostgreSQL columns.
    return wall_now().replace(tzinfo=None)


def naive_stamps(now: Callable[[], datetime]) -> Callable[[], datetime]:
    """The stored form (naive UTC, as :func:`_now`) of the aware times ``now`` returns."""

    def stamp() -> datetime:
        return now().replace(tzinfo=None)
    return stamp




class DaemonState:
    """The values of ``daemons.state``: serving, handing its sessions over, declared dead."""

    LIVE: Final = "live"
    DRAINING: Final = "draining"
    GONE: Final = "gone"


def build_models(database: pw.Database, now: Callable[[], datetime] | None = None) -> SimpleNamespace:
    """Model classes bound to ``database``, their timestamps from ``now`` (aware UTC, a
    Clock's ``now``; default: the wall clock). Returns a namespace of them plus ``all``."""
    stamp = _now if now is None else naive_stamps(now)

    class Base(pw.Model):
        class Meta:
            pass

    Base._meta.database = database

    class SchemaVersion(Base):
        """One applied migration (:mod:`corvid_actors.db.migrations`). ``breaking``: code of
        the previous release cannot run on it; ``release``: the corvid-actors release that
        applied it (both NULL in rows older than the columns)."""

        version = pw.IntegerField(primary_key=True)
        applied_at = pw.DateTimeField(default=stamp)
        breaking = pw.BooleanField(null=True)
        release = pw.CharField(max_length=64, null=True)

        class Meta:
            table_name = "schema_version"

    class Project(Base):
        id = pw.CharField(primary_key=True, default=new_id, max_length=64)
        name = pw.CharField(unique=True, max_length=200)
        description = pw.TextField(default="")
        working_dir = pw.TextField()
        env_vars = pw.TextField(default="{}")  # JSON object
        created_at = pw.DateTimeField(default=stamp)
        updated_at = pw.DateTimeField(default=stamp)

        class Meta:
            table_name = "projects"

    class Persona(Base):
        id = pw.CharField(primary_key=True, default=new_id, max_length=64)
        name = pw.CharField(max_length=200)
        archetype = pw.CharField(default="custom", max_length=50)
        traits = pw.TextField(default="[]")  # JSON list
        background = pw.TextField(default="")
        voice_guidelines = pw.TextField(default="")
        example_messages = pw.TextField(default="[]")  # JSON list

        class Meta:
            table_name = "personas"

    class SkillBundle(Base):
        id = pw.CharField(primary_key=True, default=new_id, max_length=64)
        name = pw.CharField(unique=True, max_length=200)
        description = pw.TextField(default="")
        tools = pw.TextField(default="[]")  # JSON list of tool names
        prompt_additions = pw.TextField(default="")

        class Meta:
            table_name = "skill_bundles"

    class Agent(Base):
        id = pw.CharField(primary_key=True, default=new_id, max_length=64)
        name = pw.CharField(unique=True, max_length=200)
        description = pw.TextField(default="")
        system_prompt = pw.TextField(default="")
        append_prompt = pw.TextField(default="")
        model = pw.CharField(default="", max_length=200)
        provider = pw.CharField(default="", max_length=50)
        permission_mode = pw.CharField(default="default", max_length=20)
        # JSON list of tool names, or NULL for the defaults (seed invariant 4)
        tool_permissions = pw.TextField(null=True)
        default_project = pw.ForeignKeyField(Project, null=True, on_delete="SET NULL")
        # who may talk to the agent, how often, for how much (corvid_actors.policy.access);
        # NULL: the [access] config's value
        conversation_mode = pw.CharField(null=True, max_length=20)
        conversation_allowlist = pw.TextField(null=True)  # JSON list of participant ids
        conversation_rate_limit_window_s = pw.FloatField(null=True)
        conversation_rate_limit_max = pw.IntegerField(null=True)
        max_budget_usd = pw.FloatField(null=True)  # per session
        max_total_budget_usd = pw.FloatField(null=True)  # all the agent's sessions
        # "task" or "chat" (vocabulary.AGENT_KINDS); NULL: the [agents] default_kind
        kind = pw.CharField(null=True, max_length=20)
        # a message that arrives mid-turn: enqueue, interrupt or reject
        # (corvid_actors.core.double_texting); NULL: [agents] double_texting, else by kind
        double_texting = pw.CharField(null=True, max_length=20)
        # +1 in the statement of every write of the agent (or its personas and skills): a
        # cached build of its sessions is current while the revision is (wiring.BuildCache)
        revision = pw.IntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
        created_at = pw.DateTimeField(default=stamp)
        updated_at = pw.DateTimeField(default=stamp)

        class Meta:
            table_name = "agents"

    class AgentPersona(Base):
        agent = pw.ForeignKeyField(Agent, on_delete="CASCADE")
        persona = pw.ForeignKeyField(Persona, on_delete="CASCADE")
        sort_order = pw.IntegerField(default=0)

        class Meta:
            table_name = "agent_personas"
            indexes = ((("agent", "persona"), True),)

    class AgentSkill(Base):
        agent = pw.ForeignKeyField(Agent, on_delete="CASCADE")
        bundle = pw.ForeignKeyField(SkillBundle, on_delete="CASCADE")
        sort_order = pw.IntegerField(default=0)

        class Meta:
            table_name = "agent_skills"
            indexes = ((("agent", "bundle"), True),)

    class ProjectSkill(Base):
        project = pw.ForeignKeyField(Project, on_delete="CASCADE")
        bundle = pw.ForeignKeyField(SkillBundle, on_delete="CASCADE")
        sort_order = pw.IntegerField(default=0)

        class Meta:
            table_name = "project_skills"
            indexes = ((("project", "bundle"), True),)

    class Session(Base):
        id = pw.CharField(primary_key=True, default=new_id, max_length=64)
        project = pw.ForeignKeyField(Project, null=True, on_delete="SET NULL")
        agent = pw.ForeignKeyField(Agent, null=True, on_delete="SET NULL")
        name = pw.CharField(default="", max_length=500)
        status = pw.CharField(default="idle", max_length=20, index=True)
        source = pw.CharField(default="web", max_length=20)
        initial_prompt = pw.TextField(default="")
        pid = pw.IntegerField(null=True)
        total_cost_usd = pw.FloatField(default=0.0)
        # the session's turn count (the loop's, written at each delivered user turn and at
        # start): read back when the session starts again so its count carries on
        # (actors/supervisor/_start.py); cumulative_turns counts turns that answered
        total_turns = pw.IntegerField(default=0)
        cumulative_turns = pw.IntegerField(default=0)
        restart_pending = pw.BooleanField(default=False, index=True)
        participant = pw.CharField(default="", max_length=200)
        channel = pw.CharField(default="", max_length=200)
        council_role = pw.CharField(null=True, max_length=20)
        depth = pw.IntegerField(default=1)
        credits_consumed = pw.IntegerField(default=0)
        last_context_tokens = pw.IntegerField(null=True)
        conversation_summary = pw.TextField(default="")
        plan = pw.TextField(default="")  # JSON of the current plan (OpenAgent seed)
        #: user turns delivered and not yet answered by a result: > 0 means a restart finds
        #: the session mid-turn (only such a session calls the model on resume)
        open_turns = pw.IntegerField(default=0)
        created_at = pw.DateTimeField(default=stamp)
        updated_at = pw.DateTimeField(default=stamp)

        class Meta:
            table_name = "sessions"

    class SessionMessage(Base):
        id = pw.AutoField()
        session = pw.ForeignKeyField(Session, on_delete="CASCADE", index=True)
        role = pw.CharField(max_length=20)
        content = pw.TextField()
        cost_usd = pw.FloatField(default=0.0)
        timestamp = pw.DateTimeField(default=stamp)
        #: multimodal content as given (JSON list of text/image blocks); ``content`` then
        #: holds its text (images as placeholders). NULL for plain-text messages.
        content_blocks = pw.TextField(null=True)
        #: a user message that opened its turn in the same statement (``Runtime.send_message``
        #: to a running session): the database counts the turn open (db/turn_opening.py).
        #: NULL (false) for every other message.
        opens_turn = pw.BooleanField(null=True)
        #: an assistant reply that closed its turn in the same statement (the session's
        #: answer to a user message): the database takes the turn off ``open_turns``
        #: (db/turn_opening.py). NULL (false) for every other message.
        closes_turn = pw.BooleanField(null=True)

        class Meta:
            table_name = "session_messages"

    class CreditLedger(Base):
        participant = pw.CharField(primary_key=True, max_length=200)
        credits = pw.IntegerField(default=0)
        total_purchased = pw.IntegerField(default=0)
        total_consumed = pw.IntegerField(default=0)
        created_at = pw.DateTimeField(default=stamp)
        updated_at = pw.DateTimeField(default=stamp)

        class Meta:
            table_name = "credit_ledger"
            constraints = [pw.Check("credits >= 0")]

    class CreditTransaction(Base):
        id = pw.AutoField()
        participant = pw.CharField(max_length=200, index=True)
        type = pw.CharField(max_length=20)  # grant | purchase | deduction | refund
        amount = pw.IntegerField()
        balance_after = pw.IntegerField()
        reference = pw.CharField(default="", max_length=200)
        session_id = pw.CharField(null=True, max_length=64)
        created_at = pw.DateTimeField(default=stamp)

        class Meta:
            table_name = "credit_transactions"

    class McpServerConfig(Base):
        id = pw.CharField(primary_key=True, default=new_id, max_length=64)
        agent = pw.ForeignKeyField(Agent, null=True, on_delete="CASCADE")  # NULL = global
        name = pw.CharField(max_length=200)
        command = pw.TextField()
        args = pw.TextField(default="[]")
        env_vars = pw.TextField(default="{}")
        cwd = pw.TextField(default="")
        enabled = pw.BooleanField(default=True)

        class Meta:
            table_name = "mcp_server_configs"

    class WebhookReplay(Base):
        """A signed webhook request already accepted, kept until its signature's timestamp
        falls out of the tolerance window (so a replay is refused across restarts)."""

        key = pw.CharField(primary_key=True, max_length=100)
        expires_at = pw.DateTimeField(index=True)

        class Meta:
            table_name = "webhook_replays"

    class ApiToken(Base):
        """A bearer token of the HTTP API (issue 39): its name, its scope (``read`` or
        ``operate``) and the SHA-256 of the secret, never the secret itself."""

        name = pw.CharField(primary_key=True, max_length=200)
        scope = pw.CharField(max_length=20)
        token_hash = pw.CharField(max_length=64, unique=True)
        created_at = pw.DateTimeField(default=stamp)
        last_used_at = pw.DateTimeField(null=True)
        revoked_at = pw.DateTimeField(null=True)

        class Meta:
            table_name = "api_tokens"
    class JournalEntry(Base):
        """One thing the outside world said to a journaled session (issue 40): a model
        response, a tool result, an approval, a user message, an event — its ``data`` a
        zlib-compressed JSON object (see :mod:`corvid_actors.db.journal`)."""

        session_id = pw.CharField(max_length=64)
        #: when it happened: seconds since the epoch on the runtime's clock
        at = pw.DoubleField(index=True)
        kind = pw.CharField(max_length=16)
        data = pw.BlobField()

        class Meta:
            table_name = "journal_entries"
            indexes = ((("session_id", "id"), False),)

    class Daemon(Base):
        """A daemon sharing the database (issue 20): registered at start, its heartbeat
        renewed every ``[cluster] heartbeat_s``; see :mod:`corvid_actors.db.cluster`."""

        id = pw.CharField(primary_key=True, max_length=200)
        host = pw.CharField(default="", max_length=255)
        pid = pw.IntegerField(null=True)
        started_at = pw.DateTimeField(default=stamp)
        heartbeat_at = pw.DateTimeField(default=stamp)
        version = pw.CharField(default="", max_length=50)
        state = pw.CharField(default=DaemonState.LIVE, max_length=20)

        class Meta:
            table_name = "daemons"

    class SessionLease(Base):
        """Who runs a session, until when, and its fencing epoch (issue 20). Its own table,
        not columns of ``sessions``: every heartbeat rewrites the lease rows of a daemon,
        and the hot session row (status, usage, read at every start) stays out of that
        churn. The row outlives its owners so that ``epoch`` only ever grows; it carries
        the session's durable timers, taken over with the session."""

        session = pw.ForeignKeyField(Session, primary_key=True, on_delete="CASCADE", column_name="session_id")
        owner = pw.ForeignKeyField(Daemon, null=True, on_delete="SET NULL", column_name="owner_id")
        lease_expires_at = pw.DateTimeField(null=True)
        #: +1 at every claim; the writes of an incarnation carry it (``writer_epoch``)
        epoch = pw.BigIntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
        #: durable timers: crash-restart due time, outage auto-resume due time, inactivity
        #: deadline, idle-exit deadline (issue 36)
        restart_due_at = pw.DateTimeField(null=True)
        resume_due_at = pw.DateTimeField(null=True)
        inactivity_due_at = pw.DateTimeField(null=True)
        idle_due_at = pw.DateTimeField(null=True)
        #: released for a rebalance to this daemon: the others' sweeps wait for its expiry (issue 36)
        offered_to = pw.CharField(null=True, max_length=200)

        class Meta:
            table_name = "session_leases"

    class SessionOwnership(Base):
        """Where a session ran (issue 36): one row per lease held — the daemon, the epoch,
        from when until when, and why it came and went (:mod:`corvid_actors.db.ownership`).
        Written in the transaction that changes the lease; at most one open row (no
        ``ended_at``) per session, the current owner's. No foreign key to ``daemons``: the
        history outlives the daemons' rows."""

        id = pw.BigAutoField()
        session = pw.ForeignKeyField(Session, on_delete="CASCADE", column_name="session_id", index=False)
        daemon_id = pw.CharField(max_length=200)
        epoch = pw.BigIntegerField()
        started_at = pw.DateTimeField()
        ended_at = pw.DateTimeField(null=True)
        reason_in = pw.CharField(max_length=20)
        reason_out = pw.CharField(max_length=20, null=True)

        class Meta:
            table_name = "session_ownership"
            # a session's history, newest first (reads and the retention's prune)
            indexes = ((("session", "id"), False),)

    # The lease epoch a session incarnation's write carries (issue 20 fencing; NULL: the
    # write is not fenced, as with one daemon or SQLite). On ``sessions`` it only carries
    # an UPDATE's epoch to the fencing trigger (which clears it); on messages and credit
    # transactions it stays, saying which incarnation wrote the row.
    for fenced in (Session, SessionMessage, CreditTransaction):
        fenced._meta.add_field("writer_epoch", pw.BigIntegerField(null=True))

    class HeldMessage(Base):
        """A user message accepted (and acknowledged) for a session that is between owners
        — its daemon drains, its lease lapsed, its adoption is pending — or that another
        daemon owns (issue 36 item 2: the hand-off buffer, :mod:`corvid_actors.db.held`).
        The session's owner takes it into ``session_messages`` and delivers it, exactly
        once: the take moves the row under the lease's epoch, in one transaction."""

        id = pw.BigAutoField()
        session = pw.ForeignKeyField(Session, on_delete="CASCADE", column_name="session_id", index=True)
        content = pw.TextField()
        #: multimodal content as given (JSON list of blocks), as in ``session_messages``
        content_blocks = pw.TextField(null=True)
        #: the daemon that accepted it (for the operator: where it came in)
        held_by = pw.CharField(max_length=200)
        created_at = pw.DateTimeField(default=stamp)

        class Meta:
            table_name = "held_messages"

    class ClusterCommand(Base):
        """A command forwarded to another daemon (issue 20, :mod:`corvid_actors.db.pg_bus`).

        ``state`` goes pending → taken (by the target, exactly once) → done | failed; a
        caller that gave up deletes a pending row (it never runs) or marks a taken one
        abandoned (the target deletes it when it finishes). The finished row is deleted
        by the caller that reads its result."""

        id = pw.CharField(primary_key=True, default=new_id, max_length=64)
        origin = pw.CharField(max_length=200)  # the daemon that forwarded it (reply channel)
        target = pw.CharField(max_length=200)
        payload = pw.TextField()  # JSON object
        state = pw.CharField(default="pending", max_length=20)
        result = pw.TextField(null=True)  # JSON (an error message when failed)
        created_at = pw.DateTimeField(default=stamp, index=True)  # the purge's range (pg_bus_purge)

        class Meta:
            table_name = "cluster_commands"
            # the sweep at (re)connect: "my pending commands"
            indexes = ((("target", "state"), False),)

    class ClusterEvent(Base):
        """An event too large for one NOTIFY payload: the NOTIFY carries this row's id
        (issue 20, :mod:`corvid_actors.db.pg_bus`). Kept for a short retention, then
        deleted by a later publisher."""

        id = pw.BigAutoField()
        origin = pw.CharField(max_length=200)
        body = pw.TextField()  # the event, JSON
        created_at = pw.DateTimeField(default=stamp, index=True)

        class Meta:
            table_name = "cluster_events"

    models = [
        SchemaVersion,
        Project,
        Persona,
        SkillBundle,
        Agent,
        AgentPersona,
        AgentSkill,
        ProjectSkill,
        Session,
        SessionMessage,
        CreditLedger,
        CreditTransaction,
        McpServerConfig,
        WebhookReplay,
        JournalEntry,
        Daemon,
        SessionLease,
        SessionOwnership,
        HeldMessage,
        ClusterCommand,
        ClusterEvent,
        ApiToken,
    ]
    return SimpleNamespace(**{m.__name__: m for m in models}, all=models)
