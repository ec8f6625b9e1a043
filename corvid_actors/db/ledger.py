"""The credit ledger: balances per participant and an append-only transaction log.

Every operation is one database transaction (``Store.transaction``: ``BEGIN IMMEDIATE``
on SQLite, a row-locking ``UPDATE`` on PostgreSQL), so the invariants hold across
threads *and* processes, not only behind the CreditBank actor:

- a deduction is a guarded ``UPDATE … SET credits = credits - n WHERE credits >= n``:
  it succeeds or is refused as a whole, and the balance never goes negative (the
  table's ``CHECK (credits >= 0)`` is the last line of defence);
- each change of a balance appends exactly one ``credit_transactions`` row, in the same
  transaction, carrying the balance after it — rows are never updated or deleted.

Transaction types: ``grant``, ``purchase``, ``refund`` (credits in) and ``deduction``
(credits out).

Amounts are checked here, not only by callers: every amount is a positive ``int`` (not a
bool, float or string) of at most :data:`MAX_CREDIT_AMOUNT`, and no balance grows past
:data:`MAX_BALANCE` — so a negative "deduction" cannot add credits and no sum can overflow
a column (PostgreSQL's ``INTEGER`` is 32-bit). A bad amount raises
:class:`~corvid_actors.errors.CreditAmountError` and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corvid_actors.clock import iso_utc
from corvid_actors.db.store import Store
from corvid_actors.db.store_base import store_op
from corvid_actors.errors import CreditAmountError

#: transaction types that add credits
CREDIT_TYPES = ("grant", "purchase", "refund")
#: the transaction type of a per-turn charge
DEDUCTION = "deduction"
#: ``reference`` of the first-time grant (so it can be told apart from other grants)
FIRST_TIME_REFERENCE = "first_message"
#: the largest amount of one grant, purchase, refund or deduction
MAX_CREDIT_AMOUNT = 1_000_000_000
#: the largest balance an account may hold (fits a signed 32-bit column with room to spare)
MAX_BALANCE = 2_000_000_000


@dataclass(frozen=True)
class Deduction:
    """The outcome of one deduction (the seed's ``deductTurnCredits`` result).

    ``remaining`` is the balance after the attempt; ``is_low`` means at or below the
    low-credit threshold; a refused deduction is always low and exhausted.
    """

    success: bool
    remaining: int
    is_low: bool
    is_exhausted: bool


@dataclass(frozen=True)
class Account:
    """A participant's balance; ``created`` is True when this call opened the account."""

    participant: str
    balance: int
    created: bool


class Ledger:
    """Credit operations on a :class:`Store`. Thread-safe and process-safe (see module doc)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.m = store.m

    # --- reads -----------------------------------------------------------------------------

    @store_op
    def balance(self, participant: str) -> int | None:
        """The balance, or None when the participant has no account yet."""
        L = self.m.CreditLedger
        with self.store.transaction():
            row = L.get_or_none(L.participant == participant)
        return None if row is None else int(row.credits)

    @store_op
    def transactions(self, participant: str, limit: int) -> list[dict[str, Any]]:
        """The latest ``limit`` transactions of ``participant``, newest first."""
        T = self.m.CreditTransaction
        with self.store.transaction():
            rows = list(T.select().where(T.participant == participant).order_by(T.id.desc()).limit(limit))
        return [
            {"id": r.id, "type": r.type, "amount": r.amount, "balance_after": r.balance_after,
             "reference": r.reference, "session_id": r.session_id, "created_at": iso_utc(r.created_at)}
            for r in rows
        ]

    @store_op
    def count_transactions(self, participant: str, type: str | None = None) -> int:
        T = self.m.CreditTransaction
        with self.store.transaction():
            query = T.select().where(T.participant == participant)
            if type is not None:
                query = query.where(T.type == type)
            return query.count()

    # --- writes -----------------------------------------------------------------------------

    @store_op
    def open_account(self, participant: str, free_credits: int) -> Account:
        """Open ``participant``'s account if it has none, with ``free_credits`` granted
        (one ``grant`` row, reference ``first_message``). Idempotent: an existing account
        is returned unchanged."""
        _require_participant(participant)
        if free_credits != 0:
            _require_amount(free_credits, "first-time grant")
        L = self.m.CreditLedger
        with self.store.transaction():
            # INSERT OR IGNORE / ON CONFLICT DO NOTHING: two processes opening the same
            # account at once create it once; rowcount says which one did.
            cursor = self.store.db.execute(
                L.insert(participant=participant, credits=free_credits).on_conflict_ignore()
            )
            created = cursor.rowcount == 1
            if created and free_credits > 0:
                self._append(participant, "grant", free_credits, free_credits, FIRST_TIME_REFERENCE, None)
            balance = int(L.get(L.participant == participant).credits)
        return Account(participant, balance, created)

    @store_op
    def credit(self, participant: str, amount: int, *, type: str = "grant", reference: str = "",
               session_id: str | None = None) -> int:
        """Add ``amount`` (> 0) credits; opens the account if needed. Returns the new balance."""
        _require_participant(participant)
        if type not in CREDIT_TYPES:
            raise ValueError(f"unknown credit type {type!r}; use one of {', '.join(CREDIT_TYPES)}")
        _require_amount(amount, type)
        L = self.m.CreditLedger
        with self.store.transaction():
            self.store.db.execute(L.insert(participant=participant, credits=0).on_conflict_ignore())
            before = int(L.get(L.participant == participant).credits)
            if before + amount > MAX_BALANCE:
                raise CreditAmountError(
                    f"a balance is at most {MAX_BALANCE} credits: {participant!r} has {before}, "
                    f"so a {type} of {amount} does not fit")
            fields: dict[Any, Any] = {L.credits: L.credits + amount, L.updated_at: L.updated_at.default()}
            if type == "purchase":
                fields[L.total_purchased] = L.total_purchased + amount
            L.update(fields).where(L.participant == participant).execute()
            balance = int(L.get(L.participant == participant).credits)
            self._append(participant, type, amount, balance, reference, session_id)
        return balance

    @store_op
    def deduct(self, participant: str, amount: int, *, low_threshold: int, session_id: str | None = None,
               reference: str = "turn") -> Deduction:
        """Take ``amount`` credits if the balance covers it, else refuse (nothing written).

        On success the deduction row is appended and the session's ``credits_consumed``
        grows, all in the one transaction.
        """
        _require_participant(participant)
        _require_amount(amount, "deduction")
        L, S = self.m.CreditLedger, self.m.Session
        with self.store.transaction():
            changed = (
                L.update({L.credits: L.credits - amount, L.total_consumed: L.total_consumed + amount,
                          L.updated_at: L.updated_at.default()})
                .where((L.participant == participant) & (L.credits >= amount))
                .execute()
            )
            row = L.get_or_none(L.participant == participant)
            balance = int(row.credits) if row is not None else 0
            if changed != 1:
                return Deduction(success=False, remaining=balance, is_low=True, is_exhausted=True)
            self._append(participant, DEDUCTION, -amount, balance, reference, session_id)
            if session_id is not None:
                S.update(credits_consumed=S.credits_consumed + amount).where(S.id == session_id).execute()
        return Deduction(success=True, remaining=balance, is_low=balance <= low_threshold,
                         is_exhausted=balance <= 0)

    def _append(self, participant: str, type: str, amount: int, balance_after: int, reference: str,
                session_id: str | None) -> None:
        # a turn's charge carries its session's lease epoch (several daemons: the fencing
        # trigger refuses a stale owner's charge, and the whole deduction rolls back)
        epoch = self.store.epoch_of(session_id) if session_id is not None else None
        self.m.CreditTransaction.insert(
            participant=participant, type=type, amount=amount, balance_after=balance_after,
            reference=reference, session_id=session_id, writer_epoch=epoch,
        ).execute()


def _require_amount(amount: object, what: str) -> None:
    if isinstance(amount, bool) or not isinstance(amount, int) or not 0 < amount <= MAX_CREDIT_AMOUNT:
        shown = repr(amount) if not isinstance(amount, int) or abs(amount) < 10**30 else "a huge number"
        raise CreditAmountError(
            f"a {what} must be a positive whole number of credits, at most {MAX_CREDIT_AMOUNT}; got {shown}")


#: the ``participant`` columns hold this many characters
MAX_PARTICIPANT_CHARS = 200


def _require_participant(participant: str) -> None:
    if not participant:
        raise ValueError("a credit account needs a participant id (wallet / account id)")
    if len(participant) > MAX_PARTICIPANT_CHARS:
        raise ValueError(f"a participant id is at most {MAX_PARTICIPANT_CHARS} characters, "
                         f"got {len(participant)}")


__all__ = ["Account", "Deduction", "Ledger", "CREDIT_TYPES", "DEDUCTION", "FIRST_TIME_REFERENCE",
           "MAX_BALANCE", "MAX_CREDIT_AMOUNT"]
