"""examples/telegram_bot.py runs with one command against the stubs and prints the reply."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "telegram_bot.py"
#: a fresh interpreter imports the package and PTB, and builds a runtime: bounded, generous
EXAMPLE_TIMEOUT_S = 60


def test_the_example_bot_answers_over_the_stubs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parents[1])}
    env.pop("TELEGRAM_BOT_TOKEN", None)
    env.pop("OLLAMA_HOST", None)
    result = subprocess.run([sys.executable, str(EXAMPLE), "--stub"], capture_output=True, text=True,
                            timeout=EXAMPLE_TIMEOUT_S, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "bot → chat 42: Hello from the stub model! Long replies are split, *markdown* is escaped." \
        in result.stdout
