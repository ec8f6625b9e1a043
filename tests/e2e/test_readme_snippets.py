"""The guides' Python examples that need a model server run as a new user would run them:
as scripts, in a fresh interpreter, with nothing but the environment they document (the
self-contained ones are marked runnable: tests/public_api/test_guide_examples.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from corvid_actors.testing.ollama_stub import OllamaStubServer

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ROOT / "docs" / "site"
SCRIPT_S = 60.0


def python_block_after(page: str, heading: str) -> str:
    section = (GUIDES / page).read_text(encoding="utf-8").split(heading, 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run(code: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OLLAMA_", "CORVID_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True,
                          timeout=SCRIPT_S, stdin=subprocess.DEVNULL)


def test_the_library_snippet_runs_twice_and_logs_nothing(tmp_path):
    code = python_block_after("chat/index.md", "# Embed the runtime")
    assert "ensure_agent" in code
    with OllamaStubServer() as stub:
        stub.add_reply("Hello from the stub.")
        for attempt in (1, 2):  # the second run finds its agent: no UNIQUE constraint error
            result = run(code, CORVID_DATA_DIR=str(tmp_path / "data"), OLLAMA_HOST=stub.url)
            assert result.returncode == 0, f"run {attempt}: {result.stderr}"
            assert result.stderr == ""  # a library prints no log lines unless its host enables them
            assert "session_started" in result.stdout


def test_the_simulation_example_runs_outside_pytest():
    code = python_block_after("testing/index.md", "Outside pytest, `sim_runtime(clock, provider)`")
    assert "def test" not in code
    result = run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[0.0, 5.0]" and result.stderr == ""
