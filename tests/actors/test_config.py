"""Configuration: config/default.toml < a user file < environment variables.

Every test passes ``environ`` explicitly, so the developer's environment never leaks in.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from corvid_actors.config import ENV_OVERRIDES, Config, from_dict, load_config, to_dict
from corvid_actors.errors import ConfigError, CorvidError
from corvid_actors.providers.text_tools import DEFAULT_TEXT_TOOL_FAMILIES
from corvid_actors.schema.fields import default_toml_text
from corvid_actors.schema.sections import SupervisorConfig
from corvid_actors.tools.paths import DEFAULT_PROTECTED_PATTERNS

REPO_TOML = Path(__file__).resolve().parents[2] / "config" / "default.toml"

#: credentials come from the environment only, never from a file
ENV_ONLY = {("providers", "anthropic_api_key")}


def write(tmp_path: Path, text: str, name: str = "user.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def default_toml() -> dict:
    return tomllib.loads(default_toml_text())


# --- defaults ------------------------------------------------------------------------------


SEED_CONSTANTS = [
    ("supervisor", "session_timeout_s", 1800.0),  # AGENT_TIMEOUT_MS 1800000
    ("supervisor", "timeout_extension_cap_factor", 4.0),
    ("supervisor", "timeout_fallback_check_s", 60.0),
    ("supervisor", "restart_backoff_base_s", 5.0),
    ("supervisor", "restart_backoff_multiplier", 3.0),
    ("supervisor", "max_restarts", 3),
    ("supervisor", "stable_period_s", 600.0),
    ("supervisor", "auto_resume_base_s", 300.0),
    ("supervisor", "auto_resume_multiplier", 3.0),
    ("supervisor", "auto_resume_cap_s", 3600.0),
    ("supervisor", "auto_resume_max_attempts", 10),
    ("supervisor", "orphan_prune_interval_s", 300.0),
    ("supervisor", "council_model", ""),
    ("supervisor", "sdk_pid_base", 900000),
    ("supervisor", "direct_pid_base", 800000),
    ("session", "max_turns_before_context_reset", 8),
    ("session", "resume_history_messages", 20),
    ("session", "resume_history_message_chars", 2000),
]


@pytest.mark.parametrize(("section", "key", "value"), SEED_CONSTANTS,
                         ids=[f"{s}.{k}" for s, k, _ in SEED_CONSTANTS])
def test_defaults_are_the_seed_constants(section: str, key: str, value: object) -> None:
    loaded = load_config(environ={})

    assert getattr(getattr(loaded, section), key) == value
    assert type(getattr(getattr(loaded, section), key)) is type(value)
    assert getattr(getattr(Config(), section), key) == value


def test_default_toml_names_every_key_and_agrees_with_the_dataclasses() -> None:
    toml = default_toml()
    defaults = to_dict(Config())
    loaded = to_dict(load_config(environ={}))

    assert set(toml) == set(defaults)
    for section, values in defaults.items():
        in_file = {(section, key) for key in toml[section]}
        in_code = {(section, key) for key in values}
        assert in_file == in_code - ENV_ONLY, section
        for key, value in values.items():
            if (section, key) in ENV_ONLY:
                continue
            in_toml = loaded[section][key]
            assert in_toml == value, f"{section}.{key}: default.toml {in_toml!r} != Config() {value!r}"


def test_the_section_defaults_are_the_packaged_file() -> None:
    # default.toml is the only place a default is written: Config() is the loaded file.
    # (Until issue 17, tools.protected_patterns defaulted to () in code, "the built-in
    # list"; the file names that list, so both now hold it.)
    toml_patterns = tuple(default_toml()["tools"]["protected_patterns"])

    assert Config().tools.protected_patterns == toml_patterns == DEFAULT_PROTECTED_PATTERNS
    assert load_config(environ={}) == Config()


def test_text_tool_families_default_is_the_providers_list() -> None:
    # The runtime hands this tuple to the Ollama provider as is; () would disable text tools.
    assert Config().providers.ollama_text_tool_families == DEFAULT_TEXT_TOOL_FAMILIES
    assert load_config(environ={}).providers.ollama_text_tool_families == DEFAULT_TEXT_TOOL_FAMILIES


def test_packaged_default_is_the_repository_file() -> None:
    assert default_toml_text() == REPO_TOML.read_text(encoding="utf-8")


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().supervisor.max_restarts = 5  # type: ignore[misc]


# --- environment ---------------------------------------------------------------------------


ENV_CASES = [
    ("AGENT_TIMEOUT_MS", "60000", "supervisor", "session_timeout_s", 60.0),
    ("COUNCIL_MODEL", "qwen3:32b", "supervisor", "council_model", "qwen3:32b"),
    ("OLLAMA_HOST", "http://10.0.0.5:11434", "providers", "ollama_host", "http://10.0.0.5:11434"),
    ("OLLAMA_DEFAULT_MODEL", "llama3.1:8b", "providers", "ollama_default_model", "llama3.1:8b"),
    ("OLLAMA_NUM_CTX", "16384", "providers", "ollama_num_ctx", 16384),
    ("OLLAMA_NUM_PREDICT", "512", "providers", "ollama_num_predict", 512),
    ("OLLAMA_KEEP_ALIVE", "30m", "providers", "ollama_keep_alive", "30m"),
    ("OLLAMA_REQUEST_TIMEOUT", "90000", "providers", "ollama_request_timeout_s", 90.0),
    ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9999", "providers", "anthropic_base_url",
     "http://127.0.0.1:9999"),
    ("ANTHROPIC_API_KEY", "sk-test", "providers", "anthropic_api_key", "sk-test"),
    ("CORVID_PROVIDER", "ollama", "providers", "default_provider", "ollama"),
    ("OLLAMA_MAX_PARALLEL", "4", "slots", "max_parallel", 4),
    ("OLLAMA_SLOT_WAIT_TIMEOUT_MS", "1500", "slots", "wait_timeout_s", 1.5),
    ("CREDITS_PER_TURN", "2", "credits", "credits_per_turn", 2),
    ("LOW_CREDIT_THRESHOLD", "10", "credits", "low_credit_threshold", 10),
    ("FREE_CREDITS_ON_FIRST_MESSAGE", "0", "credits", "free_credits_on_first_message", 0),
    ("CORVID_DB_URL", "postgresql://corvid@db/corvid", "store", "url",
     "postgresql://corvid@db/corvid"),
    ("CORVID_DATA_DIR", "/var/lib/corvid", "store", "data_dir", "/var/lib/corvid"),
    ("CORVID_CLUSTER", "1", "cluster", "enabled", True),
    ("CORVID_DAEMON_ID", "host-a", "cluster", "daemon_id", "host-a"),
    ("CORVID_METRICS_LISTEN", "127.0.0.1:9464", "telemetry", "metrics_listen", "127.0.0.1:9464"),
    ("CORVID_HTTP_LISTEN", "127.0.0.1:8787", "http", "listen", "127.0.0.1:8787"),
]


def test_every_env_override_is_tested_and_names_a_real_key() -> None:
    assert {case[0] for case in ENV_CASES} == set(ENV_OVERRIDES)
    defaults = to_dict(Config())
    for var, (section, key, _) in ENV_OVERRIDES.items():
        assert key in defaults[section], var


@pytest.mark.parametrize(("var", "raw", "section", "key", "value"), ENV_CASES,
                         ids=[case[0] for case in ENV_CASES])
def test_env_overrides(var: str, raw: str, section: str, key: str, value: object) -> None:
    loaded = load_config(environ={var: raw})

    assert getattr(getattr(loaded, section), key) == value
    assert getattr(getattr(load_config(environ={}), section), key) != value


def test_empty_env_value_is_ignored() -> None:
    assert load_config(environ={"AGENT_TIMEOUT_MS": "", "COUNCIL_MODEL": ""}) == load_config(environ={})


def test_resolved_store_url() -> None:
    assert load_config(environ={"CORVID_DATA_DIR": "/data"}).store.resolved_url() == (
        "sqlite:////data/corvid.db")
    explicit = load_config(environ={"CORVID_DB_URL": "sqlite:///:memory:"})
    assert explicit.store.resolved_url() == "sqlite:///:memory:"


# --- user file and precedence --------------------------------------------------------------


def test_user_file_overrides_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, '[supervisor]\nmax_restarts = 5\ncouncil_model = "big"\n'
                           '[slots]\nmax_parallel = 2\n')

    loaded = load_config(path, environ={})

    assert (loaded.supervisor.max_restarts, loaded.supervisor.council_model) == (5, "big")
    assert loaded.slots.max_parallel == 2
    # everything the file does not name keeps its default
    assert loaded.supervisor.stable_period_s == 600.0
    assert loaded.session == load_config(environ={}).session


def test_user_file_from_corvid_config_env(tmp_path: Path) -> None:
    path = write(tmp_path, "[session]\nresume_history_messages = 5\n")
    other = write(tmp_path, "[session]\nresume_history_messages = 7\n", name="other.toml")

    assert load_config(environ={"CORVID_CONFIG": str(path)}).session.resume_history_messages == 5
    # an explicit file argument wins over CORVID_CONFIG
    assert load_config(other, environ={"CORVID_CONFIG": str(path)}).session.resume_history_messages == 7


def test_precedence_default_then_file_then_env(tmp_path: Path) -> None:
    path = write(tmp_path, "[slots]\nmax_parallel = 2\n[supervisor]\nsession_timeout_s = 100.0\n")
    env = {"OLLAMA_MAX_PARALLEL": "3"}

    loaded = load_config(path, environ=env)

    assert loaded.slots.max_parallel == 3  # env beats file
    assert loaded.supervisor.session_timeout_s == 100.0  # file beats default
    assert loaded.supervisor.max_restarts == 3  # default where nobody says otherwise


def test_user_price_table_adds_to_the_defaults(tmp_path: Path) -> None:
    default_prices = Config().providers.anthropic_prices
    first_model = next(iter(default_prices))
    path = write(tmp_path, '[providers.anthropic_prices]\n"my-model" = [1, 2, 0.5, 1.5]\n'
                           f'"{first_model}" = [9, 9, 9, 9]\n')

    prices = load_config(path, environ={}).providers.anthropic_prices

    assert prices["my-model"] == (1.0, 2.0, 0.5, 1.5)
    assert prices[first_model] == (9.0, 9.0, 9.0, 9.0)
    assert {k: v for k, v in prices.items() if k not in ("my-model", first_model)} == {
        k: v for k, v in default_prices.items() if k != first_model}


# --- invalid values ------------------------------------------------------------------------


INVALID_FILES = [
    ("[supervisor]\nsession_timeout_s = -1\n", "supervisor.session_timeout_s", "must be > 0"),
    ("[supervisor]\nmax_restarts = -1\n", "supervisor.max_restarts", "must be >= 0"),
    ("[supervisor]\nmax_restarts = \"three\"\n", "supervisor.max_restarts", "must be an integer"),
    ("[supervisor]\nmax_restarts = 3.5\n", "supervisor.max_restarts", "must be an integer"),
    ("[supervisor]\nsession_timeout_s = true\n", "supervisor.session_timeout_s", "must be a number"),
    ("[supervisor]\nrestart_backoff_multiplier = 0.5\n", "supervisor.restart_backoff_multiplier",
     "must be >= 1"),
    ("[supervisor]\ncouncil_model = 7\n", "supervisor.council_model", "must be a string"),
    ("[supervisor]\nauto_restart_sources = [\"chat\", 1]\n", "supervisor.auto_restart_sources",
     "must be a list of strings"),
    ("[supervisor]\nmax_restart = 3\n", "supervisor.max_restart", "unknown config key"),
    ("[supervisr]\nmax_restarts = 3\n", "[supervisr]", "unknown config section"),
    ("supervisor = 5\n", "[supervisor]", "must be a table"),
    ("[session]\nmax_turns_before_context_reset = 0\n", "session.max_turns_before_context_reset",
     "must be >= 1"),
    ("[direct_loop]\ntrim_usage_threshold = 1.5\n", "direct_loop.trim_usage_threshold",
     "must be in (0, 1]"),
    ("[approvals]\nmode = \"sometimes\"\n", "approvals.mode", "must be normal, queued or paused"),
    ("[providers.anthropic_prices]\n\"m\" = [\"cheap\"]\n", "providers.anthropic_prices.m",
     "must be a list of numbers"),
    ("[providers]\nanthropic_prices = 3\n", "providers.anthropic_prices", "must be a table"),
    ("[tools.sandbox]\nmode = \"maybe\"\n", "tools.sandbox.mode", "must be auto, required or off"),
    ("[tools.sandbox]\nmax_processes = 0\n", "tools.sandbox.max_processes", "must be >= 1"),
    ("[tools.sandbox]\nnetwork = true\n", "tools.sandbox.network", "must be a table of strings"),
    ("[tools.sandbox]\nnetwork = { yolo = \"host\" }\n", "tools.sandbox.network.yolo", "unknown permission mode"),
    ("[tools.sandbox]\nnetwork_mode = []\n", "tools.sandbox.network_mode", "unknown config key"),
    ("[tools]\nsandbox = \"auto\"\n", "tools.sandbox", "must be a table"),
    ("[webhook]\nmax_connections_per_client = 0\n", "webhook.max_connections_per_client", "must be >= 1"),
    ("[webhook]\nmax_connections = 8\nmax_connections_per_client = 9\n", "webhook.max_connections_per_client",
     "must be at most webhook.max_connections = 8"),
]


@pytest.mark.parametrize(("text", "key", "why"), INVALID_FILES,
                         ids=[case[1] + ":" + case[2] for case in INVALID_FILES])
def test_invalid_file_values_name_the_key(tmp_path: Path, text: str, key: str, why: str) -> None:
    path = write(tmp_path, text)

    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})

    assert key in str(info.value)
    assert why in str(info.value)


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"AGENT_TIMEOUT_MS": "half an hour"}, ["AGENT_TIMEOUT_MS", "supervisor.session_timeout_s"]),
        ({"OLLAMA_MAX_PARALLEL": "two"}, ["OLLAMA_MAX_PARALLEL", "slots.max_parallel"]),
        ({"OLLAMA_NUM_CTX": "8192.5"}, ["OLLAMA_NUM_CTX", "providers.ollama_num_ctx"]),
        ({"OLLAMA_MAX_PARALLEL": "0"}, ["slots.max_parallel", "must be >= 1"]),
        ({"AGENT_TIMEOUT_MS": "-5"}, ["supervisor.session_timeout_s", "must be > 0"]),
    ],
)
def test_invalid_env_values_name_the_key(env: dict[str, str], names: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(environ=env)
    for name in names:
        assert name in str(info.value)


def test_file_that_is_not_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "[supervisor\nmax_restarts = 3\n")

    with pytest.raises(ConfigError, match="is not valid TOML") as info:
        load_config(path, environ={})
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"

    with pytest.raises(ConfigError, match="config file not found") as info:
        load_config(missing, environ={})
    assert str(missing) in str(info.value)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(environ={"CORVID_CONFIG": str(missing)})


def test_config_error_is_a_corvid_error() -> None:
    assert issubclass(ConfigError, CorvidError)


# --- replace and from_dict -----------------------------------------------------------------


def test_replace_changes_only_the_named_keys() -> None:
    base = Config()

    changed = base.replace(supervisor={"max_restarts": 5}, slots={"max_parallel": 3})

    assert (changed.supervisor.max_restarts, changed.slots.max_parallel) == (5, 3)
    assert changed.supervisor.stable_period_s == base.supervisor.stable_period_s
    assert changed.session == base.session
    assert base.supervisor.max_restarts == 3  # the original is untouched
    assert base.replace() == base


def test_replace_validates() -> None:
    with pytest.raises(ConfigError, match="supervisor.max_restarts"):
        Config().replace(supervisor={"max_restarts": -1})
    with pytest.raises(ConfigError, match="supervisor.max_restartz"):
        Config().replace(supervisor={"max_restartz": 1})
    with pytest.raises(ConfigError, match=r"\[supervisr\]"):
        Config().replace(supervisr={"max_restarts": 1})


def test_from_dict_round_trips_and_coerces() -> None:
    loaded = load_config(environ={})

    assert from_dict(to_dict(loaded)) == loaded
    # TOML integers are accepted for float keys (and stored as floats)
    coerced = from_dict({"supervisor": {"session_timeout_s": 60}})
    assert coerced.supervisor.session_timeout_s == 60.0
    assert isinstance(coerced.supervisor.session_timeout_s, float)
    assert coerced.supervisor == SupervisorConfig(session_timeout_s=60.0)
