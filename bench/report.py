"""Renders the benchmarks' JSON results as bench/RESULTS.md (figures first, then the analysis).

The generated part sits between two markers and is replaced on every run; whatever is
written after ``ANALYSIS_MARKER`` (the analysis) is kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import _report_hot_path as hot
from bench._common import md_table, min_median_max

BEGIN = "<!-- BEGIN GENERATED: python -m bench rewrites this part -->"
END = "<!-- END GENERATED -->"


def _verdict(result: dict[str, Any]) -> str:
    if result.get("failed"):
        return "**failed to run**"
    met = result.get("met")
    return "—" if met is None else ("**met**" if met else "**not met**")


def _load(result: dict[str, Any]) -> str:
    if "levels" in result:
        return "load: per level, in the table"
    before, after = result.get("load_before"), result.get("load_after")
    return f"load {before[0] if before else '?'} → {after[0] if after else '?'}"


def _side(m: dict[str, Any], kind: str) -> str:
    return (f"{m['units_per_s']:,.0f}/s" if kind == "rate" else f"{m['wall_us_per_unit']:,} µs") + \
        f" (CPU {m['cpu_us_per_unit']:,} µs)"


def paired_table(comparisons: list[dict[str, Any]], with_bench: bool = False) -> list[str]:
    """One row per paired comparison: the ratio's min / median / max in wall and CPU time."""
    if not comparisons:
        return []
    rows = [([c.get("bench", "")] if with_bench else []) + [
        c["label"], c["pairs"], min_median_max(c["wall"]), min_median_max(c["cpu"]),
        f"{c['a']}: {_side(c['a_median'], c['kind'])}", f"{c['b']}: {_side(c['b_median'], c['kind'])}"]
        for c in comparisons]
    return md_table((["benchmark"] if with_bench else []) + [
        "paired comparison (B vs A)", "pairs", "ratio, wall: min / median / max", "ratio, CPU: min / median / max",
        "A median (per unit: wall, CPU)", "B median"], rows)


def _streaming(r: dict[str, Any]) -> list[str]:
    s = r["stats"]
    rows = [[k, f"{v['tokens_per_s_total']:,}", f"{v['tokens_per_s_steady']:,}", v["cpu_us_per_token"],
             ", ".join(f"{x:,}" for x in v["trials"])] for k, v in s.items()]
    return [f"{r['trials']} paired rounds × {r['tokens_per_trial']:,} tokens after {r.get('warmup', 1)} warm-up. "
            f"**Runtime / raw = {r['ratio_cpu']:.0%}** in CPU time per token ({r['ratio_total']:.0%} in wall "
            "time; paired medians).", "",
            *md_table(["path", "tokens/s (request→last)", "tokens/s (first→last)", "CPU µs/token (this process)",
                     "per trial"], rows)]


def _messaging(r: dict[str, Any]) -> list[str]:
    rows = [[group, side, f"{m['units_per_s']:,.0f}", m["wall_us_per_unit"], m["cpu_us_per_unit"]]
            for group, sides in r["sides"].items() for side, m in sides.items()]
    out = [f"{r['trials']} paired rounds after {r['warmup']} warm-up; sizes per trial: "
           + ", ".join(f"{k} {v:,}" for k, v in r["sizes"].items()) + ".", "",
           *md_table(["path", "side", "per s (median)", "wall µs each", "CPU µs each"], rows)]
    ag = r.get("autogen", {})
    out.append(f"autogen-core {ag.get('autogen_core', '')} runs in its own venv with Pykka {ag.get('pykka', '')}: "
               f"send_message {ag.get('send_message_rtt_us')} µs vs a plain Pykka ask {ag.get('pykka_ask_rtt_us')} µs "
               "there, paired in that one process."
               if ag.get("available") else f"autogen-core: not measured — {ag.get('reason', 'unknown')}")
    return out + [""]


def _streams(r: dict[str, Any]) -> list[str]:
    rows = []
    for e in r["rates"]:
        for side in ("raw", "runtime"):
            x = e[side]
            rows.append([f"{e['rate_per_stream']:g} tok/s × {r['streams']:,}", side, f"{e['offered_tokens_per_s']:,}",
                         min_median_max(x["steady_tokens_per_s"]), min_median_max(x["latency_ms_p50"]), min_median_max(x["latency_ms_p99"]),
                         min_median_max(x["all_chunks_latency_ms_p99"]) if "all_chunks_latency_ms_p99" in x else "—",
                         x["cpu_us_per_token"], "yes" if x["sustained"] else "no", x["lost"]])
    high = r["highest_sustained_tokens_per_s"]
    return [f"{r['streams']:,} streams at once, {r['stream_s']:g} s each, {r['trials']} paired round(s) per rate; "
            f"the runtime's sessions were created and answered once before ({r['session_setup_s']} s). Highest rate "
            f"sustained (≥ 90 % delivered in the steady window, its chunks' p99 ≤ 100 ms): raw {high['raw']:,} "
            f"tokens/s, runtime {high['runtime']:,} tokens/s. Latencies are of the chunks that arrived in the "
            "steady window (every stream open); the last p99 counts every chunk, the ramp's included (1,000 "
            "connections opened; the runtime also stores and hands over 1,000 messages).", "",
            *md_table(["streams", "reader", "offered tok/s", "delivered tok/s (steady)", "p50 ms", "p99 ms",
                     "p99 ms, ramp included", "CPU µs/token", "sustained", "lost"], rows)]


def _scale(r: dict[str, Any]) -> list[str]:
    keys = [("sessions", "sessions"), ("live_sessions", "live"), ("startup_ms_per_session", "start-up ms/session"),
            ("startup_s", "start-up s"), ("rss_mib_live", "RSS MiB (all live)"),
            ("rss_kib_per_session", "RSS KiB/session"), ("threads_per_session", "threads/session (idle)"),
            ("streamers", "streamed to"), ("max_concurrent_streams", "most streams at once"),
            ("peak_threads_streaming", "peak threads"), ("latency_ms_p50", "latency p50 ms"),
            ("latency_ms_p99", "latency p99 ms"), ("send_s", "messages sent in s"),
            ("steady_latency_ms_p50", "latency p50 ms, all sent"), ("steady_latency_ms_p99", "latency p99 ms, all sent"),
            ("offered_chunks_per_s", "chunks/s offered"), ("cpu_us_per_delta", "CPU µs per chunk (phase B)"),
            ("gc_s_phase_b", "GC s by generation (phase B)"),
            ("delivered_chunks_per_s", "chunks/s delivered"), ("shutdown_s", "shutdown s"), ("error", "error")]
    rows = [[label] + [lv.get(k, "") for lv in r["levels"]] for k, label in keys]
    rows.append(["load before → after"] + [f"{lv.get('load_before', ['?'])[0]} → {lv.get('load_after', ['?'])[0]}"
                                           for lv in r["levels"]])
    return [f"Phase B: each streamed reply is {r['chunks']} chunks, {r['delay_s']} s apart.", "",
            *md_table(["", *[f"{lv.get('sessions')}" for lv in r["levels"]]], rows)]


def _control(r: dict[str, Any]) -> list[str]:
    rows = []
    for x in r["runs"]:
        d, c = x["delivered_ms"], x["stop_call_ms"]
        idle = x.get("idle_delivered_ms", {})
        rows.append([f"{1 / x['delay_s']:g} chunk/s per session", d["p50"], d["p90"], d["p99"], d["max"],
                     f"{idle.get('p50', '')} / {idle.get('p99', '')}",
                     f"{c['p50']} / {c['p99']}", f"{x['offered_chunks_per_s']:,} / {x['deltas_per_s_during_stops']:,}",
                     x["streaming_after_last_stop"], f"{x['load_before'][0]} → {x['load_after'][0]}"])
    return md_table(["streams", "p50 ms", "p90 ms", "p99 ms", "max ms", "idle session's stop p50 / p99 ms",
                   "stop call p50 / p99 ms",
                   "chunks/s offered / delivered", "still streaming after", "load"], rows) + [
        f"{r['runs'][0]['stops']} stops, one at a time, among {r['runs'][0]['sessions']} streaming sessions: "
        "time from calling stop_process to the subscriber receiving session_stopped.", ""]


def _simtime(r: dict[str, Any]) -> list[str]:
    out = md_table(["run", "sessions", "simulated span", "wall s", "CPU s", "CPU ms / turn", "events", "incarnations",
                  "simulated h / wall s", "wall ms / simulated h"],
                 [[x.get("run", ""), x["sessions"], f"{x['hours']:g} h + 1 h", x["wall_s"], x.get("cpu_s", ""),
                   x.get("cpu_ms_per_turn", ""), x["events"], x.get("incarnations", ""), x["simulated_hours_per_s"],
                   x["wall_ms_per_simulated_hour"]] for x in r["runs"]])
    base = r.get("against_issue_baseline")
    if base:
        pair = base["pair"]
        out += [f"Against issue 18's baseline ({base['commit'][:7]}, the day the issue measured), each day in a "
                f"fresh process, {pair['pairs']} interleaved rounds: this tree / baseline ×{pair['wall']['median']:g} "
                f"wall (×{pair['cpu']['median']:g} CPU; min {pair['wall']['min']:g}, max {pair['wall']['max']:g}); "
                f"medians {base['wall_s']['issue_baseline']} s → {base['wall_s']['this_tree']} s wall "
                f"({base['events']['issue_baseline']} → {base['events']['this_tree']} events: later releases "
                "publish fewer, coalesced deltas). Goal: ≤ 0.1.", ""]
    if "per_turn_24h" in r:
        out += [f"Medians of {r['trials']} paired rounds. Per simulated turn of the 24 h day (one untimed run with "
                "counters): " + ", ".join(f"{v:g} {k}" for k, v in r["per_turn_24h"].items()) + ".", ""]
    return out


def _persistence(r: dict[str, Any]) -> list[str]:
    rows = [[k, f"{v['messages_per_s']:,}", v.get("cpu_us_per_message", ""), v["avg_messages_per_commit"],
             v["acknowledged"],
             v["missing_after_reread"], v["errors"], v["locked_errors"]] for k, v in r["stats"].items()]
    return [f"{r['sessions']} threads × {r['messages_per_session']} messages, SQLite WAL file "
            f"(synchronous=NORMAL). Writer thread vs group commit (paired): blocking callers "
            f"×{r['speedup_writer']}, acknowledgements as futures ×{r['speedup_async']}, "
            f"turn-sized appends ({r['turn_messages']} messages per call) ×{r['speedup_turns']}.", "",
            *md_table(["mode", "messages/s (median)", "CPU µs/message", "messages/commit", "acknowledged",
                     "missing on re-read", "errors",
                     "'database is locked'"], rows)]


def _sandbox(r: dict[str, Any]) -> list[str]:
    kinds = [k for k in ("plain", "sandbox", "sandbox_no_cgroup", "landlock") if k in r["rows"][0]]
    rows = [[x["command"], *[f"{x[k]['p50']} / {x[k]['p99']}" for k in kinds], x["added_p50_ms"]]
            for x in r["rows"]]
    return md_table(["command", *[f"{k.replace('_', ' ')} p50 / p99 ms" for k in kinds], "added at p50 ms"],
                  rows) + [
        f"run_command through the same handler, {r['rows'][0]['runs']} calls each, alternating, in a project "
        f"of {r['files_in_project']} files; bwrap {r['bwrap']}"
        + ("; as root the process limit is a pids cgroup (joining it is a separate column)" if r["cgroup"] else "")
        + ". The kernel's floor at the same load: `/bin/true` p50 "
        + f"{r['floor']['bare']} ms bare, {r['floor']['bwrap_minimal']} ms under `bwrap --ro-bind / /`.", "",
        *hot.sandbox_run_tool(r)]


#: model servers of the soak benchmark, as the table names them
_SOAK_SERVERS = {"ollama": "stub Ollama in another process", "stub": "daemon's built-in stub (`--provider stub`)"}


def _soak(r: dict[str, Any]) -> list[str]:
    rows = [[_SOAK_SERVERS.get(x["provider"], x["provider"]), f"{x['sessions']:,}", x["live"], f"{x['warm_up']:,}",
             f"{x['elapsed_s']:,} s ({x['sessions_per_s']}/s)", f"{x['rss_mib_start']} → {x['rss_mib_end']}",
             f"**{x['rss_mib_per_1000']}**", f"{x['threads_min_max']} ({x['threads_per_1000']:+})",
             f"{x['fds_min_max']} ({x['fds_per_1000']:+})", x["db_mib_per_1000"],
             x.get("daemon_cpu_ms_per_session", ""), f"{x['late_replies']} / {x['error_count']}"] for x in r["runs"]]
    out = ["A `corvid-actors serve` subprocess churned through its admin socket: each lane starts a session, "
           "waits for the reply, sends two more messages (waiting for each reply) and stops it. Slopes are "
           "least-squares fits over the samples after the warm-up.", "",
           *md_table(["model server", "sessions", "live", "warm-up", "time", "RSS MiB after warm-up → end",
                    "RSS MiB / 1,000 sessions", "threads min–max (/1,000)", "fds min–max (/1,000)",
                    "database MiB / 1,000", "daemon CPU ms / session", "late replies / errors"], rows)]
    for x in r["runs"]:
        step = max(1, len(x["samples"]) // 10)
        picked = x["samples"][::step] + ([x["samples"][-1]] if (len(x["samples"]) - 1) % step else [])
        out += [f"Samples, {_SOAK_SERVERS.get(x['provider'], x['provider'])}:", "",
                *md_table(["sessions", "s", "RSS MiB", "threads", "fds", "database MiB", "timers / clock handles",
                         "bus sessions", "admin recent"],
                        [[f"{s['sessions']:,}", s["t_s"], s["rss_mib"], s["threads"], s["fds"], s["db_mib"],
                          f"{s['timers']} / {s['clock_handles']}", s["bus_sessions"], s["admin_recent"]]
                         for s in picked])]
    return out


def _lifecycle(r: dict[str, Any]) -> list[str]:
    keys = [("startup_s", "start-up s (reset + resume, until idle)"), ("startup_ms_per_session", "start-up ms/session"),
            ("shutdown_s", "shutdown s"), ("shutdown_ms_per_session", "shutdown ms/session"),
            ("live", "sessions live after start-up"), ("marked_after_shutdown", "marked for resume after shutdown")]
    sides = [s for s in ("before", "after") if any(s in lv for lv in r["levels"])]
    header = [""] + [f"{lv['sessions']:,} {side}" for lv in r["levels"] for side in sides]
    rows = [[label] + [lv.get(side, {}).get(k, "") for lv in r["levels"] for side in sides] for k, label in keys]
    rows.append(["one session's timer cleanup µs (3 timers/session pending)"]
                + [lv.get(side, {}).get("timers_cleanup", {}).get("cleanup_us", "") for lv in r["levels"] for side in sides])
    rows.append(["error"] + [lv.get(side, {}).get("error", "") for lv in r["levels"] for side in sides])
    rows.append(["load before → after"] + [f"{lv.get(side, {}).get('load_before', ['?'])[0]} → "
                                           f"{lv.get(side, {}).get('load_after', ['?'])[0]}"
                                           for lv in r["levels"] for side in sides])
    before = (f"before = `{r['before_ref']}` at {str(r['before_commit'])[:10]}, checked out in a temporary directory "
              "and run with the same bench code; " if r.get("before_commit") else "")
    return [f"{before}after = {str(r.get('after_commit'))[:10]} (this tree). Each level and side in its own process, "
            "SQLite WAL file, one after the other.", "", *md_table(header, rows), *hot.lifecycle_growth(r)]


def _cluster(r: dict[str, Any]) -> list[str]:
    hb, claim, fence = r["heartbeat"], r["claim"], r["fencing"]
    rows = [[name, f"{v['leases_renewed']:,}", v["statement_ms"]["median"], v["statement_ms"]["p99"],
             v["call_with_commit_ms"]["median"]] for name, v in (("one daemon", hb["one_daemon"]),
                                                                  ("one of 4 daemons", hb["4_daemons"]))]
    fo = claim["failover"]
    return [f"PostgreSQL {r.get('postgresql', '?')}. Heartbeat (lease renewal), {r['runs']} runs; "
            f"{hb.get('hot_update_share', 0):.0%} of the lease updates were HOT.", "",
            *md_table(["heartbeat of", "leases", "statement p50 ms", "p99 ms", "call with commit p50 ms"], rows),
            f"Claims: {claim['single_claims_per_s']:,}/s one at a time, {claim['batch_100_claims_per_s']:,}/s in "
            f"batches of 100; failover: {fo['sweepers']} daemons swept {fo['expired_leases']:,} expired leases at "
            f"{fo['claims_per_s']:,} claims/s, {fo['claimed_twice']} claimed twice. The fencing trigger adds "
            f"{fence['trigger_us_per_row']} µs per row to a {fence['rows_per_statement']}-row message INSERT.", "",
            *_sweep_lines(r.get("sweep"))]


def _sweep_lines(sweep: dict[str, Any] | None) -> list[str]:
    if not sweep:
        return []
    none, ended = sweep["none"], sweep["ended"]
    return [f"A failover sweep that finds nothing (every daemon, every sweep interval), 1,000 leases held: "
            f"p50 {none['sweep_ms']['median']} ms with no ended sessions' leases, "
            f"{ended['sweep_ms']['median']} ms with {ended['ended_leases']:,} of them (p99 "
            f"{none['sweep_ms']['p99']} and {ended['sweep_ms']['p99']} ms).", ""]


def _failover(r: dict[str, Any]) -> list[str]:
    d = r["downtime_s"]
    return [f"{r['sessions']:,} sessions of a daemon cut off from the database; lease {r['lease_s']} s, "
            f"heartbeat {r['heartbeat_s']} s, sweep every {r['sweep_interval_s']} s; one surviving daemon.", "",
            *md_table(["first back s", "p50 s", "p99 s", "max s", "spread of the resumes s", "turns given"],
                    [[d["first"], d["p50"], d["p99"], d["max"], r["resume_spread_s"], r["turns_given_on_b"]]])]


SECTIONS = {
    "pace": ("0. Streaming at a model's pace", hot.pace),
    "streaming": ("1. Streaming overhead (fast stub)", _streaming),
    "messaging": ("2. Actor messaging", _messaging),
    "scale": ("3. Scale", _scale),
    "control": ("4. Control latency", _control),
    "simtime": ("5. Simulated time", _simtime),
    "persistence": ("6. Persistence", _persistence),
    "streams": ("10. Many concurrent streams", _streams),
    "sandbox": ("7. Sandbox cost", _sandbox),
    "soak": ("8. Soak", _soak),
    "lifecycle": ("9. Start-up and shutdown", _lifecycle),
    "cluster": ("11. Leases on PostgreSQL", _cluster),
    "failover": ("12. Failover", _failover),
    "send_burst": ("13. Send burst", hot.send_burst),
}


def _headline(name: str, r: dict[str, Any]) -> str:
    if r.get("failed"):
        return "failed: see below"
    if name == "pace":
        return hot.pace_headline(r)
    if name == "send_burst":
        return hot.send_burst_headline(r)
    if name == "streaming":
        return (f"runtime {r['ratio_cpu']:.0%} of the raw ollama client's tokens per CPU second "
                f"({r['ratio_total']:.0%} per wall second; paired medians)")
    if name == "messaging":
        return "; ".join(f"{c['label'].split(' (')[0]} ×{c['wall']['median']:g}" for c in r["paired"])
    if name == "streams":
        high, first = r["highest_sustained_tokens_per_s"], r["paired"][-1]
        lat = r["rates"][-1]["runtime"]["latency_ms_p99"]["median"]
        return (f"{r['streams']:,} streams: highest sustained raw {high['raw']:,} vs runtime {high['runtime']:,} tok/s; "
                f"at {r['rates'][-1]['rate_per_stream']:g} tok/s each runtime/raw ×{first['wall']['median']:g} "
                f"(CPU ×{first['cpu']['median']:g}), runtime p99 {lat} ms")
    if name == "scale":
        top = r["levels"][-1]
        lat = "; ".join(f"{lv.get('sessions'):,} live + {lv.get('streamers', 0):,} streams: stub→subscriber p50 "
                        f"{lv.get('latency_ms_p50', '?')} ms, p99 {lv.get('latency_ms_p99', '?')} ms"
                        for lv in r["levels"][1:])
        return (f"{top.get('live_sessions', 0):,} live: {top.get('rss_mib_live', '?')} MiB RSS, "
                f"{top.get('rss_kib_per_session', '?')} KiB & {top.get('threads_per_session', '?')} thread/session"
                + (f"; {lat}" if lat else ""))
    if name == "control":
        a, b = r["runs"][0], r["runs"][-1]
        return (f"p50 {a['delivered_ms']['p50']} ms, p99 {a['delivered_ms']['p99']} ms; mid-stream / idle stop "
                f"×{a['paired']['wall']['median']:g}"
                + (f" (at {1 / b['delay_s']:g} chunk/s: p99 {b['delivered_ms']['p99']} ms)" if b is not a else ""))
    if name == "simtime":
        base = r.get("baseline", {})
        vs = r.get("against_issue_baseline")
        versus = f" (×{vs['pair']['wall']['median']:g} of issue 18's day, paired; goal ≤ 0.1)" if vs else ""
        return (f"{r['runs'][0]['simulated_hours_per_s']} simulated h / wall s; the day: {base.get('day_wall_s')} s wall"
                f"{versus}, "
                f"{base.get('cpu_ms_per_turn')} ms CPU per turn, {base.get('actor messages per turn')} actor messages "
                f"and {base.get('sql statements per turn')} SQL statements per turn")
    if name == "sandbox" and r.get("run_tool"):
        return "; ".join(f"run_tool {x['command']}: +{x['added_cpu_ms']['median']} ms CPU (wall p50 "
                         f"+{x['added_wall_p50_ms']} ms)" for x in r["run_tool"])
    if name == "sandbox":
        return "; ".join(f"{x['command']}: +{x['added_p50_ms']} ms at p50 (p99 {x['sandbox']['p99']} ms)"
                         for x in r["rows"])
    if name == "persistence":
        s = r["stats"]
        return (f"group commit {s['group_commit']['messages_per_s']:,} → writer thread "
                f"{s['writer']['messages_per_s']:,} (blocking), {s['writer_async']['messages_per_s']:,} msg/s "
                f"(futures; paired ×{r['speedup_async']}) "
                f"(turn-sized appends: {s['writer_turns']['messages_per_s']:,}); "
                + ("none lost, no errors" if r["all_durable_no_errors"] else "**LOST OR FAILED WRITES**"))
    if name == "soak":
        return "; ".join(f"{x['provider']}: RSS {x['rss_mib_per_1000']} MiB per 1,000 sessions over "
                         f"{x['sessions']:,} (after {x['warm_up']:,}), threads {x['threads_min_max']}, "
                         f"fds {x['fds_min_max']}" for x in r["runs"])
    if name == "cluster":
        hb = r["heartbeat"]["one_daemon"]
        return (f"one heartbeat renewing {hb['leases_renewed']:,} leases: p50 {hb['statement_ms']['median']} ms, "
                f"p99 {hb['statement_ms']['p99']} ms; failover sweep {r['claim']['failover']['claims_per_s']:,} "
                f"claims/s, none twice")
    if name == "failover":
        d = r["downtime_s"]
        return (f"{r['sessions']:,} sessions back on another daemon: p50 {d['p50']} s, p99 {d['p99']} s "
                f"(lease {r['lease_s']} s); {r['turns_given_on_b']} turns given")
    if name == "lifecycle":
        return "; ".join(
            f"{lv['sessions']:,}: start-up " + " → ".join(f"{lv[s].get('startup_s', '?')} s" for s in ("before", "after")
                                                          if s in lv)
            + ", shutdown " + " → ".join(f"{lv[s].get('shutdown_s', '?')} s" for s in ("before", "after") if s in lv)
            for lv in r["levels"])
    return ""


def render(results: dict[str, dict[str, Any]], machine: dict[str, Any], *, quick: bool) -> str:
    p = machine["packages"]
    out = [BEGIN, "", f"Written {machine['date']} by `python -m bench{' --quick' if quick else ''}` from "
           "`bench/results.json`; each section says when its benchmark ran."
           + (" (**quick smoke sizes: not the reported figures**)" if quick else ""), "",
           f"Machine: {machine['nproc']} cores, {machine['ram_gib']} GiB RAM, {machine['implementation']} "
           f"{machine['python']}, Linux {machine['kernel']}; " + ", ".join(f"{k} {v}" for k, v in p.items()) + ".",
           "Other work shared the machine during the run: the load average (1 min) is given next to each figure.", "",
           *md_table(["#", "benchmark", "figure", "goal", "verdict", "load", "reproduce"],
                   [[SECTIONS[n][0].split(".")[0], SECTIONS[n][0].split(". ")[1], _headline(n, r),
                     r.get("goal", ""), _verdict(r), _load(r), f"`{r.get('command', '')}`"]
                    for n, r in results.items()]),
           "Every ratio, measured side by side (paired, interleaved, warmed-up trials: `bench/_paired.py`); "
           "B over A per round, as a rate (units/s) or a cost (time per unit) as the comparison says:", "",
           *paired_table([{**c, "bench": n} for n, r in results.items() if not r.get("failed")
                          for c in r.get("paired", [])], with_bench=True)]
    for name, r in results.items():
        title, body = SECTIONS[name]
        out += [f"### {title}", "", f"`{r.get('command', '')}` — run {r.get('run_at', '?')} — {_load(r)} — "
                f"goal: {r.get('goal', '')} — {_verdict(r)}", ""]
        out += [f"```\n{r.get('error', '')}\n```", ""] if r.get("failed") else body(r) + paired_table(r.get("paired", []))
    return "\n".join(out + [END])


def write_results(path: Path, results: dict[str, dict[str, Any]], machine: dict[str, Any], *, quick: bool) -> Path:
    """Replace the generated part of ``path`` (keeping everything outside the markers)."""
    generated = render(results, machine, quick=quick)
    old = path.read_text() if path.exists() else ""
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + generated + tail
    else:
        text = "# corvid-actors benchmark results\n\n" + generated + "\n\n## Analysis\n\n(to be written)\n"
    path.write_text(text)
    return path
