"""Runs held back: a worker starts the runs waiting in its agent's ready queue before it settles
the ones whose jobs returned, and everything it holds settles soon, whatever runs next."""

from __future__ import annotations

import collections
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import T0, Blocker, running, wait_until

import herdsched.scheduler as engine
from herdsched import (
    Agent,
    JobSucceeded,
    RunStatus,
    Schedule,
    SchedulerShutdownError,
    SchedulerStopped,
    SkipReason,
    Status,
    ThreadedScheduler,
)
from herdsched.store import YamlStateStore
from herdsched.testing import FakeClock


def due_now(*names: str) -> dict[str, Schedule]:
    due = Schedule.interval("1h", start_at=T0)
    return dict.fromkeys(names, due)


def one_slot(name: str, job: Any, names: Any, schedule: Schedule) -> Agent:
    """Agent ``name`` with one slot, whose schedules ``names`` all follow ``schedule``."""
    return Agent(name, job=job, max_concurrent=1, schedules=dict.fromkeys(names, schedule))


class Seen:
    """A job that notes, as each run starts, which schedules have a recorded result yet and
    how many jobs the scheduler counts as running; "last" runs ``last`` instead of returning."""

    def __init__(self, sched: ThreadedScheduler, last: Any = None) -> None:
        self.sched = sched
        self.last = last
        self.order: list[str] = []
        self.settled: dict[str, list[str]] = {}
        self.counted: dict[str, int] = {}

    def __call__(self, info: Any) -> None:
        self.order.append(info.schedule)
        self.settled[info.schedule] = sorted(
            s.schedule for s in self.sched.get_status().schedules if s.last_result is not None
        )
        self.counted[info.schedule] = self.sched.get_running_job_count("a")
        if info.schedule == "last" and self.last is not None:
            self.last(info)


def test_waiting_runs_start_before_the_finished_ones_settle() -> None:
    succeeded: list[str] = []
    with running() as (sched, _clock):
        seen = Seen(sched)
        sched.add_agent(Agent("a", job=seen, max_concurrent=1, schedules=due_now("x", "y", "z")))
        sched.add_listener(lambda event: succeeded.append(event.schedule), JobSucceeded)
        sched.start()
        sched.run_pending()
        assert sched.wait_until_idle(10)
        assert seen.order == ["x", "y", "z"]
        # the three were queued at once: none settled before the last one started
        assert seen.settled == {"x": [], "y": [], "z": []}
        # a held run keeps no slot: one job at a time, as max_concurrent says
        assert seen.counted == {"x": 1, "y": 1, "z": 1}
        # the queue emptied: all three settled, in the order their jobs returned
        assert succeeded == ["x", "y", "z"]
        states = {s.schedule: s for s in sched.get_status().schedules}
        assert {name: s.last_result for name, s in states.items()} == dict.fromkeys(
            "xyz", RunStatus.SUCCESS
        )
        assert all(s.status is Status.IDLE and s.running == 0 for s in states.values())
        assert len(sched.history("a")) == 3


def test_a_long_job_does_not_keep_the_outcomes_held_before_it_waiting() -> None:
    blocker = Blocker()
    with running() as (sched, clock):
        seen = Seen(sched, last=blocker)
        sched.add_agent(Agent("a", job=seen, max_concurrent=1, schedules=due_now("x", "y", "last")))
        sched.start()
        sched.run_pending()
        try:
            assert blocker.began.wait(10)
            assert seen.settled["last"] == []  # x and y are held while "last" runs
            status = {s.schedule: s for s in sched.get_status().schedules}
            assert status["x"].running == status["y"].running == 0  # their jobs returned
            assert status["last"].running == 1
            clock.advance(timedelta(seconds=engine._SETTLE_WITHIN))
            sched.run_pending()  # the timer has what is held that long settled
            assert wait_until(lambda: len(sched.history("a")) == 2)
            status = {s.schedule: s for s in sched.get_status().schedules}
            assert status["x"].last_result is RunStatus.SUCCESS
            assert status["y"].last_result is RunStatus.SUCCESS
            assert status["last"].last_result is None and status["last"].running == 1
            assert [r.schedule for r in sched.history("a")] == ["y", "x"]  # newest first
        finally:
            blocker.release.set()
        assert sched.wait_until_idle(10)
        assert {r.schedule for r in sched.history("a")} == {"x", "y", "last"}


def test_the_sleeping_timer_wakes_to_settle_held_runs_in_real_time() -> None:
    """With a real clock: the outcomes held before a long job settle within a fraction of a
    second, though the timer planned to sleep for a minute."""
    blocker = Blocker()
    sched = ThreadedScheduler(state_dir=None, max_sleep=60)
    seen = Seen(sched, last=blocker)
    due = Schedule.interval("1h")
    schedules = {"x": due, "y": due, "last": due}
    sched.add_agent(Agent("a", job=seen, max_concurrent=1, schedules=schedules))
    settled = threading.Event()
    results: list[str] = []

    def note(event: JobSucceeded) -> None:
        results.append(event.schedule)
        if len(results) == 2:
            settled.set()

    sched.add_listener(note, JobSucceeded)
    with sched:
        try:
            assert blocker.began.wait(10)
            assert settled.wait(10)  # long before the job ends or max_sleep passes
            assert sorted(results) == ["x", "y"]
        finally:
            blocker.release.set()
        assert sched.wait_until_idle(10)
    assert seen.order[-1] == "last" and sorted(seen.order) == ["last", "x", "y"]


def test_stop_waits_for_held_runs_and_writes_their_outcomes(tmp_path: Path) -> None:
    blocker = Blocker()
    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    seen = Seen(sched, last=blocker)
    sched.add_agent(Agent("a", job=seen, max_concurrent=1, schedules=due_now("x", "y", "last")))
    sched.start()
    sched.run_pending()
    assert blocker.began.wait(10)
    assert seen.settled["last"] == []
    threading.Timer(0.2, blocker.release.set).start()
    sched.stop(timeout=10)
    store = YamlStateStore(tmp_path)
    try:
        for name in ("x", "y", "last"):
            state = store.get_schedule_state("a", name)
            assert state.last_result is RunStatus.SUCCESS, name
            assert state.status is Status.IDLE
        assert sorted(r.schedule for r in store.get_history("a")) == ["last", "x", "y"]
        assert store.load_claims() == []
    finally:
        store.close()


def test_a_job_raising_keyboard_interrupt_fails_its_run_and_the_queue_moves_on() -> None:
    """Found while holding runs back: a KeyboardInterrupt from a job left its run in its slot
    forever, and the agent's queue stopped."""

    def job(info: Any) -> None:
        if info.schedule == "x":
            raise KeyboardInterrupt

    with running() as (sched, _clock):
        sched.add_agent(Agent("a", job=job, max_concurrent=1, schedules=due_now("x", "y")))
        sched.start()
        sched.run_pending()
        assert sched.wait_until_idle(10)
        results = {s.schedule: s for s in sched.get_status().schedules}
        assert results["x"].last_result is RunStatus.FAILED
        assert "KeyboardInterrupt" in (results["x"].last_error or "")
        assert results["y"].last_result is RunStatus.SUCCESS
        assert sched.get_running_job_count("a") == 0


def long_last(blocker: Blocker) -> Any:
    """A job that returns at once, except for schedule "last", which blocks."""

    def job(info: Any) -> None:
        if info.schedule == "last":
            blocker(info)

    return job


def x_held_while_last_runs(sched: ThreadedScheduler, blocker: Blocker) -> None:
    """Agent "a" runs "x", then "last" (which blocks); "x" is held meanwhile."""
    sched.add_agent(
        Agent("a", job=long_last(blocker), max_concurrent=1, schedules=due_now("x", "last"))
    )
    sched.start()
    sched.run_pending()
    assert blocker.began.wait(10)


# -- found by review: each failed before its fix ---------------------------------------------


def test_stop_without_waiting_writes_the_outcome_of_a_job_that_returned(tmp_path: Path) -> None:
    blocker = Blocker()
    sched = ThreadedScheduler(state_dir=tmp_path, clock=FakeClock(T0), timezone="UTC")
    stopped: list[SchedulerStopped] = []
    sched.add_listener(stopped.append, SchedulerStopped)
    try:
        x_held_while_last_runs(sched, blocker)
        sched.stop(wait_for_jobs=False)
        store = YamlStateStore(tmp_path)
        try:  # what a process exiting now leaves behind: x ran and succeeded
            assert store.get_schedule_state("a", "x").last_result is RunStatus.SUCCESS
        finally:
            store.close()
        assert stopped[0].running_job_count == 1  # only "last" still runs
    finally:
        blocker.release.set()


def test_stop_timing_out_on_a_long_job_still_writes_the_jobs_that_returned(
    tmp_path: Path,
) -> None:
    blocker = Blocker()
    sched = ThreadedScheduler(state_dir=tmp_path, clock=FakeClock(T0), timezone="UTC")
    try:
        x_held_while_last_runs(sched, blocker)
        try:
            sched.stop(timeout=0.5)
        except SchedulerShutdownError as exc:
            assert exc.running_job_count == 1  # only "last"
        else:
            raise AssertionError("stop() should have timed out on the blocked job")
        store = YamlStateStore(tmp_path)
        try:
            assert store.get_schedule_state("a", "x").last_result is RunStatus.SUCCESS
        finally:
            store.close()
    finally:
        blocker.release.set()


def test_a_listener_may_stop_the_scheduler_while_a_held_run_settles() -> None:
    """stop() from the listener of a run settled by another thread than the one that ran its
    job must not wait for that run."""
    blocker = Blocker()
    errors: list[BaseException] = []
    done = threading.Event()
    with running() as (sched, clock):

        def on_success(event: JobSucceeded) -> None:
            if event.schedule != "x":
                return
            threading.Timer(0.2, blocker.release.set).start()  # "last" ends soon after
            try:
                sched.stop(timeout=3)  # documented as safe from a listener
            except BaseException as exc:
                errors.append(exc)
            finally:
                done.set()

        sched.add_listener(on_success, JobSucceeded)
        try:
            x_held_while_last_runs(sched, blocker)

            def advanced() -> bool:  # until the timer has x settled
                clock.advance(timedelta(seconds=engine._SETTLE_WITHIN))
                return done.wait(0.05)

            assert wait_until(advanced)
            assert errors == []
        finally:
            blocker.release.set()


def test_a_slow_notifier_of_a_held_run_does_not_hold_up_other_agents() -> None:
    """The timer has runs held too long settled on another thread: their notifier and
    listeners never delay dispatching."""
    blocker = Blocker()
    gate = threading.Event()
    notified = threading.Event()

    def notifier(note: Any) -> None:
        if note.schedule == "x":
            notified.set()
            gate.wait(10)  # a webhook that takes its time

    b_started = threading.Event()
    with running(notifier=notifier) as (sched, clock):
        sched.add_agent(
            Agent(
                "a",
                job=long_last(blocker),
                max_concurrent=1,
                schedules=dict.fromkeys(
                    ("x", "last"), Schedule.interval("1h", start_at=T0, notify="always")
                ),
            )
        )
        later = Schedule.interval("1h", start_at=T0 + timedelta(seconds=1))
        sched.add_agent(Agent("b", job=lambda info: b_started.set(), schedules={"b1": later}))
        sched.start()
        sched.run_pending()
        try:
            assert blocker.began.wait(10)
            clock.advance(timedelta(seconds=1))  # b1 is due; x is held past its time
            assert wait_until(notified.is_set)
            assert b_started.wait(5)  # the timer dispatched b1 though x's notifier blocks
        finally:
            gate.set()
            blocker.release.set()


def test_a_slow_listener_of_one_agents_burst_does_not_delay_another_agents_run() -> None:
    """Real time, generous bounds: settling held runs of one agent (each calling a 50 ms
    listener) never comes before another agent's due run."""
    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=None, clock=clock, timezone="UTC")
    burst = {f"b{i}": Schedule.interval("1h", start_at=T0) for i in range(300)}
    sched.add_agent(
        Agent("b", job=lambda info: time.sleep(0.002), max_concurrent=1, schedules=burst)
    )
    started: dict[str, float] = {}
    later = Schedule.interval("1h", start_at=T0 + timedelta(seconds=1))
    sched.add_agent(
        Agent(
            "a",
            job=lambda info: started.setdefault(info.schedule, time.monotonic()),
            schedules={"a2": later},
        )
    )

    def slow_listener(event: JobSucceeded) -> None:
        if event.agent == "b":
            time.sleep(0.05)  # a listener that writes to a database

    sched.add_listener(slow_listener, JobSucceeded)
    sched.start()
    try:
        sched.run_pending()
        assert wait_until(lambda: len(sched._unsettled.get("b", ())) >= 20)
        clock.advance(timedelta(seconds=1))  # a2 is due; b's held runs are past their time
        due_at = time.monotonic()
        assert wait_until(lambda: "a2" in started, timeout=20)
        # settling b's held runs first would take 50 ms each: seconds
        assert started["a2"] - due_at < 2.0
    finally:
        sched.stop(timeout=60)


def test_a_held_run_looks_the_same_before_and_after_a_group_commit() -> None:
    blocker = Blocker()
    with running(commit_delay=0.05) as (sched, clock):
        try:
            x_held_while_last_runs(sched, blocker)
            before = {s.schedule: s for s in sched.get_status().schedules}["x"]
            clock.advance(timedelta(seconds=0.05))
            sched.run_pending()  # a group commit records the starts; x is still held
            after = {s.schedule: s for s in sched.get_status().schedules}["x"]
            assert (after.status, after.running) == (before.status, before.running)
            assert (after.status, after.running) == (Status.IDLE, 0)
        finally:
            blocker.release.set()


def test_a_schedule_whose_job_returned_can_be_triggered_at_once() -> None:
    blocker = Blocker()
    with running() as (sched, _clock):
        try:
            x_held_while_last_runs(sched, blocker)
            x = {s.schedule: s for s in sched.get_status().schedules}["x"]
            assert x.running == 0 and x.skip_reason is not SkipReason.ALREADY_RUNNING
            result = sched.trigger("a", "x", bypass_concurrency=True, wait=True)
            assert result.success, result
            assert [r.schedule for r in sched.history("a", "x")] == ["x", "x"]
        finally:
            blocker.release.set()


def test_the_timer_leaves_held_runs_to_a_worker_that_still_takes_runs() -> None:
    """A worker that keeps taking runs settles the due ones itself between jobs; a settling
    thread beside it only fought it for the lock (a 10,000-run burst took twice as long). The
    timer steps in once the newest held run is due too: its worker is inside a long job."""
    blocker = Blocker()
    with running() as (sched, clock):

        def job(info: Any) -> None:
            if info.schedule == "y":
                clock.advance(timedelta(seconds=0.08))  # y returns 80 ms after x
            elif info.schedule == "last":
                blocker(info)

        schedules = due_now("x", "y", "last")
        sched.add_agent(Agent("a", job=job, max_concurrent=1, schedules=schedules))
        sched.start()
        sched.run_pending()
        try:
            assert blocker.began.wait(10)
            clock.advance(timedelta(seconds=0.03))  # x is due to settle, y is not
            sched.run_pending()
            assert not sched._settlers
            assert [s.last_result for s in sched.get_status().schedules] == [None] * 3
            wait = sched._sleep_for(clock.now(), clock.monotonic(), plan=False)
            assert wait == pytest.approx(0.08 + engine._SETTLE_WITHIN - 0.11)  # not a spin
            clock.advance(timedelta(seconds=0.08))  # y is due too: "last" keeps its worker
            sched.run_pending()
            assert wait_until(lambda: len(sched.history("a")) == 2)
            assert {r.schedule for r in sched.history("a")} == {"x", "y"}
        finally:
            blocker.release.set()


# -- found by a second review: each failed before its fix -------------------------------------


def test_a_hot_reload_dropping_a_schedule_whose_run_is_held_keeps_its_outcome(
    tmp_path: Path,
) -> None:
    blocker = Blocker()
    sched = ThreadedScheduler(state_dir=tmp_path, clock=FakeClock(T0), timezone="UTC")
    job = long_last(blocker)
    try:
        x_held_while_last_runs(sched, blocker)
        sched.set_agents([Agent("a", job=job, max_concurrent=1, schedules=due_now("last"))])
        blocker.release.set()
        assert sched.wait_until_idle(10)
        sched.set_agents([Agent("a", job=job, max_concurrent=1, schedules=due_now("x", "last"))])
        # recorded as the success it was, not as a run interrupted mid-job
        assert [r.status for r in sched.history("a", "x")] == [RunStatus.SUCCESS]
    finally:
        blocker.release.set()
        sched.stop(timeout=10)
    store = YamlStateStore(tmp_path)
    try:
        assert store.get_schedule_state("a", "x").last_result is RunStatus.SUCCESS
    finally:
        store.close()


def test_removing_a_schedule_whose_run_is_held_still_notifies_its_outcome() -> None:
    blocker = Blocker()
    notified: list[str] = []
    with running(notifier=lambda note: notified.append(note.schedule)) as (sched, _clock):
        notify = Schedule.interval("1h", start_at=T0, notify="always")
        sched.add_agent(one_slot("a", long_last(blocker), ("x", "last"), notify))
        sched.start()
        sched.run_pending()
        try:
            assert blocker.began.wait(10)
            sched.remove_schedule("a", "x")
        finally:
            blocker.release.set()
        assert sched.wait_until_idle(10)
        assert sorted(notified) == ["last", "x"]


class EmptiedUnderfoot(collections.deque):  # type: ignore[type-arg]
    """A held queue that another thread empties between a worker's look and its read."""

    def __init__(self, sched: ThreadedScheduler) -> None:
        super().__init__()
        self.sched = sched
        self.armed = True

    def __getitem__(self, index: Any) -> Any:
        if self.armed and index == 0 and not self.sched._lock._is_owned():  # type: ignore[attr-defined]
            self.armed = False
            other = threading.Thread(
                target=self.sched._settle_held, args=("a",), kwargs={"every": True}
            )
            other.start()
            other.join()
        return super().__getitem__(index)


def test_a_held_queue_emptied_by_another_thread_leaves_the_agents_worker_alive() -> None:
    with running() as (sched, clock):
        sched.add_agent(
            Agent("a", job=lambda info: None, max_concurrent=1, schedules=due_now("x", "y"))
        )
        sched._unsettled["a"] = EmptiedUnderfoot(sched)
        sched.start()
        sched.run_pending()
        assert sched.wait_until_idle(10)
        assert len(sched.history("a")) == 2
        clock.advance(timedelta(hours=1))
        sched.run_pending()
        assert sched.wait_until_idle(10), "agent a's queue stalled"
        assert len(sched.history("a")) == 4


def test_a_slow_notifier_of_one_agent_does_not_hold_up_another_agents_outcomes() -> None:
    gate = threading.Event()
    a_block, b_block = Blocker(), Blocker()

    def notifier(note: Any) -> None:
        if note.agent == "a":
            gate.wait(20)

    with running(notifier=notifier) as (sched, clock):
        notify = Schedule.interval("1h", start_at=T0, notify="always")
        sched.add_agent(one_slot("a", long_last(a_block), ("x", "last"), notify))
        later = Schedule.interval("1h", start_at=T0 + timedelta(seconds=1))
        sched.add_agent(one_slot("b", long_last(b_block), ("y", "last"), later))
        sched.start()
        try:
            sched.run_pending()
            assert a_block.began.wait(10)
            clock.advance(timedelta(seconds=1))
            sched.run_pending()  # a settling thread takes a/x, whose notifier hangs
            assert b_block.began.wait(10)  # b/y is held while b's "last" runs
            clock.advance(timedelta(seconds=engine._SETTLE_WITHIN))
            sched.run_pending()
            assert wait_until(lambda: len(sched.history("b", "y")) == 1)
        finally:
            gate.set()
            a_block.release.set()
            b_block.release.set()


def test_a_worker_settling_a_slow_notifier_counts_as_busy_for_the_stall_watcher() -> None:
    gate = threading.Event()
    started: list[str] = []

    def notifier(note: Any) -> None:
        if note.schedule == "x":
            gate.wait(20)

    with running(notifier=notifier) as (sched, clock):

        def job(info: Any) -> None:
            started.append(info.schedule)
            if info.schedule == "y":
                clock.advance(timedelta(seconds=engine._SETTLE_WITHIN))  # x is due to settle

        notify = Schedule.interval("1h", start_at=T0, notify="always")
        sched.add_agent(
            Agent("a", job=job, max_concurrent=2, schedules=dict.fromkeys(("x", "y", "z"), notify))
        )
        sched.start()
        try:
            sched.run_pending()
            # z starts on a second worker while the first one sits in x's notifier
            assert wait_until(lambda: "z" in started), started
        finally:
            gate.set()


def test_a_notifier_raising_keyboard_interrupt_does_not_stop_the_agents_queue() -> None:
    def notifier(note: Any) -> None:
        if note.schedule == "x":
            raise KeyboardInterrupt

    with running(notifier=notifier) as (sched, clock):
        notify = Schedule.interval("1h", start_at=T0, notify="always")
        sched.add_agent(
            Agent(
                "a", job=lambda info: None, max_concurrent=1, schedules=dict.fromkeys("xy", notify)
            )
        )
        sched.start()
        sched.run_pending()
        assert sched.wait_until_idle(10)
        clock.advance(timedelta(hours=1))
        sched.run_pending()
        assert sched.wait_until_idle(10), "agent a's queue stalled"
        assert len(sched.history("a")) == 4


# -- found by a third review: each failed before its fix --------------------------------------


def test_a_poll_of_other_processes_settles_no_held_run_on_the_timer(tmp_path: Path) -> None:
    """Another process adding a schedule must not make the timer settle (and notify) the held
    runs of schedules it did not remove: a slow notifier would hold up dispatching."""
    blocker = Blocker()
    sched = ThreadedScheduler(state_dir=tmp_path, clock=FakeClock(T0), timezone="UTC")
    try:
        x_held_while_last_runs(sched, blocker)
        other = YamlStateStore(tmp_path)
        try:
            other.save_definition("a", "added", {"interval": "1h"})
        finally:
            other.close()
        sched._sync_external_definitions()
        assert "x" in {run.schedule_name for run in sched._held.values()}  # still held
    finally:
        blocker.release.set()
        sched.stop(timeout=10)


def test_no_run_is_held_while_schedules_are_being_dropped() -> None:
    """A run held between a removal's settling and its drop would lose its outcome."""
    started: list[str] = []
    with running() as (sched, _clock):
        sched.add_agent(
            Agent(
                "a",
                job=lambda info: started.append(info.schedule),
                max_concurrent=1,
                schedules=due_now("x", "y"),
            )
        )
        sched.start()
        with sched._no_holds():
            sched.run_pending()
            assert wait_until(lambda: len(started) == 2)
            assert wait_until(lambda: len(sched.history("a")) == 2)
            assert not sched._held
        assert sched.wait_until_idle(10)


def test_a_worker_settling_one_by_one_counts_as_busy_when_runs_arrive() -> None:
    """The queue emptied, the worker settles what it held and sits in a slow notifier; a run
    dispatched meanwhile starts on another worker."""
    gate = threading.Event()
    in_notifier = threading.Event()
    started: list[str] = []

    def notifier(note: Any) -> None:
        if note.schedule == "x":
            in_notifier.set()
            gate.wait(20)

    with running(notifier=notifier) as (sched, clock):
        notify = Schedule.interval("1h", start_at=T0, notify="always")
        later = Schedule.interval("1h", start_at=T0 + timedelta(seconds=1))
        sched.add_agent(
            Agent(
                "a",
                job=lambda info: started.append(info.schedule),
                max_concurrent=2,
                schedules={"x": notify, "y": notify, "z": later},
            )
        )
        sched.start()
        try:
            sched.run_pending()
            assert in_notifier.wait(10)  # x and y ran; the worker settles x
            clock.advance(timedelta(seconds=1))
            sched.run_pending()  # z joins the queue the worker is not draining now
            assert wait_until(lambda: "z" in started), started
        finally:
            gate.set()


def test_a_long_burst_holds_a_bounded_number_of_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past _HOLD_MOST, each run held settles the oldest one: a 10,000-run burst keeps a small
    working set instead of settling a tenth of a second's runs at a time."""
    monkeypatch.setattr(engine, "_HOLD_MOST", 2)
    with running() as (sched, _clock):
        held_counts: list[int] = []

        def job(info: Any) -> None:
            held_counts.append(len(sched._held))

        sched.add_agent(Agent("a", job=job, max_concurrent=1, schedules=due_now(*"abcdef")))
        sched.start()
        sched.run_pending()
        assert sched.wait_until_idle(10)
        assert held_counts == [0, 1, 2, 2, 2, 2]  # never more than the bound
        assert [r.schedule for r in reversed(sched.history("a"))] == list("abcdef")
