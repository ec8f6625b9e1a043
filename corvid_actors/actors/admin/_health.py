"""Daemon health and process figures for the AdminActor's ``health`` and ``stats``.

:func:`health_report` probes the store and every model provider; it blocks (a provider's
health call is a network round trip), so the AdminActor runs it on a tracked worker and
replies with a Future. :func:`process_stats` reads the daemon process's own figures.
"""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Mapping
from typing import Any


def health_report(base: Mapping[str, Any], alive: Mapping[str, bool], store: Any,
                  providers: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` (daemon, actors, sessions) with the store's and the providers' health, an
    overall ``status`` (ok | degraded) and the ``reasons`` when degraded. Blocks."""
    # The store first: a lost connection or a SQLite file gone / read-only makes the
    # daemon refuse sends, so health must say so (and why) until it is back.
    reason = store.probe() if hasattr(store, "probe") else None
    # the schema another release migrated it to, if this code cannot run with it (issue 36)
    refusal = getattr(store, "schema_refusal", None)
    store_health = {"ok": reason is None and refusal is None, **({"reason": reason} if reason else {}),
                    **({"schema_refused": refusal} if refusal else {})}
    results: dict[str, Any] = {}
    for name, provider in providers.items():
        try:
            healthy = bool(provider.health())
        except Exception as exc:  # noqa: BLE001 - a probe that raises means "not healthy"
            healthy, results[name] = False, {"error": str(exc)}
        results.setdefault(name, {})["healthy"] = healthy
    cluster_problems = list(base.get("cluster", {}).get("problems", ()))  # several daemons (issue 20)
    ok = (reason is None and refusal is None and all(alive.values()) and all(r["healthy"] for r in results.values())
          and not cluster_problems)
    reasons = ([f"store unavailable: {reason}"] if reason else []) + (
        [f"schema: {refusal} — this daemon takes no new work"] if refusal else []) + [
        f"the {name} actor is dead" for name, up in alive.items() if not up] + [
        f"model provider {name} is not healthy" for name, r in results.items() if not r["healthy"]] + cluster_problems
    return {"status": "ok" if ok else "degraded", **({"reasons": reasons} if reasons else {}),
            "accepting_new_work": refusal is None,
            **base, "store": store_health, "providers": results}


def process_stats() -> dict[str, Any]:
    """The daemon process: pid, threads, resident and peak memory (KiB)."""
    stats: dict[str, Any] = {"pid": os.getpid(), "threads": threading.active_count(),
                             "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
        stats["rss_kib"] = pages * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):  # not Linux: the peak is all we have
        pass
    return stats
