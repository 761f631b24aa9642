"""When a started run's ``running`` transition reaches the state: at once for ``get_status()``,
with the next group commit for the store and its file (see ``ThreadedScheduler._start``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from scheduler_helpers import T0, Blocker, step, wait_until

from herdsched import Agent, RunStatus, Schedule, Status, ThreadedScheduler
from herdsched.models import ScheduleState
from herdsched.store import YamlStateStore
from herdsched.testing import FakeClock


def on_disk(state_dir: Path, schedule: str = "s") -> ScheduleState:
    """What another process reads from the state file."""
    reader = YamlStateStore(state_dir)
    try:
        return reader.get_schedule_state("a", schedule)
    finally:
        reader.close()


def s_blocks(
    tmp_path: Path, every: Schedule | None = None
) -> tuple[ThreadedScheduler, FakeClock, Blocker]:
    """A started YAML-store scheduler on a FakeClock at T0 whose schedule s (due at once) is
    running its blocking job; the caller stops it."""
    clock, job = FakeClock(T0), Blocker()
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, commit_delay=0.5)
    sched.add_agent(Agent("a", job=job, schedules={"s": every or Schedule.interval("1h")}))
    sched.start()
    sched.run_pending()
    assert job.began.wait(10)
    return sched, clock, job


def test_a_running_job_shows_running_at_once_and_on_disk_from_the_next_group_commit(
    tmp_path: Path,
) -> None:
    sched, clock, job = s_blocks(tmp_path)
    with sched:
        (status,) = sched.get_status().schedules
        assert (status.status, status.running, status.last_run_at) == (Status.RUNNING, 1, T0)
        assert on_disk(tmp_path).status is Status.IDLE  # not committed yet
        clock.advance(0.5)
        sched.run_pending()  # the group commit is due: it records the start
        assert wait_until(lambda: on_disk(tmp_path).status is not Status.IDLE)
        state = on_disk(tmp_path)
        assert (state.status, state.last_run_at, state.last_slot_at) == (Status.RUNNING, T0, T0)
        job.release.set()
        step(sched, clock, 0.5)
        clock.advance(0.5)  # the finishing transition's group commit is due
        sched.run_pending()
        assert wait_until(lambda: on_disk(tmp_path).last_result is not None)
        state = on_disk(tmp_path)
    assert (state.status, state.last_result, state.last_run_at) == (
        Status.IDLE,
        RunStatus.SUCCESS,
        T0,
    )


def test_a_short_run_reaches_disk_as_one_finished_transition(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, commit_delay=0.5)
    sched.add_agent(Agent("a", job=lambda info: None, schedules={"s": Schedule.interval("1h")}))
    with sched:
        step(sched)
        state = sched.store.get_schedule_state("a", "s")
    assert (state.status, state.last_result) == (Status.IDLE, RunStatus.SUCCESS)
    assert (state.last_run_at, state.last_slot_at, state.last_finished_at) == (T0, T0, T0)


def test_the_sleeping_timer_wakes_to_commit_a_long_run_within_commit_delay(
    tmp_path: Path,
) -> None:
    """Real time: the run starts on a trigger while the timer sleeps for ``max_sleep``."""
    job = Blocker()
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    sched = ThreadedScheduler(state_dir=tmp_path, commit_delay=0.1, max_sleep=60)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h", start_at=later)}))
    with sched:
        sched.trigger("a", "s")
        assert job.began.wait(10)
        seen = wait_until(lambda: on_disk(tmp_path).status is Status.RUNNING, timeout=10)
        job.release.set()
    assert seen


def test_a_run_settled_as_timed_out_is_not_recorded_running_afterwards(tmp_path: Path) -> None:
    sched, clock, job = s_blocks(tmp_path, Schedule.interval("1h", timeout="1s"))
    with sched:
        clock.advance(2)
        sched.run_pending()  # the timeout settles the run; the job itself goes on
        clock.advance(1)
        sched.run_pending()  # the group commit, here or on the flusher thread
        assert wait_until(lambda: on_disk(tmp_path).last_result is not None)
        state = on_disk(tmp_path)
        job.release.set()
    assert (state.status, state.last_result) == (Status.IDLE, RunStatus.TIMEOUT)


def test_stopping_without_waiting_leaves_a_running_job_recorded_as_running(
    tmp_path: Path,
) -> None:
    sched, _clock, job = s_blocks(tmp_path)
    sched.stop(wait_for_jobs=False)
    state = on_disk(tmp_path)
    job.release.set()
    # the next scheduler finds it interrupted, not idle with an old last run
    assert (state.status, state.last_run_at) == (Status.RUNNING, T0)
