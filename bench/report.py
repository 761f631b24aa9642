"""Turns raw results into the printed tables: medians per row, ratios, and the issue's targets.

Every figure in a row is the median over that row's runs. Ratios are herdsched / peer of those
medians; for times, CPU and memory a ratio below 1 means herdsched is ahead, for throughput a
ratio above 1 does.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.config import SCENARIOS, VARIANTS

__all__ = ["Target", "aggregate", "evaluate_checks", "evaluate_targets", "render", "row_label"]

Results = dict[str, dict[str, list[dict[str, Any]]]]
Row = dict[str, Any]

#: scenario → columns (field, header, format)
COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    "lateness": [
        ("runs_of_expected", "runs / expected", "text"),
        ("p50_ms", "p50 ms", "ms"),
        ("p99_ms", "p99 ms", "ms"),
        ("max_ms", "max ms", "ms"),
        ("cpu_s", "CPU s", "s"),
        ("cpu_per_run_us", "CPU µs/run", "f1"),
        ("wakeups", "wakeups", "int"),
    ],
    "burst": [
        ("jobs", "jobs", "int"),
        ("ran_s", "all ran s", "s"),
        ("durable_s", "durable s", "s"),
        ("done_s", "done s", "s"),
        ("cpu_s", "CPU s", "s"),
        ("wakeups", "wakeups", "int"),
    ],
    "idle": [
        ("seconds", "window s", "s1"),
        ("wakeups", "wakeups", "int"),
        ("wakeups_per_min", "wakeups/min", "f1"),
        ("cpu_s", "CPU s", "s"),
        ("cpu_pct", "CPU % of a core", "f3"),
    ],
    "cold": [
        ("persisted", "from disk", "text"),
        ("register_s", "build s", "s"),
        ("start_to_first_s", "start() → 1st job s", "s"),
        ("total_s", "total s", "s"),
        ("rss_per_schedule_b", "RSS B/schedule", "int"),
        ("rss_mb", "RSS MB", "f1"),
    ],
    "state": [
        ("processes", "processes", "int"),
        ("updates_per_s", "durable updates/s", "f1"),
        ("errors", "errors", "int"),
        ("state_bytes", "store bytes", "int"),
    ],
    "fleet": [
        ("runs", "runs", "int"),
        ("waited_runs", "waited for a slot", "int"),
        ("p50_ms", "p50 ms", "ms"),
        ("p99_ms", "p99 ms", "ms"),
        ("max_ms", "max ms", "ms"),
        ("all_p99_ms", "p99 ms, all runs", "ms"),
        ("cron_p99_ms", "p99 ms, cron instant", "ms"),
        ("other_p99_ms", "p99 ms, other runs", "ms"),
        ("peak_threads", "peak threads", "int"),
        ("peak_os_threads", "OS threads", "int"),
        ("thread_budget", "budget", "int"),
        ("cpu_s", "CPU s", "s"),
        ("cpu_per_run_ms", "CPU ms/run", "ms"),
    ],
    "pg-idle": [
        ("hosts", "hosts", "int"),
        ("leaders", "leading", "int"),
        ("seconds", "window s", "s1"),
        ("max_sleep", "max_sleep s", "s1"),
        ("leader_queries_per_max_sleep", "leader queries/max_sleep", "f2"),
        ("standby_queries_per_max_sleep", "standby queries/max_sleep", "f2"),
        ("leader_transactions_per_max_sleep", "leader xacts/max_sleep", "f2"),
        ("standby_transactions_per_max_sleep", "standby xacts/max_sleep", "f2"),
        ("leader_statements_per_max_sleep", "leader stmts/max_sleep", "f2"),
        ("standby_statements_per_max_sleep", "standby stmts/max_sleep", "f2"),
        ("db_tx_per_max_sleep_per_host", "db counter xacts/max_sleep/host", "f2"),
        ("cpu_s", "CPU s (busiest)", "s"),
    ],
}

#: scenario → (field, herdsched row, peer row, better when) for the ratio table
RATIOS: dict[str, list[tuple[str, str, str, str]]] = {
    "lateness": [
        ("p99_ms", "herdsched-postgres", "herdsched-yaml", "lower"),
        ("p99_ms", "herdsched-postgres", "aps-postgres", "lower"),
        ("p99_ms", "herdsched-yaml", "aps-mem", "lower"),
        ("p99_ms", "herdsched-yaml", "aps-sqlite", "lower"),
        ("p99_ms", "herdsched-mem", "aps-mem", "lower"),
        ("p99_ms", "herdsched-mem", "schedule", "lower"),
        ("p50_ms", "herdsched-yaml", "aps-mem", "lower"),
        ("p50_ms", "herdsched-mem", "aps-mem", "lower"),
        ("cpu_s", "herdsched-yaml", "aps-sqlite", "lower"),
        ("cpu_s", "herdsched-mem", "aps-mem", "lower"),
        ("cpu_per_run_us", "herdsched-mem", "aps-mem", "lower"),
    ],
    "burst": [
        ("done_s", "herdsched-postgres", "aps-postgres", "lower"),
        ("done_s", "herdsched-yaml", "aps-sqlite", "lower"),
        ("done_s", "herdsched-yaml", "aps-mem", "lower"),
        ("done_s", "herdsched-mem", "aps-mem", "lower"),
        ("done_s", "herdsched-mem", "schedule", "lower"),
    ],
    "idle": [
        ("cpu_s", "herdsched-mem", "aps-mem", "lower"),
        ("cpu_s", "herdsched-mem-nopoll", "aps-mem", "lower"),
        ("cpu_s", "herdsched-yaml", "aps-sqlite", "lower"),
        ("cpu_s", "herdsched-yaml-nopoll", "aps-sqlite", "lower"),
        ("cpu_s", "herdsched-mem-nopoll", "schedule", "lower"),
        ("wakeups", "herdsched-mem", "aps-mem", "lower"),
        ("wakeups", "herdsched-mem-nopoll", "aps-mem", "lower"),
    ],
    "cold": [
        ("total_s", "herdsched-yaml", "aps-sqlite", "lower"),
        ("total_s", "herdsched-mem", "aps-mem", "lower"),
        ("total_s", "herdsched-mem", "schedule", "lower"),
        ("rss_per_schedule_b", "herdsched-yaml", "aps-sqlite", "lower"),
        ("rss_per_schedule_b", "herdsched-mem", "aps-mem", "lower"),
        ("rss_per_schedule_b", "herdsched-mem", "schedule", "lower"),
    ],
    "state": [
        ("updates_per_s", "herdsched-yaml|1", "aps-sqlite|1", "higher"),
        ("updates_per_s", "herdsched-yaml|4", "aps-sqlite|4", "higher"),
    ],
    "fleet": [
        ("p99_ms", "herdsched-mem", "aps-mem", "lower"),
        ("p99_ms", "herdsched-yaml", "aps-mem", "lower"),
        ("p99_ms", "herdsched-yaml", "aps-sqlite", "lower"),
        ("p50_ms", "herdsched-mem", "aps-mem", "lower"),
        ("p50_ms", "herdsched-yaml", "aps-sqlite", "lower"),
        ("peak_threads", "herdsched-mem", "aps-mem", "lower"),
        ("peak_threads", "herdsched-yaml", "aps-sqlite", "lower"),
        ("cpu_per_run_ms", "herdsched-mem", "aps-mem", "lower"),
        ("cpu_per_run_ms", "herdsched-yaml", "aps-sqlite", "lower"),
    ],
}

#: the agent fleet's goal: p99 lateness (runs with a free slot) under this many milliseconds
FLEET_P99_GOAL_MS = 50.0

IDLE_CPU_NEAR_ZERO_PCT = 0.1  # "CPU near zero": at most 0.1 % of one core while idle


def row_label(key: str) -> str:
    variant_key, _, processes = key.partition("|")
    variant = VARIANTS.get(variant_key)
    label = variant.label if variant else variant_key
    return f"{label}, {processes} process{'es' if processes != '1' else ''}" if processes else label


def _median(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if all(isinstance(v, bool) for v in present):
        return all(present)
    if all(isinstance(v, (int, float)) for v in present):
        return statistics.median(present)
    return present[0]


def aggregate(runs: list[dict[str, Any]]) -> Row:
    """The median of every figure over the successful runs (plus derived figures)."""
    good = [r for r in runs if r.get("ok")]
    row: Row = {"runs_ok": len(good), "runs_total": len(runs)}
    if not good:
        row["error"] = next((r.get("error") for r in runs if r.get("error")), "no runs")
        return row
    fields = {k for r in good for k in r if k not in ("quantiles_ms", "error")}
    for name in fields:
        row[name] = _median([r.get(name) for r in good])
    if "expected_runs" in row:
        row["runs_of_expected"] = f"{int(row['runs']):,} / {int(row['expected_runs']):,}"
        with_p99 = sorted(good, key=lambda r: r.get("p99_ms") or 0.0)
        row["quantiles_ms"] = with_p99[len(with_p99) // 2].get("quantiles_ms", [])
    if "seconds" in row and "cpu_s" in row and row.get("seconds"):
        row["cpu_pct"] = 100.0 * row["cpu_s"] / row["seconds"]
        if row.get("wakeups") is not None:
            row["wakeups_per_min"] = 60.0 * row["wakeups"] / row["seconds"]
    if "expected_runs" in row and row.get("runs"):
        row["cpu_per_run_us"] = 1e6 * row["cpu_s"] / row["runs"]
    if "rss_per_schedule_b" in row:
        row["persisted"] = "yes" if row.get("state_bytes") is not None else "no (built in code)"
    return row


def _fmt(value: Any, kind: str) -> str:
    if value is None:
        return "—"
    if kind == "text":
        return str(value)
    if kind == "int":
        return f"{round(value):,}"
    if kind == "ms":
        return f"{value:,.1f}" if value >= 10 else f"{value:.2f}"
    if kind == "s":
        return f"{value:.3f}" if value < 10 else f"{value:,.1f}"
    if kind == "s1":
        return f"{value:.1f}"
    if kind == "f1":
        return f"{value:,.1f}"
    if kind == "f2":
        return f"{value:,.2f}"
    if kind == "f3":
        return f"{value:.3f}"
    raise ValueError(f"unknown format {kind!r}")


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    lines.extend(
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    )
    return lines


def _ratio(herd: Any, peer: Any) -> float | None:
    if not isinstance(herd, (int, float)) or not isinstance(peer, (int, float)):
        return None
    if peer == 0:
        return None if herd == 0 else math.inf
    return float(herd) / float(peer)


@dataclass(frozen=True)
class Target:
    """One of the issue's targets, evaluated on the medians."""

    name: str
    met: bool | None  # None: a figure is missing
    detail: str


def _get(rows: dict[str, dict[str, Row]], scenario: str, key: str, field: str) -> Any:
    value = rows.get(scenario, {}).get(key, {}).get(field)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _adder(targets: list[Target]) -> Callable[..., None]:
    """``add(name, figures, test, text)``: a target met when ``test(*figures)``, or n/a when a
    figure is missing."""

    def add(name: str, figures: list[Any], test: Callable[..., bool], text: str) -> None:
        if any(f is None for f in figures):
            targets.append(Target(name, None, "not measured in this run"))
        else:
            targets.append(Target(name, test(*figures), text.format(*figures)))

    return add


def evaluate_targets(rows: dict[str, dict[str, Row]]) -> list[Target]:
    """The issue's targets, each a ratio to the peer measured in the same run, and the agent
    fleet's goal."""
    targets: list[Target] = []
    add = _adder(targets)
    add(
        "lateness p99 (YAML store) <= 1.5x APScheduler memory",
        [
            _get(rows, "lateness", "herdsched-yaml", "p99_ms"),
            _get(rows, "lateness", "aps-mem", "p99_ms"),
        ],
        lambda h, p: h <= 1.5 * p,
        "{0:.1f} ms vs {1:.1f} ms",
    )
    add(
        "durable burst (YAML store) >= 5x faster than APScheduler + SQLite",
        [
            _get(rows, "burst", "herdsched-yaml", "done_s"),
            _get(rows, "burst", "aps-sqlite", "done_s"),
        ],
        lambda h, p: p >= 5 * h,
        "{0:.3f} s vs {1:.3f} s",
    )
    add(
        "burst (in memory) <= 2x APScheduler memory",
        [_get(rows, "burst", "herdsched-mem", "done_s"), _get(rows, "burst", "aps-mem", "done_s")],
        lambda h, p: h <= 2 * p,
        "{0:.3f} s vs {1:.3f} s",
    )
    add(
        "CPU per run (in memory, scenario 1) <= 2x APScheduler memory",
        [
            _get(rows, "lateness", "herdsched-mem", "cpu_per_run_us"),
            _get(rows, "lateness", "aps-mem", "cpu_per_run_us"),
        ],
        lambda h, p: h <= 2 * p,
        "{0:.1f} µs vs {1:.1f} µs",
    )
    for key in ("herdsched-mem", "herdsched-yaml"):
        add(
            f"agent fleet ({row_label(key)}): p99 < {FLEET_P99_GOAL_MS:.0f} ms and threads "
            "<= sum of max_concurrent + 3",
            [
                _get(rows, "fleet", key, "p99_ms"),
                _get(rows, "fleet", key, "peak_threads"),
                _get(rows, "fleet", key, "thread_budget"),
            ],
            lambda p99, threads, budget: p99 < FLEET_P99_GOAL_MS and threads <= budget,
            "p99 {0:.1f} ms, peak {1:.0f} threads, budget {2:.0f}",
        )
    if any("herdsched-postgres" in key for by_key in rows.values() for key in by_key):
        _postgres_targets(rows, add)
    return targets


def _postgres_targets(rows: dict[str, dict[str, Row]], add: Callable[..., None]) -> None:
    """Issue 18's targets for the PostgreSQL store (given when it was measured)."""
    add(
        "durable burst (PostgreSQL store) >= 5x faster than APScheduler + PostgreSQL",
        [
            _get(rows, "burst", "herdsched-postgres", "done_s"),
            _get(rows, "burst", "aps-postgres", "done_s"),
        ],
        lambda h, p: p >= 5 * h,
        "{0:.3f} s vs {1:.3f} s",
    )
    add(
        "lateness p99 (PostgreSQL store) <= 2x herdsched's YAML store",
        [
            _get(rows, "lateness", "herdsched-postgres", "p99_ms"),
            _get(rows, "lateness", "herdsched-yaml", "p99_ms"),
        ],
        lambda h, y: h <= 2 * y,
        "{0:.1f} ms vs {1:.1f} ms",
    )
    idle = sorted(k for k in rows.get("pg-idle", {}) if k.startswith("herdsched-postgres|"))
    for key in idle or ["herdsched-postgres|1"]:
        add(
            f"idle on PostgreSQL <= 1 query per max_sleep per host ({row_label(key)})",
            [
                _get(rows, "pg-idle", key, "max_queries_per_max_sleep"),
                _get(rows, "pg-idle", key, "max_transactions_per_max_sleep"),
            ],
            lambda q, _: q <= 1.0,
            "busiest host {0:.2f} queries ({1:.2f} transactions) per max_sleep",
        )


def evaluate_checks(rows: dict[str, dict[str, Row]]) -> list[Target]:
    """Checks of earlier issues that are not ratios to a peer: idle cost, cold start, memory."""
    targets: list[Target] = []
    add = _adder(targets)
    for key in ("herdsched-mem-nopoll", "herdsched-yaml-nopoll", "herdsched-mem", "herdsched-yaml"):
        seconds = _get(rows, "idle", key, "seconds")
        max_sleep = _get(rows, "idle", key, "max_sleep")
        wakeups = _get(rows, "idle", key, "wakeups")
        budget = None if seconds is None or max_sleep is None else math.ceil(seconds / max_sleep)
        add(
            f"idle wakeups <= one per max_sleep ({row_label(key)})",
            [wakeups, budget],
            lambda w, b: w <= b + 1,
            "{0:.0f} wakeups, budget {1} (+1 for the window edge)",
        )
        add(
            f"idle CPU near zero, <= {IDLE_CPU_NEAR_ZERO_PCT} % of a core ({row_label(key)})",
            [_get(rows, "idle", key, "cpu_pct"), _get(rows, "idle", key, "cpu_s")],
            lambda pct, s: pct <= IDLE_CPU_NEAR_ZERO_PCT,
            "{0:.3f} % ({1:.3f} CPU s)",
        )
    add(
        "cold start (YAML store, persisted schedules) < 1 s",
        [_get(rows, "cold", "herdsched-yaml", "total_s")],
        lambda t: t < 1.0,
        "{0:.3f} s from constructing the scheduler to the first job",
    )
    for key in ("herdsched-yaml", "herdsched-mem"):
        add(
            f"memory <= 2 KB per schedule ({row_label(key)})",
            [_get(rows, "cold", key, "rss_per_schedule_b")],
            lambda b: b <= 2048,
            "{0:,.0f} B per schedule (RSS delta)",
        )
    return targets


def render(results: Results, meta: dict[str, Any]) -> str:
    """The full text report: one table per scenario, the ratios, the targets."""
    rows: dict[str, dict[str, Row]] = {
        scenario: {key: aggregate(runs) for key, runs in by_key.items()}
        for scenario, by_key in results.items()
    }
    out: list[str] = []
    out.append(f"herdsched benchmark, {meta.get('scale', '?')} scale")
    if meta.get("source"):
        out.append(f"  source: {meta['source']}")
    if meta.get("seconds") is not None:
        out.append(f"  run time: {meta['seconds']} s, started {meta.get('started', '?')}")
    for name, value in meta.get("machine", {}).items():
        out.append(f"  {name}: {value}")
    if meta.get("skipped"):
        out.append("  not installed, skipped: " + ", ".join(meta["skipped"]))
    if meta.get("postgres"):
        out.append(f"  postgres: {meta['postgres']}")
    for scenario, by_key in rows.items():
        if not by_key:
            continue
        out.append("")
        out.append(f"## {SCENARIOS[scenario][0]}")
        out.append("")
        headers = ["variant", *(h for _, h, _ in COLUMNS[scenario]), "runs"]
        table: list[list[str]] = []
        for key, row in by_key.items():
            runs = f"{row['runs_ok']}/{row['runs_total']}"
            if "error" in row:
                failed = "FAILED: " + " ".join(str(row["error"]).split())[-160:]
                table.append(
                    [row_label(key), failed] + [""] * (len(COLUMNS[scenario]) - 1) + [runs]
                )
                continue
            cells = [_fmt(row.get(field), kind) for field, _, kind in COLUMNS[scenario]]
            table.append([row_label(key), *cells, runs])
        out.extend(_table(headers, table))
    ratio_rows: list[list[str]] = []
    for scenario, pairs in RATIOS.items():
        for field, herd, peer, better in pairs:
            h = rows.get(scenario, {}).get(herd, {}).get(field)
            p = rows.get(scenario, {}).get(peer, {}).get(field)
            ratio = _ratio(h, p)
            if ratio is None:
                continue
            ahead = ratio <= 1 if better == "lower" else ratio >= 1
            ratio_rows.append(
                [
                    SCENARIOS[scenario][0].split(". ", 1)[-1],
                    field,
                    row_label(herd),
                    row_label(peer),
                    f"{ratio:.2f}x" if math.isfinite(ratio) else "∞ (peer 0)",
                    "herdsched" if ahead else "peer",
                ]
            )
    if ratio_rows:
        out.append("")
        out.append("## Ratios (herdsched / peer, medians)")
        out.append("")
        out.extend(
            _table(["scenario", "figure", "herdsched", "peer", "ratio", "ahead"], ratio_rows)
        )
    verdicts = {True: "met", False: "MISSED", None: "n/a"}
    out.append("")
    out.append("## Targets of the issue")
    if meta.get("scale") != "full":
        out.append("(quick scale: scenarios are scaled down; only --full speaks to the targets)")
    out.append("")
    out.extend(
        _table(
            ["target", "verdict", "figures"],
            [[t.name, verdicts[t.met], t.detail] for t in evaluate_targets(rows)],
        )
    )
    out.extend(_fleet_note(meta))
    checks = [t for t in evaluate_checks(rows) if t.met is not None]
    if checks:
        out.append("")
        out.append("## Other checks (idle cost, cold start, memory)")
        out.append("")
        out.extend(
            _table(
                ["check", "verdict", "figures"],
                [[t.name, verdicts[t.met], t.detail] for t in checks],
            )
        )
    return "\n".join(out) + "\n"


def _fleet_note(meta: dict[str, Any]) -> list[str]:
    """How the agent fleet was set up, so its figures can be read."""
    params = meta.get("params") or {}
    if "fleet_agents" not in params:
        return []
    agents, slots = params["fleet_agents"], params["fleet_max_concurrent"]
    every = params["fleet_cron_seconds"]
    cron = "every minute" if every == 60 else f"every {every} s"
    return [
        "",
        f"Agent fleet: {agents} agents x ({params['fleet_intervals']} interval schedules of "
        f"{params['fleet_interval_min']}-{params['fleet_interval_max']} s + a cron {cron}), "
        f"jobs sleeping {params['fleet_job_min']}-{params['fleet_job_max']} s, "
        f"{params['fleet_seconds']:g} s window, seed {params['fleet_seed']}.",
        f"herdsched: max_concurrent={slots} per agent (thread budget {agents} x {slots} + 3); "
        f"APScheduler 3: one ThreadPoolExecutor(max_workers={agents * slots}), the same total.",
        "herdsched's intervals run from completion, APScheduler's from the previous start "
        "(IntervalTrigger): the runs differ, the rules are each library's own.",
        "p50/p99/max count the runs whose agent had a free slot when they fell due "
        "('waited for a slot' are the others, in 'p99, all runs'); 'cron instant' are those due "
        "when every agent's cron schedule fires at once, 'other runs' the rest.",
    ]
