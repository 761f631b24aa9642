"""The benchmark harness: its statistics, its report, and a quick run of every scenario.

The quick run asserts only that every scenario completes for every library and prints its
rows; it never asserts anything about speed (machines differ, CI is noisy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the harness lives beside the package, not inside it

from bench.measure import percentile, quantile_points, summarize_ms  # noqa: E402
from bench.peers.fleet import FleetPlan, FleetRecorder, cron_every  # noqa: E402
from bench.report import aggregate, evaluate_checks, evaluate_targets, render  # noqa: E402

SCENARIOS = {
    "lateness": (
        "1. Firing lateness",
        ["herdsched-mem", "herdsched-yaml", "aps-mem", "aps-sqlite", "schedule"],
    ),
    "burst": (
        "2. Burst dispatch",
        ["herdsched-mem", "herdsched-yaml", "aps-mem", "aps-sqlite", "schedule"],
    ),
    "idle": (
        "3. Idle cost",
        [
            "herdsched-mem",
            "herdsched-mem-nopoll",
            "herdsched-yaml",
            "herdsched-yaml-nopoll",
            "aps-mem",
            "aps-sqlite",
            "schedule",
        ],
    ),
    "cold": (
        "4. Cold start and memory",
        ["herdsched-mem", "herdsched-yaml", "aps-mem", "aps-sqlite", "schedule"],
    ),
    "state": (
        "5. Durable state updates",
        ["herdsched-yaml|1", "herdsched-yaml|4", "aps-sqlite|1", "aps-sqlite|4"],
    ),
    "fleet": (
        "6. Agent fleet",
        ["herdsched-mem", "herdsched-yaml", "aps-mem", "aps-sqlite"],
    ),
}

FLEET_PARAMS: dict[str, Any] = {
    "fleet_agents": 3,
    "fleet_intervals": 3,
    "fleet_interval_min": 1,
    "fleet_interval_max": 2,
    "fleet_cron_seconds": 1,
    "fleet_job_min": 0.01,
    "fleet_job_max": 0.05,
    "fleet_seconds": 2.0,
    "fleet_lead": 0.5,
    "fleet_settle": 0.3,
    "fleet_max_concurrent": 2,
    "fleet_seed": 16,
}


def test_percentile_interpolates_between_ranks() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 100) == 5.0
    assert percentile(values, 99) == pytest.approx(4.96)
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile(values, 101)


def test_summaries_are_in_milliseconds() -> None:
    summary = summarize_ms([0.003, 0.001, 0.002])
    assert summary == {"samples": 3, "p50_ms": 2.0, "p99_ms": pytest.approx(2.98), "max_ms": 3.0}
    assert summarize_ms([])["p99_ms"] is None
    points = quantile_points([i / 1000 for i in range(1000)], points=11)
    assert len(points) == 11
    assert points[0] == 0.0
    assert points[-1] == pytest.approx(999.0)


def test_aggregate_takes_medians_of_successful_runs_only() -> None:
    runs: list[dict[str, Any]] = [
        {"ok": True, "done_s": 3.0, "complete": True},
        {"ok": True, "done_s": 1.0, "complete": True},
        {"ok": True, "done_s": 2.0, "complete": True},
        {"ok": False, "error": "timed out"},
    ]
    row = aggregate(runs)
    assert row["done_s"] == 2.0
    assert row["complete"] is True
    assert (row["runs_ok"], row["runs_total"]) == (3, 4)
    failed = aggregate([{"ok": False, "error": "boom"}])
    assert failed["error"] == "boom"


def test_targets_compare_the_right_figures() -> None:
    rows = {
        "lateness": {
            "herdsched-yaml": {"p99_ms": 5.0},
            "aps-mem": {"p99_ms": 4.0, "cpu_per_run_us": 50.0},
            "herdsched-mem": {"cpu_per_run_us": 101.0},
        },
        "burst": {
            "herdsched-yaml": {"done_s": 1.0},
            "aps-sqlite": {"done_s": 4.9},
            "aps-mem": {"done_s": 0.8},
            "herdsched-mem": {"done_s": 1.6},
        },
        "fleet": {
            "herdsched-mem": {"p99_ms": 49.0, "peak_threads": 1003, "thread_budget": 1003},
            "herdsched-yaml": {"p99_ms": 20.0, "peak_threads": 1004, "thread_budget": 1003},
        },
        "cold": {"herdsched-yaml": {"total_s": 0.5, "rss_per_schedule_b": 3000.0}},
    }
    verdicts = {t.name: t.met for t in evaluate_targets(rows)}
    assert verdicts["lateness p99 (YAML store) <= 1.5x APScheduler memory"] is True
    assert verdicts["durable burst (YAML store) >= 5x faster than APScheduler + SQLite"] is False
    assert verdicts["burst (in memory) <= 2x APScheduler memory"] is True
    assert verdicts["CPU per run (in memory, scenario 1) <= 2x APScheduler memory"] is False
    fleet = "p99 < 50 ms and threads <= sum of max_concurrent + 3"
    assert verdicts[f"agent fleet (herdsched, in memory): {fleet}"] is True
    assert verdicts[f"agent fleet (herdsched, YAML store): {fleet}"] is False  # one thread over
    checks = {t.name: t.met for t in evaluate_checks(rows)}
    assert checks["cold start (YAML store, persisted schedules) < 1 s"] is True
    assert checks["memory <= 2 KB per schedule (herdsched, YAML store)"] is False
    assert checks["memory <= 2 KB per schedule (herdsched, in memory)"] is None  # not run
    assert not any("within 1.5x" in name for name in verdicts)  # durable vs memory: dropped


def test_fleet_plan_is_seeded_and_shaped_as_asked() -> None:
    params = dict(FLEET_PARAMS, fleet_agents=50, fleet_interval_min=5, fleet_interval_max=30)
    plan = FleetPlan.build(params, start=1000.0)
    again = FleetPlan.build(params, start=1000.0)
    assert plan == again
    assert FleetPlan.build(dict(params, fleet_seed=17), start=1000.0) != plan
    assert len(plan.agents) == 50
    assert len(plan.schedules) == 200
    assert plan.total_slots == 100
    for agent in plan.agents:
        kinds = [s.every is None for s in plan.of_agent(agent)]
        assert sorted(kinds) == [False, False, False, True]  # three intervals and one cron
    intervals = [s for s in plan.schedules if s.every is not None]
    assert all(5 <= s.every <= 30 for s in intervals if s.every is not None)
    assert len({s.every for s in intervals}) > 10
    assert all(1000.0 <= (s.first_due or 0) < 1000.0 + (s.every or 0) for s in intervals)
    assert cron_every(60) == ("* * * * *", {"second": "0"})
    assert cron_every(2) == ("*/2 * * * * *", {"second": "*/2"})
    with pytest.raises(ValueError, match="divide 60"):
        cron_every(7)


def test_render_shows_failures_instead_of_hiding_them() -> None:
    results = {"burst": {"aps-mem": [{"ok": False, "error": "worker exited\nwith status 1"}]}}
    text = render(results, {"scale": "quick"})
    assert "| APScheduler 3, MemoryJobStore | FAILED: worker exited with status 1" in text
    assert "0/1" in text


@pytest.mark.slow
def test_quick_run_completes_every_scenario(tmp_path: Path) -> None:
    raw = tmp_path / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            # the fleet's window at one second (quick: three): its rows are what is checked
            "--fleet-seconds",
            "1",
            "--json",
            str(raw),
            "--workdir",
            str(tmp_path / "work"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    data = json.loads(raw.read_text(encoding="utf-8"))
    assert data["meta"]["skipped"] == []
    labels = data["meta"]["labels"]
    sections = {part.split("\n", 1)[0]: part for part in done.stdout.split("## ")[1:]}
    for scenario, (title, keys) in SCENARIOS.items():
        assert title in sections, f"no table for {title}"
        table = sections[title].splitlines()
        rows = data["results"][scenario]
        assert sorted(rows) == sorted(keys)
        for key in keys:
            assert rows[key], f"{scenario}/{key} has no runs"
            assert all(run["ok"] for run in rows[key]), rows[key]
            line = next(
                (line for line in table if line.startswith(f"| {labels[key]} ")),
                None,
            )
            assert line is not None, f"no row for {scenario}/{key}"
            assert "FAILED" not in line
    assert "Ratios (herdsched / peer, medians)" in sections
    assert "Targets of the issue" in sections


def test_fleet_lateness_leaves_out_runs_that_waited_for_a_slot() -> None:
    """Two slots: a run that falls due while two others run, or while one runs and one due
    earlier still waits, waits by design; a run due with a slot free counts."""
    plan = FleetPlan.build(dict(FLEET_PARAMS, fleet_agents=1, fleet_seconds=100.0), start=0.0)
    recorder = FleetRecorder(plan, os_threads=lambda: 0)

    def run(due: float, started: float, ended: float) -> None:
        record = recorder.started("agent000", due)
        record.started, record.ended = started, ended

    run(10.0, 10.0, 13.0)  # runs 10..13
    run(11.0, 11.0, 12.0)  # runs 11..12: both slots taken
    run(11.5, 12.5, 13.5)  # due while both run: waits 1 s
    run(12.2, 13.0, 14.0)  # due with one running and one waiting: waits 0.8 s
    run(20.0, 20.01, 21.0)  # a free slot: 10 ms late
    result = recorder.result(0.0)
    assert (result["runs"], result["waited_runs"]) == (5, 2)
    assert result["max_ms"] == pytest.approx(10.0)
    assert result["all_max_ms"] == pytest.approx(1000.0)


@pytest.mark.parametrize("key", ["herdsched-mem", "herdsched-yaml", "aps-mem", "aps-sqlite"])
def test_fleet_smoke_run_gives_figures_of_the_right_shape(key: str, tmp_path: Path) -> None:
    """A few agents for two seconds, in this process: every figure is there and plausible."""
    from bench.config import QUICK, VARIANTS
    from bench.worker import run_spec

    params = dict(QUICK.as_params(), **FLEET_PARAMS, workdir=str(tmp_path))
    result = run_spec({"variant": VARIANTS[key].spec(), "phase": "fleet", "params": params})
    assert (result["agents"], result["schedules"], result["max_concurrent"]) == (3, 12, 2)
    assert result["runs"] >= 12  # every schedule fell due at least once in the window
    assert 0 <= result["waited_runs"] < result["runs"]
    assert 0 <= result["p50_ms"] <= result["p99_ms"] <= result["max_ms"] < 2000
    assert result["all_p50_ms"] >= 0
    assert result["all_p99_ms"] >= result["all_p50_ms"]
    assert result["thread_budget"] == 3 * 2 + 3
    assert 2 <= result["peak_threads"] < 100
    assert result["cpu_s"] > 0
    assert result["cpu_per_run_ms"] == pytest.approx(1000 * result["cpu_s"] / result["runs"])
    # a shape, not a timing: on a loaded machine the setup may overrun its lead, and says so
    assert isinstance(result["setup_overran"], bool)
    json.dumps(result)  # it crosses the process boundary as JSON


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_cpu_split_reports_each_threads_share() -> None:
    from bench.cpu_split import measure

    result = measure(True, schedules=20, seconds=1.0, warmup=1.2)
    assert result["runs"] >= 20  # every schedule ran at least once in the window
    shares = result["threads_us_per_run"]
    assert {"timer user", "workers user", "flusher user"} <= set(shares)
    assert result["p99_ms"] >= result["p50_ms"] >= 0


def test_fleet_lateness_at_the_cron_instant_is_given_apart() -> None:
    """Runs due at a cron instant (every agent at once) and the others have their own p99."""
    params = dict(FLEET_PARAMS, fleet_agents=2, fleet_seconds=200.0, fleet_cron_seconds=60)
    recorder = FleetRecorder(FleetPlan.build(params, start=0.0), os_threads=lambda: 0)
    for agent, late in (("agent000", 0.08), ("agent001", 0.09)):
        record = recorder.started(agent, 60.0)  # the cron instant
        record.started, record.ended = 60.0 + late, 61.0
    record = recorder.started("agent000", 20.25)  # an interval run
    record.started, record.ended = 20.26, 21.0
    result = recorder.result(0.0)
    assert result["cron_runs"] == 2
    assert result["cron_p99_ms"] == pytest.approx(89.9, abs=0.5)
    assert result["other_p99_ms"] == pytest.approx(10.0)
    assert result["max_ms"] == pytest.approx(90.0)


@pytest.mark.parametrize("persistent", [False, True])
def test_run_path_measures_every_round_through_the_public_api(persistent: bool) -> None:
    from bench.run_path import measure

    passes, runs = measure(persistent, schedules=20, rounds=3)
    assert len(passes) == len(runs) == 3
    assert all(value > 0 for value in passes + runs)


def test_postgres_variants_run_only_when_asked_for(tmp_path: Path) -> None:
    from bench.config import QUICK
    from bench.runner import Runner

    def keys(**options: Any) -> list[str]:
        runner = Runner(QUICK, workdir=tmp_path, **options)
        return [v.key for v in runner.wanted("burst")]

    assert "herdsched-postgres" not in keys()
    assert "aps-postgres" not in keys()
    assert keys(postgres=True)[-2:] == ["herdsched-postgres", "aps-postgres"]
    assert keys(variants=["aps-postgres", "aps-mem"]) == ["aps-mem", "aps-postgres"]
    assert keys(variants=["aps-mem"], postgres=True) == [
        "aps-mem",
        "herdsched-postgres",
        "aps-postgres",
    ]
    assert Runner(QUICK, workdir=tmp_path).wanted("pg-idle") == []


def test_statements_are_counted_per_database_user_within_the_window(tmp_path: Path) -> None:
    from bench.postgres import count_statements

    log = tmp_path / "server.log"
    log.write_text(
        "@99.000 [1] user=a app=herdsched: LOG:  statement: SELECT 0\n"  # before the window
        "@100.000 [1] user=a app=herdsched: LOG:  statement: BEGIN\n"
        "@100.001 [1] user=a app=herdsched: LOG:  execute <unnamed>: SELECT lease FROM t\n"
        "\tWHERE x = $1\n"  # a statement's second line
        "@100.001 [1] user=a app=herdsched: DETAIL:  parameters: $1 = 'x'\n"
        "@100.002 [1] user=a app=herdsched: LOG:  execute _pg3_0: UPDATE t SET y = 1\n"
        "@100.003 [1] user=a app=herdsched: LOG:  statement: COMMIT\n"
        "@100.500 [2] user=b app=herdsched: LOG:  statement: SELECT 1\n"
        "@100.600 [3] user=c app=herdsched: LOG:  statement: SELECT 1\n"  # not a host of the case
        "@101.000 [4] user= app=herdsched: LOG:  checkpoint starting: time\n"
        "@110.000 [1] user=a app=herdsched: LOG:  statement: SELECT 2\n",  # at the window's end
        encoding="utf-8",
    )
    counts = count_statements(log, 100.0, 110.0, {"a", "b"})
    assert (counts["a"].statements, counts["a"].transaction_control, counts["a"].queries) == (
        4,
        2,
        2,
    )
    assert counts["a"].transactions == 1  # BEGIN ... COMMIT
    assert (counts["b"].statements, counts["b"].queries, counts["b"].transactions) == (1, 1, 1)


def test_sqlalchemy_url_keeps_every_connection_parameter() -> None:
    from bench.postgres import sqlalchemy_url

    url = sqlalchemy_url("host=db.example port=5433 dbname=app user=u password=p%w sslmode=require")
    assert url.startswith("postgresql+psycopg://u:p%25w@db.example:5433/app?")
    assert "sslmode=require" in url
    url = sqlalchemy_url("postgresql://postgres@127.0.0.1:5432/postgres", application_name="x y")
    assert url == "postgresql+psycopg://postgres@127.0.0.1:5432/postgres?application_name=x+y"


def test_postgres_targets_appear_when_the_store_was_measured() -> None:
    rows = {
        "burst": {"herdsched-postgres": {"done_s": 1.0}, "aps-postgres": {"done_s": 6.0}},
        "lateness": {"herdsched-postgres": {"p99_ms": 9.0}, "herdsched-yaml": {"p99_ms": 4.0}},
        "pg-idle": {
            "herdsched-postgres|1": {
                "max_queries_per_max_sleep": 1.0,
                "max_transactions_per_max_sleep": 1.0,
            },
            "herdsched-postgres|3": {
                "max_queries_per_max_sleep": 1.5,
                "max_transactions_per_max_sleep": 1.2,
            },
        },
    }
    verdicts = {t.name: t.met for t in evaluate_targets(rows)}
    assert verdicts["durable burst (PostgreSQL store) >= 5x faster than APScheduler + PostgreSQL"]
    assert verdicts["lateness p99 (PostgreSQL store) <= 2x herdsched's YAML store"] is False
    idle = "idle on PostgreSQL <= 1 query per max_sleep per host (herdsched, PostgreSQL store, "
    assert verdicts[idle + "1 process)"] is True
    assert verdicts[idle + "3 processes)"] is False
    assert not any("PostgreSQL" in t.name for t in evaluate_targets({"burst": {}}))


@pytest.mark.parametrize("key", ["herdsched-postgres", "aps-postgres"])
def test_postgres_burst_smoke_run(
    key: str, tmp_path: Path, postgres_dsn: str, pg_namespace: str
) -> None:
    """The durable burst of 50 schedules on PostgreSQL, in this process: all ran, durable."""
    from bench.config import QUICK, VARIANTS, missing_libraries
    from bench.worker import run_spec

    if key in missing_libraries():
        pytest.skip(f"{key} needs {missing_libraries()[key]}")
    params = dict(
        QUICK.as_params(),
        workdir=str(tmp_path),
        pg_dsn=postgres_dsn,
        pg_namespace=pg_namespace,
        pg_app="smoke",
    )
    result = run_spec({"variant": VARIANTS[key].spec(), "phase": "burst", "params": params})
    assert result["complete"] is True
    assert result["jobs"] == QUICK.burst_schedules
    assert 0 < result["ran_s"] <= result["durable_s"] == result["done_s"] < 30
    json.dumps(result)


@pytest.mark.slow
def test_quick_run_of_the_postgres_variants(tmp_path: Path) -> None:
    """Lateness and idle queries on a throwaway server, through the command line."""
    from bench.config import missing_libraries
    from bench.postgres import ENV_DSN, server_binaries

    if server_binaries() is None and not os.environ.get(ENV_DSN):
        pytest.skip("no PostgreSQL server binaries and no HERDSCHED_BENCH_PG_DSN")
    if "herdsched-postgres" in missing_libraries():
        pytest.skip("herdsched.store.postgres is not installed")
    raw = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--postgres", "--variants", "herdsched-yaml",
         "--only", "lateness", "pg-idle", "--json", str(raw),
         "--workdir", str(tmp_path / "work")],
        cwd=ROOT, capture_output=True, text=True, timeout=110, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(raw.read_text(encoding="utf-8"))["results"]
    # the burst on PostgreSQL: test_postgres_burst_smoke_run
    assert sorted(results["lateness"]) == ["aps-postgres", "herdsched-postgres", "herdsched-yaml"]
    assert all(run["ok"] for runs in results["lateness"].values() for run in runs)
    assert sorted(results["pg-idle"]) == [
        "aps-postgres|1",
        "herdsched-postgres|1",
        "herdsched-postgres|2",
    ]
    for runs in results["pg-idle"].values():
        assert all(run["ok"] and run["leaders"] == 1 for run in runs), runs
        assert all(run["max_queries_per_max_sleep"] is not None for run in runs)
    assert "## 7. Idle queries on PostgreSQL" in done.stdout
    assert "idle on PostgreSQL <= 1 query per max_sleep per host" in done.stdout
