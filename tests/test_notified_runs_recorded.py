"""A run whose notifier is slow (a webhook) is never left without a record by a crash.

The notifier is heard before the run's record and new state are written, and the two reach the
store in the same group commit: before, the state showing the run ended was committed while the
notifier held the record back, the run's claim went with that commit, and a process killed then
left a run that had no record and that no one would record."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import T0, crash_copy, running, wait_until

from herdsched import Agent, JobStarted, RunStatus, Schedule, ThreadedScheduler
from herdsched.errors import StateError
from herdsched.models import Status
from herdsched.store.memory import MemoryStateStore
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
    # no group commit falls due on its own: the test's own is the one a crash copy follows
    sched = ThreadedScheduler(
        state_dir=tmp_path / "live", clock=clock, commit_delay=300, notifier=notifier
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


def _returned_past_its_timeout(
    sched: ThreadedScheduler, clock: FakeClock, in_notifier: threading.Event
) -> None:
    """Run a/s, whose job returns at once, and pass its timeout while its notifier is heard."""
    schedule = Schedule.interval("5m", timeout="30s", notify="always")
    sched.add_agent(Agent("a", job=lambda info: None, schedules={"s": schedule}))
    sched.start()
    sched.run_pending()
    assert in_notifier.wait(10)
    clock.advance("31s")
    sched.run_pending()


def test_a_job_that_returned_before_its_timeout_is_not_timed_out_while_its_notifier_is_heard(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The timer took a run whose job had returned, but whose notifier was still being
    heard past the run's timeout, for a timed-out one: it logged a timeout and planned the
    next run from when the notifier returned."""
    notifier, in_notifier, release = _held_notifier()
    with running(notifier=notifier) as (sched, clock):
        _returned_past_its_timeout(sched, clock, in_notifier)
        release.set()
        assert sched.wait_until_idle(10)
        assert [r.status for r in sched.history("a", "s")] == [RunStatus.SUCCESS]
        next_run_at = sched.store.get_schedule_state("a", "s").next_run_at
        assert next_run_at == T0 + timedelta(minutes=5)  # from the job's end, not later
    assert "timed out" not in caplog.text


def test_the_timer_sleeps_while_a_returned_jobs_notifier_outlasts_the_runs_timeout() -> None:
    """The timer planned its next pass at the passed timeout of a run whose job had returned
    (and which it no longer times out): it made passes without rest, about 100,000 a second,
    while the notifier was heard."""
    notifier, in_notifier, release = _held_notifier()
    with running(notifier=notifier) as (sched, clock):
        _returned_past_its_timeout(sched, clock, in_notifier)
        before = sched.get_state().check_count
        time.sleep(0.5)  # real time, the fake clock stands: a resting timer makes no pass
        passes = sched.get_state().check_count - before
        release.set()
        assert sched.wait_until_idle(10)
    assert passes <= 2


def test_a_timed_out_runs_notifier_may_stop_the_scheduler() -> None:
    """A timed-out run's notifier (on a thread of its own) that stopped the scheduler waited
    for its own run, whose job had returned on its cancel event, for ever."""
    answers: list[object] = []

    def notifier(note: Any) -> None:
        sched.stop(timeout=5)
        answers.append(sched.get_state().status)

    with running(notifier=notifier) as (sched, clock):
        schedule = Schedule.interval("1h", timeout="30s", notify="always")
        job = lambda info: info.cancel_event.wait(10)  # noqa: E731 - returns on its cancel
        sched.add_agent(Agent("a", job=job, schedules={"s": schedule}))
        sched.start()
        sched.run_pending()
        clock.advance("31s")
        sched.run_pending()
        assert wait_until(lambda: answers, timeout=10)
    assert answers == ["stopped"]


def _timed_out_in_notifier(sched: ThreadedScheduler, clock: FakeClock) -> None:
    """Start a/s, time it out once it began (a run timed out before a worker takes it never
    starts); its job returns on its cancel while its notifier is heard."""
    began = threading.Event()
    sched.add_listener(lambda event: began.set(), JobStarted)
    sched.start()
    sched.run_pending()
    assert began.wait(10)
    clock.advance("31s")
    sched.run_pending()


def _held_notifier() -> tuple[Any, threading.Event, threading.Event]:
    in_notifier, release = threading.Event(), threading.Event()

    def notifier(note: Any) -> None:
        in_notifier.set()
        assert release.wait(10)

    return notifier, in_notifier, release


_RETURNS_ON_CANCEL = Schedule.interval(
    "5m", timeout="30s", notify="always", job=lambda info: info.cancel_event.wait(10)
)


def test_waiting_for_a_timed_out_run_ends_once_it_is_recorded() -> None:
    """``wait_until_idle()`` and ``trigger(wait=True)`` returned once the job returned, while
    its notifier was still heard and nothing was recorded."""
    notifier, in_notifier, release = _held_notifier()
    with running(notifier=notifier) as (sched, clock):
        manual = Schedule.manual(timeout="30s", notify="always")
        schedules = {"s": _RETURNS_ON_CANCEL, "m": manual}
        sched.add_agent(
            Agent("a", job=lambda info: info.cancel_event.wait(10), schedules=schedules)
        )
        _timed_out_in_notifier(sched, clock)
        assert in_notifier.wait(10)
        assert not sched.wait_until_idle(0.3)  # not over while its notifier is heard
        release.set()
        assert sched.wait_until_idle(10)
        assert [r.status for r in sched.history("a", "s")] == [RunStatus.TIMEOUT]
        in_notifier.clear()
        release.clear()
        results: list[Any] = []
        waiting = threading.Thread(
            target=lambda: results.append(sched.trigger("a", "m", wait=True))
        )
        waiting.start()
        assert wait_until(lambda: sched.get_total_running_job_count() == 1)
        clock.advance("31s")
        sched.run_pending()
        assert in_notifier.wait(10)
        waiting.join(0.3)
        assert not results  # its notifier is heard: the run is not over
        release.set()
        waiting.join(10)
        assert results[0].error == "timed out after 30s"  # as its record says
        assert [r.status for r in sched.history("a", "m")] == [RunStatus.TIMEOUT]


class _RenewalsFail(MemoryStateStore):
    """A store whose lease calls fail while ``broken``."""

    broken = False

    def renew_lease(self, lease: Any, ttl: float) -> Any:
        if self.broken:
            raise StateError("the store does not answer")
        return super().renew_lease(lease, ttl)

    def acquire_lease(self, holder: str, ttl: float) -> Any:
        if self.broken:
            raise StateError("the store does not answer")
        return super().acquire_lease(holder, ttl)


def test_a_lead_lost_while_a_timed_out_runs_notifier_is_heard_leaves_the_schedule_planned() -> None:
    """The scheduler lost the lead and, its job having returned, led again at once: recovery
    passed over the schedule (its run going on), and the run's end, not recorded after the lost
    lead, planned nothing. The schedule never ran again."""
    notifier, in_notifier, release = _held_notifier()
    clock = FakeClock(T0)
    store = _RenewalsFail(clock=clock)
    calls: list[object] = []

    def job(info: Any) -> None:
        calls.append(info.scheduled_for)
        info.cancel_event.wait(10)

    schedule = Schedule.interval("5m", timeout="30s", notify="always")
    with running(store=store, clock=clock, lease_ttl=30, notifier=notifier) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules={"s": schedule}))
        _timed_out_in_notifier(sched, clock)
        assert in_notifier.wait(10)
        assert wait_until(lambda: sched.get_total_running_job_count() == 0)
        store.broken = True
        clock.advance("31s")
        sched.run_pending()  # the renewal fails past the lease: the scheduler stands by
        assert wait_until(lambda: sched.status == "standby")
        store.broken = False
        clock.advance("10s")
        sched.run_pending()
        assert sched.status == "standby"  # not while its run goes on: the run is not over
        release.set()

        def leads() -> bool:
            clock.advance("5s")  # the next try to lead
            sched.run_pending()
            return sched.status == "running"

        assert wait_until(leads)  # once the run is over
        for _ in range(6):  # 6 minutes: a 5-minute interval planned again comes due
            clock.advance("1m")
            sched.run_pending()
            if sched.get_total_running_job_count():  # dispatched: its worker begins it
                break
        assert wait_until(lambda: len(calls) == 2)  # planned again, and run
        clock.advance("31s")  # the second times out: its job returns on its cancel
        sched.run_pending()
        # the first run recorded by the new term's recovery
        assert sched.history("a", "s")[-1].status is RunStatus.INTERRUPTED


def test_a_schedule_put_back_while_its_runs_notifier_is_heard_records_the_run_once() -> None:
    """A schedule taken out of the fleet and put back while its run's notifier was heard took
    the run, which its state showed going on, for one its process had left: it recorded it
    ``interrupted``, and then the run's own record followed."""
    notifier, in_notifier, release = _held_notifier()
    job = lambda info: "done"  # noqa: E731
    schedules = {"s": Schedule.interval("1h", notify="always")}
    with running(notifier=notifier) as (sched, _):
        sched.add_agent(Agent("a", job=job, schedules=schedules))
        sched.start()
        sched.run_pending()
        assert in_notifier.wait(10)
        sched.set_agents([Agent("a", job=job, schedules={})])
        sched.set_agents([Agent("a", job=job, schedules=schedules)])
        release.set()
        assert sched.wait_until_idle(10)
        assert [r.status for r in sched.history("a", "s")] == [RunStatus.SUCCESS]
        state = sched.store.get_schedule_state("a", "s")
        assert (state.status, state.running_run_id) == (Status.IDLE, None)
        assert state.next_run_at == T0 + timedelta(hours=1)


def test_a_timed_out_jobs_slot_frees_when_it_returns_while_its_notifier_is_heard() -> None:
    in_notifier, release = threading.Event(), threading.Event()
    other: list[object] = []

    def notifier(note: Any) -> None:
        if note.schedule == "slow":
            in_notifier.set()
            assert release.wait(10)

    with running(notifier=notifier) as (sched, clock):
        schedules = {
            "slow": Schedule.interval(
                "1h", timeout="30s", notify="always", job=lambda info: info.cancel_event.wait(10)
            ),
            "other": Schedule.interval("1h", start_at=T0 + timedelta(seconds=40)),
        }
        sched.add_agent(Agent("a", job=other.append, schedules=schedules, max_concurrent=1))
        sched.start()
        sched.run_pending()
        clock.advance("31s")
        sched.run_pending()
        assert in_notifier.wait(10)
        assert wait_until(lambda: sched.get_total_running_job_count() == 0)
        clock.advance("10s")
        sched.run_pending()
        assert wait_until(lambda: other)  # the agent's one slot is free
        assert sched.store.get_schedule_state("a", "slow").status is Status.RUNNING
        release.set()
        assert wait_until(lambda: sched.history("a", "slow"))  # once the notifier returned
        assert [r.status for r in sched.history("a", "slow")] == [RunStatus.TIMEOUT]
        slow = sched.store.get_schedule_state("a", "slow")
        assert (slow.status, slow.last_result) == (Status.IDLE, RunStatus.TIMEOUT)
