"""Doom-loop detection: the same tool with identical input N times in a row."""

from corvid_actors.loop.doom import canonical_input, is_doom_loop


def test_three_identical_calls_are_a_doom_loop() -> None:
    calls = [("read_file", {"path": "a.py"})] * 3
    assert is_doom_loop(calls)


def test_fewer_calls_than_threshold_are_not() -> None:
    assert not is_doom_loop([("read_file", {"path": "a.py"})] * 2)
    assert not is_doom_loop([])


def test_only_the_last_calls_count() -> None:
    calls = [("list_files", {}), ("read_file", {"path": "a"}), ("read_file", {"path": "a"}),
             ("read_file", {"path": "a"})]
    assert is_doom_loop(calls)
    calls.append(("list_files", {}))
    assert not is_doom_loop(calls)


def test_different_input_or_tool_breaks_the_streak() -> None:
    assert not is_doom_loop([("read_file", {"path": "a"})] * 2 + [("read_file", {"path": "b"})])
    assert not is_doom_loop([("read_file", {"path": "a"})] * 2 + [("write_file", {"path": "a"})])


def test_input_is_compared_by_canonical_json() -> None:
    calls = [
        ("search", {"q": "x", "opts": {"a": 1, "b": [1, 2]}}),
        ("search", {"opts": {"b": [1, 2], "a": 1}, "q": "x"}),
        ("search", {"opts": {"a": 1, "b": [1, 2]}, "q": "x"}),
    ]
    assert is_doom_loop(calls)
    # list order is meaningful, key order is not
    assert canonical_input({"b": [2, 1], "a": 1}) != canonical_input({"a": 1, "b": [1, 2]})


def test_threshold_is_configurable() -> None:
    calls = [("run_command", {"command": "ls"})] * 4
    assert is_doom_loop(calls, threshold=4)
    assert not is_doom_loop(calls[:3], threshold=4)
    assert not is_doom_loop(calls, threshold=0)
