"""RESULTS.md sections of issue 37's benchmarks: streaming at a model's pace, the send burst,
the lifecycle's per-session growth and the sandbox through ``Runtime.run_tool``
(``bench.report`` calls these; kept apart so that it stays one screenful per concern)."""

from __future__ import annotations

from typing import Any

from bench._common import md_table, min_median_max


def pace(r: dict[str, Any]) -> list[str]:
    rows = []
    for lv in r["levels"]:
        for name, x in lv["readers"].items():
            rows.append([f"{lv['streams']:,} × {lv['rate_per_stream']:g} tok/s", name,
                         f"{x['delivered_tokens_per_s']:,}", f"**{x['cpu_us_per_token']}**",
                         min_median_max(x["cpu_us_per_token_spread"]), f"**{x['csw_per_token']}**", x["deltas_per_token"],
                         min_median_max(x["latency_ms_p50"]), min_median_max(x["latency_ms_p99"]), x["lost"],
                         f"{lv['load_before'][0]} → {lv['load_after'][0]}"])
    return [f"{r['trials']} paired rounds per level after one warm-up of each reader; the stub (another process) "
            "writes one stamped token per network write on an absolute schedule. CPU is this process's "
            "(every thread), context switches are `ru_nvcsw + ru_nivcsw` of the process, both per token "
            "delivered; deltas per token is how many `content_block_delta` events (runtime) or parts (raw) "
            "carried them. Latency is stub write → reader, from the stamps.", "",
            *md_table(["level", "reader", "delivered tok/s", "CPU µs/token (median)", "CPU µs/token min / med / max",
                     "context switches / token", "deltas / token", "latency p50 ms", "latency p99 ms", "lost",
                     "load"], rows)]


def pace_headline(r: dict[str, Any]) -> str:
    parts = []
    for lv in r["levels"]:
        x, c = lv["readers"], lv["paired"][0]
        parts.append(f"{lv['streams']:,} × {lv['rate_per_stream']:g} tok/s: runtime {x['runtime']['cpu_us_per_token']} "
                     f"vs AsyncClient {x['async']['cpu_us_per_token']}"
                     + (f" vs sync {x['sync']['cpu_us_per_token']}" if "sync" in x else "")
                     + f" µs CPU/token (paired ×{c['cpu']['median']:g}), {x['runtime']['csw_per_token']} vs "
                     f"{x['async']['csw_per_token']} context switches/token")
    return "; ".join(parts)


def send_burst(r: dict[str, Any]) -> list[str]:
    rows = []
    for lv in r["levels"]:
        for side in ("raw_append", "send_message"):
            x = lv[side]
            rows.append([f"{lv['sessions']:,}", side, min_median_max(x["sends_per_s"]), min_median_max(x["p50_ms"]), min_median_max(x["p99_ms"]),
                         min_median_max(x["cpu_ms_per_send_calls"]),
                         min_median_max(x["cpu_ms_per_send_settled"]) if "cpu_ms_per_send_settled" in x else "—",
                         f"{lv['load_before'][0]} → {lv['load_after'][0]}"])
    return [f"Tree `{r.get('tree')}` at {r.get('commit')}; {r['trials']} paired rounds per level (min / median / max "
            "over the rounds). `send_message` to live, idle chat sessions, each send starting a one-token turn; "
            "`raw_append` is the store's `append_message` to other sessions of the same database. CPU per send: "
            "during the calls, and until every triggered turn ended and the runtime settled.", "",
            *md_table(["sessions = sends", "path", "sends/s", "p50 ms per call", "p99 ms per call", "CPU ms/send (calls)",
                     "CPU ms/send (until settled)", "load"], rows)]


def send_burst_headline(r: dict[str, Any]) -> str:
    return "; ".join(f"{lv['sessions']:,} sends: {lv['send_message']['sends_per_s']['median']:,.0f}/s, p50 "
                     f"{lv['send_message']['p50_ms']['median']} ms, p99 {lv['send_message']['p99_ms']['median']} ms, "
                     f"{lv['send_message']['cpu_ms_per_send_settled']['median']} ms CPU/send (raw append "
                     f"{lv['raw_append']['sends_per_s']['median']:,.0f}/s)" for lv in r["levels"])


def lifecycle_growth(r: dict[str, Any]) -> list[str]:
    growth = r.get("per_session_ms")
    if not growth:
        return []
    out = ["Start-up (restart) cost per session, median round:", ""]
    for side, g in growth.items():
        line = f"- {side}: " + ", ".join(f"{n:,}: {ms} ms" for n, ms in sorted(
            (int(k), v) for k, v in g["measured"].items()))
        if "extrapolated_10000" in g:
            line += (f"; **10,000 not run: extrapolated {g['extrapolated_10000']} ms/session "
                     f"(~{g['extrapolated_10000_startup_s']} s)** on the line through the measured levels")
        out.append(line)
    return out + [""]


def sandbox_run_tool(r: dict[str, Any]) -> list[str]:
    rows = [[x["command"], x["runs"], f"{x['added_cpu_ms']['p10']} / **{x['added_cpu_ms']['median']}** / "
             f"{x['added_cpu_ms']['p90']}", f"{x['cpu_ms']['plain']} → {x['cpu_ms']['sandbox']}",
             f"{x['wall_p50_ms']['plain']} → {x['wall_p50_ms']['sandbox']}", x["added_wall_p50_ms"]]
            for x in r.get("run_tool", [])]
    if not rows:
        return []
    return ["Through `Runtime.run_tool` (sandbox `required` vs `off`, alternating; **judged: added CPU**):", "",
            *md_table(["command", "pairs", "added CPU ms p10 / median / p90", "CPU ms per call off → sandbox",
                     "wall p50 ms off → sandbox", "added wall p50 ms (follows the load)"], rows)]
