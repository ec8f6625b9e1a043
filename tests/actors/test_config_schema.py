"""One source per constant: section defaults come from default.toml, checked at import."""

from __future__ import annotations

from pathlib import Path

import pytest

from corvid_actors.config import Config, from_dict, load_config
from corvid_actors.errors import ConfigError
from corvid_actors.loop.retry import RetrySettings
from corvid_actors.loop.settings import DirectLoopSettings, SdkLoopSettings
from corvid_actors.schema.fields import section
from corvid_actors.schema.sections import (
    CreditsConfig,
    RetrySchedule,
    SlotsConfig,
    SupervisorConfig,
)
from corvid_actors.testing import SimClock
from corvid_actors.wiring.builder import SessionBuilder


def test_a_section_class_is_the_packaged_table() -> None:
    assert SupervisorConfig() == load_config(environ={}).supervisor
    assert SupervisorConfig(max_restarts=1).max_restarts == 1
    assert SupervisorConfig(max_restarts=1).stable_period_s == 600.0


def test_a_key_the_file_lacks_is_an_error_at_import() -> None:
    with pytest.raises(ConfigError, match=r"lacks the key plan\.extra"):
        @section("plan")
        class Plan:
            enabled: bool
            extra: int


def test_a_file_key_no_field_declares_is_an_error_at_import() -> None:
    with pytest.raises(ConfigError, match=r"does not declare: .*payload_guard\.growth_factor"):
        @section("payload_guard")
        class Guard:
            enabled: bool


def test_a_missing_table_is_an_error_at_import() -> None:
    with pytest.raises(ConfigError, match=r"no \[nowhere\] table"):
        @section("nowhere")
        class Nowhere:
            enabled: bool


def test_the_seed_constants_that_were_in_code_are_keys() -> None:
    cfg = Config()
    assert cfg.sdk_loop.max_iterations == 50
    assert cfg.credits.charged_sources == ("chat",)
    assert (cfg.slots.heavy_model_weight, cfg.slots.medium_model_weight, cfg.slots.light_model_weight) == (3, 2, 1)
    assert cfg.direct_loop.api_failure_threshold == 3
    assert cfg.direct_loop.retry == RetrySettings(base_s=1.0, multiplier=2.0, cap_s=30.0,
                                                  retry_after_cap_s=30.0, max_attempts=3)
    assert cfg.sdk_loop.retry == RetrySettings() == SdkLoopSettings().retry
    assert cfg.credits.charge_retry == RetrySchedule(delays_s=(1.0, 2.0, 4.0, 8.0, 16.0, 30.0), max_attempts=10)
    assert cfg.store.write_retry == RetrySchedule() == RetrySchedule((1.0, 2.0, 5.0, 15.0, 30.0, 60.0), 15)


def test_the_loops_take_their_sections() -> None:
    assert Config().direct_loop == DirectLoopSettings()
    assert isinstance(Config().sdk_loop, SdkLoopSettings)


@pytest.mark.parametrize(("size_b", "weight"), [(None, 1), (1.5, 1), (8.0, 2), (13.9, 2), (14.0, 3), (70.0, 3)])
def test_slot_weight_by_model_size(size_b: float | None, weight: int) -> None:
    assert SlotsConfig().weight_for(size_b) == weight


def test_retry_schedule_repeats_its_last_delay() -> None:
    schedule = CreditsConfig().charge_retry
    assert [schedule.delay_s(n) for n in range(1, 10)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]


def test_earlier_flat_retry_keys_still_load(tmp_path: Path) -> None:
    path = tmp_path / "user.toml"
    path.write_text("[sdk_loop]\nretry_base_s = 1.5\nretry_max_attempts = 2\n", encoding="utf-8")

    retry = load_config(path, environ={}).sdk_loop.retry

    assert (retry.base_s, retry.max_attempts, retry.cap_s, retry.retry_after_cap_s) == (1.5, 2, 30.0, 60.0)
    assert Config().replace(sdk_loop={"retry_max_attempts": 4}).sdk_loop.retry.max_attempts == 4


def test_a_partial_sub_table_keeps_its_own_sections_defaults(tmp_path: Path) -> None:
    path = tmp_path / "user.toml"
    path.write_text("[direct_loop.retry]\nbase_s = 0.5\n", encoding="utf-8")

    for retry in (load_config(path, environ={}).direct_loop.retry,
                  Config().replace(direct_loop={"retry": {"base_s": 0.5}}).direct_loop.retry,
                  from_dict({"direct_loop": {"retry": {"base_s": 0.5}}}).direct_loop.retry):
        assert retry == RetrySettings(base_s=0.5, multiplier=2.0, cap_s=30.0, retry_after_cap_s=30.0, max_attempts=3)


def test_calibrations_are_not_config_keys() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key direct_loop\.tier_caps"):
        from_dict({"direct_loop": {"tier_caps": {}}})


def test_sub_table_values_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"credits\.charge_retry\.delays_s"):
        from_dict({"credits": {"charge_retry": {"delays_s": []}}})
    with pytest.raises(ConfigError, match=r"store\.write_retry\.max_attempts = 0 must be >= 1"):
        from_dict({"store": {"write_retry": {"max_attempts": 0}}})


def test_the_tools_section_configures_the_coding_tools(tmp_path: Path, sim_clock: SimClock) -> None:
    cfg = Config().replace(tools={"command_timeout_default_s": 0.5, "command_timeout_max_s": 1.0},
                           store={"data_dir": str(tmp_path)})
    builder = SessionBuilder(config=cfg, clock=sim_clock, providers={})

    run = builder.run_tool(tmp_path, "run_command", {"command": "sleep 5"}, mode="full-auto")

    assert run.ran and run.is_error and "timed out" in (run.output or "").lower()
