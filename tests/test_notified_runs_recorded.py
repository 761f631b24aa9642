"""A run whose notifier is slow (a webhook) is never left without a record by a crash.

The notifier is heard before the run's record and new state are written, and the two reach the
store in the same group commit: before, the state showing the run ended was committed while the
notifier held the record back, the run's claim went with that commit, and a process killed then
left a run that had no record and that no one would record."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import T0, crash_copy, running, wait_until

from herdsched import Agent, RunStatus, Schedule, ThreadedScheduler
from herdsched.testing import FakeClock


@pytest.mark.parametrize("ending", ["returns", "times-out"])
def test_a_run_whose_notifier_is_slow_is_recorded_after_a_crash(
    tmp_path: Path, ending: str
) -> None:
    in_notifier, release = threading.Event(), threading.Event()

    def notifier(note: Any) -> None:  # a webhook that takes its time
        in_notifier.set()
        assert release.wait(10)

    def job(info: Any) -> None:
        if ending == "times-out":
            release.wait(10)  # ignores its cancel event

    clock = FakeClock(T0)
    sched = ThreadedScheduler(
        state_dir=tmp_path / "live", clock=clock, commit_delay=0.5, notifier=notifier
    )
    schedule = Schedule.interval("1h", timeout="30s", notify="always")
    sched.add_agent(Agent("a", job=job, schedules={"s": schedule}))
    sched.start()
    try:
        sched.run_pending()
        if ending == "times-out":
            clock.advance("31s")
            sched.run_pending()
        assert in_notifier.wait(10)
        sched.store.flush()  # a group commit while the notifier is heard
        crash = crash_copy(tmp_path / "live", tmp_path / "crash")
    finally:
        release.set()
        sched.stop()
    later = ThreadedScheduler(state_dir=crash, clock=FakeClock(T0 + timedelta(hours=1)))
    later.add_agent(Agent("a", job=lambda info: None, schedules={"s": schedule}))
    with later:
        history = later.history("a", "s")
    # its outcome never reached the store: recorded as interrupted (before: no record at all)
    assert [r.status for r in history] == [RunStatus.INTERRUPTED]


def test_a_job_that_returned_before_its_timeout_is_not_timed_out_while_its_notifier_is_heard(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The timer took a run whose job had returned, but whose notifier was still being
    heard past the run's timeout, for a timed-out one: it logged a timeout and planned the
    next run from when the notifier returned."""
    in_notifier, release = threading.Event(), threading.Event()

    def notifier(note: Any) -> None:
        in_notifier.set()
        assert release.wait(10)

    with running(notifier=notifier) as (sched, clock):
        schedule = Schedule.interval("5m", timeout="30s", notify="always")
        sched.add_agent(Agent("a", job=lambda info: None, schedules={"s": schedule}))
        sched.start()
        sched.run_pending()
        assert in_notifier.wait(10)
        clock.advance("31s")  # past the timeout while the notifier is heard
        sched.run_pending()
        release.set()
        assert sched.wait_until_idle(10)
        assert wait_until(lambda: sched.history("a", "s"))
        assert [r.status for r in sched.history("a", "s")] == [RunStatus.SUCCESS]
        next_run_at = sched.store.get_schedule_state("a", "s").next_run_at
        assert next_run_at == T0 + timedelta(minutes=5)  # from the job's end, not later
    assert "timed out" not in caplog.text
