"""Hostile amounts at the ledger itself: every caller (CreditBank, admin, chat, a library
user) gets the same guarantees — amounts are positive whole numbers under a cap, a
balance cannot overflow its column, and a refused operation writes nothing."""

from __future__ import annotations

import pytest

from corvid_actors.db.ledger import MAX_BALANCE, MAX_CREDIT_AMOUNT, Ledger
from corvid_actors.db.store import Store
from corvid_actors.errors import CreditAmountError

BAD_AMOUNTS = [0, -1, -50, True, False, 1.5, 2.0, "10", None, float("nan"), MAX_CREDIT_AMOUNT + 1, 10**400]


@pytest.fixture
def ledger(store: Store) -> Ledger:
    return Ledger(store)


@pytest.mark.parametrize("amount", BAD_AMOUNTS, ids=repr)
def test_deduct_refuses_bad_amounts_and_writes_nothing(ledger: Ledger, amount) -> None:
    ledger.open_account("alice", 100)
    with pytest.raises(CreditAmountError):
        ledger.deduct("alice", amount, low_threshold=10)
    assert ledger.balance("alice") == 100
    assert ledger.count_transactions("alice") == 1  # only the opening grant


def test_negative_deduction_never_adds_credits(ledger: Ledger) -> None:
    # the reported hole: deduct(-50) added 50 and recorded a "deduction" of +50
    ledger.open_account("alice", 100)
    with pytest.raises(ValueError):  # CreditAmountError is a ValueError: old callers still catch it
        ledger.deduct("alice", -50, low_threshold=10)
    assert ledger.balance("alice") == 100
    assert all(t["amount"] <= 0 for t in ledger.transactions("alice", 10) if t["type"] == "deduction")


@pytest.mark.parametrize("amount", BAD_AMOUNTS, ids=repr)
def test_credit_refuses_bad_amounts(ledger: Ledger, amount) -> None:
    with pytest.raises(CreditAmountError):
        ledger.credit("bob", amount)
    assert ledger.balance("bob") is None
    assert ledger.count_transactions("bob") == 0


@pytest.mark.parametrize("free", [-1, True, 1.5, MAX_CREDIT_AMOUNT + 1])
def test_open_account_refuses_bad_free_credits(ledger: Ledger, free) -> None:
    with pytest.raises(CreditAmountError):
        ledger.open_account("carol", free)
    assert ledger.balance("carol") is None


def test_open_account_with_zero_free_credits_is_fine(ledger: Ledger) -> None:
    assert ledger.open_account("carol", 0).balance == 0


def test_the_largest_amount_is_accepted(ledger: Ledger) -> None:
    assert ledger.credit("dave", MAX_CREDIT_AMOUNT) == MAX_CREDIT_AMOUNT
    assert ledger.deduct("dave", MAX_CREDIT_AMOUNT, low_threshold=0).remaining == 0


def test_a_balance_cannot_grow_past_the_cap(ledger: Ledger) -> None:
    # a 9e18 grant used to be accepted and the next one overflowed the column (HTTP 500)
    grants = MAX_BALANCE // MAX_CREDIT_AMOUNT
    for _ in range(grants):
        ledger.credit("erin", MAX_CREDIT_AMOUNT)
    room = MAX_BALANCE - ledger.balance("erin")
    with pytest.raises(CreditAmountError, match="at most"):
        ledger.credit("erin", room + 1)
    assert ledger.balance("erin") == MAX_BALANCE - room
    assert ledger.count_transactions("erin") == grants
    if room:
        assert ledger.credit("erin", room) == MAX_BALANCE


def test_the_cap_fits_a_32_bit_integer_column() -> None:
    # PostgreSQL's INTEGER is 32-bit: the cap is what makes overflow impossible there too
    assert MAX_CREDIT_AMOUNT <= MAX_BALANCE < 2**31
