"""Real threads on the real clock: short intervals, generous bounds, no speed assertions."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import wait_until

from herdsched import (
    Agent,
    RunStatus,
    Schedule,
    SchedulerShutdownError,
    SkipReason,
    Status,
    ThreadedScheduler,
    TriggerInfo,
    TriggerResult,
)
from herdsched.errors import StateError
from herdsched.events import Event, JobFailed, JobSubmitted, JobSucceeded
from herdsched.store.base import RunClaim
from herdsched.store.memory import MemoryStateStore
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import as_separate_processes

pytestmark = pytest.mark.slow


def make(**kwargs: object) -> ThreadedScheduler:
    options: dict[str, object] = {"state_dir": None, "max_sleep": 0.5, "min_interval": 0}
    options.update(kwargs)
    return ThreadedScheduler(**options)  # type: ignore[arg-type]


def test_the_timer_thread_fires_an_interval_repeatedly() -> None:
    runs: list[float] = []
    sched = make()
    sched.add_agent(
        Agent(
            "a",
            job=lambda info: runs.append(time.monotonic()),
            schedules={"s": Schedule.interval(0.2)},
        )
    )
    with sched:
        deadline = time.monotonic() + 10
        while len(runs) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(runs) >= 3
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    assert all(gap >= 0.19 for gap in gaps)  # completion-based: never sooner than the interval


def test_jobs_of_different_agents_run_in_parallel() -> None:
    barrier = threading.Barrier(2, timeout=10)
    results: list[str] = []

    def job(info: TriggerInfo) -> str:
        barrier.wait()  # only passes when both agents' jobs run at the same time
        results.append(info.agent)
        return "met"

    sched = make()
    for name in ("a", "b"):
        sched.add_agent(Agent(name, job=job, schedules={"s": Schedule.interval("1h")}))
    with sched:
        # both jobs, not an idle scheduler: it is idle too before its timer's first pass
        assert wait_until(lambda: len(results) == 2, timeout=15)
        assert sched.wait_until_idle(15)
    assert sorted(results) == ["a", "b"]
    assert all(r.status == "success" for r in sched.history("a") + sched.history("b"))


def test_max_concurrent_holds_and_waiting_schedules_fire_when_a_slot_frees() -> None:
    lock = threading.Lock()
    active = 0
    peak = 0
    done: list[str] = []

    def job(info: TriggerInfo) -> None:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.2)
        with lock:
            active -= 1
            done.append(info.schedule)

    sched = make()
    sched.add_agent(
        Agent(
            "a",
            job=job,
            max_concurrent=2,
            schedules={f"s{i}": Schedule.interval("1h") for i in range(5)},
        )
    )
    with sched:
        deadline = time.monotonic() + 15
        while len(done) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert sorted(done) == [f"s{i}" for i in range(5)]
    assert peak == 2


def test_a_changed_max_concurrent_changes_how_many_jobs_run_at_once() -> None:
    gate = threading.Event()
    started: list[str] = []

    def job(info: TriggerInfo) -> str:
        started.append(info.schedule)
        gate.wait(10)
        return "done"

    def agent(max_concurrent: int) -> Agent:
        schedules = {f"s{i}": Schedule.manual() for i in range(3)}
        return Agent("a", job=job, max_concurrent=max_concurrent, schedules=schedules)

    sched = make()
    sched.add_agent(agent(1))
    with sched:
        gate.set()
        assert sched.trigger("a", "s0", wait=True).success  # its executor has one thread
        gate.clear()
        sched.set_agents([agent(3)])
        for name in ("s0", "s1", "s2"):
            assert sched.trigger("a", name).success
        # three at once, not one running and two queued behind it
        assert wait_until(lambda: len(started) == 4, timeout=10)
        gate.set()
        assert sched.wait_until_idle(15)
        gate.clear()
        sched.set_agents([agent(1)])
        assert sched.trigger("a", "s0").success
        refused = sched.trigger("a", "s1")
        assert refused.skipped
        assert refused.skip_reason is SkipReason.AT_CAPACITY
        gate.set()
        assert sched.wait_until_idle(15)


def test_nothing_starts_after_stop_returns() -> None:
    starts: list[float] = []
    sched = make()
    sched.add_agent(
        Agent(
            "a",
            job=lambda info: starts.append(time.monotonic()),
            max_concurrent=4,
            schedules={f"s{i}": Schedule.interval(0.01) for i in range(4)},
        )
    )
    sched.start()
    assert wait_until(lambda: len(starts) >= 8, timeout=15)  # it runs, on a loaded machine too
    sched.stop()
    stopped_at = time.monotonic()
    count = len(starts)
    time.sleep(0.3)
    assert len(starts) == count
    assert all(start < stopped_at for start in starts)


def test_a_hung_job_makes_stop_raise_at_its_timeout() -> None:
    release = threading.Event()
    started = threading.Event()

    def hung(info: TriggerInfo) -> None:
        started.set()
        release.wait(30)

    sched = make()
    sched.add_agent(Agent("a", job=hung, schedules={"s": Schedule.interval("1h")}))
    sched.start()
    assert started.wait(10)
    began = time.monotonic()
    with pytest.raises(SchedulerShutdownError) as info:
        sched.stop(timeout=0.5)
    took = time.monotonic() - began
    release.set()
    assert info.value.timed_out is True
    assert info.value.running_job_count == 1
    assert info.value.running_jobs == ("a/s",)
    assert 0.4 <= took < 5.0
    assert sched.status == "stopped"


@pytest.mark.parametrize("state", ["memory", "directory"])
def test_a_jobs_own_timeout_is_kept_while_stop_waits(tmp_path: Path, state: str) -> None:
    """The timer, which times runs out, ends when ``stop()`` begins: a job 1 s from its
    timeout ran on past it while ``stop()`` waited, was recorded a success, and held
    ``stop()`` up to the job's own end (here 20 s)."""
    started, cancelled = threading.Event(), threading.Event()

    def job(info: TriggerInfo) -> str:
        started.set()
        if info.cancel_event.wait(20):
            cancelled.set()
        return "done"

    sched = make(state_dir=tmp_path if state == "directory" else None)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.manual(timeout="1s")}))
    sched.start()
    assert sched.trigger("a", "s").success and started.wait(10)
    began = time.monotonic()
    sched.stop(timeout=30)  # returns once the job, told at its timeout, has returned
    took = time.monotonic() - began
    assert cancelled.is_set()
    assert [r.status for r in sched.history("a", "s")] == [RunStatus.TIMEOUT]
    assert took < 15  # the job's own 20 s were not waited for
    if state == "directory":
        with YamlStateStore(tmp_path) as store:  # written by the stop's last commit
            assert [r.status for r in store.get_history("a", "s")] == [RunStatus.TIMEOUT]


def _leader_and_standby(
    state_dir: Path, job: Callable[[TriggerInfo], None], notes: list[object]
) -> tuple[ThreadedScheduler, ThreadedScheduler]:
    """Two schedulers as two processes on ``state_dir``, a 2 s lease: the leader runs ``job``
    (timeout 4 s) and notifies ``notes`` of every run; the standby has the same schedule."""
    leader = ThreadedScheduler(
        state_dir=state_dir, lease_ttl=2, notifier=lambda note: notes.append(note.status)
    )
    leader.add_agent(
        Agent("x", job=job, schedules={"s": Schedule.manual(timeout="4s", notify="always")})
    )
    standby = ThreadedScheduler(state_dir=state_dir, lease_ttl=2)
    standby.add_agent(Agent("x", job=lambda info: None, schedules={"s": Schedule.manual()}))
    leader.start()
    standby.start()
    return leader, standby


def test_stop_keeps_the_lease_while_it_waits_longer_than_the_lease_lasts(
    tmp_path: Path,
) -> None:
    """Nothing renewed the lease while ``stop()`` waited: past ``lease_ttl`` a standby took
    over and recorded the run interrupted while its job still ran here, and this scheduler
    then timed it out and told its notifier and listeners so."""
    started, notes = threading.Event(), list[object]()

    def job(info: TriggerInfo) -> None:
        started.set()
        info.cancel_event.wait(30)

    with as_separate_processes():
        leader, standby = _leader_and_standby(tmp_path, job, notes)
        try:
            assert leader.trigger("x", "s").success and started.wait(10)
            leader.stop(timeout=20)  # the run times out at 4 s, twice the lease's length
            assert notes == [RunStatus.TIMEOUT]
            assert wait_until(lambda: standby.is_leader)
            assert [r.status for r in standby.history("x", "s")] == [RunStatus.TIMEOUT]
        finally:
            standby.stop()


def test_a_lease_lost_while_stop_waits_ends_the_records_not_the_timeouts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut off from the store while ``stop()`` waited, a leader noticed nothing: its job's
    outcome was notified and announced though a standby had recorded the run interrupted;
    and once it did notice, it stopped timing runs out, so ``stop(timeout=None)`` waited out
    a job that waits on its cancel."""
    started, notes, heard = threading.Event(), list[object](), list[str]()
    cancelled_after: list[float] = []

    def job(info: TriggerInfo) -> None:
        began = time.monotonic()
        started.set()
        if info.cancel_event.wait(20):
            cancelled_after.append(time.monotonic() - began)

    with as_separate_processes():
        leader, standby = _leader_and_standby(tmp_path, job, notes)
        leader.add_listener(lambda event: heard.append(type(event).__name__))
        try:
            assert leader.trigger("x", "s").success and started.wait(10)

            def cut_off(*args: object, **kwargs: object) -> None:
                raise StateError("store unreachable (simulated)")

            monkeypatch.setattr(leader.store, "renew_lease", cut_off)
            with caplog.at_level(logging.ERROR, logger="herdsched"):
                leader.stop(timeout=None)
            assert cancelled_after and cancelled_after[0] < 10  # at its 4 s timeout
            assert "lost the lead" in caplog.text and "it goes on stopping" in caplog.text
            assert notes == [] and "JobFailed" not in heard  # not this scheduler's to tell
            assert wait_until(lambda: standby.is_leader)
            assert [r.status for r in standby.history("x", "s")] == [RunStatus.INTERRUPTED]
        finally:
            standby.stop()


def test_a_run_timeout_of_centuries_does_not_break_an_endless_stop() -> None:
    """A run's deadline was the wait's length: 200,000 days overflowed the thread wait, and
    ``stop(timeout=None)`` raised and gave its job up unrecorded."""
    sched = make()
    sched.add_agent(
        Agent(
            "a",
            job=lambda info: time.sleep(0.3),
            schedules={"s": Schedule.manual(timeout="200000d")},
        )
    )
    sched.start()
    assert sched.trigger("a", "s").success
    sched.stop(timeout=None)
    assert [r.status for r in sched.history("a", "s")] == [RunStatus.SUCCESS]


def _waits_to_be_cancelled(
    started: threading.Event, cancelled: threading.Event, *, then_fails: bool
) -> Callable[[TriggerInfo], None]:
    """A job whose first run waits until it is told to stop (``then_fails``: and then raises);
    later runs (the next start's) return at once."""

    def job(info: TriggerInfo) -> None:
        if started.is_set():
            return  # the next start's run
        started.set()
        if info.cancel_event.wait(30):
            cancelled.set()
            if then_fails:
                raise RuntimeError("told to stop")

    return job


def test_a_stop_that_times_out_asks_the_jobs_left_to_stop(tmp_path: Path) -> None:
    """They were left running untold, though nothing would record them: a job watching its
    cancel event (a command job's process group) ran on, beside the next start's runs. What
    such a job does once told is not recorded either (as the stop said, it was still running):
    its failure was recorded as a failure, announced, or lost with the lease."""
    started, cancelled = threading.Event(), threading.Event()
    events: list[Event] = []
    job = _waits_to_be_cancelled(started, cancelled, then_fails=True)

    def build() -> ThreadedScheduler:
        sched = make(state_dir=tmp_path)
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
        return sched

    sched = build()
    sched.add_listener(events.append)
    sched.start()
    assert started.wait(10)
    with pytest.raises(SchedulerShutdownError) as info:
        sched.stop(timeout=0.2)
    assert info.value.running_jobs == ("a/s",)
    assert cancelled.wait(10)
    assert sched.wait_until_idle(10)
    assert not [e for e in events if isinstance(e, JobFailed | JobSucceeded)]
    again = build()
    again.start()
    try:
        assert again.history("a", "s")[-1].status is RunStatus.INTERRUPTED
        assert [r.status for r in again.history("a", "s")].count(RunStatus.FAILED) == 0
    finally:
        again.stop()


def test_a_stop_interrupted_while_it_waits_still_stops_and_hands_the_lease_on(
    tmp_path: Path,
) -> None:
    """Ctrl-C (a notebook's interrupt) while ``stop()`` waited for a job left the scheduler
    ``stopping`` for good: ``start()`` refused, a second ``stop()`` returned at once, and the
    lease was neither renewed nor given up, so the next scheduler waited for it to expire and
    then recorded the job that had returned as interrupted. The interrupt now ends the stop as
    its timeout would (the job is told to stop, the lease let go) and goes on up."""
    started, cancelled = threading.Event(), threading.Event()
    job = _waits_to_be_cancelled(started, cancelled, then_fails=False)

    def build() -> ThreadedScheduler:
        sched = make(state_dir=tmp_path, lease_ttl=60)
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
        return sched

    sched = build()
    sched.start()
    assert started.wait(10)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            sched.stop(timeout=30)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sched.status == "stopped"
    assert cancelled.wait(10)
    sched.start()  # refused before: "cannot start while stop() is in progress"
    try:
        assert sched.is_leader  # the lease was let go, not left to expire in 60 s
        assert sched.history("a", "s")[-1].status is RunStatus.INTERRUPTED
    finally:
        sched.stop()


def test_a_stop_interrupted_in_its_last_commit_still_ends_stopped_without_its_lease(
    tmp_path: Path,
) -> None:
    """An interrupt after the wait (the last commit waiting on a slow disk or a lock) left the
    scheduler ``stopping`` with its lease held: a second ``stop()`` returned at once and a new
    scheduler on the directory only stood by. Every step after it still runs now."""
    slow = threading.Event()

    class SlowDisk(YamlStateStore):
        def flush(self) -> None:
            if slow.is_set():
                time.sleep(3)
            super().flush()

    ran = threading.Event()
    # the run's end waits for the last commit (commit_delay), which the slow disk then holds up
    sched = ThreadedScheduler(store=SlowDisk(tmp_path, commit_delay=600), max_sleep=0.5)
    sched.add_agent(
        Agent("a", job=lambda info: ran.set(), schedules={"s": Schedule.interval("1h")})
    )
    sched.start()
    assert sched.is_leader and ran.wait(10) and sched.wait_until_idle(10)
    slow.set()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            sched.stop()
    finally:
        signal.signal(signal.SIGINT, previous)
        slow.clear()
    assert sched.status == "stopped"
    again = make(state_dir=tmp_path, lease_ttl=60)
    again.add_agent(Agent("a", job=lambda info: None, schedules={"s": Schedule.interval("1h")}))
    again.start()
    try:
        assert again.is_leader  # the lease was let go, not left to expire in 60 s
    finally:
        again.stop()


def test_a_run_being_handed_to_its_executor_when_stop_begins_never_starts(
    tmp_path: Path,
) -> None:
    """A ``JobSubmitted`` listener still running on the timer thread when ``stop()`` (not
    waiting for jobs) began: ``stop()`` gave up joining the timer after 5 s and returned, the
    lease let go, and the job started afterwards (after a restart, under the new one), its
    outcome dropped; the old timer thread went on beside the restarted one's."""
    in_listener, release = threading.Event(), threading.Event()
    submitted: list[str] = []
    ran: list[str] = []

    def listener(event: Event) -> None:
        if not submitted:
            submitted.append(event.run_id)  # type: ignore[attr-defined]
            in_listener.set()
            release.wait(30)

    sched = make(state_dir=tmp_path)
    sched.add_agent(
        Agent(
            "a", job=lambda info: ran.append(info.run_id), schedules={"s": Schedule.interval("1h")}
        )
    )
    sched.add_listener(listener, JobSubmitted)
    sched.start()
    assert in_listener.wait(10)
    sched.stop(wait_for_jobs=False)
    sched.start()  # the old timer thread is still in its pass, in the listener
    try:
        release.set()

        def timers() -> list[threading.Thread]:
            return [t for t in threading.enumerate() if t.name == "herdsched-timer"]

        assert wait_until(lambda: len(timers()) == 1, 10)
        assert submitted and submitted[0] not in ran
    finally:
        sched.stop()


@pytest.mark.parametrize("waits", [True, False], ids=["waits", "does-not-wait"])
def test_a_run_submitted_when_stop_begins_runs_if_stop_waits_else_is_told_not_started(
    waits: bool,
) -> None:
    """``trigger()`` on a thread of the user's, its ``JobSubmitted`` listener still running
    when ``stop()`` began. A stop that waits for jobs waits for it: it was dispatched before.
    One that does not (``wait_for_jobs=False``) let it start after it had returned, its
    outcome dropped; it never starts now, is recorded as not started, and the trigger says
    why."""
    in_listener, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def listener(event: Event) -> None:
        in_listener.set()
        release.wait(30)

    sched = make()
    sched.add_agent(Agent("a", job=lambda info: ran.append(info.run_id)))
    sched.add_listener(listener, JobSubmitted)
    sched.start()
    trigger, results = _in_background(lambda: sched.trigger("a", wait=True))
    assert in_listener.wait(10)
    threading.Timer(0.5, release.set).start()
    sched.stop(wait_for_jobs=waits, timeout=20)
    trigger.join(10)
    [result] = results
    [record] = sched.history("a", "manual")
    assert sched.store.get_schedule_state("a", "manual").status is Status.IDLE
    if waits:
        assert ran == [result.run_id] and result.success
        assert record.status is RunStatus.SUCCESS
        return
    assert ran == []
    assert record.status is RunStatus.SKIPPED
    assert "the scheduler began to stop before it started" in str(record.error)
    assert not result.success and "began to stop" in str(result.error)


def test_a_run_being_claimed_when_stop_begins_never_starts() -> None:
    """``trigger()`` on another thread while its claim was being written and ``stop()`` (not
    waiting for jobs) began: the claim done, its job started after ``stop()`` had returned,
    on an executor made anew. It is recorded as not started now."""
    claiming, go_on = threading.Event(), threading.Event()

    class SlowClaims(MemoryStateStore):
        def claim_runs(self, claims: Sequence[RunClaim]) -> None:
            claiming.set()
            go_on.wait(30)  # a slow disk, a database round trip
            super().claim_runs(claims)

    ran: list[str] = []
    sched = ThreadedScheduler(store=SlowClaims(), leader_lock=False, max_sleep=0.5)
    sched.add_agent(Agent("a", job=lambda info: ran.append(info.run_id)))
    sched.start()
    trigger, _ = _in_background(lambda: sched.trigger("a"))
    assert claiming.wait(10)
    sched.stop(wait_for_jobs=False)
    go_on.set()
    trigger.join(10)
    assert sched.wait_until_idle(10)
    assert ran == []
    [record] = sched.history("a", "manual")
    assert "the scheduler began to stop before it started" in str(record.error)


def test_a_run_queued_in_its_executor_when_stop_does_not_wait_is_told_not_started() -> None:
    """Submitted, but no worker had begun it when ``stop(wait_for_jobs=False)`` began: it
    was dropped without a record, its schedule left ``running`` and ``trigger(wait=True)``
    told "its outcome is not recorded" of a run that never began."""
    gate, submitted = threading.Event(), threading.Event()

    ran: list[str] = []
    sched = make(executor_factory=_gated(gate, submitted))
    sched.add_agent(Agent("a", job=lambda info: ran.append(info.run_id)))
    sched.start()
    trigger, results = _in_background(lambda: sched.trigger("a", wait=True))
    assert submitted.wait(10)
    sched.stop(wait_for_jobs=False)
    gate.set()
    trigger.join(10)
    assert ran == []
    _told_not_started(sched, results[0])


def test_a_run_whose_claim_a_stop_not_waiting_overtook_is_told_not_started() -> None:
    """The stop gave the lease up while the claim was being written: the claim failed as if
    another scheduler led, and the run was dropped without a record, its schedule left
    ``running``."""
    claiming = threading.Event()

    class SlowClaims(MemoryStateStore):
        def claim_runs(self, claims: Sequence[RunClaim]) -> None:
            claiming.set()
            time.sleep(0.5)  # a slow disk, a database round trip
            super().claim_runs(claims)

    sched = ThreadedScheduler(store=SlowClaims(), max_sleep=0.5)
    sched.add_agent(Agent("a", job=lambda info: None))
    sched.start()
    trigger, results = _in_background(lambda: sched.trigger("a", wait=True))
    assert claiming.wait(10)
    sched.stop(wait_for_jobs=False)
    trigger.join(10)
    _told_not_started(sched, results[0])


def test_a_queued_run_timing_out_as_a_stop_not_waiting_begins_is_recorded_timed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its timeout found, the thread settling it not yet scheduled, when ``stop()`` (not
    waiting) gave it up: no record at all, the schedule left ``running``, and the trigger
    told its outcome was not recorded. Its timeout records it now."""
    from herdsched.engine import dispatch

    gate, submitted, in_window, stopped = (threading.Event() for _ in range(4))

    settle = dispatch.Dispatcher._settle_expired

    def late(self: Any, run: Any, outcome: Any) -> None:  # a busy machine's scheduling
        in_window.set()
        stopped.wait(10)
        settle(self, run, outcome)

    monkeypatch.setattr(dispatch.Dispatcher, "_settle_expired", late)
    sched = make(executor_factory=_gated(gate, submitted), max_sleep=0.2)
    later = "2099-01-01T00:00:00Z"
    schedules = {"s": Schedule.interval("1h", start_at=later, timeout="1s")}
    sched.add_agent(Agent("a", job=lambda info: "ok", schedules=schedules))
    sched.start()
    trigger, results = _in_background(lambda: sched.trigger("a", "s", wait=True))
    assert submitted.wait(10) and in_window.wait(10)
    sched.stop(wait_for_jobs=False)
    stopped.set()
    gate.set()
    trigger.join(10)
    assert wait_until(lambda: sched.history("a", "s"))
    assert [r.status for r in sched.history("a", "s")] == [RunStatus.TIMEOUT]
    assert sched.store.get_schedule_state("a", "s").status is Status.IDLE
    assert results[0].error == "timed out after 1s"


def _in_background(
    ask: Callable[[], TriggerResult],
) -> tuple[threading.Thread, list[TriggerResult]]:
    """``ask`` (a ``trigger()``) on a thread of the user's, started; its answer lands in the
    list once it returns."""
    results: list[TriggerResult] = []
    thread = threading.Thread(target=lambda: results.append(ask()))
    thread.start()
    return thread, results


def _gated(gate: threading.Event, submitted: threading.Event) -> Callable[[str, int], Any]:
    """An executor factory whose pools hold each run queued until ``gate`` is set (a busy
    pool, a slow worker): ``submitted`` tells that one was handed over."""

    class GatedPool(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            submitted.set()
            return super().submit(lambda: gate.wait(30) and fn(*args, **kwargs))

    return lambda agent, size: GatedPool(size)


def _told_not_started(sched: ThreadedScheduler, result: TriggerResult) -> None:
    """The ad hoc run of agent ``a`` never started, and its record, state and answer say so."""
    [record] = sched.history("a", "manual")
    assert "the scheduler began to stop before it started" in str(record.error)
    assert sched.store.get_schedule_state("a", "manual").status is Status.IDLE
    assert "began to stop" in str(result.error)


def test_stop_without_waiting_leaves_the_job_running_and_records_it_later() -> None:
    release = threading.Event()
    started = threading.Event()

    def job(info: TriggerInfo) -> str:
        started.set()
        release.wait(30)
        return "late"

    sched = make()
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
    sched.start()
    assert started.wait(10)
    sched.stop(wait_for_jobs=False)
    assert sched.status == "stopped"
    release.set()
    assert sched.wait_until_idle(10)
    assert sched.history("a", "s")[0].output_summary == "late"


def test_a_once_schedule_fires_at_its_time() -> None:
    fired: list[datetime] = []
    at = datetime.now(timezone.utc) + timedelta(milliseconds=400)
    sched = make()
    sched.add_agent(
        Agent(
            "a",
            job=lambda info: fired.append(datetime.now(timezone.utc)),
            schedules={"s": Schedule.once(at)},
        )
    )
    with sched:
        deadline = time.monotonic() + 10
        while not fired and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    assert len(fired) == 1
    assert fired[0] >= at - timedelta(milliseconds=1)


def test_group_commits_happen_off_the_timer_thread(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from herdsched.store.yaml_store import YamlStateStore

    flush_threads: list[str] = []

    class SlowStore(YamlStateStore):
        def flush(self) -> None:
            flush_threads.append(threading.current_thread().name)
            super().flush()

    store = SlowStore(tmp_path, commit_delay=0.05)
    sched = make(store=store, state_dir=tmp_path)
    sched.add_agent(Agent("a", job=lambda info: None, schedules={"s": Schedule.interval(0.1)}))
    with sched:
        deadline = time.monotonic() + 10
        while "herdsched-flusher" not in flush_threads and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "herdsched-flusher" in flush_threads
    assert "herdsched-timer" not in flush_threads
    assert YamlStateStore(tmp_path).get_schedule_state("a", "s").last_result == "success"


def test_wait_until_idle_wakes_when_the_last_run_finishes_not_at_its_timeout() -> None:
    release = threading.Event()
    started = threading.Event()

    def job(info: TriggerInfo) -> None:
        started.set()
        release.wait(30)

    sched = make()
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
    with sched:
        assert started.wait(10)
        threading.Timer(0.2, release.set).start()
        began = time.monotonic()
        assert sched.wait_until_idle(timeout=60)
        # woken by the finishing run (a missed notify would sleep the whole 60 s)
        assert time.monotonic() - began < 30
