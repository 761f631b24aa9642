"""Runs held back: a worker starts the runs waiting in its agent's ready queue before it settles
the ones whose jobs returned, and everything it holds settles soon, whatever runs next."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

from scheduler_helpers import T0, Blocker, running

import herdsched.scheduler as engine
from herdsched import Agent, JobSucceeded, RunStatus, Schedule, Status, ThreadedScheduler
from herdsched.store import YamlStateStore
from herdsched.testing import FakeClock


def due_now(*names: str) -> dict[str, Schedule]:
    due = Schedule.interval("1h", start_at=T0)
    return dict.fromkeys(names, due)


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
            sched.run_pending()  # the timer settles what is held that long
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
