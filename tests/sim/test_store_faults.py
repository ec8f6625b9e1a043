"""Issue 16: store faults injected at random into a busy simulated runtime (30 chat
sessions with credits): whatever write is refused — a user message, a reply, a session
update, a usage count, a credit charge — the runtime keeps serving, no core actor dies,
every acknowledged message is stored exactly once and no message whose append was refused;
after the faults clear, every credit charge refused meanwhile has been made."""

from __future__ import annotations

import random

import pytest

from corvid_actors.config import Config
from corvid_actors.errors import StoreUnavailableError
from corvid_actors.testing import EventRecorder, StoreFault, sim_runtime

SEED = 20261123
#: the writes faulted (``open_turn`` is left out: see the issue 16 notes on the send path)
KINDS = ("append_message", "update_session", "add_session_usage", "deduct")


@pytest.mark.parametrize("seed", [SEED, SEED + 1, SEED + 2])
def test_random_store_faults_lose_nothing_acknowledged_and_kill_no_actor(sim_clock, scripted, tmp_path, seed):
    rng = random.Random(seed)
    cfg = Config().replace(credits={"credits_per_turn": 1, "low_credit_threshold": 0,
                                    "free_credits_on_first_message": 0})
    rt = sim_runtime(sim_clock, scripted, config=cfg, workspace_dir=tmp_path / "ws", with_credits=True)
    recorder = EventRecorder.attach(rt)
    try:
        sessions = [rt.create_session(source="chat", participant=f"p{i}") for i in range(30)]
        for s in sessions:
            rt.grant_credits(s.participant, 1000)
        acknowledged: dict[str, list[str]] = {s.id: [] for s in sessions}
        refused: dict[str, str] = {}
        faults: list[StoreFault] = []
        for step in range(150):
            if step % 10 == 0:
                faults.append(StoreFault(rt, rng.choice(KINDS), nth=rng.randint(1, 5),
                                         times=rng.randint(1, 3)))
            s = rng.choice(sessions)
            text = f"m{step}"
            path = "send"
            try:
                if rt.send_message(s.id, text):
                    acknowledged[s.id].append(text)
                else:
                    path = "resume"
                    if rt.resume_process(s.id, text) is not None:
                        acknowledged[s.id].append(text)  # stored by the resume before it returned
                    else:
                        refused[text] = path + ":none"
            except StoreUnavailableError as exc:
                refused[text] = f"{path}:{exc}"
            rt.settle()
            if step % 25 == 24:
                rt.clock.advance(rng.uniform(0.5, 5.0))
                rt.settle()
        for fault in faults:
            fault.clear()
        rt.clock.advance(600)  # every charge retry and restart is due
        rt.settle()

        assert rt.failure is None
        for ref in (rt.internals.supervisor, rt.internals.bus, rt.internals.timers, rt.internals.slot_pool, rt.internals.approvals, rt.internals.credits, rt.internals.store_watch):
            assert ref.is_alive()
        assert sum(f.raised for f in faults) > 0, "no fault fired: the test tested nothing"
        for s in sessions:
            users = [m.content for m in rt.internals.store.messages(s.id) if m.role == "user"]
            stored = [u for u in users if u.startswith("m")]
            acked = set(acknowledged[s.id])
            # every acknowledged message is stored, exactly once, in order
            assert [u for u in stored if u in acked] == acknowledged[s.id], s.id
            # A message whose append was refused is never stored. The cold path (a resume, or
            # a send that resets the context) stores the prompt before later writes that may
            # fail (update_session), and then reports the failure: the prompt stays stored (and
            # is answered later) — never a loss, a possible duplicate if the caller retries.
            # Owned by the send-path rework (issue 16 item 1, i16a).
            extras = {u: refused.get(u, "") for u in stored if u not in acked}
            assert all(why and "(append_message" not in why for why in extras.values()), (s.id, extras)
        # a charge refused along the way was retried: every answered turn of a session was charged
        for s in sessions:
            turns = len([r for r in recorder.of(s.id, "result")])
            charged = len([t for t in rt.credit_transactions(s.participant, 1000) if t["type"] == "deduction"])
            given_up = [r for r in recorder.of(s.id, "error") if r.event.error_type == "store_unavailable"]
            assert charged == turns or given_up, (s.id, charged, turns)
        # the runtime still serves everyone
        s = sessions[0]
        if not rt.send_message(s.id, "final"):
            rt.resume_process(s.id, "final")
        rt.settle()
        assert "final" in [m.content for m in rt.internals.store.messages(s.id)]
    finally:
        rt.shutdown()
