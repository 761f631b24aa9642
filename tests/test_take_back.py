"""A leader cut off from its store for longer than its lease leads again when the store answers
and nobody led meanwhile, taking back the jobs still running from the lead it lost: what it
writes then, and the cases where it must not take them back.

The store is a state directory whose calls fail while ``broken`` (a hung network disk); time is
a ``FakeClock``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import LeaseCallsCutOff, wait_until

from herdsched import Agent, RunStatus, Schedule, Status, ThreadedScheduler, TriggerInfo, WorkItem
from herdsched.errors import StateError
from herdsched.store.base import RunClaim
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock
from herdsched.worksource import WorkOutcome

TTL = 30.0
T0 = datetime(2026, 1, 5, 9, 30, tzinfo=timezone.utc)


class CutOff(LeaseCallsCutOff, YamlStateStore):
    """A state directory that does not answer while ``broken``; ``cut_after_claim`` breaks it
    right after the next claim is durable, before the group commit that shows the run."""

    cut_after_claim = False
    refresh_failures = 0  # refreshes that fail once it answers again (a flapping store)

    def claim_runs(self, claims: list[RunClaim]) -> None:
        self._check()
        super().claim_runs(claims)
        self.broken = self.broken or self.cut_after_claim

    def flush(self) -> None:
        self._check()
        super().flush()

    def refresh(self) -> bool:
        self._check(write=False)
        if self.refresh_failures:
            self.refresh_failures -= 1
            raise StateError("the store does not answer (refresh)")
        return super().refresh()


class Held:
    """A job that runs until released; ``infos`` holds what each call was given."""

    def __init__(self) -> None:
        self.began, self.release = threading.Event(), threading.Event()
        self.infos: list[TriggerInfo] = []

    def __call__(self, info: TriggerInfo) -> str:
        self.infos.append(info)
        self.began.set()
        assert self.release.wait(10)
        return "done"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[CutOff]:
    store = CutOff(tmp_path, clock=clock, commit_delay=0)
    yield store
    store.broken = False


def _scheduler(store: CutOff, clock: FakeClock, job: Any, **more: Any) -> ThreadedScheduler:
    sched = ThreadedScheduler(store=store, clock=clock, lease_ttl=TTL, timezone="UTC", **more)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.cron("0 * * * *")}))
    return sched


def _outage(sched: ThreadedScheduler, store: CutOff, clock: FakeClock) -> None:
    """Cut the store off until the scheduler has stood down, then let it answer again."""
    store.broken = True
    clock.advance(TTL)
    sched.run_pending()
    assert wait_until(lambda: sched.status == "standby")
    store.broken = store.cut_after_claim = False


def _stored(directory: Path) -> tuple[Any, list[str]]:
    with YamlStateStore(directory) as reader:
        return reader.get_schedule_state("a", "s"), [c.run_id for c in reader.read_claims()]


def test_a_taken_back_run_whose_start_was_dropped_shows_running_again(
    tmp_path: Path, store: CutOff, clock: FakeClock
) -> None:
    """The store went away right after the run's claim, so the lost lead's transitions,
    the run's start among them, were dropped; recovery leaves the schedules of running runs
    alone, so the taken-back run was shown ``idle`` with a next run in the past until it
    ended."""
    job = Held()
    sched = _scheduler(store, clock, job)
    with sched:
        sched.run_pending()
        clock.advance(timedelta(minutes=30))  # 10:00
        store.cut_after_claim = True
        sched.run_pending()
        assert job.began.wait(10)
        _outage(sched, store, clock)
        clock.advance(TTL / 3)
        sched.run_pending()
        assert sched.status == "running"
        sched.store.flush()
        state, claims = _stored(tmp_path)
        run_id = job.infos[0].run_id
        assert (state.status, state.running_run_id, claims) == (Status.RUNNING, run_id, [run_id])
        job.release.set()
        assert sched.wait_until_idle(10)
        sched.store.flush()
        history = [(r.run_id, r.status) for r in sched.history("a", "s")]
    assert history == [(run_id, RunStatus.SUCCESS)]
    state, claims = _stored(tmp_path)
    assert (state.status, state.running_run_id, claims) == (Status.IDLE, None, [])


def test_a_take_back_whose_recovery_fails_leaves_the_jobs_written_off_until_the_next(
    store: CutOff, clock: FakeClock
) -> None:
    """The store answered the lease, then failed the recovery: the lease was given back, but
    the jobs stayed taken back, so they were never taken back again (the fleet waited for
    them) and their outcome could be written under a later lease, after another leader."""
    job = Held()
    sched = _scheduler(store, clock, job)
    with sched:
        sched.run_pending()
        clock.advance(timedelta(minutes=30))
        sched.run_pending()
        assert job.began.wait(10)
        (run,) = sched._core.running.values()
        _outage(sched, store, clock)
        store.refresh_failures = 2  # a standby's look at the others', then the recovery's
        clock.advance(TTL / 3)
        with contextlib.suppress(StateError):
            sched.run_pending()
        assert sched.status == "standby" and store.refresh_failures == 0
        assert run.written_off is not None and run.term != sched._core.term
        clock.advance(TTL / 3)
        sched.run_pending()  # its own lease between counts as no other leader
        assert sched.status == "running" and run.written_off is None
        assert not job.infos[0].cancel_event.is_set()
        job.release.set()
        assert sched.wait_until_idle(10)
        history = [(r.run_id, r.status) for r in sched.history("a", "s")]
    assert history == [(job.infos[0].run_id, RunStatus.SUCCESS)]


class OneItem:
    """A work source with one item, telling ``told`` how it went; its report waits for
    ``go_on`` (a slow HTTP call)."""

    def __init__(self) -> None:
        self.told: list[WorkOutcome] = []
        self.given = False
        self.go_on = threading.Event()

    def get_next_work_item(self, agent: str, schedule: str) -> WorkItem | None:
        if self.given:
            return None
        self.given = True
        return WorkItem(id="item-1", title="the one item")

    def report_outcome(self, item: WorkItem, outcome: WorkOutcome) -> None:
        self.told.append(outcome)
        assert self.go_on.wait(10)


def test_a_job_that_ended_while_it_stood_by_is_not_taken_back(
    store: CutOff, clock: FakeClock
) -> None:
    """Its work source had heard the item failed (the lead was lost when the job returned):
    taking the run back then recorded it a success, and the source handed the item out again
    for work that was done."""
    job, source = Held(), OneItem()
    sched = _scheduler(store, clock, job, work_sources={"queue": source})
    sched.update_schedule("a", "s", work_source="queue")
    with sched:
        sched.run_pending()
        clock.advance(timedelta(minutes=30))
        sched.run_pending()
        assert job.began.wait(10)
        _outage(sched, store, clock)
        job.release.set()  # returns while this scheduler stands by
        assert wait_until(lambda: bool(source.told))  # the source is being told
        clock.advance(TTL / 3)
        sched.run_pending()  # the store answers: it may not take that run back
        source.go_on.set()
        assert sched.wait_until_idle(10)
        clock.advance(TTL / 3)
        sched.run_pending()  # leads once the run has ended: recovery records it
        assert sched.status == "running"
        history = [r.status for r in sched.history("a", "s")]
    assert [o.success for o in source.told] == [False]
    assert history == [RunStatus.INTERRUPTED]


def test_reads_that_work_while_writes_fail_are_not_the_store_working_again(
    store: CutOff, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """On a full disk a standby with jobs left from its lost lead read the lease (reads work)
    and logged "The state store works again", then its try to lead failed again at once:
    the log said the outage was over while nothing could be written."""
    job = Held()
    sched = _scheduler(store, clock, job)
    with sched:
        sched.run_pending()
        clock.advance(timedelta(minutes=30))  # 10:00
        sched.run_pending()
        assert job.began.wait(10)
        store.full = True
        clock.advance(TTL)
        sched.run_pending()
        assert wait_until(lambda: sched.status == "standby")
        with caplog.at_level(logging.WARNING, logger="herdsched"):
            for _ in range(3):
                clock.advance(TTL / 3)
                sched.run_pending()
            assert sched.status == "standby"
            assert "works again" not in caplog.text
            store.full = False
            clock.advance(TTL / 3)
            sched.run_pending()
        assert sched.status == "running"
        assert "The state store works again" in caplog.text
        job.release.set()
        assert sched.wait_until_idle(10)
