"""Run statistics: counts by status, success rate, mean/p95 duration, last success/failure."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from agent_helpers import START, Script, advancing, running

from herdsched import Agent, Deferred, RunRecord, RunStats, Schedule
from herdsched.stats import compute_run_stats


def record(status: str, start_minute: int, seconds: float | None = None) -> RunRecord:
    started = START + timedelta(minutes=start_minute)
    finished = started + timedelta(seconds=seconds) if seconds is not None else None
    return RunRecord(
        run_id=f"r{start_minute}",
        agent="a",
        schedule="s",
        trigger_type="interval",
        scheduled_for=started,
        started_at=started if seconds is not None else None,
        finished_at=finished,
        status=status,
    )


def test_stats_of_runs_through_the_scheduler() -> None:
    with running(max_consecutive_failures=None) as (sched, clock):
        job = Script(
            advancing(clock, 1),
            advancing(clock, 2),
            advancing(clock, 10, RuntimeError("boom")),
            advancing(clock, 3),
            Deferred("1m", "busy"),
            advancing(clock, 4),
        )
        sched.add_agent(
            Agent(
                "bot",
                job=job,
                schedules={"work": Schedule.manual(), "other": Schedule.manual()},
            )
        )
        finished: list[datetime] = []
        for _ in range(6):
            sched.trigger("bot", "work", wait=True)
            finished.append(clock.now())
            clock.advance("1m")
        sched.trigger("bot", "other", wait=True)

        stats = sched.run_stats("bot", "work")
        assert stats.total == 6
        assert stats.counts == {"success": 4, "failed": 1, "deferred": 1}
        assert stats.success_rate == pytest.approx(0.8)  # 4 of 5 finished runs
        assert stats.mean_duration == timedelta(seconds=4)  # (1 + 2 + 10 + 3 + 4) / 5
        assert stats.p95_duration == timedelta(seconds=10)
        assert stats.last_success_at == finished[5]
        assert stats.last_failure_at == finished[2]

        # every schedule of the agent when none is named
        assert sched.run_stats("bot").total == 7
        assert sched.run_stats("bot").counts["success"] == 5

        since = sched.run_stats("bot", "work", since=finished[2] + timedelta(seconds=30))
        assert since.total == 3
        assert since.counts == {"success": 2, "deferred": 1}
        assert since.success_rate == 1.0
        assert since.last_failure_at is None


def test_stats_of_a_schedule_that_never_ran() -> None:
    with running() as (sched, _clock):
        sched.add_agent(Agent("bot", job=Script(), schedules={"s": Schedule.manual()}))
        stats = sched.run_stats("bot", "s")
        assert stats == RunStats(
            total=0,
            counts={},
            success_rate=None,
            mean_duration=None,
            p95_duration=None,
            last_success_at=None,
            last_failure_at=None,
        )


def test_p95_is_the_nearest_rank() -> None:
    records = [record("success", i, seconds=i + 1) for i in range(20)]  # 1..20 s
    stats = compute_run_stats(records)
    assert stats.p95_duration == timedelta(seconds=19)  # rank ceil(0.95 * 20) = 19
    assert stats.mean_duration == timedelta(seconds=10.5)
    assert compute_run_stats(records[:1]).p95_duration == timedelta(seconds=1)
    assert compute_run_stats(records[:2]).p95_duration == timedelta(seconds=2)


def test_timeouts_are_failures_and_unfinished_runs_are_only_counted() -> None:
    records = [
        record("success", 0, seconds=2),
        record("timeout", 1, seconds=60),
        record("interrupted", 2),
        record("missed", 3),
        record("skipped", 4),
    ]
    stats = compute_run_stats(records)
    assert stats.total == 5
    assert stats.counts == {
        "success": 1,
        "timeout": 1,
        "interrupted": 1,
        "missed": 1,
        "skipped": 1,
    }
    assert stats.success_rate == 0.5
    assert stats.mean_duration == timedelta(seconds=31)
    assert stats.last_failure_at == START + timedelta(minutes=1, seconds=60)
    assert stats.last_success_at == START + timedelta(seconds=2)


def test_since_uses_the_scheduled_time_of_records_that_never_started() -> None:
    records = [record("missed", 0), record("missed", 10), record("success", 20, seconds=1)]
    stats = compute_run_stats(records, since=START + timedelta(minutes=10))
    assert stats.counts == {"missed": 1, "success": 1}
