"""The package's public API (issue 17 item 4): ``corvid_actors.__all__`` names resolve, they
report ``corvid_actors`` as their module (as httpx's names do), their type hints still
resolve, and importing the package does not load the runtime."""

from __future__ import annotations

import subprocess
import sys
import typing

import corvid_actors


def test_every_public_name_resolves_and_reports_the_package_as_its_module():
    assert len(set(corvid_actors.__all__)) == len(corvid_actors.__all__)
    for name in corvid_actors.__all__:
        value = getattr(corvid_actors, name)
        assert value.__name__ == name
        assert value.__module__ == "corvid_actors", name
        assert name in dir(corvid_actors)


def test_reprs_show_the_public_path():
    assert repr(corvid_actors.Runtime) == "<class 'corvid_actors.Runtime'>"
    assert repr(corvid_actors.ToolSpec) == "<class 'corvid_actors.ToolSpec'>"
    assert repr(corvid_actors.SessionStarted) == "<class 'corvid_actors.SessionStarted'>"


def test_type_hints_of_public_classes_still_resolve():
    # get_type_hints looks names up in __module__'s namespace: the rewrite must not break it
    for name in corvid_actors.__all__:
        value = getattr(corvid_actors, name)
        if isinstance(value, type):
            typing.get_type_hints(value)
    assert typing.get_type_hints(corvid_actors.Config)["supervisor"].__name__ == "SupervisorConfig"


def test_the_public_names_are_the_defining_modules_objects():
    from corvid_actors.core.vocabulary import ToolSpec
    from corvid_actors.runtime import Runtime

    assert corvid_actors.Runtime is Runtime
    assert corvid_actors.ToolSpec is ToolSpec


def test_an_unknown_name_is_an_attribute_error():
    try:
        corvid_actors.NoSuchName  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_importing_the_package_does_not_load_the_runtime_and_logs_nothing():
    code = ("import sys, corvid_actors; from loguru import logger; "
            "print(sorted(m for m in ('corvid_actors.runtime', 'corvid_actors.actors', 'pykka', 'anthropic') "
            "if m in sys.modules)); print(logger._core.activation_list)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded, activation = done.stdout.splitlines()
    assert loaded == "[]"
    assert "('corvid_actors.', False)" in activation
