"""CreditBank and ledger: who pays, first-time credits, guarded deductions, exhaustion,
concurrency (one actor, two connections, two processes), and the per-turn charge of a
chat session in simulated time (owner exempt, low-credit warning, exhaustion stops it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from corvid_actors.actors.base import ActivityTracker, TrackedActor
from corvid_actors.actors.credits import (
    ChargeTurn,
    CreditBank,
    CreditsExhausted,
    GetBalance,
    GrantCredits,
    payer_for,
)
from corvid_actors.config import Config, load_config
from corvid_actors.db.ledger import Ledger
from corvid_actors.db.store import Store
from corvid_actors.errors import ConfigError
from corvid_actors.schema.sections import CreditsConfig
from corvid_actors.testing import EventRecorder, sim_runtime
from tests.db.conftest import run_together

JOIN_S = 10


class Inbox(TrackedActor):
    def __init__(self, tracker):
        super().__init__(tracker)
        self.got = []

    def on_receive(self, message):
        if message == "dump":
            return list(self.got)
        self.got.append(message)
        return None


@pytest.fixture
def store():
    s = Store("sqlite:///:memory:")
    yield s
    s.close()


# --- rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "participant", "owner", "payer"), [
    ("chat", "alice", False, "alice"),
    ("chat", "alice", True, None),      # owners are exempt
    ("chat", "", False, None),          # nobody to charge
    ("web", "alice", False, None),      # only chat sessions are charged
    ("agent", "alice", False, None),
])
def test_payer_for(source, participant, owner, payer):
    assert payer_for(source, participant, owner=owner) == payer


def test_credit_settings_come_from_config_and_environment():
    cfg = load_config(environ={"CREDITS_PER_TURN": "3", "LOW_CREDIT_THRESHOLD": "7",
                               "FREE_CREDITS_ON_FIRST_MESSAGE": "20"})
    assert cfg.credits == CreditsConfig(credits_per_turn=3, low_credit_threshold=7, free_credits_on_first_message=20)
    assert load_config(environ={}).credits == CreditsConfig(1, 50, 100)


# --- ledger -------------------------------------------------------------------------------


def test_first_time_account_gets_free_credits_once(store):
    ledger = Ledger(store)
    first = ledger.open_account("alice", 100)
    again = ledger.open_account("alice", 100)
    assert (first.balance, first.created) == (100, True)
    assert (again.balance, again.created) == (100, False)
    [row] = ledger.transactions("alice", 10)
    assert (row["type"], row["amount"], row["balance_after"], row["reference"]) == ("grant", 100, 100, "first_message")


def test_deduction_is_refused_rather_than_going_negative(store):
    ledger = Ledger(store)
    session = store.create_session(source="chat", participant="bob")
    ledger.credit("bob", 2)
    assert ledger.deduct("bob", 1, low_threshold=1, session_id=session.id).remaining == 1
    last = ledger.deduct("bob", 1, low_threshold=1, session_id=session.id)
    assert (last.success, last.remaining, last.is_low, last.is_exhausted) == (True, 0, True, True)
    refused = ledger.deduct("bob", 1, low_threshold=1, session_id=session.id)
    assert (refused.success, refused.remaining, refused.is_exhausted) == (False, 0, True)
    assert ledger.balance("bob") == 0
    assert ledger.count_transactions("bob", "deduction") == 2  # the refusal wrote nothing
    assert store.get_session(session.id).credits_consumed == 2
    assert [t["balance_after"] for t in ledger.transactions("bob", 10)] == [0, 1, 2]


def test_unknown_participant_cannot_be_charged(store):
    assert Ledger(store).deduct("nobody", 1, low_threshold=0).success is False
    assert Ledger(store).balance("nobody") is None


@pytest.mark.parametrize("amount", [0, -5, 1.5, True])
def test_grants_must_be_positive_whole_numbers(store, amount):
    with pytest.raises(ValueError, match="positive whole number"):
        Ledger(store).credit("alice", amount)


def test_purchase_counts_towards_total_purchased(store):
    ledger = Ledger(store)
    ledger.credit("alice", 30, type="purchase", reference="order-1")
    ledger.credit("alice", 5, type="refund")
    row = store.m.CreditLedger.get(store.m.CreditLedger.participant == "alice")
    assert (row.credits, row.total_purchased) == (35, 30)
    with pytest.raises(ValueError, match="unknown credit type"):
        ledger.credit("alice", 5, type="deduction")


# --- concurrency ----------------------------------------------------------------------------


def test_100_simultaneous_charges_through_the_bank_leave_exactly_zero(store):
    tracker = ActivityTracker()
    bank = CreditBank.start(tracker, store=store, config=CreditsConfig(free_credits_on_first_message=0))
    supervisor = Inbox.start(tracker)
    try:
        assert bank.ask(GrantCredits("carol", 50)) == 50
        sessions = [store.create_session(source="chat", participant="carol").id for _ in range(100)]
        results = []
        lock = threading.Lock()

        def charge(sid):
            def run():
                outcome = bank.ask(ChargeTurn(sid, "chat", supervisor))
                with lock:
                    results.append(outcome.success)
            return run

        assert run_together([charge(sid) for sid in sessions]) == []
        tracker.wait_idle(JOIN_S)
        assert (results.count(True), results.count(False)) == (50, 50)
        assert bank.ask(GetBalance("carol")) == 0
        ledger = Ledger(store)
        assert ledger.count_transactions("carol", "deduction") == 50
        assert sorted(t["balance_after"] for t in ledger.transactions("carol", 200) if t["type"] == "deduction") \
            == list(range(50))
        stops = supervisor.ask("dump")
        assert len(stops) == 50 and all(isinstance(m, CreditsExhausted) for m in stops)
    finally:
        bank.stop()
        supervisor.stop()


@pytest.fixture
def pg_store_url():
    """A fresh schema on the test PostgreSQL server (skipped locally when it is down, failed in CI)."""
    from tests.db.conftest import (
        _admin_connect,
        _create_schema,
        _schema_url,
        admin_connect_or_skip,
        pg_base_url,
    )

    base = pg_base_url()
    admin_connect_or_skip(base).close()
    schema = _create_schema(base)
    yield _schema_url(base, schema)
    admin = _admin_connect(base)
    with admin.cursor() as cur:
        cur.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    admin.close()


@pytest.mark.parametrize("backend", ["sqlite-file", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_100_simultaneous_deductions_over_two_connections(backend, tmp_path, request):
    # Two stores on one database are two processes' connections: only the database's
    # transaction guards the balance here, not the store lock or the actor.
    url = f"sqlite:///{tmp_path / 'credits.db'}" if backend == "sqlite-file" else request.getfixturevalue(
        "pg_store_url")
    first, second = Store(url), Store(url)
    try:
        Ledger(first).credit("dave", 50)
        outcomes = []
        lock = threading.Lock()

        def deduct(store):
            def run():
                ok = Ledger(store).deduct("dave", 1, low_threshold=0).success
                with lock:
                    outcomes.append(ok)
            return run

        assert run_together([deduct(first if i % 2 else second) for i in range(100)]) == []
        assert (outcomes.count(True), outcomes.count(False)) == (50, 50)
        assert Ledger(second).balance("dave") == 0
        assert Ledger(first).count_transactions("dave", "deduction") == 50
        assert Ledger(first).open_account("dave", 100).created is False  # no second first-time grant
    finally:
        first.close()
        second.close()


def test_two_processes_deducting_at_once_never_overdraw(tmp_path):
    url = f"sqlite:///{tmp_path / 'credits.db'}"
    store = Store(url)
    Ledger(store).credit("erin", 50)
    script = textwrap.dedent(f"""
        from corvid_actors.db.ledger import Ledger
        from corvid_actors.db.store import Store
        ledger = Ledger(Store({url!r}))
        print(sum(ledger.deduct("erin", 1, low_threshold=0).success for _ in range(40)))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        successes = [int(p.communicate(timeout=30)[0]) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert sum(successes) == 50
    assert Ledger(store).balance("erin") == 0
    assert Ledger(store).count_transactions("erin", "deduction") == 50
    store.close()


# --- the bank in the runtime (simulated time) --------------------------------------------


@pytest.fixture
def credit_runtime(sim_clock, scripted, tmp_path):
    owners = {"owner-wallet"}
    cfg = Config().replace(credits={"credits_per_turn": 1, "low_credit_threshold": 2,
                                    "free_credits_on_first_message": 0})
    rt = sim_runtime(sim_clock, scripted, config=cfg, workspace_dir=tmp_path / "ws", with_credits=True,
                     is_owner=owners.__contains__)
    rt.recorder = EventRecorder.attach(rt)
    yield rt
    rt.shutdown()


def _turns(rt, sid, texts):
    for text in texts:
        if not rt.send_message(sid, text):
            rt.resume_process(sid, text)
        rt.settle()


def test_chat_session_is_charged_once_per_turn(credit_runtime):
    rt = credit_runtime
    rt.grant_credits("alice", 10)
    s = rt.create_session(source="chat", participant="alice")
    rt.start_process(s.id, "one")
    rt.settle()
    _turns(rt, s.id, ["two", "three"])
    assert rt.credit_balance("alice") == 7
    deductions = [t for t in rt.credit_transactions("alice") if t["type"] == "deduction"]
    assert [(t["amount"], t["session_id"]) for t in deductions] == [(-1, s.id)] * 3
    assert rt.internals.store.get_session(s.id).credits_consumed == 3


def test_owner_and_web_sessions_are_not_charged(credit_runtime):
    rt = credit_runtime
    rt.grant_credits("owner-wallet", 5)
    owner = rt.create_session(source="chat", participant="owner-wallet")
    web = rt.create_session(source="web", participant="alice")
    rt.grant_credits("alice", 5)
    for s in (owner, web):
        rt.start_process(s.id, "hi")
    rt.settle()
    assert rt.credit_balance("owner-wallet") == 5
    assert rt.credit_balance("alice") == 5
    assert rt.recorder.of(type="credits_low") == []


def test_low_balance_emits_a_warning_event(credit_runtime):
    rt = credit_runtime
    rt.grant_credits("alice", 4)
    s = rt.create_session(source="chat", participant="alice")
    rt.start_process(s.id, "one")  # 3 left: above the threshold of 2
    rt.settle()
    assert rt.recorder.of(s.id, "credits_low") == []
    _turns(rt, s.id, ["two"])  # 2 left: low
    low = rt.recorder.last("credits_low", s.id)
    assert low.remaining == 2 and "Low credits: 2 remaining" in low.message
    assert rt.is_running(s.id)


def test_exhaustion_mid_session_stops_it_with_credits_exhausted(credit_runtime):
    rt = credit_runtime
    rt.grant_credits("alice", 1)
    s = rt.create_session(source="chat", participant="alice")
    rt.start_process(s.id, "one")  # pays the last credit
    rt.settle()
    assert rt.is_running(s.id)
    _turns(rt, s.id, ["two"])  # cannot be paid
    error = rt.recorder.last("error", s.id)
    assert error.error_type == "credits_exhausted"
    stopped = rt.recorder.last("session_stopped", s.id)
    assert stopped.reason == "credits_exhausted"
    types = rt.recorder.types(s.id)
    assert types.index("error") < types.index("session_stopped")  # the error comes first
    session_error = rt.recorder.last("session_error", s.id)
    assert (session_error.error_type, session_error.severity, session_error.recoverable) == (
        "credits_exhausted", "warning", True)
    assert types.index("error") < types.index("session_error") < types.index("session_stopped")
    assert not rt.is_running(s.id)
    assert rt.internals.store.get_session(s.id).status == "stopped"
    assert rt.credit_balance("alice") == 0
    assert Ledger(rt.internals.store).count_transactions("alice", "deduction") == 1
    rt.clock.advance(60)  # a stop is not a crash: no restart
    assert rt.recorder.times("session_started", s.id) == [0.0]


def test_first_time_chat_participant_gets_free_credits(sim_clock, scripted, tmp_path):
    rt = sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws", with_credits=True)
    try:
        s = rt.create_session(source="chat", participant="newcomer")
        rt.start_process(s.id, "hello")
        rt.settle()
        assert rt.credit_balance("newcomer") == 99  # 100 free, 1 turn
        assert [t["type"] for t in rt.credit_transactions("newcomer")] == ["deduction", "grant"]
    finally:
        rt.shutdown()


def test_credit_methods_need_the_bank(runtime):
    with pytest.raises(ConfigError, match="with_credits=True"):
        runtime.credit_balance("alice")


def test_a_failing_owner_check_is_not_an_exemption_and_the_bank_survives(store):
    def broken(participant):
        raise RuntimeError("owner service down")

    tracker = ActivityTracker()
    bank = CreditBank.start(tracker, store=store, config=CreditsConfig(), is_owner=broken)
    try:
        sid = store.create_session(source="chat", participant="frank").id
        assert bank.ask(ChargeTurn(sid, "chat")).remaining == 99
        bank.tell(ChargeTurn("no-such-session", "chat"))
        assert bank.ask(GetBalance("frank")) == 99  # still alive
    finally:
        bank.stop()


def test_the_runtime_binds_its_supervisor_to_the_bank(credit_runtime, scripted):
    rt = credit_runtime
    s = rt.create_session(source="chat", participant="broke")
    rt.start_process(s.id, "hi")  # no credits: this turn is refused and the session stopped
    rt.settle()
    assert rt.recorder.last("session_stopped", s.id).reason == "credits_exhausted"
    scripted.reply("still thinking", latency_s=60)
    rt.start_process(s.id, "again")  # running, its turn not charged yet
    rt.settle()
    # a charge that names no supervisor goes to the one the runtime bound at start-up
    assert rt.internals.credits.ask(ChargeTurn(s.id, "chat")).success is False
    rt.settle()
    assert [e.event.reason for e in rt.recorder.of(s.id, "session_stopped")] == ["credits_exhausted"] * 2
    assert not rt.is_running(s.id)
