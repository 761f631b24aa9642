"""The run rules of ARCHITECTURE §3 through a real ThreadedScheduler driven by a FakeClock."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import T0, Blocker, Recorder, running, step, wait_until

from herdsched import (
    Agent,
    ConflictError,
    Deferred,
    InvalidScheduleError,
    JobFailed,
    JobMissed,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
    RunRecord,
    RunStatus,
    Schedule,
    ScheduleDisabled,
    SchedulePaused,
    ScheduleResumed,
    SchedulerShutdownError,
    ScheduleType,
    SkipReason,
    StateError,
    Status,
    ThreadedScheduler,
    TriggerInfo,
    TriggerType,
)
from herdsched.cadence import Cron, Interval, parse_interval
from herdsched.cli import main as cli_main
from herdsched.definitions import schedule_from_mapping, schedule_to_mapping
from herdsched.revisions import schedule_revision
from herdsched.store import MemoryStateStore
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock, as_separate_processes

M = timedelta(minutes=1)
S = timedelta(seconds=1)


def state(sched, agent: str = "a", schedule: str = "s"):  # type: ignore[no-untyped-def]
    return sched.store.get_schedule_state(agent, schedule)


def test_interval_is_measured_from_completion_the_ten_minute_job() -> None:
    with running() as (sched, clock):
        job = Recorder(lambda info: clock.advance("10m"))  # the job "takes" ten minutes
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("5m")}))
        sched.start()
        step(sched)
        assert job.slots() == [T0]
        assert state(sched).last_finished_at == T0 + 10 * M
        assert state(sched).next_run_at == T0 + 15 * M
        step(sched, clock, "4m")  # T0+14m: not due yet
        assert len(job.calls) == 1
        step(sched, clock, "1m")  # T0+15m: due, 15 minutes after the first run began
        assert job.slots() == [T0, T0 + 15 * M]


def test_interval_with_start_at_and_anchor_grid() -> None:
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(
            Agent(
                "a",
                job=job,
                schedules={
                    "later": Schedule.interval("1h", start_at=T0 + 30 * M),
                    "grid": Schedule.interval("15m", anchor=T0 - 7 * M),
                },
            )
        )
        sched.start()
        step(sched)
        assert job.calls == []
        assert state(sched, "a", "grid").next_run_at == T0 + 8 * M
        step(sched, clock, "8m")
        assert job.schedules() == ["grid"]
        assert state(sched, "a", "grid").next_run_at == T0 + 23 * M
        step(sched, clock, "22m")  # T0+30m: grid's T0+23m slot came due on the way
        assert job.schedules() == ["grid", "grid", "later"]
        assert state(sched, "a", "grid").next_run_at == T0 + 38 * M


def _ran_once(tmp_path: Path, clock: FakeClock, job: Recorder, schedule: Schedule) -> None:
    """A scheduler on ``tmp_path`` registers a/s with ``schedule``, makes one timer pass at
    the clock's time and stops, as one process's run would."""
    with running(state_dir=tmp_path, clock=clock) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": schedule}))
        sched.start()
        step(sched)


def test_a_start_moved_later_between_two_starts_holds_back_the_first_run(
    tmp_path: Path,
) -> None:
    """The stored plan was kept: a ``start_at`` moved later in the fleet file while no
    scheduler ran was not seen, and the first run came at the old start, before the new one
    ("no run before this time")."""
    moved = 2 * 24 * 60 * M
    job = Recorder()
    clock = FakeClock(T0)
    first = Schedule.interval("1h", start_at=T0 + 30 * M)
    _ran_once(tmp_path, clock, job, first)
    edited = Schedule.interval("1h", start_at=T0 + moved)
    with running(state_dir=tmp_path, clock=clock) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": edited}))
        sched.start()
        step(sched)
        assert state(sched).next_run_at == T0 + moved
        step(sched, clock, "30m")
        assert job.slots() == []


@pytest.mark.parametrize("how", ["fleet file", "update_schedule"])
def test_a_start_moved_later_while_paused_holds_back_the_first_run_on_resume(
    how: str, tmp_path: Path
) -> None:
    """Paused before its first run, its start moved later (in the fleet file between two
    starts, or at run time), then resumed: it ran at the old start."""
    job = Recorder()
    clock = FakeClock(T0)
    later = T0 + 2 * 24 * 60 * M
    with running(state_dir=tmp_path, clock=clock) as (sched, _):
        schedule = Schedule.interval("1h", start_at=T0 + 30 * M)
        sched.add_agent(Agent("a", job=job, schedules={"s": schedule}))
        sched.start()
        step(sched)
        sched.pause("a", "s")
    moved = Schedule.interval("1h", start_at=later) if how == "fleet file" else schedule
    with running(state_dir=tmp_path, clock=clock) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": moved}))
        sched.start()
        if how == "update_schedule":
            sched.update_schedule("a", "s", start_at=later)
        sched.resume("a", "s")
        step(sched, clock, "31m")
        assert job.calls == []
        assert state(sched).next_run_at == later


def test_a_start_moved_later_that_passed_while_down_follows_the_catch_up_rule(
    tmp_path: Path,
) -> None:
    """Moved later, and that start passed too while nothing ran: under ``skip`` it ran at
    once, where an unmoved start is recorded missed and waits for its next slot."""
    job = Recorder()
    clock = FakeClock(T0)
    first = Schedule.interval("1h", start_at=T0 + 30 * M, catch_up="skip")
    _ran_once(tmp_path, clock, job, first)
    clock.advance("2h")
    moved = Schedule.interval("1h", start_at=T0 + 60 * M, catch_up="skip")
    with running(state_dir=tmp_path, clock=clock) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": moved}))
        sched.start()
        step(sched)
        assert job.calls == []
        assert [(r.status, r.error) for r in sched.history("a", "s")] == [
            (RunStatus.MISSED, "the slot passed while no scheduler was running it")
        ]
        planned = state(sched).next_run_at
        assert planned is not None and planned > clock.now()


def test_a_never_run_schedule_whose_start_slot_was_skipped_waits_for_its_next_slot(
    tmp_path: Path,
) -> None:
    """Its start passed while nothing ran and ``catch_up="skip"`` moved the plan on: a
    restart before that next slot took the later plan for a start moved earlier (a first
    reading of moved starts) and ran it at once."""
    job = Recorder()
    clock = FakeClock(T0)
    schedule = Schedule.interval("1h", start_at=T0 + 10 * M, catch_up="skip")
    _ran_once(tmp_path, clock, job, schedule)
    clock.advance("2h")  # the start passed while nothing ran
    for _ in range(2):  # a start that skips it, then a restart before the next slot
        with running(state_dir=tmp_path, clock=clock) as (sched, _):
            sched.add_agent(Agent("a", job=job, schedules={"s": schedule}))
            sched.start()
            step(sched)
            planned = state(sched).next_run_at
        assert job.calls == [] and planned is not None and planned > clock.now()
        clock.advance("10m")


def test_a_start_edited_after_the_first_run_changes_no_plan(tmp_path: Path) -> None:
    """``start_at`` delays a schedule's first run only: edited once the schedule has run, it
    must not replan it (a first version dropped the failure backoff it waited out)."""
    job = Recorder(lambda info: (_ for _ in ()).throw(RuntimeError("boom")))
    clock = FakeClock(T0)
    with running(state_dir=tmp_path, clock=clock, backoff=["2h"]) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h", start_at=T0)}))
        sched.start()
        step(sched)
        assert state(sched).next_run_at == T0 + 120 * M  # the backoff's, not the cadence's
    clock.advance("70m")
    edited = Schedule.interval("1h", start_at=T0 + 5 * M)
    with running(state_dir=tmp_path, clock=clock, backoff=["2h"]) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": edited}))
        sched.start()
        step(sched)
        assert len(job.calls) == 1
        assert state(sched).next_run_at == T0 + 120 * M


def test_cron_fires_on_each_slot_with_its_slot_time() -> None:
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.cron("*/10 * * * *")}))
        sched.start()
        step(sched)
        assert job.calls == []
        for _ in range(3):
            step(sched, clock, "10m")
        assert job.slots() == [T0 + 10 * M, T0 + 20 * M, T0 + 30 * M]
        assert {c.trigger_type for c in job.calls} == {TriggerType.CRON}


@pytest.mark.parametrize(
    ("overlap", "expected_slots", "missed"),
    [
        ("skip", [T0 + M, T0 + 3 * M], [T0 + 2 * M]),
        ("buffer_one", [T0 + M, T0 + 2 * M], []),
    ],
)
def test_cron_overlap_policies(overlap: str, expected_slots: list, missed: list) -> None:
    with running() as (sched, clock):
        missed_events: list[JobMissed] = []
        sched.add_listener(missed_events.append, JobMissed)
        first = threading.Event()

        def slow_once(info):  # type: ignore[no-untyped-def]
            if not first.is_set():
                first.set()
                clock.advance(timedelta(seconds=90))  # outlives the next slot

        job = Recorder(slow_once)
        sched.add_agent(
            Agent("a", job=job, schedules={"s": Schedule.cron("* * * * *", overlap=overlap)})
        )
        sched.start()
        step(sched, clock, "1m")  # T0+1m fires, finishes at T0+2m30s
        step(sched)  # buffer_one: runs right away
        if overlap == "skip":
            assert state(sched).next_run_at == T0 + 3 * M
            step(sched, clock, timedelta(seconds=30))  # T0+3m
        assert job.slots()[:2] == expected_slots
        assert [e.scheduled_for for e in missed_events] == missed
        records = sched.history("a", "s")
        assert [r.scheduled_for for r in records if r.status is RunStatus.MISSED] == missed
        # it said "slot passed while the schedule could not run", whatever the cause
        assert [r.error for r in records if r.status is RunStatus.MISSED] == [
            "the slot passed while the run before it was still running"
        ] * len(missed)


def test_buffer_one_runs_once_after_a_job_that_outlived_many_slots() -> None:
    """A job that outlived five slots was followed by five runs, one per missed slot."""
    with running() as (sched, clock):
        first = threading.Event()

        def slow_once(info):  # type: ignore[no-untyped-def]
            if not first.is_set():
                first.set()
                clock.advance(timedelta(minutes=5, seconds=30))

        job = Recorder(slow_once)
        sched.add_agent(
            Agent("a", job=job, schedules={"s": Schedule.cron("* * * * *", overlap="buffer_one")})
        )
        sched.start()
        step(sched, clock, "1m")  # T0+1m runs until T0+6m30s; one run follows at once
        for _ in range(3):
            step(sched)
        assert [c.scheduled_for for c in job.calls] == [T0 + M, T0 + 2 * M]
        assert job.calls[1].fired_at == T0 + 6 * M + 30 * S
        assert state(sched).next_run_at == T0 + 7 * M
        step(sched, clock, "30s")
        assert job.slots()[2:] == [T0 + 7 * M]


@pytest.mark.parametrize("overlap", ["skip", "buffer_one"])
def test_a_catch_up_run_is_the_only_run_and_miss_of_the_downtime(overlap: str) -> None:
    """After five hours down, buffer_one ran every missed slot (five runs back to back), and
    skip recorded a miss of the slot after the one caught up, though it had fired once."""
    clock = FakeClock(T0)
    store = MemoryStateStore(clock=clock)
    job = Recorder()
    agent = Agent("a", job=job, schedules={"s": Schedule.cron("0 * * * *", overlap=overlap)})
    with running(store=store, clock=clock) as (sched, _):
        sched.add_agent(agent)
        sched.start()
        step(sched)
    clock.advance("5h")
    with running(store=store, clock=clock) as (sched, _):
        sched.add_agent(agent)
        sched.start()
        for _ in range(3):
            step(sched)
        assert job.slots() == [T0 + 60 * M]  # the first missed slot, once
        assert [r.status for r in sched.history("a", "s")] == [RunStatus.SUCCESS]
        assert state(sched).next_run_at == T0 + 6 * 60 * M


def test_once_fires_once_then_completed_and_past_once_is_refused() -> None:
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.once(T0 + 5 * M)}))
        sched.start()
        step(sched, clock, "5m")
        step(sched, clock, "1h")
        assert job.slots() == [T0 + 5 * M]
        assert state(sched).status is Status.COMPLETED
        assert state(sched).next_run_at is None
        with pytest.raises(InvalidScheduleError, match="has already passed") as info:
            sched.add_schedule("a", "old", Schedule.once(T0))
        assert info.value.field == "at"


@pytest.mark.parametrize(
    ("settings", "runs"),
    [({}, 1), ({"catch_up": "skip"}, 0), ({"catch_up_window": "1h"}, 0)],
)
def test_a_once_whose_time_passed_before_it_was_first_registered_follows_the_catch_up_rule(
    settings: dict[str, str], runs: int
) -> None:
    """A once a year past, registered with its agent on fresh state (an old migration left in
    code, a new host, a wiped state directory), ran at once whatever ``catch_up`` and
    ``catch_up_window`` said; now its slot is missed as after downtime."""
    with running(**settings) as (sched, clock):
        job = Recorder()
        past = T0 - timedelta(days=365)
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.once(past)}))
        sched.start()
        step(sched, clock, "1m")
        assert len(job.slots()) == runs
        assert state(sched).status is Status.COMPLETED
        records = sched.history("a", "s")
        assert [r.status.value for r in records] == (["success"] if runs else ["missed"])
        assert records[0].scheduled_for == past


def test_a_failing_once_completes_at_the_auto_disable_limit_and_resume_skips_it() -> None:
    """It was auto-disabled instead (with ``max_consecutive_failures=1``, or after triggers had
    failed before), and ``resume()`` ran it a second time."""
    with running(max_consecutive_failures=1) as (sched, clock):
        job = Recorder(lambda info: 1 / 0)
        disabled = Recorder()
        sched.add_listener(disabled, ScheduleDisabled)
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.once(T0 + M)}))
        sched.start()
        step(sched, clock, "1m")
        assert (state(sched).status, state(sched).disabled_reason) == (Status.COMPLETED, None)
        assert state(sched).consecutive_failures == 1
        sched.resume("a", "s")
        step(sched, clock, "1h")
        assert len(job.calls) == 1
        assert disabled.calls == []


def test_failed_run_nows_of_a_once_schedule_do_not_disable_it_before_its_time() -> None:
    """Two failing ``trigger()``s (a test of a one-shot job) auto-disabled it, and its own run
    never came."""
    with running(max_consecutive_failures=2) as (sched, clock):
        job = Recorder(lambda info: 1 / 0 if info.trigger_type is TriggerType.MANUAL else "ok")
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.once(T0 + 60 * M)}))
        sched.start()
        for _ in range(3):
            assert not sched.trigger("a", "s", wait=True).success
        assert (state(sched).status, state(sched).consecutive_failures) == (Status.IDLE, 3)
        step(sched, clock, "2h")
        records = [(r.status.value, r.trigger_type) for r in sched.history("a", "s")]
        assert records == [("success", TriggerType.ONCE), *[("failed", "manual")] * 3]
        assert state(sched).status is Status.COMPLETED


@pytest.mark.parametrize("whole_agent", [False, True])
def test_a_completed_once_stays_completed_when_paused_and_resumed(whole_agent: bool) -> None:
    """A pause wrote ``paused`` over ``completed``, and the resume then ran the slot again."""
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.once(T0 + M)}))
        sched.start()
        step(sched, clock, "1m")
        assert state(sched).status is Status.COMPLETED
        sched.pause("a", None if whole_agent else "s")
        assert state(sched).status is Status.COMPLETED
        assert sched.store.get_schedule_state("a", "s").status is Status.COMPLETED
        sched.resume("a", None if whole_agent else "s")
        step(sched, clock, "1h")
        assert job.slots() == [T0 + M]
        assert state(sched).status is Status.COMPLETED


def test_a_once_whose_time_passes_during_a_triggered_run_is_missed_and_completed(
    tmp_path: Path,
) -> None:
    """It stayed idle with no next run, and after a restart the missed slot ran after all."""
    clock = FakeClock(T0)
    job = Blocker()
    with running(clock=clock, state_dir=tmp_path) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.once(T0 + M)}))
        sched.start()
        sched.trigger("a", "s")
        assert job.began.wait(10)
        clock.advance("2m")
        sched.run_pending()
        job.release.set()
        assert sched.wait_until_idle(10)
        assert (state(sched).status, state(sched).next_run_at) == (Status.COMPLETED, None)
        records = [(r.status, r.trigger_type) for r in sched.history("a", "s")]
        assert records == [(RunStatus.MISSED, TriggerType.ONCE), (RunStatus.SUCCESS, "manual")]
    ran = Recorder()
    with running(clock=clock, state_dir=tmp_path) as (sched, _):
        sched.add_agent(Agent("a", job=ran, schedules={"s": Schedule.once(T0 + M)}))
        sched.start()
        step(sched, clock, "1h")
        assert ran.calls == []
        assert state(sched).status is Status.COMPLETED


def test_a_run_now_of_a_completed_once_records_no_missed_slot() -> None:
    """Its slot, run an hour before, was recorded ``missed`` a second time (with a JobMissed)."""
    with running() as (sched, clock):
        missed: list[JobMissed] = []
        sched.add_listener(missed.append, JobMissed)
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.once(T0 + M)}))
        sched.start()
        step(sched, clock, "1m")
        step(sched, clock, "1h")
        assert sched.trigger("a", "s").success
        step(sched)
        records = [(r.status, r.trigger_type) for r in reversed(sched.history("a", "s"))]
        assert records == [(RunStatus.SUCCESS, TriggerType.ONCE), (RunStatus.SUCCESS, "manual")]
        assert missed == []
        assert (state(sched).status, state(sched).next_run_at) == (Status.COMPLETED, None)


def test_a_run_now_of_a_paused_once_after_its_time_leaves_its_slot_to_the_resume() -> None:
    """Its slot was recorded ``missed`` by the run-now, then run all the same at the resume."""
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.once(T0 + 2 * M)}))
        sched.start()
        step(sched)
        sched.pause("a", "s")
        step(sched, clock, "30m")
        assert sched.trigger("a", "s").success
        step(sched)
        assert [(r.status, r.trigger_type) for r in sched.history("a", "s")] == [
            (RunStatus.SUCCESS, "manual")
        ]
        assert state(sched).status is Status.PAUSED
        clock.advance("10m")
        sched.resume("a", "s")
        step(sched)
        records = [(r.status, r.trigger_type) for r in reversed(sched.history("a", "s"))]
        assert records == [(RunStatus.SUCCESS, "manual"), (RunStatus.SUCCESS, TriggerType.ONCE)]
        assert job.slots() == [None, T0 + 2 * M]
        assert state(sched).status is Status.COMPLETED


def test_once_failure_also_completes() -> None:
    with running() as (sched, clock):
        job = Recorder(lambda info: 1 / 0)
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.once(T0 + M)}))
        sched.start()
        step(sched, clock, "1m")
        step(sched, clock, "2h")
        assert len(job.calls) == 1
        assert state(sched).status is Status.COMPLETED
        assert state(sched).last_result is RunStatus.FAILED


def test_failure_ladder_then_auto_disable_then_resume() -> None:
    with running(max_consecutive_failures=3) as (sched, clock):
        disabled: list[ScheduleDisabled] = []
        sched.add_listener(disabled.append, ScheduleDisabled)
        job = Recorder(lambda info: (_ for _ in ()).throw(RuntimeError("boom")))
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("10s")}))
        sched.start()
        step(sched)
        # failure 1 at T0: next = max(T0+10s, T0+30s)
        assert state(sched).consecutive_failures == 1
        assert state(sched).next_run_at == T0 + 30 * S
        assert state(sched).last_error == "RuntimeError: boom"
        step(sched, clock, "30s")
        assert state(sched).next_run_at == T0 + 30 * S + M  # rung 2: one minute
        step(sched, clock, "1m")
        assert state(sched).status is Status.DISABLED
        assert "3 consecutive failures" in (state(sched).disabled_reason or "")
        assert "RuntimeError: boom" in (state(sched).disabled_reason or "")
        assert [e.schedule for e in disabled] == ["s"]
        step(sched, clock, "2h")
        assert len(job.calls) == 3  # disabled: nothing more
        status = sched.get_status().schedules[0]
        assert status.skip_reason is SkipReason.DISABLED
        job.action = None
        sched.resume("a", "s")
        assert state(sched).consecutive_failures == 0
        assert state(sched).status is Status.IDLE
        step(sched)
        assert len(job.calls) == 4
        assert state(sched).last_result is RunStatus.SUCCESS


@pytest.mark.parametrize("by_another_process", [False, True])
@pytest.mark.parametrize("status", ["auto-disabled", "paused", "backed off"])
def test_a_resume_drops_the_backoff_of_the_failures_it_resets(
    status: str, by_another_process: bool, tmp_path: Path
) -> None:
    """The bug: resumed after its job was fixed, an auto-disabled schedule still waited out the
    backoff of its last failure (the ladder's last rung is 60 minutes), although the resume had
    reset the failure count. Its plan is now the cadence's own after the last run; a time that
    passed follows the catch-up rule (here: once, at once). A schedule still idle in its
    backoff, resumed in another process, kept it too: its status had not changed, so the
    leader took nothing in."""
    store = YamlStateStore(tmp_path, clock=FakeClock(T0))
    with running(store=store, max_consecutive_failures=3, backoff=["1h"]) as (sched, clock):
        job = Recorder(lambda info: (_ for _ in ()).throw(RuntimeError("boom")))
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1m")}))
        sched.start()
        step(sched)
        step(sched, clock, "1h")
        if status == "paused":
            sched.pause("a", "s")
        elif status == "auto-disabled":
            step(sched, clock, "1h")
            assert state(sched).status is Status.DISABLED
        failed_at = clock.now()
        assert state(sched).next_run_at == failed_at + 60 * M  # the backoff's hour
        ran = len(job.calls)
        job.action = None  # the job is fixed
        step(sched, clock, "5m")
        if by_another_process:
            store.flush()  # the group commit its flusher makes within commit_delay
            with YamlStateStore(tmp_path) as other:
                other.update_schedule_state(
                    "a", "s", status="idle", consecutive_failures=0, disabled_reason=None
                )
            step(sched, clock, "2s")
        else:
            sched.resume("a", "s")
            step(sched)
        assert len(job.calls) == ran + 1  # at once, not 55 minutes later
        assert job.calls[-1].scheduled_for == failed_at + M  # the slot the cadence gave
        assert state(sched).last_result is RunStatus.SUCCESS
        assert state(sched).consecutive_failures == 0


@pytest.mark.parametrize("plan_left", [True, False], ids=["plan-kept", "plan-dropped"])
def test_a_resume_made_while_no_scheduler_runs_drops_the_backoff_at_the_next_start(
    tmp_path: Path, plan_left: bool
) -> None:
    """Auto-disabled, then resumed with ``herdsched resume`` while no scheduler ran: the next
    scheduler planned the schedule from the stored plan, the backoff of its last failure (the
    ladder's last rung is an hour), though the resume had reset the failures."""
    job = Recorder(lambda info: (_ for _ in ()).throw(RuntimeError("boom")))
    agent = Agent("a", job=job, schedules={"s": Schedule.interval("1m")})
    with running(state_dir=tmp_path, max_consecutive_failures=2, backoff=["1h"]) as (
        sched,
        clock,
    ):
        sched.add_agent(agent)
        sched.start()
        step(sched)
        step(sched, clock, "1h")
        assert state(sched).status is Status.DISABLED
        failed_at = clock.now()
    with YamlStateStore(tmp_path) as cli:  # `herdsched resume a/s`, the scheduler stopped
        dropped = {} if plan_left else {"next_run_at": None}  # as the command line does now
        cli.update_schedule_state(
            "a", "s", status="idle", consecutive_failures=0, disabled_reason=None, **dropped
        )
    job.action = None  # the job is fixed
    with running(state_dir=tmp_path, clock=FakeClock(failed_at + 5 * M)) as (sched, clock):
        sched.add_agent(agent)
        sched.start()
        step(sched)
        assert len(job.calls) == 3  # at once, not 55 minutes later
        assert state(sched).last_result is RunStatus.SUCCESS


def test_a_cron_resumed_from_the_command_line_catches_up_the_slot_that_passed(
    tmp_path: Path,
) -> None:
    """``herdsched resume`` while no scheduler runs drops the backoff's plan; the next start
    plans from the cadence after the last run, and a slot that passed meanwhile follows the
    catch-up rule (once, at once), as with a resume made while a scheduler runs."""
    job = Recorder(lambda info: (_ for _ in ()).throw(RuntimeError("boom")))
    agent = Agent("a", job=job, schedules={"s": Schedule.cron("0 * * * *")})
    clock = FakeClock(T0)
    with running(state_dir=tmp_path, clock=clock, max_consecutive_failures=1) as (sched, _):
        sched.add_agent(agent)
        sched.start()
        step(sched, clock, "1h")  # 13:00 fails: disabled
        assert state(sched).status is Status.DISABLED
    assert cli_main(["resume", "a/s", "--state-dir", str(tmp_path)]) == 0
    job.action = None
    clock.advance("90m")  # 14:30: the 14:00 slot passed while nothing ran
    with running(state_dir=tmp_path, clock=clock) as (sched, _):
        sched.add_agent(agent)
        sched.start()
        step(sched)
        assert job.slots() == [T0 + 60 * M, T0 + 120 * M]
        assert state(sched).next_run_at == T0 + 180 * M


def test_success_resets_failure_count_and_auto_disable_can_be_off() -> None:
    outcomes = iter([RuntimeError("x"), RuntimeError("y"), None] + [RuntimeError("z")] * 8)

    def flaky(info):  # type: ignore[no-untyped-def]
        error = next(outcomes)
        if error:
            raise error
        return "fine"

    with running(max_consecutive_failures=None, backoff=["1s"]) as (sched, clock):
        sched.add_agent(Agent("a", job=flaky, schedules={"s": Schedule.interval("5s")}))
        sched.start()
        step(sched)
        step(sched, clock, "5s")
        assert state(sched).consecutive_failures == 2
        step(sched, clock, "5s")
        assert state(sched).consecutive_failures == 0
        for _ in range(8):
            step(sched, clock, "5s")
        assert state(sched).consecutive_failures == 8
        assert state(sched).status is Status.IDLE


def test_deferred_moves_next_run_without_counting_a_failure() -> None:
    with running() as (sched, _clock):
        job = Recorder(lambda info: (_ for _ in ()).throw(Deferred("2m", "session busy")))
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
        sched.start()
        step(sched)
        assert state(sched).last_result is RunStatus.DEFERRED
        assert state(sched).consecutive_failures == 0
        assert state(sched).next_run_at == T0 + 2 * M
        assert sched.history("a", "s")[0].error == "session busy"


def test_timeout_sets_cancel_event_records_timeout_and_frees_slot_when_thread_ends() -> None:
    with running() as (sched, clock):
        began, saw_cancel, release = threading.Event(), threading.Event(), threading.Event()

        def stubborn(info):  # type: ignore[no-untyped-def]
            began.set()
            if info.cancel_event.wait(10):
                saw_cancel.set()
            release.wait(10)

        sched.add_agent(
            Agent("a", job=stubborn, schedules={"s": Schedule.interval("1h", timeout="30s")})
        )
        sched.start()
        sched.run_pending()
        assert began.wait(10)  # timed out before its worker began it, it would never start
        clock.advance("31s")
        sched.run_pending()
        assert saw_cancel.wait(5)
        assert state(sched).last_result is RunStatus.TIMEOUT
        assert state(sched).consecutive_failures == 1
        assert sched.get_running_job_count("a") == 1  # the thread has not returned yet
        release.set()
        assert sched.wait_until_idle(5)
        assert sched.get_running_job_count("a") == 0
        records = sched.history("a", "s")
        assert [r.status for r in records] == [RunStatus.TIMEOUT]


def test_a_job_that_returns_past_its_timeout_before_the_timer_looked_is_timed_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its process stopped (SIGSTOP) past the job's timeout and continued: the job returned
    before a timer pass looked, and the run was recorded a success after twice its timeout."""
    with running() as (sched, clock):

        def slow(info):  # type: ignore[no-untyped-def]
            clock.advance("45s")  # as a stopped process finds the time on waking
            return "done"

        sched.add_agent(
            Agent("a", job=slow, schedules={"s": Schedule.interval("1h", timeout="30s")})
        )
        sched.start()
        with caplog.at_level(logging.WARNING, logger="herdsched"):
            step(sched)
        [record] = sched.history("a", "s")
        assert (record.status, record.error) == (RunStatus.TIMEOUT, "timed out after 30s")
        assert state(sched).consecutive_failures == 1
        warned = [r for r in caplog.records if "timed out after 30s" in r.getMessage()]
        assert len(warned) == 1, caplog.text


def test_stop_names_a_timed_out_job_whose_thread_goes_on() -> None:
    job, calls, release = _first_run_ignores_its_cancel()
    with running() as (sched, clock):
        sched.add_agent(
            Agent("a", job=job, schedules={"s": Schedule.interval("1h", timeout="30s")})
        )
        sched.start()
        sched.run_pending()
        assert wait_until(lambda: calls)
        clock.advance("31s")
        sched.run_pending()
        assert state(sched).last_result is RunStatus.TIMEOUT
        with pytest.raises(SchedulerShutdownError) as stopped:
            sched.stop(timeout=0.2)
        release.set()
    assert stopped.value.running_job_count == 1
    assert stopped.value.running_jobs == ("a/s",)


def test_at_capacity_waits_in_due_order_and_fires_when_a_slot_frees() -> None:
    gate = threading.Event()
    order: list[str] = []

    def job(info):  # type: ignore[no-untyped-def]
        order.append(info.schedule)
        if info.schedule == "first":
            gate.wait(10)

    with running() as (sched, clock):
        sched.add_agent(
            Agent(
                "a",
                job=job,
                max_concurrent=1,
                schedules={
                    "first": Schedule.interval("1h", start_at=T0),
                    "third": Schedule.interval("1h", start_at=T0 + 2 * S),
                    "second": Schedule.interval("1h", start_at=T0 + S),
                },
            )
        )
        sched.start()
        sched.run_pending()
        clock.advance("5s")
        sched.run_pending()
        statuses = {s.schedule: s.skip_reason for s in sched.get_status().schedules}
        assert statuses["second"] is SkipReason.AT_CAPACITY
        assert statuses["first"] is SkipReason.ALREADY_RUNNING
        assert sched.get_running_job_count("a") == 1
        gate.set()
        for _ in range(5):
            sched.run_pending()
            sched.wait_until_idle(5)
        assert order == ["first", "second", "third"]


@pytest.mark.parametrize("change", ["pause", "remove", "stop"])
def test_wait_until_idle_returns_when_a_schedule_waiting_for_a_slot_is_given_up(
    change: str,
) -> None:
    """A schedule waiting for its agent's slot and paused or removed meanwhile was dropped from
    the waiting line by the next pass without a word to ``wait_until_idle()``, which slept its
    whole timeout (for ever without one) after the fleet had gone idle; ``stop()`` let the
    running job end, then dropped the plan so too."""
    blocker = Blocker()
    with running() as (sched, clock):
        schedules = {
            "long": Schedule.interval("1h", start_at=T0, job=blocker),
            "short": Schedule.interval("1h", start_at=T0 + S),
        }
        sched.add_agent(Agent("a", job=Recorder(), max_concurrent=1, schedules=schedules))
        sched.start()
        sched.run_pending()
        assert blocker.began.wait(10)
        clock.advance("5s")
        sched.run_pending()
        reasons = {s.schedule: s.skip_reason for s in sched.get_status().schedules}
        assert reasons["short"] is SkipReason.AT_CAPACITY
        waiter = threading.Thread(target=sched.wait_until_idle, daemon=True)
        waiter.start()
        if change == "pause":
            sched.pause("a", "short")
        elif change == "remove":
            sched.remove_schedule("a", "short")
        else:
            threading.Thread(target=sched.stop, kwargs={"timeout": 10}, daemon=True).start()
            assert wait_until(lambda: sched.status == "stopping")
        blocker.release.set()
        waiter.join(10)
        assert not waiter.is_alive()  # idle: the long run ended, nothing waits any more
        assert [r.status for r in sched.history("a", "long")] == [RunStatus.SUCCESS]


def test_max_total_concurrent_caps_all_agents() -> None:
    gate = threading.Event()
    with running(max_total_concurrent=1) as (sched, _clock):
        job = Recorder(lambda info: gate.wait(10))
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
        sched.add_agent(Agent("b", job=job, schedules={"s": Schedule.interval("1h")}))
        sched.start()
        sched.run_pending()
        assert sched.get_total_running_job_count() == 1
        assert wait_until(lambda: job.calls)  # its worker began it
        (busy,) = {c.agent for c in job.calls}
        idle = "b" if busy == "a" else "a"
        refused = sched.trigger(idle, "s")  # it named the agent, which runs nothing
        assert (refused.skip_reason, refused.error) == (
            SkipReason.AT_CAPACITY,
            "the scheduler is at max_total_concurrent",
        )
        assert sched.trigger(busy, "s").skip_reason is SkipReason.ALREADY_RUNNING
        gate.set()
        step(sched)
        assert sorted(c.agent for c in job.calls) == ["a", "b"]


def test_pause_resume_and_trigger_on_paused_schedule() -> None:
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("5m")}))
        sched.start()
        step(sched)
        sched.pause("a", "s")
        assert state(sched).status is Status.PAUSED
        step(sched, clock, "1h")
        assert len(job.calls) == 1
        result = sched.trigger("a", "s", wait=True, prompt="now please")
        assert result.success and result.run_id
        assert job.calls[-1].trigger_type is TriggerType.MANUAL
        assert job.calls[-1].prompt == "now please"
        assert state(sched).status is Status.PAUSED  # a manual run does not unpause
        sched.resume("a", "s")
        step(sched)  # an interval counts from the manual run's end, as when not paused
        assert len(job.calls) == 2
        step(sched, clock, "5m")
        assert len(job.calls) == 3
        step(sched)
        assert len(job.calls) == 3


@pytest.mark.parametrize("how", ["resume", "by another process", "enabled"])
@pytest.mark.parametrize(
    ("policy", "window", "runs"), [("once", None, 1), ("skip", None, 0), ("once", "1h", 0)]
)
def test_a_slot_that_passed_while_paused_follows_the_catch_up_policy_on_resume(
    policy: str, window: str | None, runs: int, how: str, tmp_path: Path
) -> None:
    """Also when the schedule was disabled and enabled again (``update_schedule(enabled=...)``,
    the REST PATCH): that ran the passed slot at once, standing for the time of the change,
    whatever the policy (a bug)."""
    store = YamlStateStore(tmp_path, clock=FakeClock(T0))
    with running(store=store, catch_up_window=window) as (sched, clock):
        job = Recorder()
        cron = Schedule.cron("0 * * * *", catch_up=policy)
        sched.add_agent(Agent("a", job=job, schedules={"s": cron}))
        sched.start()
        step(sched, clock, "1h")  # T0 + 1h: the first slot runs
        assert job.slots() == [T0 + 60 * M]
        if how == "enabled":
            sched.update_schedule("a", "s", enabled=False)
        else:
            sched.pause("a", "s")
        step(sched, clock, "3h10m")  # the slots of 2h, 3h and 4h pass while paused
        if how == "by another process":  # the CLI or a web worker writes the resume
            with YamlStateStore(tmp_path) as other:
                other.update_schedule_state(
                    "a", "s", status="idle", consecutive_failures=0, disabled_reason=None
                )
            step(sched, clock, "2s")  # the next poll takes it in
        elif how == "enabled":
            sched.update_schedule("a", "s", enabled=True)
            step(sched)
        else:
            sched.resume("a", "s")
            step(sched)
        assert len(job.calls) == 1 + runs
        history = sched.history("a", "s")
        if runs:  # once: the first slot that passed runs now, standing for the others
            assert job.calls[-1].scheduled_for == T0 + 120 * M
            assert [r.status for r in history] == [RunStatus.SUCCESS, RunStatus.SUCCESS]
        else:  # skipped, or too old for the window: recorded missed, the next slot waits
            assert [(r.status, r.scheduled_for) for r in history] == [
                (RunStatus.MISSED, T0 + 120 * M),
                (RunStatus.SUCCESS, T0 + 60 * M),
            ]
            assert state(sched).next_run_at == T0 + 300 * M
        step(sched, clock, "50m")  # T0 + 5h
        assert job.slots()[-1] == T0 + 300 * M


@pytest.mark.parametrize("policy", ["once", "skip"])
def test_a_cron_changed_after_its_run_waits_for_its_first_new_slot(policy: str) -> None:
    """The bug: the new cron's next time was counted from the old cron's last slot, and one
    that had passed fired at once, standing for a time that was no slot of either cadence
    (``0 9`` ran at 09:00, changed at 15:00 to ``0 12``: a run at 15:00)."""
    with running(clock=FakeClock(T0 - 181 * M)) as (sched, clock):  # 08:59
        job = Recorder()
        daily = Schedule.cron("0 9 * * *", catch_up=policy)
        sched.add_agent(Agent("a", job=job, schedules={"s": daily}))
        sched.start()
        step(sched, clock, "1m")
        assert job.slots() == [T0 - 3 * 60 * M]
        step(sched, clock, "6h")  # 15:00
        sched.update_schedule("a", "s", cron="0 12 * * *")
        step(sched)
        assert len(job.calls) == 1
        assert state(sched).next_run_at == T0 + 24 * 60 * M  # tomorrow 12:00
        assert [r.status for r in sched.history("a", "s")] == [RunStatus.SUCCESS]
        sched.update_schedule("a", "s", cadence=Interval("2h"))  # counted from the last run
        step(sched)
        assert job.slots()[-1] == T0 + 3 * 60 * M  # overdue by its new length: at once


def test_a_restart_in_another_zone_plans_an_inherited_cron_from_its_first_slot_there(
    tmp_path: Path,
) -> None:
    """The same on a restart with another scheduler ``timezone``: ``0 9 * * *`` ran at 09:00
    UTC; started at 15:00 UTC (10:00 in New York) it ran at once, at 10:00 New York."""
    clock = FakeClock(T0 - 181 * M)  # 08:59 UTC
    job = Recorder()
    with running(state_dir=tmp_path, clock=clock) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.cron("0 9 * * *")}))
        sched.start()
        step(sched, clock, "1m")
    clock.advance("6h")
    with running(state_dir=tmp_path, clock=clock, timezone="America/New_York") as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.cron("0 9 * * *")}))
        sched.start()
        step(sched)
        assert job.slots() == [T0 - 3 * 60 * M]
        assert state(sched).next_run_at == T0 + 26 * 60 * M  # 09:00 New York tomorrow


@pytest.mark.parametrize("cadence", ["*/10 * * * * *", "10s"])
def test_a_run_that_ends_while_paused_is_not_run_again_at_resume(cadence: str) -> None:
    gate = threading.Event()
    job = Recorder(lambda info: gate.wait(10))
    every = Schedule.interval(cadence) if cadence == "10s" else Schedule.cron(cadence)
    with running(min_interval=0) as (sched, clock):
        sched.add_agent(Agent("a", job=job, schedules={"s": every}))
        sched.start()
        gate.set()
        step(sched)  # an interval's first run is due at once: it ends at once
        gate.clear()
        clock.advance("10s")
        sched.run_pending()
        assert wait_until(lambda: sched.get_running_job_count("a") == 1, 5)
        ran = clock.now()
        sched.pause("a", "s")  # while the run is in progress
        gate.set()
        assert wait_until(lambda: sched.get_running_job_count("a") == 0, 5)
        assert state(sched).next_run_at == ran + timedelta(seconds=10)  # for the resume
        clock.advance("3s")
        sched.resume("a", "s")
        step(sched)
        assert job.calls[-1].fired_at == ran  # the slot that ran is not run again
        calls = len(job.calls)
        step(sched, clock, "7s")  # its next slot
        assert len(job.calls) == calls + 1


@pytest.mark.parametrize("recorded", [False, True], ids=["killed", "killed-after-its-record"])
def test_a_catch_up_run_a_dead_process_left_is_not_followed_by_the_slots_it_stood_for(
    recorded: bool,
) -> None:
    """Down from 12:00 to 13:30, the 13:30 catch-up run stood for the slots of 12:00 and 13:00;
    killed while it ran, the next start (13:45) planned from 12:00 and ran the 13:00 slot
    again at once. It plans from the run's start, as a run's own end does."""
    clock = FakeClock(T0 + 105 * M)
    store = MemoryStateStore(clock=clock)
    store.update_schedule_state(
        "a",
        "s",
        status=Status.RUNNING,
        last_run_at=T0 + 90 * M,
        last_slot_at=T0,
        running_run_id="abcd1234abcd1234",
        next_run_at=T0,
    )
    if recorded:  # the record was written, the state showing the end was not
        _record_success(store, slot=T0, started=T0 + 90 * M, finished=T0 + 100 * M)
    job = Recorder()
    with running(store=store) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.cron("0 * * * *")}))
        sched.start()
        step(sched)
        assert job.calls == []  # 13:00 is not run again
        [record] = sched.history("a", "s")
        expected = RunStatus.SUCCESS if recorded else RunStatus.INTERRUPTED
        assert (record.run_id, record.status) == ("abcd1234abcd1234", expected)
        assert state(sched).next_run_at == T0 + 120 * M
        step(sched, clock, "15m")
        assert job.slots() == [T0 + 120 * M]


def test_a_resume_after_a_failed_catch_up_run_does_not_run_the_slots_it_stood_for() -> None:
    """The catch-up run at 14:30 (for 13:00 and 14:00) failed; resumed at 14:40, the backoff
    dropped, the plan was the cadence's own from 13:00: the 14:00 slot ran at once."""
    clock = FakeClock(T0)
    store = MemoryStateStore(clock=clock)
    job = Recorder(lambda info: (_ for _ in ()).throw(RuntimeError("boom")))
    agent = Agent("a", job=job, schedules={"s": Schedule.cron("0 * * * *")})
    with running(store=store, max_consecutive_failures=1) as (sched, _):
        sched.add_agent(agent)
        sched.start()
        sched.pause("a", "s")
        step(sched, clock, "150m")  # the slots of 13:00 and 14:00 pass while paused
        sched.resume("a", "s")
        step(sched)
        assert job.slots() == [T0 + 60 * M]  # the catch-up run, at 14:30
        assert state(sched).status is Status.DISABLED
        job.action = None  # fixed
        step(sched, clock, "10m")
        sched.resume("a", "s")
        step(sched)
        assert len(job.calls) == 1  # 14:00 is not run again
        assert state(sched).next_run_at == T0 + 180 * M


@pytest.mark.parametrize("status", [Status.PAUSED, Status.DISABLED])
def test_a_run_a_dead_process_left_while_paused_is_recorded_interrupted_not_run_again(
    status: Status,
) -> None:
    clock = FakeClock(T0 + 5 * M)
    store = MemoryStateStore(clock=clock)
    # the process died mid-run after the schedule was paused (or auto-disabled)
    store.update_schedule_state(
        "a",
        "s",
        status=status,
        last_run_at=T0,
        last_slot_at=T0,
        running_run_id="abcd1234abcd1234",
        next_run_at=T0,
    )
    job = Recorder()
    with running(store=store, clock=clock) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.cron("0 * * * *")}))
        sched.start()
        step(sched)
        [record] = sched.history("a", "s")
        assert (record.run_id, record.status) == ("abcd1234abcd1234", RunStatus.INTERRUPTED)
        after = state(sched)
        assert after.status is status and after.running_run_id is None
        assert after.next_run_at == T0 + 60 * M
        sched.resume("a", "s")
        step(sched)
        assert job.calls == []  # its slot is not run again
        step(sched, clock, "55m")
        assert job.slots() == [T0 + 60 * M]


def _record_success(
    store: MemoryStateStore, *, slot: datetime, started: datetime, finished: datetime
) -> None:
    """The record of a/s's cron run ``abcd1234abcd1234``, a success."""
    store.append_run(
        RunRecord(
            run_id="abcd1234abcd1234",
            agent="a",
            schedule="s",
            trigger_type=TriggerType.CRON,
            scheduled_for=slot,
            started_at=started,
            finished_at=finished,
            status=RunStatus.SUCCESS,
        )
    )


def _left_with_run_id(store: MemoryStateStore, *, ended_before: bool) -> None:
    """A state whose run id ``abcd1234abcd1234`` was kept, its run recorded in the history
    (``ended_before``) or not, while a later run's times say it ended."""
    if ended_before:
        _record_success(store, slot=T0 - 60 * M, started=T0 - 60 * M, finished=T0 - 59 * M)
    store.update_schedule_state(
        "a",
        "s",
        status=Status.IDLE,
        last_run_at=T0,
        last_slot_at=T0,
        last_finished_at=T0 + M,
        last_result=RunStatus.SUCCESS,
        running_run_id="abcd1234abcd1234",
        next_run_at=T0 + 60 * M,
    )


def test_a_run_id_an_older_version_left_after_the_run_ended_is_not_an_interrupted_run() -> None:
    store = MemoryStateStore(clock=FakeClock(T0 + 5 * M))
    # an older version ran the schedule on after this one recorded the run, carrying the id
    _left_with_run_id(store, ended_before=True)
    with running(store=store) as (sched, _):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.cron("0 * * * *")}))
        sched.start()
        step(sched)
        assert [r.status for r in sched.history("a", "s")] == [RunStatus.SUCCESS]
        after = state(sched)
        assert after.last_result is RunStatus.SUCCESS
        assert after.next_run_at == T0 + 60 * M


def test_a_run_left_running_after_the_wall_clock_stepped_back_is_recorded_interrupted() -> None:
    """Its start (after the step back) is earlier than the end of the run before it: times
    alone would take its id for a stale one."""
    store = MemoryStateStore(clock=FakeClock(T0 + 5 * M))
    _left_with_run_id(store, ended_before=False)
    with running(store=store) as (sched, _):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.cron("0 * * * *")}))
        sched.start()
        step(sched)
        [record] = sched.history("a", "s")
        assert (record.run_id, record.status) == ("abcd1234abcd1234", RunStatus.INTERRUPTED)
        assert state(sched).running_run_id is None


def test_an_interval_run_with_the_clock_a_day_fast_waits_its_interval_after_a_restart() -> None:
    """Run while the wall clock was a day fast, stopped, started again with the clock right:
    the interval kept the plan of the fast clock and stayed silent for a day (a step back
    while it ran moved the wait back with the clock)."""
    clock = FakeClock(T0 + timedelta(days=1))
    store = MemoryStateStore(clock=clock)
    with running(store=store) as (sched, _):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("5m")}))
        sched.start()
        step(sched)
        assert len(sched.history("a", "s")) == 1
    job = Recorder()
    clock.jump_wall_clock(-(timedelta(days=1) - 2 * M))  # set right: T0 + 2 minutes
    with running(store=store) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("5m")}))
        sched.start()
        step(sched)
        assert state(sched).next_run_at == T0 + 7 * M  # five minutes from now, not a day on
        step(sched, clock, "5m")
        assert job.slots() == [T0 + 7 * M]


def test_trigger_refuses_running_and_full_agents_unless_bypassed() -> None:
    gate = threading.Event()
    with running() as (sched, _clock):
        job = Recorder(lambda info: gate.wait(10))
        sched.add_agent(
            Agent(
                "a",
                job=job,
                max_concurrent=1,
                schedules={"s": Schedule.manual(), "t": Schedule.manual()},
            )
        )
        sched.start()
        assert sched.trigger("a", "s").success
        again = sched.trigger("a", "s")
        assert (again.success, again.skip_reason) == (False, SkipReason.ALREADY_RUNNING)
        full = sched.trigger("a", "t")
        assert (full.success, full.skip_reason) == (False, SkipReason.AT_CAPACITY)
        assert sched.trigger("a", "t", bypass_concurrency=True).success
        assert sched.get_running_job_count("a") == 2
        gate.set()
        assert sched.wait_until_idle(5)
        adhoc = sched.trigger("a", wait=True)
        assert adhoc.success
        assert sched.history("a", "manual")[0].status is RunStatus.SUCCESS


def test_manual_types_never_fire_on_the_timer() -> None:
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(
            Agent("a", job=job, schedules={"w": Schedule.webhook(), "c": Schedule.chat()})
        )
        sched.start()
        step(sched, clock, "1d")
        assert job.calls == []
        reasons = {s.schedule: s.skip_reason for s in sched.get_status().schedules}
        assert reasons == {"w": SkipReason.UNSUPPORTED_TYPE, "c": SkipReason.UNSUPPORTED_TYPE}


def test_a_failed_or_deferred_run_of_a_manual_schedule_shows_no_next_run() -> None:
    """A failed run-now of a manual schedule showed the backoff's next run (30 s, then 1 m
    later), a deferred one ``now + delay``, in ``status``, ``list`` and REST: nothing ever ran
    then, as only triggers fire such a schedule."""

    def job(info: TriggerInfo) -> str:
        if info.prompt == "defer":
            raise Deferred(60)
        raise RuntimeError("boom")

    with running() as (sched, clock):
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.manual()}))
        sched.start()
        for prompt in ("fail", "fail", "defer"):
            assert not sched.trigger("a", "s", prompt=prompt, wait=True).success
            assert state(sched).next_run_at is None
            [item] = sched.get_status().schedules
            assert item.next_run_at is None
        assert state(sched).consecutive_failures == 2
        step(sched, clock, "1h")
        assert len(sched.history("a", "s")) == 3


def test_disabled_in_config_never_fires() -> None:
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(
            Agent("a", job=job, schedules={"s": Schedule.interval("1m", enabled=False)})
        )
        sched.start()
        step(sched, clock, "1h")
        assert job.calls == []


def test_raising_job_does_not_disturb_other_schedules() -> None:
    with running() as (sched, clock):
        good = Recorder()
        sched.add_agent(Agent("bad", job=lambda i: 1 / 0, schedules={"s": Schedule.interval("1m")}))
        sched.add_agent(Agent("good", job=good, schedules={"s": Schedule.interval("1m")}))
        sched.start()
        step(sched)
        for _ in range(3):
            step(sched, clock, "1m")
        assert len(good.calls) == 4


def test_restart_recovery_interrupted_and_catch_up_once() -> None:
    clock = FakeClock(T0)
    store = MemoryStateStore(clock=clock)
    job = Recorder()
    agent = Agent(
        "a",
        job=job,
        schedules={
            "cron": Schedule.cron("*/5 * * * *"),
            "was-running": Schedule.interval("1h"),
        },
    )
    with running(store=store, clock=clock) as (sched, _):
        sched.add_agent(agent)
        sched.start()
        step(sched, clock, "5m")
        step(sched, clock, "5m")
    assert job.slots().count(T0 + 10 * M) == 1
    # A process died mid-run, and we were down for an hour.
    store.update_schedule_state("a", "was-running", status="running", last_run_at=T0 + 10 * M)
    clock.advance("1h")
    job.calls.clear()
    with running(store=store, clock=clock) as (sched, _):
        sched.add_agent(agent)
        sched.start()
        step(sched)
        assert job.schedules() == ["cron"]  # the missed cron fires exactly once
        assert job.calls[0].scheduled_for == T0 + 15 * M  # the first missed slot
        history = sched.history("a", "was-running")
        assert [r.status for r in history] == [RunStatus.INTERRUPTED, RunStatus.SUCCESS]
        assert history[0].started_at == T0 + 10 * M
        assert history[0].duration is None  # not the hour down: when it stopped is unknown
        assert store.get_schedule_state("a", "was-running").status is Status.IDLE
        step(sched, clock, "1m")
        assert job.schedules() == ["cron"]


def test_restart_catch_up_skip_and_window_record_missed() -> None:
    clock = FakeClock(T0)
    store = MemoryStateStore(clock=clock)
    job = Recorder()
    agents = [
        Agent("a", job=job, schedules={"skip": Schedule.cron("0 * * * *", catch_up="skip")}),
        Agent("b", job=job, schedules={"old": Schedule.cron("0 * * * *")}),
    ]
    with running(store=store, clock=clock, catch_up_window="30m") as (sched, _):
        for agent in agents:
            sched.add_agent(agent)
        sched.start()
        step(sched)
    clock.advance("3h")
    with running(store=store, clock=clock, catch_up_window="30m") as (sched, _):
        for agent in agents:
            sched.add_agent(agent)
        sched.start()
        step(sched)
        assert job.calls == []
        for agent, name in (("a", "skip"), ("b", "old")):
            records = sched.history(agent, name)
            assert [r.status for r in records] == [RunStatus.MISSED]
            assert store.get_schedule_state(agent, name).next_run_at == T0 + 4 * 60 * M


def test_set_agents_keeps_persisted_next_run_pause_failures_and_disable() -> None:
    with running(max_consecutive_failures=2) as (sched, _clock):
        job = Recorder(lambda info: 1 / 0)
        agent = Agent(
            "a",
            job=job,
            schedules={"p": Schedule.interval("1h"), "f": Schedule.interval("1h")},
        )
        sched.add_agent(agent)
        sched.start()
        step(sched)
        sched.pause("a", "p")
        before = {n: state(sched, "a", n) for n in ("p", "f")}
        sched.set_agents([agent])  # re-registering must not reset anything
        after = {n: state(sched, "a", n) for n in ("p", "f")}
        assert after == before
        assert after["p"].status is Status.PAUSED
        assert after["f"].consecutive_failures == 1
        assert after["f"].next_run_at == T0 + 60 * M


def test_update_schedule_recomputes_next_run_and_rejects_bad_changes() -> None:
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
        sched.start()
        step(sched)
        assert state(sched).next_run_at == T0 + 60 * M
        sched.update_schedule("a", "s", interval="10m", prompt="new")
        assert state(sched).next_run_at == T0 + 10 * M
        step(sched, clock, "10m")
        assert job.calls[-1].prompt == "new"
        with pytest.raises(InvalidScheduleError, match="Decimal"):
            sched.update_schedule("a", "s", interval="1.5h")
        with pytest.raises(InvalidScheduleError, match="no field 'cron'"):
            sched.update_schedule("a", "s", cron="* * * * *")
        with pytest.raises(InvalidScheduleError, match="new type needs its cadence") as info:
            sched.update_schedule("a", "s", type="cron")
        assert info.value.field == "type"
        with pytest.raises(InvalidScheduleError, match="cron schedules need a Cron cadence"):
            sched.update_schedule("a", "s", type="cron", cadence=Interval(timedelta(hours=2)))
        assert sched.get_schedule("a", "s").type == "interval"


def test_a_new_cadence_of_another_type_is_one_change_keeping_the_schedules_state() -> None:
    with running() as (sched, clock):
        job = Recorder(lambda info: 1 / 0)
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
        sched.start()
        step(sched)  # T0: fails once
        assert state(sched).consecutive_failures == 1
        sched.update_schedule("a", "s", cadence=Cron("30 * * * *"))  # the type follows
        assert sched.get_schedule("a", "s").type == "cron"
        assert state(sched).next_run_at == T0 + 30 * M
        assert state(sched).consecutive_failures == 1  # the same schedule, not a new one
        step(sched, clock, "30m")
        assert job.slots() == [T0, T0 + 30 * M]
        sched.update_schedule("a", "s", type="manual", cadence=None)
        assert (sched.get_schedule("a", "s").type, state(sched).next_run_at) == ("manual", None)
        step(sched, clock, "2h")
        assert len(job.calls) == 2


def test_a_completed_once_given_a_new_time_runs_again_and_a_passed_time_is_refused() -> None:
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.once(T0 + 5 * M)}))
        sched.start()
        step(sched, clock, "5m")
        step(sched, clock, "1m")
        assert state(sched).status is Status.COMPLETED
        with pytest.raises(InvalidScheduleError, match="has already passed") as info:
            sched.update_schedule("a", "s", at=T0 + 2 * M)
        assert info.value.field == "at"
        assert state(sched).status is Status.COMPLETED
        sched.update_schedule("a", "s", at=T0 + 30 * M)
        assert (state(sched).status, state(sched).next_run_at) == (Status.IDLE, T0 + 30 * M)
        step(sched, clock, "24m")
        assert job.slots() == [T0 + 5 * M, T0 + 30 * M]
        assert state(sched).status is Status.COMPLETED
        sched.update_schedule("a", "s", cadence=Interval(timedelta(hours=1)))  # another type
        assert state(sched).status is Status.IDLE
        step(sched, clock, "1h")
        assert len(job.calls) == 3


def test_a_completed_once_registered_again_with_a_new_time_stays_completed(
    tmp_path: Path,
) -> None:
    """A relative ``at`` in a fleet file (``"+2s"``) names a new time at every load: a once
    schedule that ran stays completed across restarts whatever its time now (only a change at
    run time, ``update_schedule`` or a ``PUT``, opens it again)."""
    clock = FakeClock(T0)
    job = Recorder()
    for _ in range(3):  # each start names a time two seconds after it, as "+2s" would
        with running(clock=clock, state_dir=tmp_path) as (sched, _):
            at = clock.now() + 2 * S
            sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.once(at)}))
            sched.start()
            step(sched, clock, "5s")
            assert state(sched).status is Status.COMPLETED
    assert job.slots() == [T0 + 2 * S]


def test_min_interval_and_missing_job_are_rejected_with_the_culprit_named() -> None:
    with running(min_interval="1m") as (sched, _clock):
        with pytest.raises(InvalidScheduleError, match="shorter than min_interval"):
            sched.add_agent(Agent("a", job=print, schedules={"s": Schedule.interval("30s")}))
        closest = r"only 1s apart \(00:00:00 and 00:00:01\), more often than min_interval 1m"
        with pytest.raises(InvalidScheduleError, match=closest):
            sched.add_agent(Agent("b", job=print, schedules={"s": Schedule.cron("* * * * * *")}))
        with pytest.raises(InvalidScheduleError, match="c/s: nothing to run") as info:
            sched.add_agent(Agent("c", schedules={"s": Schedule.interval("1h")}))
        assert info.value.field == "job"
        assert sched.get_status().schedules == []


def test_on_trigger_is_the_fallback_job_and_scheduler_jitter_applies() -> None:
    calls = Recorder()
    with running(on_trigger=calls, jitter_percent=50) as (sched, _clock):
        sched.add_agent(Agent("a", schedules={"s": Schedule.interval("10m")}))
        sched.start()
        step(sched)
        next_run = state(sched).next_run_at
        assert next_run is not None
        assert T0 + 10 * M <= next_run <= T0 + 15 * M
        assert len(calls.calls) == 1


def test_a_schedules_own_zero_jitter_turns_the_schedulers_jitter_off() -> None:
    """``jitter_percent=0`` on a schedule read as "not set", so the scheduler's default jitter
    moved a schedule that asked for exact times; ``None`` (the default) still takes it, in
    code, in a fleet file (``jitter_percent: null``) and stored at run time."""
    exact = Schedule.interval("10m", jitter_percent=0)
    assert schedule_from_mapping(schedule_to_mapping(exact)) == exact
    assert schedule_from_mapping({"type": "interval", "interval": "10m", "jitter_percent": 0}) == (
        exact
    )
    unset = schedule_from_mapping({"type": "interval", "interval": "10m", "jitter_percent": None})
    assert unset == Schedule.interval("10m") != exact
    assert schedule_revision(unset) != schedule_revision(exact)
    with running(jitter_percent=50) as (sched, _clock):
        schedules = {f"exact{i}": exact for i in range(5)} | {
            f"jittered{i}": unset for i in range(5)
        }
        sched.add_agent(Agent("a", job=Recorder(), max_concurrent=10, schedules=schedules))
        sched.start()
        step(sched)
        nexts = {n: sched.store.get_schedule_state("a", n).next_run_at for n in schedules}
        assert {nexts[f"exact{i}"] for i in range(5)} == {T0 + 10 * M}
        jittered = [nexts[f"jittered{i}"] for i in range(5)]
        assert all(T0 + 10 * M < t <= T0 + 15 * M for t in jittered if t is not None)


def test_listeners_get_typed_events_and_a_raising_listener_is_ignored() -> None:
    with running() as (sched, _clock):
        seen: list[object] = []
        sched.add_listener(lambda e: (_ for _ in ()).throw(RuntimeError("bad listener")))
        sched.add_listener(seen.append, JobSucceeded)
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1m")}))
        sched.start()
        step(sched)
        assert len(seen) == 1
        assert isinstance(seen[0], JobSucceeded)
        assert seen[0].record.status is RunStatus.SUCCESS


def test_a_listener_added_or_removed_later_changes_which_events_are_built() -> None:
    with running() as (sched, clock):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1m")}))
        sched.start()
        step(sched)  # a run with nobody listening: the scheduler notes that it needs no events
        seen: list[object] = []
        listener = seen.append  # one bound method: remove_listener matches it by identity
        sched.add_listener(listener, JobStarted, JobSucceeded)
        step(sched, clock, "1m")
        assert [type(event) for event in seen] == [JobStarted, JobSucceeded]
        sched.remove_listener(listener)
        step(sched, clock, "1m")
        assert len(seen) == 2


def test_a_listener_filtering_by_a_protocol_with_data_members_gets_its_events() -> None:
    from typing import Protocol, runtime_checkable

    @runtime_checkable
    class HasAgent(Protocol):  # issubclass() refuses protocols with data members
        agent: str

    with running() as (sched, _clock):
        seen: list[object] = []
        sched.add_listener(seen.append, HasAgent)  # type: ignore[type-abstract]
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1m")}))
        sched.start()
        step(sched)
        assert {type(event) for event in seen} >= {JobStarted, JobSucceeded}
        assert all(event.agent == "a" for event in seen)  # type: ignore[attr-defined]


def test_clock_jumps_are_detected_and_schedules_re_evaluated(caplog) -> None:  # type: ignore[no-untyped-def]
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("10m")}))
        sched.start()
        step(sched)
        clock.jump_wall_clock(timedelta(hours=-2))  # the wall clock is set back two hours
        sched.run_pending()
        assert "wall clock jumped" in caplog.text
        # elapsed-time semantics: still at most ten minutes away, not two hours ten
        assert state(sched).next_run_at == clock.now() + 10 * M
        clock.jump_wall_clock(timedelta(hours=5))
        step(sched)
        assert len(job.calls) == 2  # forward jump: overdue fires once, no storm


def test_a_missed_record_says_why_the_slot_was_not_run() -> None:
    """Every miss a running scheduler records said "no scheduler was running": also a slot
    that passed while the schedule was paused, or was jumped over by the wall clock."""
    with running() as (sched, clock):
        job = Recorder()
        hourly = Schedule.cron("0 * * * *", catch_up="skip")
        sched.add_agent(Agent("a", job=job, schedules={"s": hourly}))
        sched.start()
        sched.pause("a", "s")
        step(sched, clock, "90m")  # 13:00 passes while paused
        sched.resume("a", "s")
        step(sched)
        clock.jump_wall_clock(timedelta(hours=2))  # 15:00 (and 14:00) jumped over
        step(sched)
        assert job.calls == []
        missed = [r.error for r in sched.history("a", "s") if r.status is RunStatus.MISSED]
        assert missed == [
            "the slot passed while the wall clock jumped ahead",
            "the slot passed while the schedule was paused or disabled",
        ]


def test_a_backwards_clock_step_keeps_a_backoff_wait_whole() -> None:
    """Waits were capped at one interval after a backwards step: a schedule failing every run,
    on its 60-minute rung, ran again 10 s after the clock was set back 3 s."""
    with running(max_consecutive_failures=None) as (sched, clock):
        job = Recorder(lambda info: 1 / 0)
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("10s")}))
        sched.start()
        step(sched)
        while state(sched).consecutive_failures < 5:  # up the ladder to its 60-minute rung
            clock.set(state(sched).next_run_at)
            step(sched)
        failed_at = state(sched).last_finished_at
        assert state(sched).next_run_at == failed_at + timedelta(hours=1)
        clock.jump_wall_clock(-3)
        sched.run_pending()
        # the same hour of waiting, on the clock that now reads three seconds earlier
        assert state(sched).next_run_at == failed_at + timedelta(hours=1) - 3 * S
        step(sched, clock, "30m")
        assert len(job.calls) == 5


def test_stop_is_idempotent_and_nothing_dispatches_after_it() -> None:
    with running() as (sched, clock):
        job = Recorder()
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1m")}))
        sched.start()
        sched.start()  # idempotent
        step(sched)
        sched.stop()
        sched.stop()
        assert sched.status == "stopped"
        step(sched, clock, "1h")
        assert len(job.calls) == 1
        result = sched.trigger("a", "s")
        assert (result.success, result.skip_reason) == (False, SkipReason.STOPPING)


def test_a_paused_schedule_shows_no_next_run_on_a_stopped_scheduler_or_a_standby(
    tmp_path: Path,
) -> None:
    """The leader said ``None``; once stopped, and on a standby (a REST worker), the status
    showed the stored ``next_run_at`` of a paused schedule, as if it would fire then."""
    clock = FakeClock(T0)

    def build() -> ThreadedScheduler:
        sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, commit_delay=0)
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1m")}))
        return sched

    with _leader_and_standby(build) as (leader, standby):
        step(leader)
        # a live plan is shown, once the run's end is committed (on the flusher thread)
        assert wait_until(lambda: _next_run(standby) == T0 + timedelta(minutes=1))
        leader.pause("a", "s")
        assert (_next_run(leader), _next_run(standby)) == (None, None)
    assert _next_run(leader) is None


def _next_run(sched: ThreadedScheduler) -> object:
    (item,) = sched.get_status().schedules
    return item.next_run_at


@contextmanager
def _leader_and_standby(
    build: Callable[[], ThreadedScheduler],
) -> Iterator[tuple[ThreadedScheduler, ThreadedScheduler]]:
    """Two schedulers of one state directory, as of two processes: the first leads."""
    with as_separate_processes():
        leader, standby = build(), build()
        leader.start()
        standby.start()
        try:
            yield leader, standby
        finally:
            standby.stop()
            leader.stop()


def test_a_resume_made_on_a_standby_answers_the_plan_the_leader_will_make(
    tmp_path: Path,
) -> None:
    """A schedule in its failure backoff resumed through a standby (a web worker that does
    not lead): its answer, and its status until the leader replanned, showed the backoff's
    hour, though the resume drops it for the cadence's own next run."""
    clock = FakeClock(T0)
    job = Recorder(lambda info: (_ for _ in ()).throw(RuntimeError("boom")))

    def build() -> ThreadedScheduler:
        sched = ThreadedScheduler(
            state_dir=tmp_path, clock=clock, commit_delay=0, backoff=["1h"], timezone="UTC"
        )
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("10m")}))
        return sched

    with _leader_and_standby(build) as (leader, standby):
        step(leader)  # fails at T0: backed off an hour
        assert wait_until(lambda: _next_run(standby) == T0 + timedelta(hours=1))
        standby.resume("a", "s")
        assert _next_run(standby) == T0 + timedelta(minutes=10)  # the cadence's own
        step(leader, clock, "1s")  # the leader takes the resume in
        assert _next_run(leader) == T0 + timedelta(minutes=10)


def test_a_scheduler_not_running_says_so_as_each_schedule_s_skip_reason() -> None:
    """Before ``start()`` every schedule said ``not_due`` with no next run (the troubleshooting
    table reads ``not_due`` as "its next run is in the future"), and after ``stop()`` a
    schedule whose time had come said nothing kept it from firing."""
    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=None, clock=clock)
    schedules = {
        "s": Schedule.interval("1m"),
        "off": Schedule.interval("1m", enabled=False),
        "hook": Schedule.manual(),
    }
    sched.add_agent(Agent("a", job=Recorder(), schedules=schedules))

    def reasons() -> dict[str, SkipReason | None]:
        return {item.schedule: item.skip_reason for item in sched.get_status().schedules}

    not_running = {
        "s": SkipReason.STOPPING,
        "off": SkipReason.DISABLED,
        "hook": SkipReason.UNSUPPORTED_TYPE,
    }
    assert reasons() == not_running
    sched.start()
    step(sched)
    assert reasons()["s"] is SkipReason.NOT_DUE
    sched.stop()
    clock.advance("5m")  # its next run has come: only the stopped scheduler keeps it back
    assert reasons() == not_running


def test_a_process_that_does_not_run_the_scheduler_shows_the_leader_s_reasons(
    tmp_path: Path,
) -> None:
    """A web worker that never starts its scheduler (``AUTOSTART=False``) reads the schedules
    another process runs: it must not say ``stopping`` of them while that process leads."""
    clock = FakeClock(T0)

    def build() -> ThreadedScheduler:
        sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, commit_delay=0)
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1h")}))
        return sched

    def reason(sched: ThreadedScheduler) -> SkipReason | None:
        (item,) = sched.get_status().schedules
        return item.skip_reason

    with as_separate_processes():
        leader, web = build(), build()
        leader.start()
        try:
            step(leader)
            leader.store.flush()  # the run's end written: until then the state says it runs
            assert reason(web) is SkipReason.NOT_DUE
        finally:
            leader.stop()
        assert reason(web) is SkipReason.STOPPING  # the lease given up: nobody runs them


def test_a_job_that_outlived_a_stop_is_not_why_its_schedule_does_not_fire(tmp_path: Path) -> None:
    """After a ``stop()`` that timed out, its job still running, the schedule said
    ``already_running`` with a next run in the past (the slot being run): nothing fires it
    because no scheduler runs, and a running schedule has no next run yet, as the leader says."""
    job = Blocker()
    sched = ThreadedScheduler(state_dir=tmp_path, clock=FakeClock(T0), commit_delay=0)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
    sched.start()
    try:
        sched.run_pending()
        assert job.began.wait(10)
        (running,) = sched.get_status().schedules
        assert (running.next_run_at, running.skip_reason) == (None, SkipReason.ALREADY_RUNNING)
        with pytest.raises(SchedulerShutdownError):
            sched.stop(timeout=0.1)
        (item,) = sched.get_status().schedules
        assert (item.status, item.next_run_at) == (Status.RUNNING, None)
        assert item.skip_reason is SkipReason.STOPPING
    finally:
        job.release.set()


def test_a_standby_shows_no_next_run_for_a_schedule_the_leader_runs(tmp_path: Path) -> None:
    """The standby showed the slot being run as the next run ("1 s ago"), the leader none."""
    job = Blocker()
    clock = FakeClock(T0)

    def build() -> ThreadedScheduler:
        sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, commit_delay=0)
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
        return sched

    with as_separate_processes():
        leader, standby = build(), build()
        leader.start()
        standby.start()
        try:
            leader.run_pending()
            assert job.began.wait(10)
            leader.store.flush()

            def seen_running() -> bool:
                standby.refresh()
                return standby.get_status().schedules[0].status is Status.RUNNING

            assert wait_until(seen_running)
            (seen,) = standby.get_status().schedules
            (own,) = leader.get_status().schedules
            assert seen.status is own.status is Status.RUNNING
            assert seen.next_run_at is own.next_run_at is None
        finally:
            job.release.set()
            leader.stop()
            standby.stop()


def test_run_pending_on_a_scheduler_never_started_is_an_error_not_a_silent_pass() -> None:
    """It fired nothing and said nothing, so a user's test of "this did not fire" passed
    without testing anything; after ``stop()`` it still fires nothing, quietly (above)."""
    job = Recorder()
    sched = ThreadedScheduler(state_dir=None, clock=FakeClock(T0))
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1m")}))
    with pytest.raises(SchedulerShutdownError, match=r"never started: call start\(\) first"):
        sched.run_pending()
    assert job.calls == []

    class Unreadable(MemoryStateStore):
        def refresh(self) -> None:
            raise StateError("the state cannot be read")

    failed = ThreadedScheduler(store=Unreadable(clock=FakeClock(T0)))
    failed.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1m")}))
    with pytest.raises(StateError):
        failed.start()
    assert failed.get_state().started_at is None  # a start that failed started nothing
    with pytest.raises(SchedulerShutdownError, match="never started"):
        failed.run_pending()


def test_stop_from_inside_a_job_and_from_a_listener_does_not_deadlock() -> None:
    with running() as (sched, _clock):
        sched.add_agent(
            Agent("a", job=lambda info: sched.stop(), schedules={"s": Schedule.interval("1m")})
        )
        sched.start()
        sched.run_pending()
        assert sched.wait_until_idle(5)
        assert sched.status == "stopped"
    with running() as (sched, _clock):
        sched.add_listener(lambda e: sched.stop(), JobSucceeded)
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1m")}))
        sched.start()
        step(sched)
        assert sched.status == "stopped"


@pytest.mark.parametrize("fired_by", ["run_pending", "trigger", "timer thread"])
def test_stop_from_a_job_submitted_listener_starts_no_job_and_waits_for_nothing(
    fired_by: str,
) -> None:
    """The run a ``JobSubmitted`` listener heard of was counted as running, but its job went to
    a worker only after the listener returned: ``stop()`` inside it waited its whole timeout,
    raised "1 job(s) still running", and the job then ran after ``stop()`` had returned."""
    ran, outcome = threading.Event(), []

    def stop_at_submission(event: object) -> None:
        try:
            sched.stop(timeout=10)
            outcome.append("stopped")
        except SchedulerShutdownError as exc:
            outcome.append(str(exc))

    with running() as (sched, clock):
        sched.add_listener(stop_at_submission, JobSubmitted)
        schedules = {"s": Schedule.interval("1h", start_at=T0 + S)}
        sched.add_agent(Agent("a", job=lambda info: ran.set(), schedules=schedules))
        sched.start()
        if fired_by == "trigger":
            sched.trigger("a", "s")
        elif fired_by == "run_pending":
            clock.advance("1s")
            sched.run_pending()
        else:
            clock.wait_for_waiters(1)
            clock.advance("1s")
        assert wait_until(lambda: outcome)
        assert outcome == ["stopped"] and sched.status == "stopped"
        [record] = sched.history("a", "s")
        manual = fired_by == "trigger"
        assert record.status is (RunStatus.SKIPPED if manual else RunStatus.MISSED)
        assert "the scheduler began to stop before it started" in str(record.error)
        assert sched.get_total_running_job_count() == 0
        assert sched.store.get_schedule_state("a", "s").status is Status.IDLE
        assert not ran.wait(0.5)  # no job once stop() has returned


@pytest.mark.parametrize("then", ["returns", "stops"])
def test_a_run_timed_out_while_its_job_submitted_listener_runs_frees_its_slot_once_recorded(
    then: str,
) -> None:
    """A listener slower than the run's timeout: the run is recorded ``timeout`` and its job
    never starts. Skipping it at launch kept it running for ever (``already_running`` for good,
    ``wait_until_idle()`` never true); a listener's ``stop()`` then recorded it a second time."""
    ran = threading.Event()

    def slow(event: object) -> None:
        # the timer thread times the run out meanwhile (within the lease's 30 s: past them,
        # whether the renewal or the timeout's record came first decided who led after)
        clock.advance("21s")
        assert wait_until(lambda: sched.history("a", "s"))
        if then == "stops":
            sched.stop(timeout=10)

    with running() as (sched, clock):
        sched.add_listener(slow, JobSubmitted)
        schedules = {"s": Schedule.interval("1h", start_at=T0 + 60 * S, timeout="20s")}
        sched.add_agent(Agent("a", job=lambda info: ran.set(), schedules=schedules))
        sched.start()
        result = sched.trigger("a", "s")
        assert sched.wait_until_idle(10)
        [record] = sched.history("a", "s")
        assert (record.run_id, record.status) == (result.run_id, RunStatus.TIMEOUT)
        assert not ran.is_set()
        if then == "returns":
            sched.remove_listener(slow)
            assert sched.trigger("a", "s", wait=True).success  # not "already running"
            assert ran.is_set()


def test_a_timeouts_job_failed_waits_for_a_slow_listener_of_the_runs_job_started() -> None:
    """The timeout's own thread delivered ``JobFailed`` while a slow listener still heard
    ``JobStarted``: a second listener heard the run fail before it had started."""
    go, hearing, heard = threading.Event(), threading.Event(), []

    def slow(event: object) -> None:
        hearing.set()
        assert go.wait(10)

    with running() as (sched, clock):
        sched.add_listener(slow, JobStarted)
        sched.add_listener(lambda event: heard.append(type(event).__name__))
        schedules = {
            "s": Schedule.interval(
                "1h",
                start_at=T0 + 60 * S,
                timeout="30s",
                job=lambda info: info.cancel_event.wait(10),
            )
        }
        sched.add_agent(Agent("a", job=Recorder(), schedules=schedules))
        sched.start()
        sched.trigger("a", "s")
        assert hearing.wait(10)  # the run started: a run timed out before it starts never does
        clock.advance("31s")
        sched.run_pending()  # times the run out while the slow listener hears its start
        assert wait_until(lambda: sched.history("a", "s"))  # recorded ...
        assert "JobFailed" not in heard  # ... and not announced before its start
        go.set()
        assert wait_until(lambda: "JobFailed" in heard)
        run_events = [name for name in heard if name.startswith("Job")]
        assert run_events == ["JobSubmitted", "JobStarted", "JobFailed"]


def test_a_run_that_times_out_while_its_executor_queues_it_never_starts() -> None:
    """With a shared pool busy with another agent's job, a run timed out before a thread took
    it: its ``JobFailed`` came before its ``JobStarted``, its job then ran after its timeout
    was recorded, and a ``JobFailed`` listener calling ``wait_until_idle()`` hung for ever."""
    from concurrent.futures import ThreadPoolExecutor

    shared = ThreadPoolExecutor(max_workers=1)
    gate, ran, heard, waited = threading.Event(), threading.Event(), [], []

    def on_failed(event: Any) -> None:
        waited.append(sched.wait_until_idle(10))

    with running(executor_factory=lambda agent, slots: shared) as (sched, clock):
        sched.add_listener(lambda e: heard.append(type(e).__name__) if e.agent == "a" else None)
        sched.add_listener(on_failed, JobFailed)
        sched.add_agent(Agent("b", job=lambda i: gate.wait(10), schedules={"m": Schedule.manual()}))
        schedules = {"m": Schedule.manual(timeout="30s")}
        sched.add_agent(Agent("a", job=lambda info: ran.set(), schedules=schedules))
        sched.start()
        sched.trigger("b", "m")  # the pool's one thread
        sched.trigger("a", "m")  # queued behind it
        clock.advance("31s")
        sched.run_pending()  # a times out before a thread takes it
        assert wait_until(lambda: sched.history("a", "m"))
        gate.set()
        assert wait_until(lambda: waited)
        assert waited == [True]
        assert sched.wait_until_idle(10)
        assert not ran.is_set()
        assert [n for n in heard if n.startswith("Job")] == ["JobSubmitted", "JobFailed"]
        assert [r.status for r in sched.history("a", "m")] == [RunStatus.TIMEOUT]
    shared.shutdown()


@pytest.mark.parametrize("timed_out", [False, True])
def test_trigger_wait_answers_that_stop_gave_the_run_up_at_its_timeout(
    tmp_path: Path, timed_out: bool
) -> None:
    """``trigger(wait=True)`` answered ``success=True`` for a run ``stop()`` had given up at
    its timeout: the run had no record, and the next start recorded it interrupted. A run
    recorded as timed out before the stop keeps that answer."""
    blocker, results, clock = Blocker(), [], FakeClock(T0)  # the job ignores its cancel event
    sched = ThreadedScheduler(state_dir=tmp_path, timezone="UTC", clock=clock)
    sched.add_agent(Agent("a", job=blocker, schedules={"m": Schedule.manual(timeout="30s")}))
    sched.start()
    waiter = threading.Thread(target=lambda: results.append(sched.trigger("a", "m", wait=True)))
    waiter.start()
    assert blocker.began.wait(10)
    if timed_out:
        clock.advance("31s")
        sched.run_pending()
        assert wait_until(lambda: sched.history("a", "m"))
    with pytest.raises(SchedulerShutdownError):
        sched.stop(timeout=0.2)
    blocker.release.set()
    waiter.join(10)
    [result] = results
    assert not result.success
    if timed_out:
        assert result.error == "timed out after 30s"
        assert [r.status for r in sched.history("a", "m")] == [RunStatus.TIMEOUT]
    else:
        given_up = "stop() gave the run up before it ended: its outcome is not recorded"
        assert result.error == given_up
        assert sched.history("a", "m") == []


@pytest.mark.parametrize("leader_lock", [True, False])
def test_a_triggered_runs_timeout_is_enforced_on_time(leader_lock: bool) -> None:
    """``trigger()`` did not wake the timer: a run it started was cancelled at the timer's next
    wake for another reason (the lease's heartbeat, 10 s; ``max_sleep`` without the lock), so a
    2 s timeout fired 8 to 58 s late, or the run was recorded a success."""
    began, cancelled, clock = threading.Event(), threading.Event(), FakeClock(T0)

    def job(info: Any) -> str:
        began.set()
        if info.cancel_event.wait(10):
            cancelled.set()
        return "stopped"

    sched = ThreadedScheduler(state_dir=None, clock=clock, leader_lock=leader_lock)
    sched.add_agent(Agent("bot", job=job, schedules={"ask": Schedule.manual(timeout="2s")}))
    sched.start()
    try:
        assert clock.wait_for_waiters(1)  # the timer sleeps until its next wake
        assert sched.trigger("bot", "ask").success
        assert began.wait(10)  # timed out before its worker began it, it would never start
        clock.advance("3s")
        assert cancelled.wait(5)
        assert wait_until(lambda: sched.history("bot", "ask"))
        assert [r.status for r in sched.history("bot", "ask")] == [RunStatus.TIMEOUT]
    finally:
        sched.stop()


def test_a_run_times_out_while_stop_waits_when_a_fake_clock_passes_its_timeout() -> None:
    """``stop()`` times runs out as the timer would, on the scheduler's clock: a test moving
    a ``FakeClock`` past the timeout is seen within a second, not the timeout's length in
    real seconds (an hour)."""
    started, clock = threading.Event(), FakeClock(T0)

    def job(info: Any) -> None:
        started.set()
        info.cancel_event.wait(30)

    sched = ThreadedScheduler(state_dir=None, clock=clock)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.manual(timeout="1h")}))
    sched.start()
    assert sched.trigger("a", "s").success and started.wait(10)
    mover = threading.Timer(0.2, clock.advance, args=("2h",))
    mover.start()
    sched.stop(timeout=20)
    mover.join()
    assert [r.status for r in sched.history("a", "s")] == [RunStatus.TIMEOUT]


def test_trigger_wait_returns_at_the_timeout_of_a_job_that_ignores_its_cancel() -> None:
    """``trigger(wait=True)`` returns "once the run is recorded": a timed-out run is recorded
    at its timeout, but the call waited for the job's thread, for as long as a job ignoring its
    cancel event went on."""
    blocker, results, clock = Blocker(), [], FakeClock(T0)
    sched = ThreadedScheduler(state_dir=None, timezone="UTC", clock=clock)
    sched.add_agent(Agent("a", job=blocker, schedules={"m": Schedule.manual(timeout="30s")}))
    sched.start()
    try:
        waiter = threading.Thread(target=lambda: results.append(sched.trigger("a", "m", wait=True)))
        waiter.start()
        assert blocker.began.wait(10)
        clock.advance("31s")
        sched.run_pending()
        waiter.join(10)
        assert not waiter.is_alive()  # the job still runs
        [result] = results
        assert (result.success, result.error) == (False, "timed out after 30s")
        assert [r.status for r in sched.history("a", "m")] == [RunStatus.TIMEOUT]
        assert sched.get_running_job_count("a") == 1  # its slot frees when the job returns
    finally:
        blocker.release.set()
        sched.stop()
    assert sched.get_running_job_count("a") == 0


def test_decorators_misused_say_how_to_write_them() -> None:
    """A partial or a callable object raised a bare ``AttributeError`` ('__name__'); a lambda
    was refused as the agent name '<lambda>' with no word of ``name=``; ``@sched.every``
    without its call said only that the interval was no duration."""
    import functools

    def job(info: object, extra: int = 0) -> None: ...

    def _cleanup(info: object) -> None: ...

    def größe(info: object) -> None: ...  # noqa: PLC2401 (a name a schedule cannot take)

    with running() as (sched, _clock):
        for unnamed in (functools.partial(job, extra=1), lambda info: None, _cleanup, größe):
            with pytest.raises(InvalidScheduleError, match=r"give name= and agent=$"):
                sched.every("5m")(unnamed)
            with pytest.raises(InvalidScheduleError, match=r"schedule after .* give name=$"):
                sched.every("5m", agent="a")(unnamed)
        for decorator in (sched.every, sched.cron, sched.once):
            with pytest.raises(InvalidScheduleError, match=r"takes the cadence first \(@sched"):
                decorator(job)  # type: ignore[arg-type]
        assert sched.get_status().schedules == []  # nothing half made
        sched.every("5m", name="named", agent="a")(functools.partial(job, extra=1))
        assert sched.get_schedule("a", "named").type is ScheduleType.INTERVAL
        # a name given is the name's rules' to judge, whatever the function is called
        sched.every("5m", name="check-issues")(_cleanup)
        sched.every("5m", name="2fa-sweep", agent="ops")(job)
        assert sched.get_schedule("check-issues", "check-issues").job is _cleanup
        with pytest.raises(InvalidScheduleError, match="schedule name 'my job' is invalid"):
            sched.every("5m", name="my job", agent="a")(job)


def test_decorators_register_jobs() -> None:
    with running() as (sched, clock):
        calls: list[str] = []

        @sched.every("30s", agent="triage")
        def heartbeat(info):  # type: ignore[no-untyped-def]
            calls.append(info.schedule)

        @sched.cron("0 13 * * *", agent="triage", name="lunch")
        def report(info):  # type: ignore[no-untyped-def]
            calls.append(info.schedule)

        @sched.once(T0 + M)
        def migrate(info):  # type: ignore[no-untyped-def]
            calls.append(info.schedule)

        assert heartbeat.__name__ == "heartbeat"  # the function is returned unchanged
        sched.start()
        step(sched)
        step(sched, clock, "1h")
        assert sorted(set(calls)) == ["heartbeat", "lunch", "migrate"]
        with pytest.raises(ConflictError, match="already exists"):
            sched.every("1m", agent="triage", name="heartbeat")(print)
        assert [s.schedule for s in sched.get_status().schedules if s.agent == "triage"] == [
            "heartbeat",
            "lunch",
        ]  # the refused one left the agent as it was


def test_a_decorated_schedule_that_is_refused_leaves_no_agent_behind() -> None:
    """The agent was made before its schedule was refused, and stayed: ``add_agent`` of that
    name was then refused as already registered."""
    with running() as (sched, _):
        with pytest.raises(InvalidScheduleError, match="has already passed"):
            sched.once(T0 - M, agent="migrations", name="p")(print)
        with pytest.raises(InvalidScheduleError, match="min_interval"):
            sched.every(0.1, agent="pings")(print)
        assert "migrations" not in [s.agent for s in sched.get_status().schedules]
        sched.add_agent(Agent("migrations", job=print))
        sched.add_agent(Agent("pings", job=print))


def test_a_refused_decorator_leaves_the_schedules_other_processes_stored_alone(
    tmp_path: Path,
) -> None:
    """A first fix took the made agent back with ``remove_agent``, which deletes the
    schedules stored for that name by other processes, for every process."""
    first = ThreadedScheduler(state_dir=tmp_path, poll_interval=None, timezone="UTC")
    first.add_agent(Agent("triage", job=print))
    first.add_schedule("triage", "kept", Schedule.interval("1h"), persist=True)
    second = ThreadedScheduler(state_dir=tmp_path, poll_interval=None, timezone="UTC")
    with pytest.raises(InvalidScheduleError, match="min_interval"):
        second.every(timedelta(milliseconds=500), agent="triage")(print)
    assert "kept" in YamlStateStore(tmp_path).load_definitions()["triage"]
    second.add_agent(Agent("triage", job=print))  # the name is free again in the second


def test_context_manager_and_status_reporting() -> None:
    clock = FakeClock(T0)
    from herdsched import ThreadedScheduler

    with ThreadedScheduler(state_dir=None, clock=clock) as sched:
        sched.run_pending()
        assert sched.is_running() and sched.is_leader
        assert sched.get_state().status == "running"
        assert "ThreadedScheduler running" in repr(sched)
        assert "<table>" in sched._repr_html_()
    assert sched.status == "stopped"
    assert sched.get_state().check_count >= 1


def test_a_finished_run_wakes_the_timer_for_a_schedule_waiting_on_capacity() -> None:
    clock = FakeClock(T0)
    job = Recorder()
    schedules = {f"s{i}": Schedule.interval("1h") for i in range(3)}
    sched = ThreadedScheduler(state_dir=None, clock=clock, max_sleep=60)
    sched.add_agent(Agent("a", job=job, max_concurrent=1, schedules=schedules))
    with sched:
        # no time passes: only the finished runs can start the waiting ones
        assert wait_until(lambda: len(job.calls) == 3)
    assert sorted(job.schedules()) == ["s0", "s1", "s2"]


def test_a_finished_run_wakes_the_timer_when_its_next_run_is_sooner() -> None:
    clock = FakeClock(T0)
    job = Recorder()
    sched = ThreadedScheduler(state_dir=None, clock=clock, max_sleep=60, min_interval=0)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("30s")}))
    with sched:
        assert wait_until(lambda: len(job.calls) == 1)
        assert sched.wait_until_idle(10)
        assert clock.wait_for_waiters()
        clock.advance("30s")  # before the 60 s the timer slept for when the run began
        assert wait_until(lambda: len(job.calls) == 2)
    assert job.slots() == [T0, T0 + timedelta(seconds=30)]


class _ChunkWatchingStore(MemoryStateStore):
    """Records each durable claim; the second waits until a job of the first has started."""

    def __init__(self, first_job_started: threading.Event) -> None:
        super().__init__()
        self.chunks: list[int] = []
        self.first_job_started = first_job_started
        self.started_before_second_claim = False

    def claim_runs(self, claims: Any) -> None:
        self.chunks.append(len(claims))
        if len(self.chunks) == 2:
            self.started_before_second_claim = self.first_job_started.wait(10)


def test_the_group_commit_waits_for_a_run_due_within_commit_delay(tmp_path: Any) -> None:
    clock = FakeClock(T0)
    soon = T0 + timedelta(seconds=0.2)
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, commit_delay=0.5)
    schedules = {"s": Schedule.interval("1h"), "t": Schedule.interval("1h", start_at=soon)}
    sched.add_agent(Agent("a", job=Recorder(), schedules=schedules))
    with sched:
        step(sched)
        # "t" runs in 0.2 s: its transitions can share the commit that is due in 0.5 s
        assert sched.store.flush_deadline() is not None


class _PassHoldingStore(MemoryStateStore):
    """Holds the timer's first pass after it dispatched, until the first job has ended (the
    job waits for the hold: it begins and ends while the pass is held)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.counts: Callable[[], int] = lambda: 0
        self.engine_lock: Any = None
        self.holding = threading.Event()

    def flush_deadline(self) -> float | None:
        # asked after the dispatch, inside the pass, when its commit is looked at: not where
        # the pass plans its sleep under the engine's lock, which the job's end needs
        if not self.holding.is_set() and not self.engine_lock._is_owned() and self.counts():
            self.holding.set()
            wait_until(lambda: self.counts() == 0)
        return super().flush_deadline()


def test_a_slot_freed_while_the_timer_finishes_its_pass_still_goes_to_the_waiting_schedule() -> (
    None
):
    clock = FakeClock(T0)
    store = _PassHoldingStore(clock)
    job = Recorder(lambda info: store.holding.wait(10))
    sched = ThreadedScheduler(state_dir=None, store=store, clock=clock, max_sleep=60)
    store.counts, store.engine_lock = sched.get_total_running_job_count, sched._core.lock
    schedules = {"s0": Schedule.interval("1h"), "s1": Schedule.interval("1h")}
    sched.add_agent(Agent("a", job=job, max_concurrent=1, schedules=schedules))
    with sched:
        # no time passes; only the freed slot can start "s1"
        assert wait_until(lambda: len(job.calls) == 2, timeout=5)
    assert store.holding.is_set()
    assert sorted(job.schedules()) == ["s0", "s1"]


def test_a_slow_notifier_does_not_delay_the_cancel_of_a_timed_out_job() -> None:
    began, saw_cancel, release = threading.Event(), threading.Event(), threading.Event()
    notified_after_cancel: list[bool] = []

    def notifier(note: Any) -> None:  # a webhook that takes its time
        notified_after_cancel.append(saw_cancel.wait(2))

    def stubborn(info: Any) -> None:
        began.set()
        if info.cancel_event.wait(10):
            saw_cancel.set()
        release.wait(10)

    with running(notifier=notifier) as (sched, clock):
        schedules = {"s": Schedule.interval("1h", timeout="30s", notify="always")}
        sched.add_agent(Agent("a", job=stubborn, schedules=schedules))
        sched.start()
        sched.run_pending()
        # begun before it times out: timed out while its worker had not begun it, it never
        # starts, and nothing sees the cancel (a loaded machine did that)
        assert began.wait(10)
        clock.advance("31s")
        sched.run_pending()
        release.set()
        assert sched.wait_until_idle(5)
    assert notified_after_cancel == [True]  # the job was cancelled while the notifier ran


def _first_run_ignores_its_cancel() -> tuple[Callable[[Any], None], list[Any], threading.Event]:
    """A job whose first run ignores its cancel event and returns once ``release`` is set, and
    the slots it was called for."""
    release = threading.Event()
    calls: list[Any] = []

    def job(info: Any) -> None:
        calls.append(info.scheduled_for)
        if len(calls) == 1:
            assert release.wait(10)

    return job, calls, release


@pytest.mark.parametrize(
    ("schedule", "history", "next_due"),
    [
        (
            Schedule.cron("* * * * *", timeout="10s"),  # skip: 12:02 missed, 12:05 next
            [(RunStatus.TIMEOUT, T0 + M), (RunStatus.MISSED, T0 + 2 * M)],
            T0 + 5 * M,
        ),
        (
            Schedule.cron("* * * * *", timeout="10s", overlap="buffer_one"),
            [(RunStatus.TIMEOUT, T0 + M), (RunStatus.SUCCESS, T0 + 2 * M)],
            T0 + 5 * M,
        ),
        (Schedule.interval("1m", timeout="10s"), [(RunStatus.TIMEOUT, T0)], T0 + 4 * M + 30 * S),
    ],
)
def test_a_timed_out_job_that_runs_on_past_its_next_slot_follows_the_overlap_rule(
    schedule: Schedule, history: list[tuple[RunStatus, Any]], next_due: Any
) -> None:
    """The next run was planned when the run timed out; when the job, ignoring its cancel,
    returned minutes later, that stale slot fired at once: ``skip`` ran it like
    ``buffer_one``, and an interval ran again with no rest."""
    job, calls, release = _first_run_ignores_its_cancel()
    with running(max_consecutive_failures=None) as (sched, clock):
        sched.add_agent(Agent("a", job=job, schedules={"s": schedule}))
        sched.start()
        if schedule.type == "cron":
            clock.advance("1m")
        sched.run_pending()
        assert wait_until(lambda: calls)
        for _ in range(7):  # 3.5 minutes: the timeout, then slots pass while the job goes on
            clock.advance("30s")
            sched.run_pending()
        release.set()
        step(sched)
        records = [(r.status, r.scheduled_for) for r in reversed(sched.history("a", "s"))]
        assert records == history
        assert state(sched).next_run_at == next_due


@pytest.mark.parametrize(
    ("schedule", "manual", "returns_after", "backoff", "next_after"),
    [
        # an interval counts from when the thread returned: it counted from the timeout
        (Schedule.interval("5m", timeout="2m"), False, "4m", None, "9m"),
        (Schedule.interval("5m", timeout="2m"), False, "6m50s", None, "11m50s"),
        (Schedule.interval("5m", timeout="2m"), True, "4m", None, "9m"),
        # never sooner than the failure's backoff, which counts from the timeout
        (Schedule.interval("5m", timeout="2m"), False, "4m", ["10m"], "12m"),
        # slots on a grid or a clock stand
        (Schedule.interval("5m", anchor=T0, timeout="2m"), False, "4m", None, "5m"),
        (Schedule.cron("*/5 * * * *", timeout="2m"), False, "4m", None, "5m"),
    ],
)
def test_a_timed_out_job_plans_its_next_run_from_when_its_thread_returned(
    schedule: Schedule, manual: bool, returns_after: str, backoff: Any, next_after: str
) -> None:
    """The next run was planned from the timeout: a job that ignored its cancel and returned
    just before that time was run again at once, with no rest."""
    job, calls, release = _first_run_ignores_its_cancel()
    if manual:  # the timer leaves it alone until long after
        schedule = schedule.with_changes(cadence=Interval("5m", start_at=T0 + 1440 * M))
    with running(backoff=backoff) as (sched, clock):
        sched.add_agent(Agent("a", job=job, schedules={"s": schedule}))
        sched.start()
        if manual:
            assert sched.trigger("a", "s").success
        else:
            clock.advance(state(sched).next_run_at - T0)  # type: ignore[operator]
            sched.run_pending()
        assert wait_until(lambda: calls)
        began = clock.now()
        while clock.now() < began + parse_interval(returns_after):  # timed out, goes on
            clock.advance("10s")
            sched.run_pending()
        release.set()
        step(sched)
        assert [r.status for r in sched.history("a", "s")] == [RunStatus.TIMEOUT]
        next_due = began + parse_interval(next_after)
        assert state(sched).next_run_at == next_due
        step(sched, clock, next_due - clock.now() - S)
        assert len(calls) == 1
        step(sched, clock, S)
        assert len(calls) == 2


@pytest.mark.parametrize("how", ["pause", "update", "set_agents"])
def test_a_schedule_parked_and_let_go_while_its_timed_out_job_goes_on_is_planned_again(
    how: str,
) -> None:
    """Paused and resumed (or disabled and enabled) after its run timed out but while its job
    still ran, a schedule was planned by neither: the resume left it to the run, whose
    settling was over. It stayed idle with no next run for good."""
    job, calls, release = _first_run_ignores_its_cancel()
    schedule = Schedule.interval("5m", timeout="30s")
    with running() as (sched, clock):
        sched.add_agent(Agent("a", job=job, schedules={"s": schedule}))
        sched.start()
        sched.run_pending()
        assert wait_until(lambda: calls)
        clock.advance("1m")
        sched.run_pending()  # timed out, the job goes on
        assert wait_until(lambda: sched.history("a", "s"))
        for enabled in (False, True):
            if how == "pause":
                (sched.resume if enabled else sched.pause)("a", "s")
            elif how == "update":
                sched.update_schedule("a", "s", enabled=enabled)
            else:
                changed = schedule.with_changes(enabled=enabled)
                sched.set_agents([Agent("a", job=job, schedules={"s": changed})])
        clock.advance("3m")
        release.set()  # returns at 4 min: the interval counts from then
        step(sched)
        assert state(sched).next_run_at == T0 + 9 * M
        step(sched, clock, 5 * M - S)
        assert len(calls) == 1
        step(sched, clock, S)
        assert len(calls) == 2


@pytest.mark.parametrize(("timeout", "paused"), [("7m", False), ("30s", True)])
def test_a_slot_given_up_while_a_timed_out_job_goes_on_is_recorded_missed_once(
    timeout: str, paused: bool
) -> None:
    """The 12:05 run times out, its job goes on until 12:17. The 12:10 slot was given up
    (``skip``) at the timeout, or by a resume at 12:11 that follows the catch-up rule; when the
    job returned, the overlap rule was applied again from the run's own slot: 12:10 was
    recorded missed twice, and 12:15, which came due while the job ran, not at all."""
    job, calls, release = _first_run_ignores_its_cancel()
    schedule = Schedule.cron("*/5 * * * *", timeout=timeout, catch_up="skip")
    with running(max_consecutive_failures=None) as (sched, clock):
        sched.add_agent(Agent("a", job=job, schedules={"s": schedule}))
        sched.start()
        clock.advance("5m")
        sched.run_pending()
        assert wait_until(lambda: calls)
        while clock.now() < T0 + 17 * M:  # 30 s steps, as the timer would pass
            clock.advance("30s")
            sched.run_pending()
            if paused and clock.now() == T0 + 6 * M:
                assert wait_until(lambda: sched.history("a", "s"))  # timed out
                sched.pause("a", "s")
            if paused and clock.now() == T0 + 11 * M:
                sched.resume("a", "s")
        release.set()
        step(sched)
        records = [(r.status, r.scheduled_for) for r in reversed(sched.history("a", "s"))]
        assert records == [
            (RunStatus.TIMEOUT, T0 + 5 * M),
            (RunStatus.MISSED, T0 + 10 * M),
            (RunStatus.MISSED, T0 + 15 * M),
        ]
        assert state(sched).next_run_at == T0 + 20 * M


def test_a_slow_notifier_of_a_timed_out_run_does_not_hold_up_the_timer() -> None:
    """The timer settled timed-out runs itself, so their notifier (a webhook) and listeners ran
    on the timer thread: every other schedule waited for them."""
    release = threading.Event()
    threads: list[str] = []

    def notifier(note: Any) -> None:
        threads.append(threading.current_thread().name)
        release.wait(10)

    with running(notifier=notifier) as (sched, clock):
        tick = Recorder()
        schedules = {
            "slow": Schedule.interval(
                "1h", timeout="30s", notify="always", job=lambda info: info.cancel_event.wait(10)
            ),
            "tick": Schedule.interval("1m", job=tick),
        }
        sched.add_agent(Agent("a", schedules=schedules, max_concurrent=2))
        sched.start()
        sched.run_pending()
        # its end recorded, not only begun: an interval counts from the end, and one read after
        # the advance below made tick due a minute later (the test failed on a loaded machine)
        assert wait_until(lambda: len(sched.history("a", "tick")) == 1)
        clock.advance("1m")  # the slow run timed out, and tick is due again
        passing = threading.Thread(target=sched.run_pending)
        passing.start()
        try:
            assert wait_until(lambda: len(tick.calls) == 2, timeout=5)
            assert wait_until(lambda: threads == ["herdsched-timeout-a"], timeout=5)
        finally:
            release.set()
            passing.join(10)
        assert sched.wait_until_idle(10)
    assert [r.status for r in sched.history("a", "slow")] == [RunStatus.TIMEOUT]


def test_a_finished_run_leaves_the_sleeping_timer_asleep_when_its_plan_is_unchanged() -> None:
    clock = FakeClock(T0)
    job = Recorder()
    sched = ThreadedScheduler(state_dir=None, clock=clock, max_sleep=60)
    sched.add_agent(Agent("a", job=job, schedules={"m": Schedule.manual()}))
    with sched:
        assert clock.wait_for_waiters(1)
        assert wait_until(lambda: sched.get_state().check_count >= 1)
        before = sched.get_state().check_count
        assert sched.trigger("a", "m", wait=True).success
        time.sleep(0.2)  # real time: a woken timer would have made a pass by now
        assert sched.get_state().check_count == before
        assert len(job.calls) == 1


def test_a_stop_racing_the_timers_next_pass_is_never_lost() -> None:
    """stop() from a job lands while the timer thread starts its next pass; the timer must
    still end (its wake event was once cleared after stop() had set it, and stop() then waited
    for a timer asleep for max_sleep). Repeated: the window is narrow."""
    for _ in range(30):
        with running() as (sched, _clock):
            schedules = {"s": Schedule.interval("1m")}
            sched.add_agent(Agent("a", job=lambda info: sched.stop(), schedules=schedules))
            sched.start()
            sched.run_pending()
            assert sched.wait_until_idle(2)
            assert sched.status == "stopped"


def test_pause_and_resume_events_are_heard_when_the_status_changes() -> None:
    """Pausing a paused schedule three times told listeners it was paused three times, and a
    resume of one that was not paused told them it was resumed."""
    with running() as (sched, _clock):
        heard = Recorder()
        sched.add_listener(heard, SchedulePaused, ScheduleResumed)
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1h")}))
        sched.start()
        sched.resume("a", "s")  # it runs: nothing to resume
        for _ in range(3):
            sched.pause("a", "s")
        sched.resume("a")
        sched.resume("a", "s")
        assert [type(event).__name__ for event in heard.calls] == [
            "SchedulePaused",
            "ScheduleResumed",
        ]
