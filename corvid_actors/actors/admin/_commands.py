"""The AdminActor's relayed commands: approvals and credits, one ask to one actor each.

Plain functions that take the actor they relay to and the command's checked arguments;
they run on the AdminActor's thread and reply with JSON-ready data, or raise
:class:`~corvid_actors.errors.AdminError`. :func:`ask_actor` is the one ask every
admin command makes: it turns the runtime's errors into the admin socket's codes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pykka

from corvid_actors.actors import approvals as ap
from corvid_actors.actors import credits
from corvid_actors.actors.supervisor import KillIncarnation, StartTicket
from corvid_actors.errors import (
    BAD_REQUEST,
    FORBIDDEN,
    NOT_FOUND,
    SHUTTING_DOWN,
    UNAVAILABLE,
    AdminError,
    CorvidError,
    NotFoundError,
    RuntimeStoppedError,
    admin_code,
)
from corvid_actors.telemetry.metrics import RuntimeMetrics

_BROKER = "approval broker"
_BANK = "credit bank"


def read_metrics(metrics: RuntimeMetrics) -> tuple[dict[str, Any], dict[str, float]]:
    """``metrics.read()`` (asks the actors): a dead actor or a stopping runtime is an ``AdminError``."""
    try:
        return metrics.read()
    except pykka.ActorDeadError:
        raise AdminError(UNAVAILABLE, "the runtime is shut down") from None
    except RuntimeStoppedError as exc:
        raise AdminError(SHUTTING_DOWN, str(exc)) from None


def ask_actor(ref: pykka.ActorRef[Any] | None, message: Any, what: str = "runtime") -> Any:
    """Ask ``ref`` (blocking); a missing or dead actor, a stopping runtime and an unknown
    session become ``AdminError``s. A start/resume's ticket is waited on: the pid."""
    if ref is None:
        raise AdminError(UNAVAILABLE, f"the {what} is not running in this daemon")
    try:
        reply = ref.ask(message)
        return reply.wait() if isinstance(reply, StartTicket) else reply
    except pykka.ActorDeadError:
        raise AdminError(UNAVAILABLE, f"the {what} is shut down") from None
    except RuntimeStoppedError as exc:
        raise AdminError(SHUTTING_DOWN, str(exc)) from None
    except NotFoundError as exc:
        raise AdminError(NOT_FOUND, str(exc)) from None


def crash(supervisor: pykka.ActorRef[Any], allowed: bool, session_id: Callable[[], str]) -> dict[str, Any]:
    """``admin crash ID`` (``[daemon] allow_fault_commands``): the session's running actor
    fails as on a bug in it (``corvid_actors.testing.kill_incarnation``'s fault, for tests
    and drills); ``crashed`` False when it was not running."""
    if not allowed:
        raise AdminError(FORBIDDEN, "fault commands are off: set [daemon] allow_fault_commands = true "
                                    "(for tests and drills only)")
    sid = session_id()
    return {"session": sid, "crashed": bool(ask_actor(supervisor, KillIncarnation(sid), "session supervisor"))}


# --- approvals --------------------------------------------------------------------------------


def pending_counts(broker: pykka.ActorRef[Any] | None) -> dict[str, int]:
    """Pending approvals per session id."""
    counts: dict[str, int] = {}
    for item in ask_actor(broker, ap.ListPending(None), _BROKER):
        counts[item["session_id"]] = counts.get(item["session_id"], 0) + 1
    return counts


def list_approvals(broker: pykka.ActorRef[Any] | None, session_id: str | None) -> list[dict[str, Any]]:
    """``admin approvals``: the pending approvals (of one session, or all)."""
    return list(ask_actor(broker, ap.ListPending(session_id), _BROKER))


def _resolve(broker: pykka.ActorRef[Any] | None, approval_id: str, behavior: str, message: str,
             answered_by: str) -> dict[str, Any]:
    try:
        resolved = ask_actor(broker, ap.Resolve(approval_id, behavior, message, answered_by=answered_by), _BROKER)
    except ValueError as exc:
        raise AdminError(BAD_REQUEST, str(exc)) from None
    if resolved is None:
        raise AdminError(NOT_FOUND, f"no pending approval {approval_id!r} (or the prefix is ambiguous); "
                                    "see `corvid-actors admin approvals`")
    return dict(resolved)


def approve(broker: pykka.ActorRef[Any] | None, args: Mapping[str, Any]) -> dict[str, Any]:
    """``admin approve``: allow once, or for the whole session (``session_wide``); answered
    as ``answered_by`` (the admin actor sets it from the transport's caller)."""
    behavior = "allow_session" if args.get("session_wide") else "allow"
    return _resolve(broker, args["approval"], behavior, args.get("message", ""), args.get("answered_by", "admin"))


def deny(broker: pykka.ActorRef[Any] | None, args: Mapping[str, Any]) -> dict[str, Any]:
    """``admin deny``."""
    return _resolve(broker, args["approval"], "deny", args.get("message", ""), args.get("answered_by", "admin"))


def mode(broker: pykka.ActorRef[Any] | None, args: Mapping[str, Any]) -> dict[str, Any]:
    """``admin mode``: the approval mode, set when ``mode`` is given."""
    if "mode" not in args:
        return {"mode": ask_actor(broker, ap.GetMode(), _BROKER)}
    try:
        return {"mode": ask_actor(broker, ap.SetMode(args["mode"]), _BROKER)}
    except ValueError as exc:
        raise AdminError(BAD_REQUEST, str(exc)) from None


# --- credits ----------------------------------------------------------------------------------


def _bank(bank: pykka.ActorRef[Any] | None) -> pykka.ActorRef[Any]:
    if bank is None:
        raise AdminError(UNAVAILABLE, "credits are not enabled in this daemon "
                                      "(set daemon.with_credits = true in the config and restart)")
    return bank


def credits_balance(bank: pykka.ActorRef[Any] | None, args: Mapping[str, Any]) -> dict[str, Any]:
    """``admin credits balance``: the balance, and the latest transactions if asked."""
    ref = _bank(bank)
    participant = args["participant"]
    balance = ask_actor(ref, credits.GetBalance(participant), _BANK)
    out: dict[str, Any] = {"participant": participant, "balance": int(balance)}
    if "transactions" in args:
        out["transactions"] = list(ask_actor(ref, credits.GetTransactions(participant, args["transactions"]), _BANK))
    return out


def credits_grant(bank: pykka.ActorRef[Any] | None, max_grant: int, args: Mapping[str, Any]) -> dict[str, Any]:
    """``admin credits grant``: at most ``max_grant`` (``daemon.max_credit_grant``) at once."""
    ref = _bank(bank)
    amount = args["amount"]
    if amount > max_grant:
        raise AdminError(BAD_REQUEST, f"a single grant is at most {max_grant} credits (daemon.max_credit_grant)")
    try:
        balance = ask_actor(ref, credits.GrantCredits(
            args["participant"], amount, "grant", args.get("reason", "") or "admin grant"), _BANK)
    except (ValueError, CorvidError) as exc:  # the store down: `unavailable`, as everywhere
        raise AdminError(admin_code(exc) if isinstance(exc, CorvidError) else BAD_REQUEST, str(exc)) from None
    return {"participant": args["participant"], "granted": amount, "balance": int(balance)}
