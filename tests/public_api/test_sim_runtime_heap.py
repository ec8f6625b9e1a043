"""``sim_runtime`` freezes the heap it finds the first time it runs in a process (the
imported modules: ``gc.freeze()``, as the daemon does after start-up), and never again:
what a simulation leaves behind stays collectable by the next full collection."""

from __future__ import annotations

import gc
import weakref

from corvid_actors.testing import SimClock, sim_runtime


def _one_simulation(tmp_path) -> weakref.ref:
    clock = SimClock()
    rt = sim_runtime(clock, workspace_dir=tmp_path / "workspace")
    try:
        rt.start_process(rt.create_session(source="chat", name="s").id, "hi")
        clock.advance(60)
        return weakref.ref(rt)
    finally:
        rt.shutdown()
        clock.close()


def test_the_first_simulation_freezes_the_import_heap_and_later_ones_freeze_nothing(tmp_path):
    _one_simulation(tmp_path / "first")
    frozen = gc.get_freeze_count()
    assert frozen > 10_000  # the modules of corvid_actors and its dependencies
    _one_simulation(tmp_path / "second")
    assert gc.get_freeze_count() <= frozen  # (frozen objects freed by refcount leave it)


def test_a_finished_simulation_is_still_collected(tmp_path):
    _one_simulation(tmp_path / "warm")  # the freeze, if no test ran a simulation before
    runtime = _one_simulation(tmp_path / "later")
    gc.collect()
    assert runtime() is None
