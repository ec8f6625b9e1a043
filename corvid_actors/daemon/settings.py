"""What ``serve``, ``run`` and the admin commands are configured with.

``load_daemon_config`` is :func:`corvid_actors.config.load_config` plus the ``CORVID_*``
variables of the ``[daemon]`` section and the command line's own values; the admin
commands use it to find the socket without starting anything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corvid_actors.errors import ConfigError

if TYPE_CHECKING:
    from corvid_actors.config import Config

#: environment variables for the [daemon] section: variable -> (key, converter)
DAEMON_ENV: Mapping[str, tuple[str, type]] = {
    "CORVID_DAEMON_PROVIDER": ("provider", str),
    "CORVID_ADMIN_TOKEN": ("admin_token", str),
    "CORVID_LOG_FORMAT": ("log_format", str),
    "CORVID_LOG_LEVEL": ("log_level", str),
    "CORVID_SHUTDOWN_TIMEOUT_S": ("shutdown_timeout_s", float),
}


@dataclass(frozen=True)
class ServeOptions:
    """Command-line choices of ``serve``; None keeps the configured value."""

    config_file: str | None = None
    data_dir: str | None = None
    provider: str | None = None
    log_format: str | None = None
    log_level: str | None = None
    stub_script: str | None = None
    #: fork, log to ``<data dir>/daemon.log`` and return once the daemon is ready
    detach: bool = False
    #: ``--json``: the detached daemon's facts as one JSON object; JSON log lines otherwise
    json: bool = False


def load_daemon_config(config_file: str | None = None, *, data_dir: str | None = None,
                       environ: Mapping[str, str] | None = None, **daemon: Any) -> Config:
    """The configuration the daemon and its CLI use: ``load_config`` plus the ``CORVID_*``
    variables of :data:`DAEMON_ENV`, plus explicit values (``data_dir``, daemon keys)."""
    from corvid_actors.config import load_config  # not for `--help` and `--version`

    env = os.environ if environ is None else environ
    config = load_config(config_file, env)
    overrides: dict[str, Any] = {}
    for var, (key, convert) in DAEMON_ENV.items():
        raw = env.get(var)
        if raw:
            try:
                overrides[key] = convert(raw)
            except ValueError:
                raise ConfigError(f"environment variable {var}={raw!r} is not valid for daemon.{key}") from None
    overrides.update({k: v for k, v in daemon.items() if v is not None})
    if overrides:
        config = config.replace(daemon=overrides)
    if data_dir:
        config = config.replace(store={"data_dir": str(Path(data_dir).expanduser().resolve())})
    return config


def data_dir_of(config: Config) -> Path:
    """The daemon's data directory (``store.data_dir``, ``~`` expanded)."""
    return Path(config.store.data_dir).expanduser()




def package_version() -> str:
    """The installed corvid-actors version (``unknown`` when running from a source tree);
    here rather than from the runtime, so that ``--version`` and ``--help`` load no actor."""
    try:
        return version("corvid-actors")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"
