"""The statements of :class:`~corvid_actors.db.cluster.ClusterStore`, per database.

PostgreSQL gets the statements the multi-daemon mode depends on: the heartbeat is ONE
statement (a CTE renewing the daemon's row and every lease it owns) and a claim locks its
candidates ``FOR UPDATE SKIP LOCKED``, so claiming daemons never wait for each other nor
for a writer holding a lease. SQLite (one daemon, every transaction ``BEGIN IMMEDIATE``)
gets plain equivalents: several statements inside the store's transaction.

Statements are written with ``%s`` placeholders; :func:`statements` turns them into the
database's own. Times are naive UTC, as every column of the store.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from corvid_actors.db.models import DaemonState

#: a lease another daemon may take: unowned (released, or ended), owned by the claimer
#: (a new incarnation of its own session), or expired. Parameters: claimer, now.
CLAIMABLE = "(owner_id IS NULL OR owner_id = %s OR lease_expires_at <= %s)"

#: a lease left by its owner: released (owner gone, lease kept) or expired, and not the
#: sweeper's own (its heartbeat renews those). A lease released for a rebalance is offered
#: to one daemon (``offered_to``, issue 36): the others take it only once it has expired
#: (the one offered it did not). Parameters: sweeper, now, sweeper, now.
EXPIRED = ("(lease_expires_at IS NOT NULL AND ((owner_id IS NULL AND (offered_to IS NULL OR offered_to = %s "
           "OR lease_expires_at <= %s)) OR (owner_id <> %s AND lease_expires_at <= %s)))")

_LEASE_COLUMNS = ("session_id, owner_id, epoch, lease_expires_at, restart_due_at, resume_due_at, "
                  "inactivity_due_at, idle_due_at")


@dataclass(frozen=True)
class Statements:
    """One database's SQL for the cluster operations (see the module docstring)."""

    #: conditions on a lease row: CLAIMABLE and EXPIRED (see there)
    claimable: str
    expired: str
    #: a held lease (an expiry set), as its partial index states it (migration 11): the
    #: scope of a sweep, which must not read the ended sessions' rows
    held: str
    #: (daemon) -> state, or no row
    daemon_state: str
    #: upsert the daemon's row as live: (id, host, pid, now, now, version)
    register: str
    #: (now, daemon): leases of the daemon that are still running; to expire at registration
    leases_of: str
    #: (now, now, daemon): the leases of an earlier life of the daemon lose their owner and
    #: expire now at the latest, so any daemon's sweep (its own included) takes them
    release_leases_of: str
    #: PostgreSQL: (now, daemon, expires) -> (daemons renewed, leases renewed), one statement;
    #: SQLite: the daemon's row, then its leases (two statements, one transaction)
    heartbeat: str
    heartbeat_leases: str
    #: (cutoff, spared) -> ids of daemons other than ``spared`` whose heartbeat is older: declared gone
    dead_daemons: str
    mark_gone: str
    #: (cutoff) -> live daemon ids
    live_daemons: str
    #: create the missing lease rows (epoch 0) of existing sessions: {candidates} filled in
    ensure_leases: str
    #: candidates subquery for a list of ids: one parameter
    ids_param: str
    #: (scope args..., claimable args..., me, expires) -> (session_id, epoch, previous owner,
    #: previous expiry); {scope} is a condition
    claim: str
    #: PostgreSQL: claim is one statement; SQLite: select (with the previous owner and
    #: expiry), then update the selected
    claim_update: str
    claim_read: str
    #: (me, now, me, now, me) -> expired leases, leases of me
    count_expired: str
    #: (offered to, daemon, ids) release; (daemon, ids) finish
    release: str
    release_all: str
    finish: str
    #: PostgreSQL: (ids, epochs, deadlines, idle deadlines, daemon): the inactivity and
    #: idle-exit deadlines of several leases in one statement, each guarded by owner and
    #: epoch; SQLite: (deadline, idle deadline, id, epoch, daemon), one row per statement
    inactivity_deadlines: str
    #: (ids param) -> lease rows
    leases: str
    #: (daemon) -> ids
    owned_by: str
    #: (cutoff, cutoff?, max) -> least-loaded live daemon
    place: str
    #: (cutoff) -> (live daemon, leases it holds or is offered)
    load: str


_PG = Statements(
    claimable=CLAIMABLE,
    expired=EXPIRED,
    held="held",
    daemon_state="SELECT state FROM daemons WHERE id = %s",
    register=(
        "INSERT INTO daemons (id, host, pid, started_at, heartbeat_at, version, state) "
        f"VALUES (%s, %s, %s, %s, %s, %s, '{DaemonState.LIVE}') ON CONFLICT (id) DO UPDATE SET "
        "host = excluded.host, pid = excluded.pid, started_at = excluded.started_at, "
        "heartbeat_at = excluded.heartbeat_at, version = excluded.version, state = excluded.state"),
    leases_of="SELECT session_id FROM session_leases WHERE lease_expires_at > %s AND owner_id = %s",
    release_leases_of=("UPDATE session_leases SET owner_id = NULL, lease_expires_at = "
                       "CASE WHEN lease_expires_at > %s THEN %s ELSE lease_expires_at END WHERE owner_id = %s"),
    heartbeat=(
        "WITH beat AS (UPDATE daemons SET heartbeat_at = %s "
        f"WHERE id = %s AND state <> '{DaemonState.GONE}' RETURNING id), "
        "renewed AS (UPDATE session_leases SET lease_expires_at = %s "
        "WHERE owner_id IN (SELECT id FROM beat) RETURNING 1) "
        "SELECT (SELECT count(*) FROM beat), (SELECT count(*) FROM renewed)"),
    heartbeat_leases="",
    dead_daemons="",
    mark_gone=(f"UPDATE daemons SET state = '{DaemonState.GONE}' "
               f"WHERE state <> '{DaemonState.GONE}' AND heartbeat_at < %s AND id <> %s RETURNING id"),
    live_daemons=(f"SELECT id FROM daemons WHERE state = '{DaemonState.LIVE}' AND heartbeat_at >= %s "
                  "ORDER BY id"),
    ensure_leases=("INSERT INTO session_leases (session_id, epoch) SELECT id, 0 FROM sessions "
                   "WHERE id IN ({candidates}) ORDER BY id ON CONFLICT (session_id) DO NOTHING"),
    ids_param="SELECT unnest(%s::text[])",
    claim=(
        "WITH chosen AS (SELECT session_id, owner_id, lease_expires_at FROM session_leases "
        "WHERE {scope} AND {claimable} ORDER BY {order} {limit} FOR UPDATE SKIP LOCKED) "
        "UPDATE session_leases AS l SET owner_id = %s, epoch = l.epoch + 1, lease_expires_at = %s, offered_to = NULL "
        "FROM chosen WHERE l.session_id = chosen.session_id "
        "RETURNING l.session_id, l.epoch, chosen.owner_id, chosen.lease_expires_at"),
    claim_update="",
    claim_read="",
    count_expired=(f"SELECT (SELECT count(*) FROM session_leases WHERE held AND {EXPIRED}), "
                   "(SELECT count(*) FROM session_leases WHERE owner_id = %s)"),
    release=("UPDATE session_leases SET owner_id = NULL, offered_to = %s "
             "WHERE owner_id = %s AND session_id IN ({candidates})"),
    release_all="UPDATE session_leases SET owner_id = NULL, offered_to = %s WHERE owner_id = %s",
    finish=("UPDATE session_leases SET owner_id = NULL, offered_to = NULL, lease_expires_at = NULL, restart_due_at = NULL, "
            "resume_due_at = NULL, inactivity_due_at = NULL, idle_due_at = NULL "
            "WHERE owner_id = %s AND session_id IN ({candidates})"),
    inactivity_deadlines=(
        "UPDATE session_leases AS l SET inactivity_due_at = d.due, idle_due_at = d.idle "
        "FROM unnest(%s::text[], %s::bigint[], %s::timestamp[], %s::timestamp[]) AS d(session_id, epoch, due, idle) "
        "WHERE l.session_id = d.session_id AND l.epoch = d.epoch AND l.owner_id = %s"),
    leases=f"SELECT {_LEASE_COLUMNS} FROM session_leases WHERE session_id IN ({{candidates}}) ORDER BY session_id",
    owned_by="SELECT session_id FROM session_leases WHERE owner_id = %s ORDER BY session_id",
    place=(
        "SELECT d.id FROM daemons AS d LEFT JOIN session_leases AS l ON l.owner_id = d.id "
        f"WHERE d.state = '{DaemonState.LIVE}' AND d.heartbeat_at >= %s GROUP BY d.id "
        "HAVING count(l.session_id) < %s ORDER BY count(l.session_id), d.id LIMIT 1"),
    load=(
        "SELECT d.id, (SELECT count(*) FROM session_leases AS l WHERE l.owner_id = d.id) + "
        "(SELECT count(*) FROM session_leases AS l WHERE l.owner_id IS NULL AND l.offered_to = d.id "
        "AND l.lease_expires_at IS NOT NULL) "
        f"FROM daemons AS d WHERE d.state = '{DaemonState.LIVE}' AND d.heartbeat_at >= %s ORDER BY d.id"),
)

_SQLITE = Statements(
    **{f.name: getattr(_PG, f.name) for f in fields(Statements)
       if f.name not in ("heartbeat", "heartbeat_leases", "dead_daemons", "mark_gone", "ids_param",
                         "claim", "claim_update", "claim_read", "count_expired", "inactivity_deadlines",
                         "held")},
    held="lease_expires_at IS NOT NULL",
    heartbeat=f"UPDATE daemons SET heartbeat_at = %s WHERE id = %s AND state <> '{DaemonState.GONE}'",
    heartbeat_leases="UPDATE session_leases SET lease_expires_at = %s WHERE owner_id = %s",
    dead_daemons=f"SELECT id FROM daemons WHERE state <> '{DaemonState.GONE}' AND heartbeat_at < %s AND id <> %s",
    mark_gone=(f"UPDATE daemons SET state = '{DaemonState.GONE}' "
               f"WHERE state <> '{DaemonState.GONE}' AND heartbeat_at < %s AND id <> %s"),
    ids_param="SELECT value FROM json_each(%s)",
    claim=("SELECT session_id, owner_id, lease_expires_at FROM session_leases WHERE {scope} AND {claimable} "
           "ORDER BY {order} {limit}"),
    claim_update=("UPDATE session_leases SET owner_id = %s, epoch = epoch + 1, lease_expires_at = %s, offered_to = NULL "
                  "WHERE session_id IN ({candidates})"),
    claim_read="SELECT session_id, epoch FROM session_leases WHERE session_id IN ({candidates})",
    count_expired=(f"SELECT (SELECT count(*) FROM session_leases WHERE {EXPIRED}), "
                   "(SELECT count(*) FROM session_leases WHERE owner_id = %s)"),
    inactivity_deadlines=("UPDATE session_leases SET inactivity_due_at = %s, idle_due_at = %s "
                          "WHERE session_id = %s AND epoch = %s AND owner_id = %s"),
)


def statements(sqlite: bool) -> Statements:
    """The statements for SQLite (``?`` placeholders) or PostgreSQL (``%s``)."""
    if not sqlite:
        return _PG
    return Statements(**{f.name: getattr(_SQLITE, f.name).replace("%s", "?") for f in fields(Statements)})
