"""Table tests of text-based tool calling: family detection, prompt, parser, repair, gate."""

from __future__ import annotations

import json

import pytest

from corvid_actors.core.vocabulary import ToolSpec
from corvid_actors.providers.base import TextDelta, ToolCall
from corvid_actors.providers.text_tools import (
    TOOL_OUTPUT_CLOSE,
    TOOL_OUTPUT_OPEN,
    CallTextGate,
    format_tool_calls,
    parse_tool_calls,
    repair_arguments,
    repair_native_call,
    repair_tool_name,
    tool_instructions,
    uses_text_tools,
    wrap_tool_output,
)


def _spec(name: str, *props: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=f"the {name} tool",
        parameters={"type": "object", "properties": {p: {"type": "string"} for p in props}},
    )


TOOLS = (
    _spec("read_file", "path"),
    _spec("write_file", "path", "content"),
    _spec("run_command", "command"),
    _spec("corvid_send_message", "to_agent", "message"),
    _spec("search_files", "pattern", "path"),
)
NAMES = [t.name for t in TOOLS]


# --- family detection ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("qwen3:8b", True),
        ("qwen3-coder:30b", True),
        ("qwen3.5:14b", True),
        ("hf.co/unsloth/Qwen3-8B-GGUF:Q4_K_M", True),
        ("gpt-oss:20b", True),
        ("deepseek-v3.2", True),
        ("glm4:9b", True),
        ("devstral:24b", True),
        ("kimi-k2:1t", True),
        ("qwen2.5:7b", False),
        ("qwen2.5-coder:14b", False),
        ("llama3.1:8b", False),
        ("gemma3:4b", False),
        ("mistral", False),
        ("llama3.1:cloud", True),
        ("gpt-oss:120b-cloud", True),
        ("mistral-large-cloud", True),
    ],
)
def test_uses_text_tools_by_family_and_cloud(model: str, expected: bool) -> None:
    assert uses_text_tools(model) is expected


def test_family_list_is_configurable_but_cloud_always_text() -> None:
    assert uses_text_tools("llama3.1:8b", ("llama",)) is True
    assert uses_text_tools("qwen3:8b", ()) is False
    assert uses_text_tools("qwen3:cloud", ()) is True


# --- prompt side -----------------------------------------------------------------------


def test_tool_instructions_name_every_tool_with_its_schema_and_the_format() -> None:
    text = tool_instructions(TOOLS)
    for spec in TOOLS:
        assert f"### {spec.name}" in text
        assert json.dumps(spec.parameters, sort_keys=True) in text
    assert "JSON array" in text
    assert '"name"' in text and '"arguments"' in text
    assert TOOL_OUTPUT_OPEN in text and TOOL_OUTPUT_CLOSE in text


def test_wrap_tool_output_uses_the_markers_and_names_the_tool() -> None:
    wrapped = wrap_tool_output("read_file", "line 1\nline 2")
    assert wrapped.startswith(TOOL_OUTPUT_OPEN) and wrapped.endswith(TOOL_OUTPUT_CLOSE)
    assert "read_file returned" in wrapped and "line 1\nline 2" in wrapped
    assert "read_file failed" in wrap_tool_output("read_file", "boom", is_error=True)


def test_format_tool_calls_round_trips_through_the_parser() -> None:
    original = (
        ToolCall("x", "read_file", {"path": "a.py"}),
        ToolCall("y", "run_command", {"command": "ls"}),
    )
    calls, rest = parse_tool_calls(format_tool_calls(original), TOOLS)
    assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in original]
    assert rest == ""


# --- parser ----------------------------------------------------------------------------

READ_A = ("read_file", {"path": "a.py"})


@pytest.mark.parametrize(
    ("text", "expected_calls", "expected_rest"),
    [
        ('[{"name": "read_file", "arguments": {"path": "a.py"}}]', [READ_A], ""),
        ('{"name": "read_file", "arguments": {"path": "a.py"}}', [READ_A], ""),
        ('```json\n[{"name": "read_file", "arguments": {"path": "a.py"}}]\n```', [READ_A], ""),
        ('```\n{"name": "read_file", "arguments": {"path": "a.py"}}\n```', [READ_A], ""),
        (
            'Let me look at it.\n[{"name": "read_file", "arguments": {"path": "a.py"}}]\nThen I decide.',
            [READ_A],
            "Let me look at it.\n\nThen I decide.",
        ),
        (
            'Checking.\n```json\n{"name": "read_file", "arguments": {"path": "a.py"}}\n```',
            [READ_A],
            "Checking.",
        ),
        (
            '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>',
            [READ_A],
            "",
        ),
        ('<tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}', [READ_A], ""),
        ('read_file({"path": "a.py"})', [READ_A], ""),
        ('I will run read_file({"path": "a.py"}) now.', [READ_A], "I will run  now."),
        (
            '<|python_tag|>run_command({"command": "ls -la"})',
            [("run_command", {"command": "ls -la"})],
            "",
        ),
        ('{"name": "read_file", "arguments": "{\\"path\\": \\"a.py\\"}"}', [READ_A], ""),
        ('{"name": "read_file", "parameters": {"path": "a.py"}}', [READ_A], ""),
        ('{"function": {"name": "read_file", "arguments": {"path": "a.py"}}}', [READ_A], ""),
        ('{"name": "read_file"}', [("read_file", {})], ""),
        (
            '[{"name": "read_file", "arguments": {"path": "a.py"}}, '
            '{"name": "run_command", "arguments": {"command": "make"}}]',
            [READ_A, ("run_command", {"command": "make"})],
            "",
        ),
        (
            '<tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}</tool_call>\n'
            '<tool_call>{"name": "run_command", "arguments": {"command": "make"}}</tool_call>',
            [READ_A, ("run_command", {"command": "make"})],
            "",
        ),
    ],
)
def test_parser_accepts_every_call_format(
    text: str, expected_calls: list[tuple[str, dict]], expected_rest: str
) -> None:
    calls, rest = parse_tool_calls(text, TOOLS)
    assert [(c.name, c.arguments) for c in calls] == expected_calls
    assert all(c.arguments_error is None for c in calls)
    assert [c.id for c in calls] == [f"call_{i}" for i in range(len(calls))]
    assert rest == expected_rest


# issue 12 item 18: every form the original's parser accepts
@pytest.mark.parametrize(
    ("text", "expected_calls", "expected_rest"),
    [
        ('read_file(path="a.py")', [READ_A], ""),
        ("read_file(path='a.py')", [READ_A], ""),
        ('I will call read_file(path="a.py") now.', [READ_A], "I will call  now."),
        (
            'run_command(command="echo \\"hi\\", there", timeout=20)',
            [("run_command", {"command": 'echo "hi", there', "timeout": 20})],
            "",
        ),
        (
            'write_file(path="a.py", content="line1\nline2 (x)")',  # a raw newline: Python cannot parse it
            [("write_file", {"path": "a.py", "content": "line1\nline2 (x)"})],
            "",
        ),
        (
            "search_files(pattern='TODO', path=None, recursive=true, depth=2.5, globs=[\"*.py\"])",
            [("search_files", {"pattern": "TODO", "path": None, "recursive": True, "depth": 2.5,
                               "globs": ["*.py"]})],
            "",
        ),
        ('<|python_tag|>read_file(path="a.py")', [READ_A], ""),
        ("<|python_tag|>corvid_send_message()", [("corvid_send_message", {})], ""),
        (
            'Thought: I need the file.\nAction: read_file\nAction Input: {"path": "a.py"}',
            [READ_A],
            "Thought: I need the file.",
        ),
        (
            'Action: read_file\nAction Input: ```json\n{"file_path": "a.py"}\n```',
            [READ_A],
            "",
        ),
        ("Action: run_command\nAction Input: ls -la", [("run_command", {"command": "ls -la"})], ""),
        (
            'Action: bash\nAction Input: {"command": "make test"}\nObservation: pending',
            [("run_command", {"command": "make test"})],
            "Observation: pending",
        ),
        ('read_file\n{"path": "a.py"}', [READ_A], ""),
        ('Reading it.\nread_file\n{\n  "path": "a.py"\n}\nThen done.', [READ_A], "Reading it.\n\nThen done."),
        ('```python\nread_file(path="a.py")\n```', [READ_A], ""),
    ],
)
def test_parser_accepts_the_originals_other_call_forms(
    text: str, expected_calls: list[tuple[str, dict]], expected_rest: str
) -> None:
    calls, rest = parse_tool_calls(text, TOOLS)
    assert [(c.name, c.arguments) for c in calls] == expected_calls
    assert all(c.arguments_error is None for c in calls)
    assert rest == expected_rest


@pytest.mark.parametrize(
    "text",
    [
        # one call written in several forms runs once
        '<tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}</tool_call>\n'
        '```json\n[{"name": "read_file", "arguments": {"path": "a.py"}}]\n```',
        'read_file({"path": "a.py"})\nor, as JSON: [{"name": "read_file", "arguments": {"path": "a.py"}}]',
        '[{"name": "read_file", "arguments": {"path": "a.py"}}]\nread_file(path="a.py")',
        'Action: read_file\nAction Input: {"path": "a.py"}\n\n{"name": "read_file", "arguments": {"path": "a.py"}}',
        '<|python_tag|>read_file(path="a.py")\n<tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}'
        "</tool_call>",
        'read_file\n{"path": "a.py"}\nread_file(path="a.py")',
    ],
)
def test_one_call_in_several_forms_runs_once(text: str) -> None:
    calls, rest = parse_tool_calls(text, TOOLS)
    assert [(c.name, c.arguments) for c in calls] == [READ_A]
    assert "read_file" not in rest and "a.py" not in rest  # every form's text is stripped


@pytest.mark.parametrize(
    ("text", "winner"),
    [
        # the original's order: python tag > name({json}) > <tool_call> > ReAct > JSON > name line > kwargs
        ('read_file({"path": "a.py"})\n<|python_tag|>run_command(command="ls")', "run_command"),
        ('read_file({"path": "a.py"})\n<tool_call>{"name": "run_command", "arguments": {"command": "ls"}}'
         "</tool_call>", "read_file"),
        ('<tool_call>{"name": "run_command", "arguments": {"command": "ls"}}</tool_call>\n'
         'Action: read_file\nAction Input: {"path": "a.py"}', "run_command"),
        ('Action: run_command\nAction Input: {"command": "ls"}\n\n'
         '[{"name": "read_file", "arguments": {"path": "a.py"}}]', "run_command"),
        ('[{"name": "run_command", "arguments": {"command": "ls"}}]\nread_file\n{"path": "a.py"}', "run_command"),
        ('run_command\n{"command": "ls"}\nread_file(path="a.py")', "run_command"),
        # a malformed call of a better form does not hide a well-formed one
        ('read_file({path: a.py})\n[{"name": "run_command", "arguments": {"command": "ls"}}]', "run_command"),
    ],
)
def test_only_the_best_ranked_form_runs(text: str, winner: str) -> None:
    calls, _ = parse_tool_calls(text, TOOLS)
    assert [c.name for c in calls] == [winner]
    assert calls[0].arguments_error is None


@pytest.mark.parametrize(
    "text",
    [
        "All done, the tests pass.",
        'The config is {"debug": true} for now.',
        '```json\n{"status": "ok", "count": 3}\n```',
        '```python\nprint({"name": "x"})\nresult = json.dumps({"a": 1})\n```',
        'Use json.dumps({"a": 1}) to serialise.',
        "A list [1, 2, 3] and a link [docs](http://x).",
        'Call print(path="a.py") or open(file="x") in Python.',  # not offered tools
        "read_file() needs a path.",  # no arguments outside the python tag: prose
        'read_file("a.py") takes the path first.',  # positional: nothing says which parameter
        "Action: think harder\nAction Input: nothing",  # not an offered tool
        "The read_file\ntool reads files.",
    ],
)
def test_parser_leaves_ordinary_text_alone(text: str) -> None:
    calls, rest = parse_tool_calls(text, TOOLS)
    assert calls == []
    assert rest == text.strip()


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ('{"name": "read_file", "arguments": "{path: a.py}"}', "read_file"),
        ('{"name": "read_file", "arguments": ["a.py"]}', "read_file"),
        ('```json\n[{"name": "read_file", "arguments": {"path": "a.py",}}\n```', "read_file"),
        (
            '<tool_call>{"name": "run_command", "arguments": {command: ls}}</tool_call>',
            "run_command",
        ),
        ('read_file({path: "a.py"})', "read_file"),
        ('Reading now.\n[{"name": "read_file", "arguments": {"path": "a.py"]', "read_file"),
    ],
)
def test_malformed_arguments_keep_the_call_with_an_error(text: str, name: str) -> None:
    calls, _ = parse_tool_calls(text, TOOLS)
    assert len(calls) == 1
    assert calls[0].name == name
    assert calls[0].arguments == {}
    assert calls[0].arguments_error


def test_parser_strips_the_call_text_and_keeps_the_prose() -> None:
    text = 'First I read the file.\n\n```json\n[{"name": "read_file", "arguments": {"path": "a"}}]\n```\n\n\n\nDone.'
    calls, rest = parse_tool_calls(text, TOOLS)
    assert len(calls) == 1
    assert rest == "First I read the file.\n\nDone."


def test_parser_repairs_names_and_arguments_of_parsed_calls() -> None:
    text = '[{"name": "Read_File", "arguments": {"file_path": "a.py"}}, {"name": "send_message", "arguments": {"to_agent": "b", "message": "hi"}}]'
    calls, _ = parse_tool_calls(text, TOOLS)
    assert [(c.name, c.arguments) for c in calls] == [
        ("read_file", {"path": "a.py"}),
        ("corvid_send_message", {"to_agent": "b", "message": "hi"}),
    ]


def test_unknown_tool_names_in_json_calls_are_kept_for_the_loop_to_reject() -> None:
    calls, _ = parse_tool_calls('{"name": "launch_rocket", "arguments": {}}', TOOLS)
    assert [c.name for c in calls] == ["launch_rocket"]


def test_parser_accepts_bare_tool_names() -> None:
    calls, _ = parse_tool_calls('{"name": "READ_FILE", "arguments": {"file_path": "a"}}', NAMES)
    # names only: the name is repaired, the arguments are not (no schema to consult)
    assert calls[0].name == "read_file" and calls[0].arguments == {"file_path": "a"}


# --- repair ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("read_file", {}, "read_file"),
        ("Read_File", {}, "read_file"),
        ("READ-FILE", {}, "read_file"),
        ("readfile", {}, "read_file"),
        ("corvid_read_file", {}, "read_file"),
        ("send_message", {}, "corvid_send_message"),
        ("bash", {"command": "ls"}, "run_command"),
        ("shell", {"command": "ls"}, "run_command"),
        ("read", {}, "read_file"),
        ("search", {}, "search_files"),
        ("file", {}, "file"),  # ambiguous: read_file, write_file, search_files
        ("run", {}, "run"),  # shorter than the fuzzy minimum
        ("launch_rocket", {}, "launch_rocket"),
    ],
)
def test_repair_tool_name(name: str, arguments: dict, expected: str) -> None:
    assert repair_tool_name(name, NAMES, arguments) == expected


def test_command_argument_does_not_pick_run_command_when_it_is_not_offered() -> None:
    assert repair_tool_name("bash", ["read_file"], {"command": "ls"}) == "bash"


@pytest.mark.parametrize(
    ("arguments", "props", "expected"),
    [
        ({"file_path": "a"}, ("path",), {"path": "a"}),
        ({"filepath": "a"}, ("path",), {"path": "a"}),
        ({"filename": "a"}, ("path",), {"path": "a"}),
        ({"source_path": "a"}, ("path",), {"path": "a"}),
        ({"cmd": "ls"}, ("command",), {"command": "ls"}),
        ({"contents": "x", "file": "a"}, ("path", "content"), {"content": "x", "path": "a"}),
        # never overwrite an existing key
        ({"path": "a", "file_path": "b"}, ("path",), {"path": "a", "file_path": "b"}),
        # the schema knows the alias itself: leave it
        ({"filename": "a"}, ("path", "filename"), {"filename": "a"}),
        # nothing to map onto
        ({"colour": "red"}, ("path",), {"colour": "red"}),
    ],
)
def test_repair_arguments(arguments: dict, props: tuple[str, ...], expected: dict) -> None:
    schema = _spec("t", *props).parameters
    assert repair_arguments(arguments, schema) == expected


def test_repair_arguments_without_schema_changes_nothing() -> None:
    assert repair_arguments({"file_path": "a"}, None) == {"file_path": "a"}
    assert repair_arguments({"file_path": "a"}, {"type": "object"}) == {"file_path": "a"}


def test_repair_native_call_keeps_id_and_fixes_name_and_arguments() -> None:
    fixed = repair_native_call(ToolCall("call_3", "ReadFile", {"filename": "x"}), TOOLS)
    assert fixed == ToolCall("call_3", "read_file", {"path": "x"})


# --- stream gate -----------------------------------------------------------------------


def _gate_run(chunks: list[str]) -> tuple[str, str]:
    shown: list[str] = []
    gate = CallTextGate(lambda e: shown.append(e.text if isinstance(e, TextDelta) else ""), NAMES)
    full = ""
    for chunk in chunks:
        gate.feed(chunk)
        full += chunk
    _, rest = parse_tool_calls(full, TOOLS)
    gate.finish(rest)
    return "".join(shown), rest


def test_gate_never_shows_the_call_text() -> None:
    chunks = [
        "Sure, I will ",
        "check the file.\n",
        "[",
        '{"name": "read_',
        'file", "arguments": {"path": "a"}}]',
    ]
    shown, rest = _gate_run(chunks)
    assert rest == "Sure, I will check the file."
    assert "name" not in shown and "[" not in shown
    assert shown.strip() == rest


def test_gate_streams_plain_text_and_completes_it_at_the_end() -> None:
    chunks = ["This is a long ", "reply without ", "any tool calls ", "in it at all."]
    shown: list[str] = []
    gate = CallTextGate(lambda e: shown.append(e.text), NAMES)
    for chunk in chunks:
        gate.feed(chunk)
    assert shown, "text before the holdback window must stream right away"
    gate.finish("".join(chunks))
    assert "".join(shown) == "".join(chunks)


def test_gate_releases_a_false_alarm_at_the_end() -> None:
    shown, rest = _gate_run(["The result was ", '{"ok": true}', " and that is fine."])
    assert shown == rest == 'The result was {"ok": true} and that is fine.'


@pytest.mark.parametrize(
    "chunks",
    [
        ["Reading ", 'read_file(path=', '"a.py")'],
        ["Thought: go\n", "Action: read_file\n", 'Action Input: {"path": "a.py"}'],
        ["Reading.\n", "read_file\n", '{"path": "a.py"}'],
    ],
)
def test_gate_holds_back_the_originals_other_forms(chunks: list[str]) -> None:
    shown, rest = _gate_run(chunks)
    assert "a.py" not in shown and "Action Input" not in shown
    assert shown.strip() == rest


def test_gate_holds_back_name_call_syntax() -> None:
    shown, rest = _gate_run(["Running ", "run_command(", '{"command": "ls"})'])
    assert "run_command" not in shown
    assert rest == "Running"
