"""Every code block the docs mark runnable is run here, so no guide can drift from the code.

A block is runnable when the line before its ```` ```python ```` fence is
``<!-- runnable -->``, both at the start of their lines (docs/site/contributing.md). Blocks that define ``test_…`` functions
are pytest tests: they are compiled from the page, line numbers and all, into this module,
so pytest collects them with their fixtures (``runtime``, ``scripted``, ``recorder``,
``sim_clock``, ``ollama_stub``, ``arrange``, ``tmp_path`` …) and a failure points at the
page's line. Any other runnable block is a script, run as a reader would run it: in a fresh
interpreter, with no model server or corvid settings in its environment.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- runnable -->"
SCRIPT_S = 60.0


@dataclass(frozen=True)
class Block:
    """A runnable code block: where it is (``page``, the 1-based line of its first code line)
    and its code."""

    page: str
    line: int
    code: str

    @property
    def is_test(self) -> bool:
        return re.search(r"^def test_", self.code, re.M) is not None

    def compiled(self):
        # blank lines in front keep the page's line numbers in tracebacks
        return compile("\n" * (self.line - 1) + self.code, self.page, "exec")


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs" / "site").rglob("*.md"))]


def runnable_blocks(path: Path) -> list[Block]:
    """The page's runnable blocks; a marker not followed by a ```python fence is an error."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    blocks = []
    for n, line in enumerate(lines):
        if line != MARKER:  # at the start of a line: an indented one is an example of the marker
            continue
        fence = n + 1
        if fence >= len(lines) or not re.match(r"```python(\s|$)", lines[fence]):
            raise ValueError(f"{page}:{n + 1}: {MARKER} must be followed by a ```python fence")
        end = next((i for i in range(fence + 1, len(lines)) if lines[i].startswith("```")), None)
        if end is None:
            raise ValueError(f"{page}:{fence + 1}: the runnable block is never closed")
        blocks.append(Block(page, fence + 2, "\n".join(lines[fence + 1:end]) + "\n"))
    return blocks


BLOCKS = [block for path in doc_pages() for block in runnable_blocks(path)]
TESTS = [block for block in BLOCKS if block.is_test]
SCRIPTS = [block for block in BLOCKS if not block.is_test]


def _define_tests() -> list[str]:
    """Compile the test blocks into this module; their names must be unique."""
    names: list[str] = []
    for block in TESTS:
        namespace: dict[str, object] = {"__name__": __name__}
        exec(block.compiled(), namespace)  # noqa: S102 - the documented example, as written
        for name, value in namespace.items():
            if name.startswith("test_") and callable(value):
                assert name not in globals(), f"{block.page}:{block.line}: a second {name}"
                globals()[name] = value
                names.append(name)
    return names


DOC_TESTS = _define_tests()


def test_the_guides_keep_their_runnable_examples():
    # the examples moved from the README's "Testing your agents" (issue 41) stay runnable
    assert {
        "test_a_chat_session_restarts_after_5_then_15_seconds",
        "test_the_user_allows_a_read_and_denies_a_write",
        "test_each_session_follows_its_own_script",
        "test_a_resumed_session_answers_its_unanswered_message_in_persona",
        "test_a_turn_killed_mid_call_is_answered_after_the_restart",
        "test_a_crashed_chat_session_is_restarted_after_5_seconds",   # the README's tour
    } <= set(DOC_TESTS)
    assert {block.page for block in SCRIPTS} >= {"docs/site/testing/index.md"}


def test_a_marker_without_a_python_block_is_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"text\n{MARKER}\n```\nls\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="must be followed by a ```python fence"):
        runnable_blocks(page)


def test_an_indented_marker_is_an_example_not_a_marker(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"- a list item:\n\n  {MARKER}\n  ```python\n  raise SystemExit(1)\n  ```\n", encoding="utf-8")
    assert runnable_blocks(page) == []


def test_a_failing_block_points_at_its_page_line(tmp_path):
    (tmp_path / "guide.md").write_text(f"# A\n\n{MARKER}\n```python\nx = 1\nraise KeyError(x)\n```\n")
    [block] = runnable_blocks(tmp_path / "guide.md")
    with pytest.raises(KeyError) as raised:
        exec(block.compiled(), {})  # noqa: S102
    last = traceback.extract_tb(raised.value.__traceback__)[-1]
    assert (last.filename, last.lineno, block.is_test) == ("guide.md", 6, False)


@pytest.mark.parametrize("block", SCRIPTS, ids=[f"{b.page}:{b.line}" for b in SCRIPTS])
def test_a_runnable_script_runs_in_a_fresh_interpreter(block):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OLLAMA_", "CORVID_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", block.code], env=env, capture_output=True, text=True,
                          timeout=SCRIPT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{block.page}:{block.line}\n{done.stderr}"


#: python blocks that are excerpts, not code that parses: (page, first words) -> who checks them
EXCERPTS = {
    ("docs/site/chat/asyncio.md", "async def reply_events"): "tests/aio/test_starlette_sse_example.py",
}


def test_every_python_block_of_the_docs_parses():
    # the unmarked blocks are fragments (a `runtime` from the text around them), but they are
    # still Python: a renamed keyword or a stray edit shows here
    unparsable = []
    for path in doc_pages():
        text = path.read_text(encoding="utf-8")
        page = path.relative_to(ROOT).as_posix()
        for found in re.finditer(r"^```python[^\n]*\n(.*?)^```", text, re.S | re.M):
            code = found.group(1)
            if any(page == p and code.startswith(start) for p, start in EXCERPTS):
                continue
            try:
                ast.parse(code)
            except SyntaxError as exc:
                unparsable.append(f"{page}:{text[:found.start()].count(chr(10)) + 1}: {exc.msg}")
    assert unparsable == []
