"""A schedule removed while its job runs: should its scheduler die before the run's record is
written, the next leader still records the run, as `interrupted`. The claim journal keeps a
run's claim until its record is in the history, and recovery records the claimed runs of
schedules that are gone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from scheduler_helpers import T0, Blocker, crash_copy

from herdsched import Agent, RunStatus, Schedule, ThreadedScheduler
from herdsched.models import RunRecord, Status
from herdsched.store.base import RunClaim, StateStore
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock


def _fleet(job: Callable[[object], object], *names: str) -> Agent:
    schedules = {name: Schedule.interval("1h") for name in names}
    return Agent("a", job=job, schedules=schedules)


def crash_after_removing_s(tmp_path: Path, *, start_committed: bool, ends: bool) -> Path:
    """Start s's run, remove s while it runs, and return what a kill -9 right then would leave
    on disk (after s's run ended and its record was written, when ``ends``)."""
    job = Blocker()
    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=tmp_path / "live", clock=clock, commit_delay=0.5)
    sched.add_agent(_fleet(lambda info: job(info) if info.schedule == "s" else None, "s", "o"))
    sched.start()
    try:
        sched.run_pending()
        assert job.began.wait(10)
        if start_committed:
            sched.store.flush()  # the state shows s running; before, this dropped its claim
        sched.remove_schedule("a", "s")  # writes state.yaml without s
        sched.store.flush()
        if ends:
            job.release.set()
            sched.wait_until_idle(10)
            sched.store.flush()
        return crash_copy(tmp_path / "live", tmp_path / "crash")
    finally:
        job.release.set()
        sched.stop()


def history_after_recovery(crash: Path) -> list[RunRecord]:
    """Start a scheduler whose fleet no longer has s on the crashed directory."""
    sched = ThreadedScheduler(state_dir=crash, clock=FakeClock(T0), commit_delay=0.5)
    sched.add_agent(_fleet(lambda info: None, "o"))
    with sched:
        sched.run_pending()
        sched.wait_until_idle(10)
        return sched.history("a", "s")


@pytest.mark.parametrize("start_committed", [True, False], ids=["start-committed", "claim-only"])
def test_a_run_of_a_removed_schedule_is_recorded_after_its_scheduler_died(
    tmp_path: Path, start_committed: bool
) -> None:
    crash = crash_after_removing_s(tmp_path, start_committed=start_committed, ends=False)
    with YamlStateStore(crash) as reader:
        claims = reader.load_claims()
    assert [c.schedule for c in claims] == ["s"]  # the only trace of s's run
    history = history_after_recovery(crash)
    assert [(r.run_id, r.status, r.started_at, r.scheduled_for) for r in history] == [
        (claims[0].run_id, RunStatus.INTERRUPTED, T0, T0)
    ]


def test_a_run_of_a_removed_schedule_that_ended_is_recorded_once(tmp_path: Path) -> None:
    crash = crash_after_removing_s(tmp_path, start_committed=True, ends=True)
    assert (crash / "claims.log").read_text() == ""  # its record written: its claim went
    history = history_after_recovery(crash)
    assert [r.status for r in history] == [RunStatus.SUCCESS]


def _dead_leader_left_a_removed_run(store: StateStore) -> RunClaim:
    """What a leader leaves when it dies after s was removed during s's run: the claim, the
    start committed, the state removed, no record."""
    claim = RunClaim("a", "s", "run-s", T0, T0)
    earlier = T0.replace(hour=8)
    store.append_run(
        RunRecord(run_id="run-0", agent="a", schedule="s", trigger_type="cron",
                  scheduled_for=earlier, started_at=earlier, finished_at=earlier,
                  status="success")
    )  # fmt: skip
    store.update_schedule_state("a", "o", next_run_at=T0.replace(hour=20))
    store.claim_runs([claim])
    store.record_transition("a", "s", status=Status.RUNNING, last_run_at=T0, running_run_id="run-s")
    store.flush()
    store.remove_schedule_state("a", "s")
    store.flush()
    return claim


def test_postgres_keeps_the_claim_of_a_removed_run_and_recovery_records_it(
    postgres_dsn: str, pg_namespace: str
) -> None:
    from herdsched.store.postgres import PostgresStateStore

    dead = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    claim = _dead_leader_left_a_removed_run(dead)
    dead.close()
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    assert store.load_claims() == [claim]
    sched = ThreadedScheduler(store=store, clock=FakeClock(T0))
    sched.add_agent(_fleet(lambda info: None, "o"))
    with sched:
        history = sched.history("a", "s")
    store.close()
    assert [(r.run_id, r.status, r.trigger_type) for r in history] == [
        ("run-s", RunStatus.INTERRUPTED, "cron"),  # the type of the gone schedule's timer runs
        ("run-0", RunStatus.SUCCESS, "cron"),
    ]
    with PostgresStateStore(postgres_dsn, namespace=pg_namespace) as later:
        assert later.load_claims() == []  # recorded: its claim went with the record
