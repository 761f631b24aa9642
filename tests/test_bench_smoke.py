"""The benchmark harness: its statistics, its report, and a quick run of every scenario.

The quick run asserts only that every scenario completes for every library and prints its
rows; it never asserts anything about speed (machines differ, CI is noisy).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the harness lives beside the package, not inside it

from bench.measure import percentile, quantile_points, summarize_ms  # noqa: E402
from bench.report import aggregate, evaluate_targets, render  # noqa: E402

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
        "lateness": {"herdsched-yaml": {"p99_ms": 5.0}, "aps-mem": {"p99_ms": 4.0}},
        "burst": {
            "herdsched-yaml": {"done_s": 1.0},
            "aps-sqlite": {"done_s": 3.5},
            "aps-mem": {"done_s": 0.8},
        },
        "cold": {"herdsched-yaml": {"total_s": 0.5, "rss_per_schedule_b": 3000.0}},
    }
    verdicts = {t.name: t.met for t in evaluate_targets(rows)}
    assert verdicts["lateness p99 (YAML store) <= APScheduler memory p99"] is False
    assert verdicts["burst >= 3x faster than APScheduler + SQLite (both durable)"] is True
    assert verdicts["burst (YAML store) within 1.5x of APScheduler memory"] is True
    assert verdicts["cold start (YAML store, persisted schedules) < 1 s"] is True
    assert verdicts["memory <= 2 KB per schedule (herdsched, YAML store)"] is False
    assert verdicts["burst (in memory) within 1.5x of APScheduler memory"] is None  # not run


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


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_cpu_split_reports_each_threads_share() -> None:
    from bench.cpu_split import measure

    result = measure(True, schedules=20, seconds=1.0, warmup=1.2)
    assert result["runs"] >= 20  # every schedule ran at least once in the window
    shares = result["threads_us_per_run"]
    assert {"timer user", "workers user", "flusher user"} <= set(shares)
    assert result["p99_ms"] >= result["p50_ms"] >= 0
