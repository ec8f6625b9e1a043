"""The session actor keeps its side of the Loop protocol (``corvid_actors.loop.effects.Loop``):
it hands every user message to the loop, and it applies the clean-up effects ``abort()``
returns — those that publish and start nothing — and drops the rest."""

from __future__ import annotations

from typing import Any

from corvid_actors.events import SystemEvent
from corvid_actors.loop import effects as fx
from corvid_actors.testing import EventRecorder, sim_runtime
from corvid_actors.wiring.loop_factories import LoopSpec, conversation_loop


class CleaningLoop:
    """A real conversation loop whose ``abort()`` returns clean-up effects (and one
    effect that is not clean-up), recording what the actor hands it."""

    def __init__(self, inner: fx.Loop) -> None:
        self._inner = inner
        self.user_messages: list[str] = []
        self.aborted = 0

    def start(self, prompt: str | fx.UserMessage) -> list[fx.Effect]:
        self.user_messages.append(fx.UserMessage.of(prompt).text)
        return self._inner.start(prompt)

    def handle(self, event: fx.LoopInput) -> list[fx.Effect]:
        if isinstance(event, fx.UserMessage):
            self.user_messages.append(event.text)
        return self._inner.handle(event)

    def abort(self) -> list[fx.Effect]:
        self.aborted += 1
        self._inner.abort()
        return [
            fx.PersistMessage(role="system", content="stopped mid-conversation"),
            fx.Emit(SystemEvent(subtype="after_abort", message="never published")),
            fx.ReleaseSlot(),
        ]

    @property
    def history(self) -> Any:
        return self._inner.history


def make_runtime(sim_clock: Any, scripted: Any, tmp_path: Any, made: list[CleaningLoop]) -> Any:
    def factory(spec: LoopSpec) -> fx.Loop:
        made.append(CleaningLoop(conversation_loop(spec)))
        return made[-1]

    return sim_runtime(sim_clock, scripted, workspace_dir=tmp_path / "ws",
                       loops={"conversation": factory})


def test_the_actor_applies_aborts_clean_up_effects_and_publishes_nothing(sim_clock, scripted, tmp_path):
    made: list[CleaningLoop] = []
    rt = make_runtime(sim_clock, scripted, tmp_path, made)
    try:
        recorder = EventRecorder.attach(rt)
        s = rt.create_session(source="web", name="w")
        scripted.for_session(s.id, "hello")
        rt.start_process(s.id, "hi")
        rt.settle()
        rt.stop_process(s.id)
        rt.settle()
        assert [loop.aborted for loop in made] == [1]
        # PersistMessage was performed although the lifeline was already closed ...
        assert [(m.role, m.content) for m in rt.internals.store.messages(s.id) if m.role == "system"] == [
            ("system", "stopped mid-conversation")]
        # ... and the Emit was dropped: nothing of the incarnation follows its end
        subtypes = [r.event.subtype for r in recorder.of(s.id, "system")]
        assert "after_abort" not in subtypes
        assert recorder.types(s.id)[-1] == "session_stopped"
    finally:
        rt.shutdown()


def test_every_user_message_goes_to_the_loop_in_order(sim_clock, scripted, tmp_path):
    made: list[CleaningLoop] = []
    rt = make_runtime(sim_clock, scripted, tmp_path, made)
    try:
        s = rt.create_session(source="web", name="w")
        scripted.for_session(s.id, "one", "two", "three")
        rt.start_process(s.id, "first")
        assert rt.send_message(s.id, "second") and rt.send_message(s.id, "third")
        rt.settle()
        assert made[0].user_messages == ["first", "second", "third"]
        assistant = [m.content for m in rt.internals.store.messages(s.id) if m.role == "assistant"]
        assert assistant == ["one", "two", "three"]
    finally:
        rt.shutdown()
