"""A provider SDK first imported inside a simulation stays usable: pydantic must never meet
freezegun's FakeDatetime. Reproduced by test order (a daemon test first, then the Anthropic stub
fixture test, whose simulation is the first to import ``anthropic``), so it runs that order in a
fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_anthropic_sdk_first_imported_inside_a_simulation_still_works():
    order = ["tests/daemon/test_daemon_models.py::test_forced_choices",
             "tests/public_api/test_stub_fixtures.py::test_anthropic_stub_serves_a_scripted_turn_through_the_real_sdk"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           *order], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout
    assert "FakeDatetime" not in done.stdout
