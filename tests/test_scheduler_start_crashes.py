"""A start not yet handed to the store (see ``ThreadedScheduler._start``) keeps its slot safe:
its claim stays in ``claims.log`` through any write of ``state.yaml`` until the state shows the
run, so a crash at any moment leaves the run recoverable as interrupted."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import (
    T0,
    Blocker,
    crash_copy,
    trace_on_disk,
    wait_until,
)

from herdsched import Agent, RunStatus, Schedule, Status, ThreadedScheduler
from herdsched.testing import FakeClock


def recover(crash: Path, clock: FakeClock) -> tuple[list[RunStatus], int]:
    """Start a fresh scheduler on the crashed directory: history of a/s, and how often s ran."""
    ran: list[str] = []
    sched = ThreadedScheduler(state_dir=crash, clock=clock, commit_delay=0.5)
    sched.add_agent(Agent("a", job=lambda info: ran.append(info.schedule), schedules=_schedules()))
    with sched:
        sched.run_pending()
        sched.wait_until_idle(10)
        history = [r.status for r in sched.history("a", "s")]
    return history, ran.count("s")


def _schedules() -> dict[str, Schedule]:
    return {
        "s": Schedule.interval("1h"),
        "other": Schedule.interval("1h", start_at=T0 + timedelta(minutes=30)),
    }


def started_scheduler(live: Path, job: Blocker, clock: FakeClock) -> ThreadedScheduler:
    sched = ThreadedScheduler(state_dir=live, clock=clock, commit_delay=0.5)
    sched.add_agent(
        Agent(
            "a",
            job=lambda info: job(info) if info.schedule == "s" else None,
            schedules=_schedules(),
        )
    )
    sched.start()
    sched.run_pending()  # s is due at T0: claimed in claims.log, its job starts
    assert job.began.wait(10)
    return sched


def crash_while_s_runs(
    tmp_path: Path, clock: FakeClock, action: Callable[[ThreadedScheduler], object]
) -> Path:
    """Start s's run, do ``action`` while its start is not handed to the store, and return
    what a kill -9 right then would leave on disk."""
    job = Blocker()
    sched = started_scheduler(tmp_path / "live", job, clock)
    try:
        action(sched)
        return crash_copy(tmp_path / "live", tmp_path / "crash")
    finally:
        job.release.set()
        sched.stop()


def test_pausing_another_schedule_must_not_erase_every_trace_of_a_running_job(
    tmp_path: Path,
) -> None:
    """A user-intent write (pause of *another* schedule) while s's start is not in state.yaml
    keeps s's claim: after a crash s is interrupted, not run again."""
    clock = FakeClock(T0)
    # a pause is durable when it returns: it writes state.yaml
    crash = crash_while_s_runs(tmp_path, clock, lambda sched: sched.pause("a", "other"))
    status, claims = trace_on_disk(crash, "s")
    assert status is Status.RUNNING or "s" in claims, (status, claims)
    clock.advance(60)
    history, reruns = recover(crash, clock)
    assert history == [RunStatus.INTERRUPTED]
    assert reruns == 0  # at most once per slot


def test_removing_another_schedule_must_not_erase_every_trace_of_a_running_job(
    tmp_path: Path,
) -> None:
    def remove(sched: ThreadedScheduler) -> None:
        sched.remove_schedule("a", "other")  # remove_schedule_state rewrites state.yaml

    crash = crash_while_s_runs(tmp_path, FakeClock(T0), remove)
    status, claims = trace_on_disk(crash, "s")
    assert status is Status.RUNNING or "s" in claims, (status, claims)


def test_cli_second_signal_flush_keeps_a_running_job_recoverable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``herdsched run``: a second SIGINT calls ``scheduler.store.flush`` and ``os._exit``,
    with no running transition handed to the store for s."""
    import signal

    from herdsched import cli

    class Exited(Exception):
        pass

    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(cli.os, "_exit", fake_exit)

    def interrupt_twice(sched: ThreadedScheduler) -> None:
        stopper = cli._Stopper()
        stopper.flush = sched.store.flush
        stopper.received(signal.SIGINT)
        with pytest.raises(Exited):
            stopper.received(signal.SIGINT)  # "quitting without waiting for running jobs"

    clock = FakeClock(T0)
    crash = crash_while_s_runs(tmp_path, clock, interrupt_twice)
    status, claims = trace_on_disk(crash, "s")
    assert status is Status.RUNNING or "s" in claims, (status, claims)
    clock.advance(60)
    history, reruns = recover(crash, clock)
    assert (history, reruns) == ([RunStatus.INTERRUPTED], 0)


def claim_lines(path: Path) -> list[str]:
    log = path / "claims.log"
    return log.read_text().splitlines() if log.exists() else []


def test_a_hot_reload_dropping_a_running_schedule_does_not_hold_claims_forever(
    tmp_path: Path,
) -> None:
    """set_agents() drops s (its state stays) while its run's start is not handed to the store:
    the start is recorded then, so s's claim, and every later one, can go."""
    clock, job = FakeClock(T0), Blocker()

    def work(info: Any) -> None:
        if info.schedule == "s":
            job(info)

    schedules = {"s": Schedule.manual(), "t": Schedule.manual()}
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, commit_delay=0.5)
    sched.add_agent(Agent("a", job=work, max_concurrent=2, schedules=schedules))
    try:
        with sched:
            clock.advance(1)
            sched.run_pending()  # the group commit of the install transitions
            assert wait_until(lambda: sched.store.flush_deadline() is None)
            assert sched.trigger("a", "s").success
            assert job.began.wait(10)
            # hot reload within commit_delay of the start: s is no longer defined
            kept = {"t": Schedule.manual()}
            sched.set_agents([Agent("a", job=work, max_concurrent=2, schedules=kept)])
            job.release.set()
            assert wait_until(lambda: sched.get_total_running_job_count() == 0)
            for _ in range(20):
                clock.advance(1)
                assert sched.trigger("a", "t", wait=True).success
                clock.advance(1)
                sched.run_pending()  # the group commit
                assert wait_until(lambda: sched.store.flush_deadline() is None)
            lines = claim_lines(tmp_path)
    finally:
        job.release.set()
    # every run finished and was committed long ago
    assert lines == [], f"{len(lines)} claims kept, first: {lines[:1]}"


def test_a_run_whose_settling_failed_does_not_hold_claims_forever(tmp_path: Path) -> None:
    """When the finishing transition cannot be made (here: a deferral too far for datetime
    arithmetic), the start is still recorded, so the run's claim can go."""
    from herdsched.signals import Deferred

    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, commit_delay=0.5)

    def work(info: Any) -> Any:
        if info.schedule == "s":
            raise Deferred(timedelta(days=3_000_000))  # now + delay: OverflowError
        return None

    sched.add_agent(
        Agent("a", job=work, schedules={"s": Schedule.manual(), "t": Schedule.manual()})
    )
    with sched:
        clock.advance(1)
        sched.run_pending()  # the group commit of the install transitions
        assert wait_until(lambda: sched.store.flush_deadline() is None)
        sched.trigger("a", "s", wait=True)
        for _ in range(10):
            clock.advance(1)
            assert sched.trigger("a", "t", wait=True).success
            clock.advance(1)
            sched.run_pending()
            assert wait_until(lambda: sched.store.flush_deadline() is None)
        lines = claim_lines(tmp_path)
    assert lines == [], f"{len(lines)} claims kept"


def test_a_failed_claim_does_not_let_a_later_runs_claim_be_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timer pass takes f and g for free slots and their one append fails (ENOSPC once), which
    may leave a torn line; they do not start. A manual run u starts later; a pause of another
    schedule writes state.yaml while u's start is not handed to the store: u's claim stays."""
    clock = FakeClock(T0)
    jobs = {"f": Blocker(), "g": Blocker(), "u": Blocker()}
    sched = ThreadedScheduler(state_dir=tmp_path / "live", clock=clock, commit_delay=0.5)
    sched.add_agent(
        Agent(
            "a",
            job=lambda info: jobs[info.schedule](info) if info.schedule in jobs else None,
            max_concurrent=5,
            schedules={
                "f": Schedule.interval("1h"),
                "g": Schedule.interval("1h"),
                "u": Schedule.manual(),
                "other": Schedule.manual(),
            },
        )
    )
    # every claim append fails until run_pending() returns: the timer thread's first pass may
    # take f and g itself, and a pass after a failed one may try them again
    real_write = os.write
    full = threading.Event()
    full.set()

    def write(fd: int, data: Any) -> int:
        if full.is_set() and b'"run_at"' in bytes(data):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr("herdsched.store.claims.os.write", write)
    try:
        with sched:
            sched.run_pending()  # f and g are due: their append fails; they do not start
            assert not jobs["f"].began.is_set() and not jobs["g"].began.is_set()
            full.clear()
            clock.advance(0.1)
            assert sched.trigger("a", "u").success
            assert jobs["u"].began.wait(10)
            sched.pause("a", "other")  # a write while u's start is unrecorded
            crash = crash_copy(tmp_path / "live", tmp_path / "crash")
            for job in jobs.values():
                job.release.set()
    finally:
        for job in jobs.values():
            job.release.set()
    status, claims = trace_on_disk(crash, "u")
    assert status is Status.RUNNING or "u" in claims, (status, claims)


def test_a_clock_stepped_back_keeps_a_running_jobs_claim(tmp_path: Path) -> None:
    """After the wall clock steps back, a new run starts before the previous one did: its
    claim must not count as shown by the previous run's ``last_run_at``."""
    clock, job = FakeClock(T0), Blocker()
    calls = [0]

    def work(info: Any) -> None:
        if info.schedule == "s":
            calls[0] += 1
            if calls[0] == 2:
                job(info)

    sched = ThreadedScheduler(state_dir=tmp_path / "live", clock=clock, commit_delay=0.5)
    sched.add_agent(
        Agent(
            "a",
            job=work,
            max_concurrent=2,
            schedules={"s": Schedule.manual(), "other": Schedule.manual()},
        )
    )
    try:
        with sched:
            sched.run_pending()
            assert sched.trigger("a", "s", wait=True).success  # last_run_at = T0
            clock.advance(1)
            sched.run_pending()
            assert wait_until(lambda: sched.store.flush_deadline() is None)
            clock.jump_wall_clock(timedelta(minutes=-5))  # NTP steps the clock back
            assert sched.trigger("a", "s").success
            assert job.began.wait(10)
            sched.pause("a", "other")
            crash = crash_copy(tmp_path / "live", tmp_path / "crash")
            job.release.set()
    finally:
        job.release.set()
    status, claims = trace_on_disk(crash, "s")
    assert status is Status.RUNNING or "s" in claims, (status, claims)
