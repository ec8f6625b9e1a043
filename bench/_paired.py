"""Paired, interleaved, warmed-up trials: how every comparison in ``bench/`` is measured.

A comparison of two (or more) ways of doing the same work on a shared machine is only fair
when both see the same moment: the same load from other processes, the same warm caches,
the same thermal state. So every side is first run ``warmup`` times (imports, connection
paths, code caches, allocator arenas) and then ``trials`` rounds are run; in each round
every side runs once, and the order alternates A,B / B,A / A,B … (or is shuffled with a
seed). Trial *k* of A and trial *k* of B ran next to each other: their ratio is one
paired ratio, and a comparison reports the min/median/max of those ratios along with each
side's median.

Each trial is timed twice: wall time, and CPU time (this process's threads plus the
children it reaped during the trial). On a shared 2-core machine wall time follows the
neighbours' load; CPU time per unit of work is the steadier figure and is reported beside
it. A side returns how many units of work its trial did (tokens, messages, calls), or a
:class:`Outcome` carrying the units and its own figures (a latency percentile, say).

This module uses the standard library only: ``_autogen_probe`` imports it from another
virtualenv.

    trials = interleave({"raw": raw_trial, "runtime": runtime_trial}, trials=7, warmup=1)
    ratio = compare(trials, "raw", "runtime", kind="rate", label="runtime / raw tokens/s")
"""

from __future__ import annotations

import random
import resource
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

#: a comparison's ratio: "rate" = B's units per second / A's; "cost" = B's time per unit / A's
Kind = Literal["rate", "cost"]


@dataclass(frozen=True)
class Outcome:
    """What one trial did: ``units`` of work, and any figures of its own (``extra``).

    A trial whose set-up must not be timed (creating 200 sessions, re-reading what was
    written) times its measured part itself and gives ``wall_s`` and ``cpu_s``.
    """

    units: float
    extra: dict[str, Any] = field(default_factory=dict)
    wall_s: float | None = None
    cpu_s: float | None = None


@dataclass(frozen=True)
class Trial:
    """One timed run of one side."""

    side: str
    round: int
    wall_s: float
    cpu_s: float
    units: float
    extra: dict[str, Any]

    def per_unit(self, clock: str) -> float:
        """Seconds of ``clock`` ("wall" or "cpu") per unit of work."""
        spent = self.wall_s if clock == "wall" else self.cpu_s
        return spent / self.units if self.units else float("nan")


def cpu_seconds() -> float:
    """CPU time of this process (every thread) plus that of the children it has reaped."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def context_switches() -> int:
    """Voluntary + involuntary context switches of this process so far (every thread:
    Linux sums them for ``RUSAGE_SELF``)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def timed(side: str, round_: int, fn: Callable[[], float | Outcome]) -> Trial:
    """Run ``fn`` once, timing its wall and CPU time; its context switches go into the
    trial's ``extra["csw"]`` (unless ``fn`` counted its own)."""
    cpu0, csw0, t0 = cpu_seconds(), context_switches(), time.perf_counter()
    result = fn()
    wall, cpu, csw = time.perf_counter() - t0, cpu_seconds() - cpu0, context_switches() - csw0
    outcome = result if isinstance(result, Outcome) else Outcome(float(result))
    return Trial(side, round_, wall if outcome.wall_s is None else outcome.wall_s,
                 cpu if outcome.cpu_s is None else outcome.cpu_s, outcome.units, {"csw": csw, **outcome.extra})


def order(sides: Sequence[str], round_: int, rng: random.Random | None) -> list[str]:
    """The order of the sides in one round: forward, then backward (A,B,B,A,A,B …), or
    a seeded shuffle."""
    names = list(sides)
    if rng is not None:
        rng.shuffle(names)
        return names
    return names if round_ % 2 == 0 else names[::-1]


def interleave(sides: Mapping[str, Callable[[], float | Outcome]], *, trials: int, warmup: int = 1,
               seed: int | None = None, between: Callable[[], None] | None = None) -> dict[str, list[Trial]]:
    """Warm every side up ``warmup`` times, then run ``trials`` interleaved rounds.

    Returns each side's trials in round order (the warm-ups are dropped). ``between`` runs
    after every trial (a ``gc.collect()``, say), untimed.
    """
    rng = random.Random(seed) if seed is not None else None
    for _ in range(warmup):
        for name in order(list(sides), 0, rng):
            sides[name]()
            if between is not None:
                between()
    out: dict[str, list[Trial]] = {name: [] for name in sides}
    for k in range(trials):
        for name in order(list(sides), k, rng):
            out[name].append(timed(name, k, sides[name]))
            if between is not None:
                between()
    return out


def spread(values: Sequence[float], digits: int = 3) -> dict[str, float]:
    """min / median / max of ``values`` (NaN when empty)."""
    clean = [v for v in values if v == v]
    if not clean:
        return {"min": float("nan"), "median": float("nan"), "max": float("nan")}
    return {"min": round(min(clean), digits), "median": round(statistics.median(clean), digits),
            "max": round(max(clean), digits)}


def summary(trials: Sequence[Trial]) -> dict[str, Any]:
    """One side's medians: units per wall second, wall and CPU µs per unit."""
    return {
        "trials": len(trials),
        "units": statistics.median([t.units for t in trials]) if trials else 0,
        "units_per_s": round(statistics.median([t.units / t.wall_s for t in trials]), 1) if trials else 0,
        "wall_us_per_unit": round(statistics.median([t.per_unit("wall") for t in trials]) * 1e6, 2)
        if trials else float("nan"),
        "cpu_us_per_unit": round(statistics.median([t.per_unit("cpu") for t in trials]) * 1e6, 2)
        if trials else float("nan"),
    }


def paired_ratios(a: Sequence[Trial], b: Sequence[Trial], clock: str, kind: Kind) -> list[float]:
    """One ratio per round: B over A, as a rate (units/s) or as a cost (s/unit)."""
    out = []
    for ta, tb in zip(a, b, strict=True):
        ca, cb = ta.per_unit(clock), tb.per_unit(clock)
        if ca > 0 and cb > 0:
            out.append(cb / ca if kind == "cost" else ca / cb)
    return out


def compare(trials: Mapping[str, Sequence[Trial]], a: str, b: str, *, kind: Kind, label: str,
            goal: str = "", digits: int = 3) -> dict[str, Any]:
    """The paired comparison of side ``b`` against side ``a``.

    ``kind="rate"``: the ratio is B's throughput over A's (0.8 = B does 80 % of A's work per
    second); ``kind="cost"``: B's time per unit over A's (×1.2 = B takes 20 % longer). Both
    from wall time and from CPU time, min/median/max over the rounds.
    """
    return {
        "label": label, "a": a, "b": b, "kind": kind, "pairs": min(len(trials[a]), len(trials[b])),
        "wall": spread(paired_ratios(trials[a], trials[b], "wall", kind), digits),
        "cpu": spread(paired_ratios(trials[a], trials[b], "cpu", kind), digits),
        "a_median": summary(trials[a]), "b_median": summary(trials[b]),
        **({"goal": goal} if goal else {}),
    }


def retimed(trials: Sequence[Trial], wall_key: str, cpu_key: str | None = None) -> list[Trial]:
    """The trials with their wall (and CPU) time taken from their own figures: one phase of
    a trial that reports several (start-up and shutdown, say)."""
    return [Trial(t.side, t.round, float(t.extra[wall_key]),
                  float(t.extra[cpu_key]) if cpu_key and cpu_key in t.extra else t.cpu_s, t.units, t.extra)
            for t in trials]


def extra_spread(trials: Sequence[Trial], key: str, digits: int = 1) -> dict[str, float]:
    """min / median / max of one of the trials' own figures."""
    return spread([float(t.extra[key]) for t in trials if key in t.extra], digits)


def diffs(a: Sequence[Trial], b: Sequence[Trial], key: str) -> list[float]:
    """Per round, B's figure ``key`` minus A's (e.g. the milliseconds a sandbox adds)."""
    return [float(tb.extra[key]) - float(ta.extra[key]) for ta, tb in zip(a, b, strict=True)]


def table(comparisons: Sequence[Mapping[str, Any]]) -> str:
    """The summary table ``python -m bench`` prints: one row per paired comparison."""

    def cell(s: Mapping[str, float]) -> str:
        return f"{s['min']:.3g} / {s['median']:.3g} / {s['max']:.3g}"

    rows = [("benchmark", "comparison (B vs A)", "pairs", "wall min/med/max", "CPU min/med/max")]
    for c in comparisons:
        rows.append((str(c.get("bench", "")), str(c["label"]), str(c["pairs"]), cell(c["wall"]), cell(c["cpu"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
