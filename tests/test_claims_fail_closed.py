"""Claims fail closed: a run whose claim cannot be made durable does not start.

Unit tests with a store whose ``claim_runs`` fails on demand and a FakeClock; the real full
disk (a small tmpfs) is in ``test_full_disk.py``.
"""

from __future__ import annotations

import errno
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from scheduler_helpers import T0, Recorder, running, step

import herdsched.events as ev
from herdsched import Agent, RunStatus, Schedule, Status
from herdsched.store import MemoryStateStore, YamlStateStore
from herdsched.testing import FakeClock


class _ClaimFailingStore(MemoryStateStore):
    """A memory store on a FakeClock at T0 whose claims fail (ENOSPC) while ``failing`` is
    set."""

    def __init__(self) -> None:
        super().__init__(clock=FakeClock(T0))
        self.failing = False
        self.claimed: list[Any] = []

    def claim_runs(self, claims: Any) -> None:
        if self.failing:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.claimed.extend(claims)
        super().claim_runs(claims)


def _events(sched: Any) -> list[ev.Event]:
    seen: list[ev.Event] = []
    sched.add_listener(seen.append)
    return seen


def test_an_interval_run_whose_claim_fails_does_not_start_and_is_recorded_as_missed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, job = _ClaimFailingStore(), Recorder()
    with running(store=store, min_interval=0) as (sched, clock):
        sched.add_agent(
            Agent("a", job=job, max_concurrent=1, schedules={"s": Schedule.interval("5m")})
        )
        seen = _events(sched)
        store.failing = True
        with caplog.at_level(logging.ERROR, logger="herdsched"):
            sched.start()
            step(sched)
        assert job.calls == []
        assert sched.get_running_job_count("a") == 0
        state = sched.store.get_schedule_state("a", "s")
        assert state.status is Status.IDLE
        assert state.last_run_at is None  # it never ran
        assert state.next_run_at == T0 + timedelta(minutes=5)  # the next slot is planned
        [record] = sched.history("a", "s")
        assert record.status is RunStatus.MISSED
        assert record.scheduled_for == T0
        assert record.error is not None and "No space left on device" in record.error
        assert any(
            isinstance(e, ev.JobMissed) and e.scheduled_for == T0 and e.schedule == "s"
            for e in seen
        )
        assert any(isinstance(e, ev.StateErrorOccurred) and e.schedule == "s" for e in seen)
        assert not any(isinstance(e, (ev.JobSubmitted, ev.JobStarted)) for e in seen)
        assert any(
            r.levelno == logging.ERROR and "did not start" in r.getMessage() for r in caplog.records
        )
        # the store works again: the schedule goes on normally
        store.failing = False
        step(sched, clock, "5m")
        assert job.slots() == [T0 + timedelta(minutes=5)]
        assert [r.status for r in sched.history("a", "s")] == [RunStatus.SUCCESS, RunStatus.MISSED]


def test_runs_of_one_pass_that_did_not_start_are_logged_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = _ClaimFailingStore()
    every = Schedule.interval("5m")
    names = [f"s{i}" for i in range(8)]
    with running(store=store, min_interval=0) as (sched, _clock):
        schedules = dict.fromkeys(names, every)
        sched.add_agent(Agent("a", job=Recorder(), max_concurrent=8, schedules=schedules))
        store.failing = True
        with caplog.at_level(logging.ERROR, logger="herdsched"):
            sched.start()
            step(sched)
        lines = [r.getMessage() for r in caplog.records if "did not start" in r.getMessage()]
        assert len(lines) == 1, lines
        assert lines[0].startswith("8 runs did not start: the claim could not be made durable")
        assert lines[0].endswith(" and 3 more.")
        assert lines[0].count("a/s") == 5
        # every slot has its own record all the same
        assert all([r.status for r in sched.history("a", n)] == [RunStatus.MISSED] for n in names)


def test_a_cron_slot_whose_claim_fails_is_missed_and_the_next_slot_runs() -> None:
    store, job = _ClaimFailingStore(), Recorder()
    with running(store=store, min_interval=0) as (sched, clock):
        sched.add_agent(Agent("a", job=job, schedules={"c": Schedule.cron("*/10 * * * *")}))
        sched.start()
        store.failing = True
        step(sched, clock, "10m")
        assert job.calls == []
        assert sched.store.get_schedule_state("a", "c").status is Status.IDLE
        store.failing = False
        step(sched, clock, "10m")
        assert job.slots() == [T0 + timedelta(minutes=20)]
        records = sched.history("a", "c")
        assert [(r.status, r.scheduled_for) for r in records] == [
            (RunStatus.SUCCESS, T0 + timedelta(minutes=20)),
            (RunStatus.MISSED, T0 + timedelta(minutes=10)),
        ]


def test_a_once_schedule_whose_claim_fails_is_completed_as_missed() -> None:
    store, job = _ClaimFailingStore(), Recorder()
    at = T0 + timedelta(minutes=1)
    with running(store=store, min_interval=0) as (sched, clock):
        sched.add_agent(Agent("a", job=job, schedules={"o": Schedule.once(at)}))
        sched.start()
        store.failing = True
        step(sched, clock, "1m")
        store.failing = False
        step(sched, clock, "1h")
        assert job.calls == []
        assert sched.store.get_schedule_state("a", "o").status is Status.COMPLETED
        [record] = sched.history("a", "o")
        assert (record.status, record.scheduled_for) == (RunStatus.MISSED, at)


def test_a_failed_claim_frees_the_slot_for_the_schedule_waiting_behind() -> None:
    store, job = _ClaimFailingStore(), Recorder()
    schedules = {"s": Schedule.interval("1h"), "t": Schedule.interval("1h")}
    with running(store=store, min_interval=0) as (sched, clock):
        sched.add_agent(Agent("a", job=job, max_concurrent=1, schedules=schedules))
        sched.start()
        store.failing = True
        step(sched)
        assert job.calls == []
        assert sched.get_running_job_count("a") == 0
        assert {r.schedule for r in sched.history("a")} == {"s", "t"}
        store.failing = False
        step(sched, clock, "1h")
        assert sorted(job.schedules()) == ["s", "t"]


def test_a_manual_run_whose_claim_fails_does_not_start_and_says_why() -> None:
    store, job = _ClaimFailingStore(), Recorder()
    with running(store=store, min_interval=0) as (sched, clock):
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
        sched.start()
        step(sched)
        store.failing = True
        clock.advance("1m")
        result = sched.trigger("a", "s", wait=True)
        assert not result.success
        assert result.error is not None and "claim" in result.error
        no_wait = sched.trigger("a", "s")
        assert not no_wait.success
        assert len(job.calls) == 1
        state = sched.store.get_schedule_state("a", "s")
        assert state.status is Status.IDLE
        assert state.last_run_at == T0  # the run before, not the one that never started
        assert state.next_run_at == T0 + timedelta(hours=1)  # the plan is untouched
        records = sched.history("a", "s")
        assert [r.status for r in records[:2]] == [RunStatus.SKIPPED, RunStatus.SKIPPED]
        assert records[0].run_id == no_wait.run_id


def test_a_claim_failure_is_recorded_once_the_store_works_again(tmp_path: Any) -> None:
    """On a real YAML store whose disk is full, the missed record waits in memory and reaches
    the history file with the first group commit that succeeds."""
    store = YamlStateStore(tmp_path, commit_delay=0, clock=FakeClock(T0))
    failing = [True]
    real_claims = store.claim_runs
    real_flush = store.flush

    def claim_runs(claims: Any) -> None:
        if failing[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_claims(claims)

    def flush() -> None:
        if failing[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_flush()

    store.claim_runs = claim_runs  # type: ignore[method-assign]
    store.flush = flush  # type: ignore[method-assign]
    job = Recorder()
    with running(store=store, min_interval=0) as (sched, clock):
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
        sched.start()
        step(sched)
        assert not (tmp_path / "history").exists()
        failing[0] = False
        clock.advance(2)
        step(sched)
    assert job.calls == []
    with YamlStateStore(tmp_path) as reread:
        [record] = reread.get_history("a", "s")
        assert record.status is RunStatus.MISSED
        assert reread.get_schedule_state("a", "s").status is Status.IDLE


class _RefusingPool(ThreadPoolExecutor):
    """A thread pool that refuses work while ``refusing`` is set, as every pool does once the
    interpreter has begun to exit (``cannot schedule new futures after interpreter shutdown``)."""

    refusing = False

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        if _RefusingPool.refusing:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")
        return super().submit(fn, *args, **kwargs)


def test_a_claimed_run_its_executor_refuses_is_recorded_as_not_started_and_holds_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The run was claimed, so its slot is not run again; it used to stay "running" for good,
    holding its slot, and stop() waited for it until its timeout."""
    monkeypatch.setattr(_RefusingPool, "refusing", True)
    job = Recorder()
    with running(min_interval=0, executor_factory=lambda _agent, size: _RefusingPool(size)) as (
        sched,
        clock,
    ):
        sched.add_agent(
            Agent("a", job=job, max_concurrent=1, schedules={"s": Schedule.interval("5m")})
        )
        seen = _events(sched)
        with caplog.at_level(logging.ERROR, logger="herdsched"):
            sched.start()
            step(sched)
        assert job.calls == []
        assert sched.get_running_job_count("a") == 0
        state = sched.store.get_schedule_state("a", "s")
        assert state.status is Status.IDLE
        assert state.next_run_at == T0 + timedelta(minutes=5)
        [record] = sched.history("a", "s")
        assert record.status is RunStatus.MISSED
        assert record.error is not None
        assert "its executor refused it (cannot schedule new futures" in record.error
        assert any(isinstance(e, ev.JobMissed) and e.scheduled_for == T0 for e in seen)
        assert not any(isinstance(e, ev.StateErrorOccurred) for e in seen)  # not the store's
        assert any("did not start" in r.getMessage() for r in caplog.records)
        # a run-now is refused the same way and recorded as skipped
        result = sched.trigger("a", "s", wait=True)
        assert not result.success
        assert "its executor refused it" in (result.error or "")
        assert sched.history("a", "s")[0].status is RunStatus.SKIPPED
        monkeypatch.setattr(_RefusingPool, "refusing", False)
        step(sched, clock, "5m")
        assert job.slots() == [T0 + timedelta(minutes=5)]
    # running() stopped it with timeout=5: no phantom run was left for stop() to wait for


def test_runs_that_do_not_start_while_the_store_fails_are_told_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """During a database outage the leader logged a "did not start" ERROR at every timer pass
    (264 lines in a 15 s outage of a large fleet), though the docs say an outage is told
    once, then once a minute; the records still name every run."""
    store = _ClaimFailingStore()
    with running(store=store, min_interval=0) as (sched, clock):
        sched.add_agent(
            Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1s", catch_up="skip")})
        )
        store.failing = True
        with caplog.at_level(logging.DEBUG, logger="herdsched"):
            sched.start()
            step(sched)
            for _ in range(25):  # 50 s of passes, one slot missed at each
                step(sched, clock, "2s")
            told = [r for r in caplog.records if "did not start" in r.getMessage()]
            assert [r.levelno for r in told].count(logging.ERROR) == 1
            assert len(told) >= 25  # the rest at DEBUG
            step(sched, clock, "20s")  # past a minute: told again
            told = [r for r in caplog.records if "did not start" in r.getMessage()]
            assert [r.levelno for r in told].count(logging.ERROR) == 2
        missed = [r for r in sched.history("a", "s", limit=100) if r.status is RunStatus.MISSED]
        assert len(missed) == 20  # every slot has its record, as many as the history keeps


def test_runs_that_did_not_start_are_told_once_a_minute_whatever_works_between(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The first rule asked whether the failure was told lately before the failure itself was
    counted, which starts a new outage: a second outage, a quiet minute after the first
    ended, told its own failure at ERROR but its runs that did not start at DEBUG only; and
    claims failing at every pass while the commits between them worked told them at ERROR
    at every pass (each commit ended an "outage")."""
    clock = FakeClock(T0)
    store = YamlStateStore(tmp_path, clock=clock)
    failing = [False]
    real = store.claim_runs

    def claim_runs(claims: Any) -> None:
        if failing[0]:
            raise OSError(errno.EIO, "Input/output error")
        real(claims)

    store.claim_runs = claim_runs  # type: ignore[method-assign]
    with running(store=store, min_interval=0) as (sched, _):
        every = Schedule.interval("15s", catch_up="skip")
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": every}))
        with caplog.at_level(logging.DEBUG, logger="herdsched"):
            sched.start()
            step(sched)
            # claims failing at every pass for 2.5 minutes, the commits between them working
            failing[0] = True
            for _ in range(10):
                step(sched, clock, "15s")
            told = [r.levelno for r in caplog.records if "did not start" in r.getMessage()]
            assert told.count(logging.ERROR) == 3, told  # at 15 s, 75 s, 135 s
            failing[0] = False  # 70 s of work, then a new outage, told anew
            for _ in range(5):
                step(sched, clock, "15s")
            caplog.clear()
            failing[0] = True
            step(sched, clock, "15s")
            told = [r.levelno for r in caplog.records if "did not start" in r.getMessage()]
            assert told == [logging.ERROR]


def test_a_status_page_that_cannot_read_the_history_tells_it_once_a_minute(
    tmp_path: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every load of the page during an outage logged a WARNING (every open page refreshes
    every few seconds); told at DEBUG only, a history the web process cannot read, the rest
    of the store fine, was told by nothing at all. A WARNING, then once a minute."""
    monkeypatch.setattr("herdsched.api._runs_unread_told", {})
    from herdsched import ThreadedScheduler
    from herdsched.api import RestApi
    from herdsched.store.history import encode_name

    agent = Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1m")})
    with running(state_dir=tmp_path) as (sched, _):
        sched.add_agent(agent)
        sched.start()
        step(sched)
    path = tmp_path / "history" / encode_name("a") / f"{encode_name('s')}.jsonl"
    path.unlink()
    path.mkdir()  # unreadable as a file, also to root
    web = ThreadedScheduler([agent], state_dir=tmp_path, clock=FakeClock(T0), timezone="UTC")
    with caplog.at_level(logging.DEBUG, logger="herdsched"):
        for _ in range(3):
            assert "no runs yet" in RestApi(web).status_page(api_base="/api")
    told = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage().split(": Cannot read")[0] for r in told] == [
        "The status page shows no recent runs"
    ]
