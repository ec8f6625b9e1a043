"""The CreditBank actor: per-participant credits, charged once per model turn of chat sessions.

A session actor tells the bank :class:`ChargeTurn` for every ``result`` event (one model
turn). The bank charges ``credits.credits_per_turn`` to the session's ``participant``
when the session's source is charged (``credits.charged_sources``: ``chat``) and the participant is not an owner
(``is_owner``, injected by the host). A first-time participant's account is opened with
``credits.free_credits_on_first_message``. After a charge:

- balance at or below ``credits.low_credit_threshold`` → a ``credits_low`` event on the
  session (:class:`~corvid_actors.events.CreditsLow`);
- a refused charge (the balance does not cover the turn) → an ``error`` event of type
  ``credits_exhausted``, then :class:`CreditsExhausted` to the asker (``reply_to``: the
  session actor, which asks its supervisor to stop it; the supervisor stops the session
  itself when it is the one told), so the session ends with ``session_stopped``.

A charge that cannot be written (the store is unavailable) is not dropped: the bank
publishes a ``session_error`` (``store_unavailable``, a warning) on the session and tries
again through the timer table on the ``[credits.charge_retry]`` schedule (1 s, doubling,
at most 30 s between tries, 10 tries); only then it gives up with an ``error`` event. An
*asked* charge (``Runtime.charge_turn``) raises the StoreError to the asker instead.

The bank serialises its own requests (one mailbox); the ledger's guarded transaction
(:mod:`corvid_actors.db.ledger`) keeps balances right across processes as well, so the
balance never goes negative and no deduction is lost or doubled.

Messages (all on the bank's thread):

- :class:`ChargeTurn` (tell; an ask replies with the :class:`Deduction`, or None when
  the turn was not charged);
- :class:`OpenAccount` → :class:`Account`; :class:`GrantCredits` → new balance;
  :class:`GetBalance` → int; :class:`GetTransactions` → list of dicts (newest first);
- :class:`BindSupervisor` (tell) — who is told :class:`CreditsExhausted` when a
  ``ChargeTurn`` names no ``reply_to``.

Replies (this module owns them): :class:`CreditsExhausted`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.events import Publish
from corvid_actors.actors.timers import ScheduleTimer, Timers
from corvid_actors.db.ledger import Account, Deduction, Ledger
from corvid_actors.errors import StoreError
from corvid_actors.events import CreditsLow, ErrorEvent, SessionError
from corvid_actors.schema.sections import CreditsConfig

__all__ = [
    "BindSupervisor", "ChargeTurn", "CreditBank", "CreditsExhausted", "GetBalance", "GetTransactions",
    "GrantCredits", "OpenAccount", "payer_for", "exhausted_message", "low_message",
]

#: the packaged ``[credits]`` section (the sources charged when none are given)
_DEFAULTS = CreditsConfig()


# --- messages -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ChargeTurn:
    """One model turn of ``session_id`` finished; charge it if its source is charged.

    ``reply_to`` is told :class:`CreditsExhausted` when the credits are exhausted (the
    session actor, or the supervisor); None: the bound supervisor.
    ``attempt`` counts the bank's own retries of a charge the store refused.

    Told by a session actor (``session_effects``, on its thread) after each ``result``, and
    by the timer table for a retry; asked by ``Runtime.charge_turn`` (on the caller's
    thread). Handled on the bank's thread. An ask replies with the :class:`Deduction`, or
    None when the turn was not charged; a tell has no reply.
    """

    session_id: str
    source: str
    reply_to: pykka.ActorRef[Any] | None = None
    attempt: int = 0


@dataclass(frozen=True)
class OpenAccount:
    """Open ``participant``'s account with the first-time free credits (idempotent).

    Asked by ``Runtime.open_credit_account`` (on the caller's thread); handled on the bank's
    thread. Replies with the :class:`Account`."""

    participant: str


@dataclass(frozen=True)
class GrantCredits:
    """Add credits: ``type`` is grant | purchase | refund.

    Asked by ``Runtime.grant_credits`` (on the caller's thread) and the AdminActor's
    ``credits_grant`` (on its thread); handled on the bank's thread. Replies with the
    new balance (int)."""

    participant: str
    amount: int
    type: str = "grant"
    reference: str = ""


@dataclass(frozen=True)
class GetBalance:
    """Asked by ``Runtime.credit_balance`` (on the caller's thread) and the AdminActor's
    ``credits_balance`` (on its thread); handled on the bank's thread. Replies with the balance
    (int; 0 for a participant without an account)."""

    participant: str


@dataclass(frozen=True)
class GetTransactions:
    """Asked by ``Runtime.credit_transactions`` (on the caller's thread) and the AdminActor's
    ``credits_balance`` (on its thread); handled on the bank's thread. Replies with the latest
    ``limit`` transactions, a list of dicts, newest first."""

    participant: str
    limit: int = 10


@dataclass(frozen=True)
class BindSupervisor:
    """``ref`` is told :class:`CreditsExhausted` when a ``ChargeTurn`` names no ``reply_to``.

    Told by the runtime's tree builder (``runtime_tree``, on the building thread) once the
    supervisor exists; handled on the bank's thread. Reply: none (told)."""

    ref: pykka.ActorRef[Any]


@dataclass(frozen=True)
class CreditsExhausted:
    """Reply to :class:`ChargeTurn`'s ``reply_to``: the charge was refused, the session is
    to be stopped (reason ``credits_exhausted``).

    Told by the bank (on its thread) to the session actor, which tells its supervisor
    ``StopRequested``, or to the supervisor, which stops the session; handled on the
    receiver's own thread. Reply: none (told)."""

    session_id: str


# --- rules (pure) -------------------------------------------------------------------------


def payer_for(source: str, participant: str, *, owner: bool,
              charged_sources: tuple[str, ...] = _DEFAULTS.charged_sources) -> str | None:
    """Who pays a turn: the participant of a charged-source session, unless an owner."""
    if source not in charged_sources or not participant or owner:
        return None
    return participant


def low_message(remaining: int) -> str:
    return f"Low credits: {remaining} remaining. Top up to keep chatting."


def exhausted_message(remaining: int, per_turn: int) -> str:
    return (f"Session stopped: credits exhausted ({remaining} left, {per_turn} per turn). "
            "Top up to resume; /credits shows your balance.")


# --- the actor ----------------------------------------------------------------------------


class CreditBank(TrackedActor):
    """See the module docstring. ``store`` is the runtime's :class:`~corvid_actors.db.store.Store`."""
    survive_errors = True  # one bad told message never kills it (actors/base.py)

    def __init__(self, tracker: ActivityTracker, *, store: Any, config: CreditsConfig,
                 bus: pykka.ActorRef[Any] | None = None,
                 is_owner: Callable[[str], bool] | None = None,
                 timers: Timers | None = None) -> None:
        super().__init__(tracker)
        self.timers = timers
        self._retries = 0
        self.store = store
        self.ledger = Ledger(store)
        self.cfg = config
        self.bus = bus
        self.is_owner = is_owner or (lambda participant: False)
        self.supervisor: pykka.ActorRef[Any] | None = None

    def on_receive(self, message: Any) -> Any:
        match message:
            case ChargeTurn(session_id, source, reply_to, attempt):
                return self._charge_safely(session_id, source, reply_to, attempt)
            case OpenAccount(participant):
                return self.ledger.open_account(participant, self.cfg.free_credits_on_first_message)
            case GrantCredits(participant, amount, type_, reference):
                return self.ledger.credit(participant, amount, type=type_, reference=reference)
            case GetBalance(participant):
                balance = self.ledger.balance(participant)
                return 0 if balance is None else balance
            case GetTransactions(participant, limit):
                return self.ledger.transactions(participant, limit)
            case BindSupervisor(ref):
                self.supervisor = ref
        return None

    def _charge_safely(self, session_id: str, source: str, reply_to: pykka.ActorRef[Any] | None,
                       attempt: int = 0) -> Deduction | None:
        # A charge arrives as a tell: an exception here would kill the bank (Pykka stops an
        # actor whose tell raises), and with it every later charge. Log and go on.
        try:
            return self._charge(session_id, source, reply_to)
        except StoreError as exc:
            if getattr(self.actor_inbox, "current_is_ask", False):  # TrackedActor's inbox says
                raise  # the asker (Runtime.charge_turn) hears of it
            self._charge_refused(session_id, source, reply_to, attempt, exc)
            return None
        except Exception:  # noqa: BLE001 - anything else must not kill the bank either
            logger.bind(session_id=session_id).opt(exception=True).error("credit charge failed; turn not charged")
            return None

    def _charge_refused(self, session_id: str, source: str, reply_to: pykka.ActorRef[Any] | None,
                        attempt: int, exc: StoreError) -> None:
        """The store refused a charge: try again later through the timer table, or give up."""
        log = logger.bind(session_id=session_id)
        schedule = self.cfg.charge_retry
        if attempt + 1 >= schedule.max_attempts or self.timers is None:
            log.error("credit charge failed {} time(s), giving up; turn not charged: {}", attempt + 1, exc)
            self._publish(session_id, ErrorEvent(
                error_type="store_unavailable",
                message=f"A turn's credit charge could not be written and was given up: {exc}"))
            return
        delay = schedule.delay_s(attempt + 1)
        log.warning("credit charge refused by the store ({}); retrying in {} s", exc, delay)
        if attempt == 0:
            self._publish(session_id, SessionError(
                error_type="store_unavailable", severity="warning", recoverable=True,
                message=f"The turn's credit charge could not be written ({exc}); it is retried."))
        self._retries += 1
        # Not keyed by the session: cleaning up a stopped session's timers must not drop it.
        tell(self.timers, ScheduleTimer(("credit_charge_retry", self._retries), delay, self.actor_ref,
                                        ChargeTurn(session_id, source, reply_to, attempt + 1)))

    def _charge(self, session_id: str, source: str, reply_to: pykka.ActorRef[Any] | None) -> Deduction | None:
        if source not in self.cfg.charged_sources:
            return None  # cheap exit before any read: most sessions are never charged
        session = self.store.get_session(session_id)
        if session is None:
            return None
        participant = session.participant or ""
        payer = payer_for(session.source, participant, owner=bool(participant) and self._owner(participant),
                          charged_sources=self.cfg.charged_sources)
        if payer is None:
            if not participant:
                logger.bind(session_id=session_id).warning("chat session without a participant: turn not charged")
            return None
        self.ledger.open_account(payer, self.cfg.free_credits_on_first_message)
        cost = self.cfg.credits_per_turn
        if cost <= 0:
            return None  # free turns (credits_per_turn = 0): the ledger takes positive amounts only
        result = self.ledger.deduct(payer, cost, low_threshold=self.cfg.low_credit_threshold,
                                    session_id=session_id)
        if not result.success:
            self._publish(session_id, ErrorEvent(error_type="credits_exhausted",
                                                 message=exhausted_message(result.remaining, cost)))
            self._publish(session_id, SessionError(error_type="credits_exhausted", severity="warning",
                                                   recoverable=True,
                                                   message="Session paused: credits exhausted. Add credits to resume."))
            tell(reply_to or self.supervisor, CreditsExhausted(session_id))
        elif result.is_low:
            self._publish(session_id, CreditsLow(remaining=result.remaining, message=low_message(result.remaining)))
        return result

    def _owner(self, participant: str) -> bool:
        try:
            return bool(self.is_owner(participant))
        except Exception:  # noqa: BLE001 - a broken host callback must not stop charging
            logger.opt(exception=True).error("is_owner({!r}) raised; treating as not an owner", participant)
            return False

    def _publish(self, session_id: str, event: Any) -> None:
        tell(self.bus, Publish(session_id, event))


__all__ += ["Account", "Deduction"]
