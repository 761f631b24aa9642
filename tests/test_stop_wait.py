"""What ``stop()``'s wait for running jobs keeps up in the timer's place: the outcomes of jobs
that end meanwhile are committed, and a lead lost meanwhile tells the jobs to stop once
another scheduler leads. Time is a ``FakeClock``; the wait's looks are real (at most a second
apart)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from scheduler_helpers import LeaseCallsCutOff, wait_until

from herdsched import Agent, RunStatus, Schedule, StateError, ThreadedScheduler, TriggerInfo
from herdsched import events as ev
from herdsched.errors import SchedulerShutdownError
from herdsched.store.base import Lease
from herdsched.store.deadline import current_deadline
from herdsched.store.memory import MemoryStateStore
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock

TTL = 30.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc))


class Held:
    """A job that runs until ``release`` is set or its run is cancelled."""

    def __init__(self) -> None:
        self.began, self.release = threading.Event(), threading.Event()
        self.cancelled = threading.Event()

    def __call__(self, info: TriggerInfo) -> str:
        self.began.set()
        while not self.release.wait(0.01):
            if info.cancel_event.is_set():
                self.cancelled.set()
                return "told to stop"
        return "done"


@pytest.fixture
def stopping() -> Iterator[list[threading.Thread]]:
    """Threads running ``stop()``, joined at the end of the test."""
    threads: list[threading.Thread] = []
    yield threads
    for thread in threads:
        thread.join(30)


def _stop_in_background(sched: ThreadedScheduler, threads: list[threading.Thread]) -> None:
    thread = threading.Thread(target=lambda: sched.stop(timeout=60), daemon=True)
    thread.start()
    threads.append(thread)
    assert wait_until(lambda: sched.status == "stopping")


def test_a_job_that_ends_while_stop_waits_is_recorded_at_once(
    tmp_path: Path, clock: FakeClock, stopping: list[threading.Thread]
) -> None:
    """Its outcome stayed unwritten until the wait was over: a web worker killed by its
    server while it waited for a long job left the short one to be recorded interrupted."""
    short, long = Held(), Held()
    store = YamlStateStore(tmp_path, clock=clock, commit_delay=0)
    sched = ThreadedScheduler(store=store, clock=clock, lease_ttl=TTL)
    sched.add_agent(Agent("a", job=short, schedules={"short": Schedule.interval("1h")}))
    sched.add_agent(Agent("b", job=long, schedules={"long": Schedule.interval("1h")}))
    sched.start()
    sched.run_pending()
    assert short.began.wait(10) and long.began.wait(10)
    _stop_in_background(sched, stopping)
    short.release.set()

    def recorded() -> list[RunStatus]:
        with YamlStateStore(tmp_path) as reader:
            return [record.status for record in reader.get_history("a", "short")]

    assert wait_until(lambda: recorded() == [RunStatus.SUCCESS])
    assert sched.status == "stopping"  # the long job still runs
    long.release.set()


class CutOff(LeaseCallsCutOff, MemoryStateStore):
    """A store whose lease calls fail while ``broken``."""


def _leading(
    store: MemoryStateStore, clock: FakeClock, ttl: float = TTL
) -> tuple[ThreadedScheduler, Held]:
    """A scheduler leading on ``store`` whose hourly job runs (until released or told to
    stop)."""
    job = Held()
    sched = ThreadedScheduler(state_dir=None, store=store, clock=clock, lease_ttl=ttl)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
    sched.start()
    sched.run_pending()
    assert job.began.wait(10)
    return sched, job


def test_a_lead_lost_while_stop_waits_tells_the_jobs_to_stop(
    clock: FakeClock, stopping: list[threading.Thread]
) -> None:
    """A store out of reach for longer than the lease while a web worker's exit waited for a
    job: the lead was lost, another host took over and ran the schedule again, and the job
    (a command's program) ran on beside it until it ended. A stopping scheduler will not lead
    again to record its jobs: they are told to stop as it loses the lease."""
    store = CutOff(clock=clock)
    sched, job = _leading(store, clock)
    _stop_in_background(sched, stopping)
    store.broken = True
    clock.advance(TTL / 2)
    assert not job.cancelled.wait(1.5)  # the lease still holds: the job goes on
    clock.advance(TTL / 2 + 1)
    assert job.cancelled.wait(10)
    for thread in stopping:
        thread.join(30)
    assert sched.status == "stopped"


class SlowLooks(CutOff):
    """Its lease reads, while ``slow``, answer at the caller's deadline, or after 20 s (a
    database out of reach: the PostgreSQL store cuts a call at the deadline)."""

    slow = False

    def current_lease(self) -> Lease | None:
        if self.slow:
            deadline = current_deadline()
            time.sleep(20.0 if deadline is None else max(0.0, deadline.left()))
            raise StateError("the store did not answer")
        return super().current_lease()


def test_a_standby_that_stops_tells_the_jobs_of_its_lost_lead_to_stop_in_time(
    clock: FakeClock,
) -> None:
    """A leader that lost its lease to an outage stood by with its job running; stopped
    then, it let the job run on to the stop's timeout, beside the runs of a scheduler that
    leads meanwhile; and the wait's look for that leader read the lease with no limit but
    the store's own (``stop(timeout=3)`` took 23 s on PostgreSQL)."""
    store = SlowLooks(clock=clock)
    sched, job = _leading(store, clock)
    try:
        store.broken = True
        clock.advance(TTL + 1)
        sched.run_pending()
        assert wait_until(lambda: sched.status == "standby")
        assert not job.cancelled.is_set()
        store.broken, store.slow = False, True
        began = time.monotonic()
        sched.stop(timeout=3)  # its job, told to stop at once, returns
        assert time.monotonic() - began < 10  # not 20 s and more
        assert job.cancelled.is_set()
    finally:
        job.release.set()


@pytest.mark.parametrize("handed_over", [False, True], ids=["at once", "after a hand-over"])
def test_a_stop_called_on_the_flusher_thread_still_commits_what_ends(
    tmp_path: Path, clock: FakeClock, handed_over: bool
) -> None:
    """A listener that hears a failed group commit (on the flusher thread) and stops the
    scheduler: the wait handed its commits to the flusher, the very thread waiting, and the
    outcome of a job that ended meanwhile stayed unwritten until the wait was over; also
    when the timer had handed the flusher the failed commit's retry before the stop."""

    class FailsOnce(YamlStateStore):
        fail = True

        def flush(self) -> None:
            if self.fail:
                self.fail = False
                raise StateError("the disk is full (once)")
            super().flush()

    short, long = Held(), Held()
    store = FailsOnce(tmp_path, clock=clock, commit_delay=0)
    sched = ThreadedScheduler(store=store, clock=clock, lease_ttl=TTL)
    sched.add_agent(Agent("a", job=short, schedules={"short": Schedule.interval("1h")}))
    sched.add_agent(Agent("b", job=long, schedules={"long": Schedule.interval("1h")}))
    stopped_on: list[str] = []

    def on_error(event: ev.StateErrorOccurred) -> None:
        if not stopped_on:
            stopped_on.append(threading.current_thread().name)
            if handed_over:  # the retry comes due and the timer asks the flusher for it
                clock.advance(2)
                sched._core.wake.set()
                assert wait_until(lambda: sched._commits._in_flight)
            sched.stop(timeout=60)

    sched.add_listener(on_error, ev.StateErrorOccurred)
    sched.start()
    assert short.began.wait(10) and long.began.wait(10)
    assert wait_until(lambda: sched.status == "stopping")
    clock.advance(2)  # past the failed commit's retry
    short.release.set()

    def recorded() -> list[RunStatus]:
        with YamlStateStore(tmp_path) as reader:
            return [record.status for record in reader.get_history("a", "short")]

    assert wait_until(lambda: recorded() == [RunStatus.SUCCESS])
    assert sched.status == "stopping" and stopped_on == ["herdsched-flusher"]
    long.release.set()
    assert wait_until(lambda: sched.status == "stopped")


class SlowRelease(CutOff):
    """Its lease release, while ``slow``, answers at the caller's deadline, or after 20 s."""

    slow = False

    def release_lease(self, lease: Lease) -> None:
        if self.slow:
            deadline = current_deadline()
            time.sleep(20.0 if deadline is None else max(0.0, deadline.left()))
            raise StateError("the store did not answer")
        super().release_lease(lease)


def test_a_normal_stop_releases_its_lease_on_a_slow_store(clock: FakeClock) -> None:
    """The bound on the release of a lost lease (a third of it) applied to every release: on
    a slow but working database a stop's release was cut, and standbys waited for the
    lease's expiry."""

    class SlowButWorking(CutOff):
        def release_lease(self, lease: Lease) -> None:
            deadline = current_deadline()
            time.sleep(1.5 if deadline is None else min(1.5, max(0.0, deadline.left())))
            if deadline is not None and deadline.left() <= 0:
                raise StateError("the release was cut at its deadline")
            super().release_lease(lease)

    store = SlowButWorking(clock=clock)
    sched, job = _leading(store, clock, ttl=3)
    job.release.set()
    assert sched.wait_until_idle(10)
    sched.stop(timeout=10)
    assert store.current_lease() is None  # released: a standby leads at once


def test_a_lease_lost_while_stop_waits_is_released_within_a_third_of_it(
    clock: FakeClock,
) -> None:
    """The release of a lost lease, which a stop's wait makes as it steps down, waited for a
    database out of reach as long as its connection's own limit (10 s), past the stop's
    timeout."""
    store = SlowRelease(clock=clock)
    sched, job = _leading(store, clock, ttl=3)
    store.broken = store.slow = True
    clock.advance(10)  # past the lease: the stop's first look, or the timer's, steps down
    began = time.monotonic()
    with contextlib.suppress(SchedulerShutdownError):  # as the job's end and the wait meet
        sched.stop(timeout=2)
    assert time.monotonic() - began < 10  # the stop's 2 s and a 1 s release, not 20 s more
    assert job.cancelled.is_set()
