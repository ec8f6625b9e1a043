"""The chat bridge's credit commands: ``/credits`` (a balance and recent transactions) and an
owner's ``/grant <participant> <amount>``, and the balance line ``/status`` shows. Plain
functions over the Runtime's credit calls; ``owner`` is the bridge's ``is_owner`` answer."""

from __future__ import annotations

import re

from corvid_actors.chat.commands import transactions_text
from corvid_actors.runtime import Runtime

__all__ = ["balance_line", "credits_text", "grant_text"]

_ASCII_DIGITS = re.compile(r"[0-9]+")
_NOT_ENABLED = "Credits are not enabled on this bot."


def balance_line(runtime: Runtime, participant: str, *, owner: bool) -> str:
    """``Credits: 7 (1 per reply)``, or that an owner's turns are free."""
    if owner:
        return "Credits: you are an owner; your turns are free."
    balance = runtime.credit_balance(participant)
    return f"Credits: {balance} ({runtime.config.credits.credits_per_turn} per reply)"


def credits_text(runtime: Runtime, participant: str, *, owner: bool, recent: int) -> str:
    """The answer to ``/credits``: the balance line and the ``recent`` latest transactions."""
    if not runtime.credits_enabled:
        return _NOT_ENABLED
    if not owner:
        runtime.open_credit_account(participant)  # first contact: the free credits
    rows = runtime.credit_transactions(participant, recent)
    return f"{balance_line(runtime, participant, owner=owner)}\n{transactions_text(rows)}"


def grant_text(runtime: Runtime, sender: str, args: tuple[str, ...], *, owner: bool) -> str:
    """Grant the credits ``/grant <participant> <amount>`` names (owners only); the answer."""
    if not runtime.credits_enabled:
        return _NOT_ENABLED
    if not owner:
        return "Only an owner can grant credits."
    cap = runtime.config.daemon.max_credit_grant  # the admin's cap, one setting for both
    # ASCII digits only: str.isdigit() also accepts "²" and "١", which int() then refuses
    if len(args) != 2 or not _ASCII_DIGITS.fullmatch(args[1]) or not args[1].strip("0"):
        return f"Usage: /grant <participant> <amount> (a whole number from 1 to {cap})."
    # compare lengths first: int() refuses more than 4,300 digits
    if len(args[1].lstrip("0")) > len(str(cap)) or int(args[1]) > cap:
        return f"A single grant is at most {cap} credits (daemon.max_credit_grant)."
    amount = int(args[1])
    try:
        balance = runtime.grant_credits(args[0], amount, reference=f"granted by {sender}")
    except ValueError as exc:  # the ledger's own checks: participant id, balance cap
        return f"Cannot grant: {exc}"
    return f"Granted {amount} credits to {args[0]}: balance {balance}."
