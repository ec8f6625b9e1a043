"""The loops' config sections, which are the loops' settings types (values: default.toml).

``[direct_loop]`` is :class:`DirectLoopSettings`, ``[sdk_loop]`` :class:`SdkLoopSettings`;
each holds its provider-call retry policy (:class:`~corvid_actors.loop.retry.RetrySettings`)
as a ``retry`` table. The OpenAgent seed's sections (``[plan]``, ``[payload_guard]``,
``[observation]``, ``[memory]``) are read by :mod:`corvid_actors.loop.rules`.

A few fields are *calibrations*, not config keys: structured tables of pure policies
(tier caps, trim tiers, token estimation, nudge rules, truncation shape) whose values live
beside the policy that reads them; tests may pass their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field

from corvid_actors.loop.nudges import NudgeRules
from corvid_actors.loop.retry import RetrySettings
from corvid_actors.loop.tiers import DEFAULT_TIER_CAPS, ModelTier, TierCaps, TierRules
from corvid_actors.loop.tokens import TokenSettings
from corvid_actors.loop.tool_results import TruncationShape
from corvid_actors.loop.trimming import TrimTiers
from corvid_actors.schema.fields import (
    AT_LEAST_ONE,
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    calibration,
    check,
    one_of,
    section,
)


@section("direct_loop")
class DirectLoopSettings:
    """Every knob of the direct (Ollama) loop; default.toml documents each key."""

    max_tool_iterations: int = field(metadata=AT_LEAST_ONE)
    max_nudges: int = field(metadata=NON_NEGATIVE)
    max_mid_chain_nudges: int = field(metadata=NON_NEGATIVE)
    #: take iteration and nudge caps from the model's tier (they override the three above)
    use_tier_caps: bool
    # context trimming
    max_messages: int = field(metadata=AT_LEAST_ONE)
    keep_recent: int = field(metadata=AT_LEAST_ONE)
    trim_usage_threshold: float = field(metadata=FRACTION)
    #: tool results older than the last N messages (and not of the newest call) are cut
    stale_tool_result_keep_last: int = field(metadata=NON_NEGATIVE)
    stale_tool_result_chars: int = field(metadata=AT_LEAST_ONE)
    #: context usage (fraction of the window) at which each warning level is emitted
    context_info_at: float = field(metadata=FRACTION)
    context_warning_at: float = field(metadata=FRACTION)
    context_critical_at: float = field(metadata=FRACTION)
    # stall detection
    max_repeats: int = field(metadata=AT_LEAST_ONE)
    max_same_tool: int = field(metadata=AT_LEAST_ONE)
    ping_pong_window: int = field(metadata=AT_LEAST_ONE)
    # tool results
    tool_result_share: float = field(metadata=FRACTION)
    tool_result_pressure_share: float = field(metadata=FRACTION)
    tool_result_min_chars: int = field(metadata=AT_LEAST_ONE)
    cap_chars_per_token: float = field(metadata=POSITIVE)
    #: the ``output`` preview carried by ``tool_status`` events
    tool_status_output_chars: int = field(metadata=AT_LEAST_ONE)
    #: how much of a failed tool's first output line its ``tool_status`` message shows
    tool_status_error_chars: int = field(metadata=AT_LEAST_ONE)
    # provider failures
    api_failure_threshold: int = field(metadata=AT_LEAST_ONE)
    retry: RetrySettings
    # calibrations (not config keys)
    tier_caps: Mapping[ModelTier, TierCaps] = calibration(lambda: DEFAULT_TIER_CAPS)
    tier_rules: TierRules = calibration(TierRules)
    trim_tiers: TrimTiers = calibration(TrimTiers)
    token_settings: TokenSettings = calibration(TokenSettings)
    nudge_rules: NudgeRules = calibration(NudgeRules)
    truncation_shape: TruncationShape = calibration(TruncationShape)

    @property
    def context_warning_levels(self) -> tuple[tuple[float, str], ...]:
        """``(usage fraction, level)`` pairs, lowest first."""
        return ((self.context_info_at, "info"), (self.context_warning_at, "warning"),
                (self.context_critical_at, "critical"))


@section("sdk_loop")
class SdkLoopSettings:
    """Every knob of the SDK (Anthropic) loop; default.toml documents each key."""

    #: consecutive API errors (across retries and turns) that mean an outage
    api_failure_threshold: int = field(metadata=AT_LEAST_ONE)
    #: fraction of the context window above which the conversation is compacted
    compaction_threshold: float = field(metadata=FRACTION)
    #: identical consecutive calls of one tool that trigger the doom-loop ask
    doom_loop_threshold: int = field(metadata=AT_LEAST_ONE)
    #: model calls per turn; a response asking for tools beyond it ends the turn
    max_iterations: int = field(metadata=AT_LEAST_ONE)
    #: a human's denial ends the turn (false, the default: it goes back to the model)
    stop_on_denial: bool
    #: characters of tool output shown in a tool_status event
    tool_preview_chars: int = field(metadata=AT_LEAST_ONE)
    #: characters kept per message when the conversation is rendered for a summary
    compaction_entry_max_chars: int = field(metadata=AT_LEAST_ONE)
    retry: RetrySettings


@section("plan")
class PlanConfig:
    """Plan tracking: the update_plan tool, offered to both loops (OpenAgent seed)."""

    enabled: bool


@section("payload_guard")
class PayloadGuardConfig:
    """The payload-growth failsafe (OpenAgent seed)."""

    enabled: bool
    growth_factor: float = field(metadata=check(lambda v: v > 1, "must be > 1"))
    min_growth_bytes: int = field(metadata=NON_NEGATIVE)
    on_trip: str = field(metadata=one_of("compact", "stop"))
    #: empty: <store.data_dir>/snapshots
    snapshot_dir: str


@section("observation")
class ObservationConfig:
    """Observation caps on tool output shown to the model (OpenAgent seed)."""

    enabled: bool
    max_lines: int = field(metadata=AT_LEAST_ONE)
    max_bytes: int = field(metadata=check(lambda v: v >= 2048, "must be >= 2048"))
    hard_limit_bytes: int = field(metadata=AT_LEAST_ONE)


def _memory_rows(rows: Mapping[str, tuple[float, ...]]) -> bool:
    return all(len(row) == 2 and min(row) >= 0 and all(x == int(x) for x in row) for row in rows.values())


@section("memory")
class MemoryConfig:
    """History memory policies (OpenAgent seed); 0 turns a policy off."""

    amnesia_turns: int = field(metadata=NON_NEGATIVE)
    dementia_turns: int = field(metadata=NON_NEGATIVE)
    #: per agent name: [amnesia_turns, dementia_turns]
    agents: dict[str, tuple[float, ...]] = field(metadata=check(
        _memory_rows, "rows must be [amnesia_turns, dementia_turns]: two whole numbers >= 0"))
