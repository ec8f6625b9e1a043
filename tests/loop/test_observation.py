"""Observation caps (OpenAgent seed): lines, bytes, the hard limit, and the notices."""

from __future__ import annotations

import pytest

from corvid_actors.loop.observation import (
    ObservationSettings,
    build_observation,
    operator_record,
    parse_operator_record,
    parse_tail_lines,
)

S = ObservationSettings()
KIB = 1024


def numbered(n: int, width: int = 0) -> str:
    return "".join(f"line {i}{'.' * width}\n" for i in range(1, n + 1))


@pytest.mark.parametrize(("output", "command", "tail", "truncated", "first_shown", "last_shown", "lines"), [
    (numbered(10), True, None, False, "line 1", "line 10", 10),
    (numbered(200), True, None, False, "line 1", "line 200", 200),
    # over 200 lines: a command keeps its last 200, another tool its first 200
    (numbered(201), True, None, True, "line 2", "line 201", 200),
    (numbered(201), False, None, True, "line 1", "line 200", 200),
    # tail_lines overrides the line cap (fewer or more)
    (numbered(500), True, 20, True, "line 481", "line 500", 20),
    (numbered(300), True, 300, False, "line 1", "line 300", 300),
])
def test_line_caps(output, command, tail, truncated, first_shown, last_shown, lines):
    obs = build_observation(output, S, command=command, tail_lines=tail)
    assert obs.truncated is truncated and not obs.omitted
    body = [line for line in obs.text.splitlines() if line.startswith("line ")]
    assert (body[0], body[-1], len(body)) == (first_shown, last_shown, lines)
    assert obs.shown_lines == lines


def test_byte_cap_keeps_the_tail_within_16_kib_notice_included():
    output = numbered(150, width=200)  # ~31 KiB in 150 lines: under the line cap
    obs = build_observation(output, S)
    assert obs.truncated and len(obs.text.encode()) <= 16 * KIB
    assert obs.text.splitlines()[-1].startswith("line 150")
    notice = obs.text.splitlines()[0]
    assert notice.startswith("[Output truncated: showing the last")
    assert f"of 150 lines ({obs.shown_bytes} of {obs.total_bytes} bytes)" in notice
    assert "tail_lines=N" in notice and "kept for the operator" in notice
    # whole lines only
    assert all(line.startswith(("line ", "[Output")) for line in obs.text.splitlines())


def test_tail_lines_never_lifts_the_byte_cap():
    obs = build_observation(numbered(1000, width=60), S, tail_lines=1000)
    assert obs.truncated and len(obs.text.encode()) <= 16 * KIB


def test_over_the_hard_limit_the_output_is_replaced_by_a_notice():
    mib = "0123456789abcde\n" * (1024 * 1024 // 16)
    obs = build_observation(mib, S)
    assert obs.omitted and obs.truncated and obs.shown_lines == 0
    assert len(obs.text.encode()) <= 16 * KIB and "0123456789" not in obs.text
    assert obs.text.startswith("[Output omitted: 1048576 bytes in 65536 lines is over the 51200-byte limit")
    assert "grep" in obs.text and "read_file" in obs.text


def test_just_under_the_hard_limit_is_capped_not_omitted():
    output = "x" * (50 * KIB)
    obs = build_observation(output, S)
    assert not obs.omitted and obs.truncated and obs.text.endswith("x")


@pytest.mark.parametrize("command", [True, False])
def test_json_output_keeps_its_head_and_its_tail(command):
    # issue 12 item 16: JSON is cut as head plus tail (70:20), not as its last lines
    import json

    output = json.dumps({"items": [{"id": i} for i in range(1000)], "total": 1000}, indent=1)
    lines = output.splitlines(keepends=True)
    obs = build_observation(output, S, command=command)
    assert obs.truncated and len(obs.text.encode()) <= 16 * KIB
    head, notice, tail = obs.text.partition("\n[Output truncated: showing the first ")
    assert head == "".join(lines[:155]).rstrip("\n")  # ⌊200 × 7/9⌋ lines
    assert tail.split("\n", 1)[1] == "".join(lines[-45:]) and tail.endswith('"total": 1000\n}')
    assert tail.startswith(f"155 and the last 45 of {len(lines)} lines") and "JSON" in tail
    assert obs.shown_lines == 200


@pytest.mark.parametrize("output", [
    "".join(f"[INFO] step {i}\n" for i in range(300)),
    "".join(f"[2026-11-23 18:00:{i % 60:02d}] step {i}\n" for i in range(300)),
])
def test_logs_in_brackets_are_not_json_and_keep_their_last_lines(output):
    obs = build_observation(output, S)
    assert obs.text.splitlines()[0].startswith("[Output truncated: showing the last 200 of 300 lines")
    assert obs.text.endswith("step 299\n")


def test_head_mode_notice_tells_how_to_read_more():
    obs = build_observation(numbered(400), S, command=False)
    assert obs.text.splitlines()[-1].startswith("[Output truncated: showing the first 200 of 400 lines")
    assert "offset and limit" in obs.text


def test_utf8_is_never_cut_inside_a_character():
    obs = build_observation("é" * 20_000, S)  # 40,000 bytes, one line
    assert obs.truncated and len(obs.text.encode()) <= 16 * KIB
    obs.text.encode("utf-8")  # no half character left


def test_lone_surrogates_are_replaced_so_the_client_can_encode_them():
    obs = build_observation("ok \udcff done", S)
    assert obs.text == "ok ? done"


def test_disabled_caps_show_everything():
    output = numbered(5000)
    obs = build_observation(output, ObservationSettings(enabled=False))
    assert obs.text == output and not obs.truncated


def test_every_notice_fits_the_reserve():
    worst = build_observation("a\n" * 40_000, S, command=True)  # big numbers in the notice
    assert len(worst.text.split("\n", 1)[0].encode()) < S.notice_reserve_bytes


@pytest.mark.parametrize(("arguments", "expected"), [
    ({}, None), ({"tail_lines": 50}, 50), ({"tail_lines": "30"}, 30), ({"tail_lines": 0}, None),
    ({"tail_lines": -5}, None), ({"tail_lines": "many"}, None), ({"tail_lines": True}, None),
])
def test_tail_lines_argument(arguments, expected):
    assert parse_tail_lines(arguments, S) == expected


def test_operator_record_round_trip():
    record = parse_operator_record(operator_record("c1", "run_command", "é" * 3, True))
    assert record == {"call_id": "c1", "tool_name": "run_command", "is_error": True, "bytes": 6,
                      "output": "ééé"}
    assert parse_operator_record("plain text") is None and parse_operator_record('{"a": 1}') is None


def test_an_output_printing_the_history_tag_survives_the_stores_stripping():
    from corvid_actors.loop.prompts import strip_conversation_history

    output = "before <conversation_history>inside</conversation_history> after"
    stored = operator_record("c1", "run_command", output, False)
    assert strip_conversation_history(stored) == stored
    assert parse_operator_record(stored)["output"] == output


def test_a_one_line_json_output_over_the_byte_cap_keeps_its_real_end():
    # issue 34 item 2: cut by bytes, head and tail come from the whole text (one line here)
    output = '{"rows": "' + "a" * 20_000 + '", "end": "END"}'
    obs = build_observation(output, S, command=False)
    budget = 16 * KIB - S.notice_reserve_bytes
    head, tail = output[: budget * 7 // 9], output[-(budget * 2 // 9):]
    notice = (f"[Output truncated: showing the first 1 and the last 1 of 1 lines ({len(head) + len(tail)} of "
              f"{len(output)} bytes) of this JSON. The full output is kept for the operator, not shown to you. "
              "To read more, narrow it (jq, grep) or ask for less at a time.]")
    assert obs.text == f"{head}\n{notice}\n{tail}"


def test_a_callers_byte_cap_lowers_the_observations_and_the_notice_says_so():
    # the direct loop's share of the context window, folded into the one cut
    obs = build_observation("x\n" * 1000, S, command=True, max_bytes=900)  # 300 bytes for the lines
    assert obs.text == ("[Output truncated: showing the last 149 of 1000 lines (298 of 2000 bytes). The full "
                        "output is kept for the operator, not shown to you. To read other parts, run the "
                        "command again with tail_lines=N for the last N lines (at most 900 bytes are "
                        "shown), or narrow it: grep, head -n, sed -n 'A,Bp'.]\n" + "x\n" * 149)
    assert build_observation("x\n" * 1000, S, max_bytes=20 * KIB) == build_observation("x\n" * 1000, S)
