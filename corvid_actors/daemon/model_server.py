"""Which model server the daemon (and ``corvid-actors run``) talks to.

``daemon.provider``: ``auto`` uses a real provider when one is configured — an
``ANTHROPIC_API_KEY``, or an Ollama answering at ``providers.ollama_host`` — and
otherwise starts the stub Ollama server of ``corvid_actors.testing.ollama_stub`` in
process (part of the product: the stub servers import nothing of the test extras), which the caller announces loudly (:meth:`ModelServer.announce`, one log
record, after everything else started); ``stub`` always does; ``ollama`` / ``anthropic`` never
do (a session whose server is down pauses on the outage and resumes when it is back).

The stub answers every chat with ``daemon.stub_reply`` streamed in ``stub_chunks``
pieces ``stub_chunk_delay_s`` apart; a stub script (``serve --stub-script FILE``: a JSON
list of turns such as ``{"match": "list", "tool_calls": [["list_files", {"path": "."}]]}``)
queues scripted turns first — for demos and end-to-end tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from loguru import logger

from corvid_actors.config import Config
from corvid_actors.errors import ConfigError
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.runtime.tree import default_providers
from corvid_actors.testing.ollama_stub import OllamaStubServer, Turn

#: the banner printed when the stub stands in for a real model
STUB_BANNER = """\
==============================================================================
  NO MODEL PROVIDER IS CONFIGURED: serving sessions with the built-in STUB model
  server at {url} (canned replies, no real model).
  For real answers, start Ollama and set OLLAMA_HOST (providers.ollama_host),
  or set ANTHROPIC_API_KEY; then start again.
==============================================================================""".rstrip()

#: requests the daemon's built-in stub keeps for inspection: a bounded ring, because a
#: daemon serves requests for months (tests build their own stub, which keeps every one)
STUB_KEPT_REQUESTS = 100


@dataclass
class ModelServer:
    """The providers a Runtime should use, the config that points at them, and how to stop."""

    config: Config
    providers: dict[str, Any]
    description: str
    stub_url: str | None = None
    _close: Callable[[], None] = field(default=lambda: None, repr=False)
    #: the built-in stub server object when the stub serves (for inspection), else None
    stub: Any = field(default=None, repr=False)

    def close(self) -> None:
        """Stop the stub server, when one was started (nothing to do for a real provider)."""
        self._close()

    @property
    def banner(self) -> str:
        """The loud notice that the stub stands in for a real model ("" when it does not)."""
        return STUB_BANNER.format(url=self.stub_url) if self.stub_url else ""

    def announce(self) -> None:
        """Log the stub banner as one WARNING record. The daemon calls this once everything
        else has started, so a fatal configuration error is never printed after it."""
        if self.stub_url:
            logger.warning("\n" + self.banner)


def ollama_answers(config: Config) -> bool:
    """Does an Ollama server answer at ``providers.ollama_host`` (bounded by the probe timeout)?"""
    probe = OllamaProvider(config.providers.ollama_host, probe_timeout_s=config.daemon.provider_probe_timeout_s)
    return probe.health()


def load_stub_script(path: str | Path) -> list[Any]:
    """Turns for the stub from a JSON list of objects with ``Turn``'s fields."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the stub script {path}: {exc}") from None
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ConfigError(f"stub script {path} must be a JSON list of objects")
    known = {f.name for f in fields(Turn)}
    turns = []
    for index, item in enumerate(data):
        unknown = set(item) - known
        if unknown:
            raise ConfigError(f"stub script {path}, turn {index}: unknown field(s) {', '.join(sorted(unknown))}")
        if "tool_calls" in item:
            item = {**item, "tool_calls": [(name, dict(args)) for name, args in item["tool_calls"]]}
        turns.append(Turn(**item))
    return turns


def start_stub(config: Config, stub_script: str | None = None) -> ModelServer:
    """Start the in-process stub Ollama server; the returned config points Ollama at it."""
    d = config.daemon
    turns = load_stub_script(stub_script) if stub_script else []

    def answer(body: dict[str, Any]) -> Any:
        return Turn(text=d.stub_reply, chunks=d.stub_chunks, delay_s=d.stub_chunk_delay_s)

    stub = OllamaStubServer(responder=answer, keep_requests=STUB_KEPT_REQUESTS).start()
    for turn in turns:
        stub.add_turn(turn)
    stub_config = config.replace(providers={"ollama_host": stub.url, "anthropic_api_key": "",
                                            "default_provider": ""})
    return ModelServer(stub_config, _real_providers(stub_config), f"STUB Ollama at {stub.url}", stub.url, stub.stop,
                       stub)


def _real_providers(config: Config) -> dict[str, Any]:
    return dict(default_providers(config))


def start_model_server(config: Config, stub_script: str | None = None) -> ModelServer:
    """Choose and start the model server for ``daemon.provider`` (see the module docstring)."""
    mode = config.daemon.provider
    p = config.providers
    if mode == "anthropic" and not p.anthropic_api_key:
        raise ConfigError("daemon.provider = anthropic needs ANTHROPIC_API_KEY in the environment")
    if mode == "auto" and not p.anthropic_api_key and not ollama_answers(config):
        mode = "stub"
    if mode == "stub":
        return start_stub(config, stub_script)  # the caller announces it (ModelServer.announce)
    providers = _real_providers(config)
    if p.anthropic_api_key:
        description = f"Anthropic ({p.anthropic_base_url or 'api.anthropic.com'}) and Ollama at {p.ollama_host}"
    else:
        description = f"Ollama at {p.ollama_host}"
        if mode == "ollama" and not ollama_answers(config):
            logger.warning("Ollama does not answer at {} (OLLAMA_HOST / providers.ollama_host): sessions will "
                           "pause until it does", p.ollama_host)
    return ModelServer(config, providers, description)
