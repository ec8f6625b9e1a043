"""Options of the whole test run: the long suites are bounded unless asked for in full.

The chaos suite (``tests/chaos``) and the memory soak (``tests/sim/test_soak.py``) run in
every test run, at a size that keeps the README's test command fast. The full sizes — the
sizes their findings were measured at — run with:

- ``--chaos-full``: the chaos scenario with 200 sessions instead of 60;
- ``--soak-full``: the memory soak with 1,200 churned sessions instead of 600;
- ``--explore-full``: the seed scenarios under 200 explored interleavings each instead of 30;
- ``--full``: all three.

Tests read the choice through the ``chaos_full`` and ``soak_full`` fixtures.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("corvid-actors", "corvid-actors long suites")
    group.addoption("--chaos-full", action="store_true", default=False,
                    help="run the chaos suite at its full size (200 sessions; default 60)")
    group.addoption("--soak-full", action="store_true", default=False,
                    help="run the memory soak at its full size (1,200 sessions; default 600)")
    group.addoption("--explore-full", action="store_true", default=False,
                    help="explore the seed scenarios under 200 seeds each (default 30)")
    group.addoption("--full", action="store_true", default=False,
                    help="--chaos-full, --soak-full and --explore-full")


def pytest_report_header(config: pytest.Config) -> str:
    chaos = "full" if _full(config, "--chaos-full") else "bounded (--chaos-full for all of it)"
    soak = "full" if _full(config, "--soak-full") else "bounded (--soak-full for all of it)"
    explore = "200 seeds" if _full(config, "--explore-full") else "30 seeds (--explore-full for 200)"
    return f"chaos suite: {chaos}; memory soak: {soak}; explored scenarios: {explore}"


def _full(config: pytest.Config, option: str) -> bool:
    return bool(config.getoption(option) or config.getoption("--full"))


@pytest.fixture(scope="session")
def chaos_full(pytestconfig: pytest.Config) -> bool:
    """True under ``--chaos-full`` or ``--full``."""
    return _full(pytestconfig, "--chaos-full")


@pytest.fixture(scope="session")
def explore_full(pytestconfig: pytest.Config) -> bool:
    """True under ``--explore-full`` or ``--full``."""
    return _full(pytestconfig, "--explore-full")


@pytest.fixture(scope="session")
def soak_full(pytestconfig: pytest.Config) -> bool:
    """True under ``--soak-full`` or ``--full``."""
    return _full(pytestconfig, "--soak-full")
