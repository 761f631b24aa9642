"""A schedule removed while its job runs: should its scheduler die before the run's record is
written, the next leader still records the run, as `interrupted`. The claim journal keeps a
run's claim until its record is in the history, and recovery records the claimed runs of
schedules that are gone."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from scheduler_helpers import T0, Blocker, crash_copy

from herdsched import Agent, RunStatus, Schedule, ThreadedScheduler
from herdsched.models import RunRecord, ScheduleState, Status
from herdsched.store.base import READ_ALL_HISTORY, RunClaim, StateStore
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock


def _fleet(job: Callable[[object], object], *names: str) -> Agent:
    schedules = {name: Schedule.interval("1h") for name in names}
    return Agent("a", job=job, schedules=schedules)


def crash_after_removing_s(
    tmp_path: Path, *, start_committed: bool, ends: bool, remove: bool = True
) -> Path:
    """Start s's run, remove s while it runs (unless not ``remove``), and return what a
    kill -9 right then would leave on disk (after s's run ended and its record was written,
    when ``ends``)."""
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
        if remove:
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


@pytest.mark.parametrize("start_committed", [True, False], ids=["start-committed", "claim-only"])
def test_a_run_of_a_schedule_the_next_leaders_fleet_lacks_is_recorded_at_its_start(
    tmp_path: Path, start_committed: bool
) -> None:
    """A rolling update took s out of the fleet while the old leader ran it: the run waited
    for s to be registered again, for ever if it never was, shown ``running`` (found by a
    PostgreSQL probe: two completed runs had no record and their claims stayed)."""
    crash = crash_after_removing_s(
        tmp_path, start_committed=start_committed, ends=False, remove=False
    )
    with YamlStateStore(crash) as reader:
        (claim,) = reader.load_claims()
    history = history_after_recovery(crash)
    assert [(r.run_id, r.status, r.started_at) for r in history] == [
        (claim.run_id, RunStatus.INTERRUPTED, T0)
    ]
    with YamlStateStore(crash) as reader:
        assert reader.load_claims() == []
        state = reader.get_schedule_state("a", "s")
    assert (state.status, state.running_run_id) == (Status.IDLE, None)
    assert (state.removed_at is not None) is start_committed  # without, s has no state at all
    # registered again, s runs again, and its interrupted run is not recorded twice
    job = Blocker()
    job.release.set()
    again = ThreadedScheduler(state_dir=crash, clock=FakeClock(T0), commit_delay=0.5)
    again.add_agent(_fleet(job, "s", "o"))
    with again:
        again.run_pending()
        again.wait_until_idle(10)
        statuses = [r.status for r in again.history("a", "s")]
    assert statuses.count(RunStatus.INTERRUPTED) == 1


def test_a_left_run_of_a_schedule_registered_late_in_the_next_lead_is_not_run_again(
    tmp_path: Path,
) -> None:
    """The next leader started without s (its program registers it after ``start()``), so it
    recorded s's left run and kept s's plan for the late registration: that plan was the
    slot the left run stood for, which then ran a second time."""
    crash = crash_after_removing_s(tmp_path, start_committed=True, ends=False, remove=False)
    ran: list[str] = []
    sched = ThreadedScheduler(state_dir=crash, clock=FakeClock(T0), commit_delay=0.5)
    sched.add_agent(Agent("b", job=lambda info: None, schedules={"x": Schedule.manual()}))
    with sched:
        sched.run_pending()  # leads without a: s is marked removed, its run recorded
        sched.add_agent(_fleet(lambda info: ran.append(str(info.schedule)), "s", "o"))
        sched.run_pending()
        assert sched.wait_until_idle(10)
        history = [(r.status, r.scheduled_for) for r in sched.history("a", "s")]
        next_run = {item.schedule: item.next_run_at for item in sched.get_status().schedules}
    assert "s" not in ran  # at most once per slot
    assert history == [(RunStatus.INTERRUPTED, T0)]
    assert next_run["s"] == T0 + timedelta(hours=1)


@pytest.mark.parametrize("paused", [False, True], ids=["idle", "paused"])
@pytest.mark.parametrize("registered", ["before start", "after start"])
def test_a_left_cron_run_then_downtime_catches_up_however_the_program_registers(
    tmp_path: Path, registered: str, paused: bool
) -> None:
    """A crash during the 13:00 run of an hourly cron, the next start at 15:30. Registered
    before ``start()``, the run is recorded interrupted and the 14:00 slot caught up once;
    registered after, the kept plan was the 13:00 slot (run again), then no plan at all (14:00
    and 15:00 lost). Both ways now agree, also for a schedule paused during its run and resumed
    after (its resume planned from the stale slot, which ran again)."""
    hourly = Schedule.cron("0 * * * *")
    job, clock = Blocker(), FakeClock(T0)
    sched = ThreadedScheduler(state_dir=tmp_path / "live", clock=clock, timezone="UTC")
    sched.add_agent(Agent("a", job=job, schedules={"s": hourly}))
    with sched:
        sched.run_pending()
        clock.advance(timedelta(hours=1))  # the 13:00 slot
        sched.run_pending()
        assert job.began.wait(10)
        if paused:
            sched.pause("a", "s")
        sched.store.flush()
        crash = crash_copy(tmp_path / "live", tmp_path / "crash")
        job.release.set()
    ran: list[datetime | None] = []
    later = ThreadedScheduler(
        state_dir=crash,
        clock=FakeClock(clock.now() + timedelta(hours=2, minutes=30)),
        timezone="UTC",
    )
    agent = Agent("a", job=lambda info: ran.append(info.scheduled_for), schedules={"s": hourly})
    if registered == "before start":
        later.add_agent(agent)
    with later:
        if registered == "after start":
            later.run_pending()
            later.add_agent(agent)
        later.run_pending()
        if paused:
            later.resume("a", "s")
            later.run_pending()
        assert later.wait_until_idle(10)
        history = [(r.status, r.scheduled_for) for r in later.history("a", "s")]
    left_slot = clock.now()
    assert ran == [left_slot + timedelta(hours=1)]  # the first missed slot, once
    assert history == [
        (RunStatus.SUCCESS, left_slot + timedelta(hours=1)),
        (RunStatus.INTERRUPTED, left_slot),
    ]


def test_a_once_whose_timer_run_and_a_run_now_after_it_were_left_is_completed(
    tmp_path: Path,
) -> None:
    """The last claim, a run-now, has no slot: the once schedule was left idle and ran its
    time a third time when registered after ``start()``."""
    store = YamlStateStore(tmp_path, clock=FakeClock(T0))
    store.claim_runs([RunClaim("a", "s", "r1", T0, T0)])
    store.claim_runs([RunClaim("a", "s", "r2", T0 + timedelta(seconds=5), None)])
    store.record_transition("a", "s", type="once", status=Status.RUNNING, running_run_id="r2")
    store.flush()
    store.close()
    ran, status = _once_registered_late(tmp_path, FakeClock(T0 + timedelta(minutes=10)), T0)
    assert ran == []
    assert status is Status.COMPLETED


def test_a_once_given_a_new_time_whose_run_now_was_left_still_runs_at_it(tmp_path: Path) -> None:
    """Completed at its first time, then given a new one: its state kept the old slot, which
    was taken for this run's, and the schedule was completed before its new time."""
    later, now = T0 + timedelta(hours=1), T0 + timedelta(minutes=10)
    store = YamlStateStore(tmp_path, clock=FakeClock(now))
    store.record_transition(
        "a", "s", type="once", status=Status.IDLE, last_run_at=T0, last_slot_at=T0
    )
    store.claim_runs([RunClaim("a", "s", "r2", now, None)])  # a run-now, no slot
    store.flush()
    store.close()
    clock = FakeClock(now + timedelta(minutes=1))
    ran, _ = _once_registered_late(tmp_path, clock, later, then=timedelta(hours=1))
    assert ran == [later]


def _once_registered_late(
    state_dir: Path, clock: FakeClock, at: datetime, *, then: timedelta | None = None
) -> tuple[list[object], Status]:
    """Start a scheduler on ``state_dir``, then register agent a with a once schedule s at
    ``at`` (as a program that starts its scheduler first), run a pass, and another ``then``
    later: the slots it ran and the schedule's status."""
    ran: list[object] = []
    sched = ThreadedScheduler(state_dir=state_dir, clock=clock, timezone="UTC")
    with sched:
        once = Schedule.once(at)
        sched.add_agent(
            Agent("a", job=lambda info: ran.append(info.scheduled_for), schedules={"s": once})
        )
        sched.run_pending()
        assert sched.wait_until_idle(10)
        if then is not None:
            clock.advance(then)
            sched.run_pending()
            assert sched.wait_until_idle(10)
        status = sched.store.get_schedule_state("a", "s").status
    return ran, status


@pytest.mark.parametrize("kind", ["once", "definition"])
def test_a_run_taken_up_before_its_schedule_is_registered_does_not_run_its_slot_again(
    tmp_path: Path, kind: str
) -> None:
    """A program that registers its agents after ``start()``: a once schedule's interrupted
    run left it idle, so registering it ran its time again; a stored definition's kept plan
    caught its interrupted slot up again. The once is completed; a definition's claim waits
    for its agent, which takes the run up from its plan."""
    job = Blocker()
    clock = FakeClock(T0 - timedelta(minutes=1))

    def schedule() -> Schedule:
        return Schedule.once(T0) if kind == "once" else Schedule.interval("1h", start_at=T0)

    sched = ThreadedScheduler(state_dir=tmp_path / "live", clock=clock, commit_delay=0.5)
    sched.add_agent(
        Agent("a", job=job, schedules={} if kind == "definition" else {"s": schedule()})
    )
    if kind == "definition":
        sched.add_schedule("a", "s", schedule(), persist=True)
    sched.start()
    try:
        clock.advance(timedelta(minutes=1))
        sched.run_pending()
        assert job.began.wait(10)
        sched.store.flush()
        crash = crash_copy(tmp_path / "live", tmp_path / "crash")
    finally:
        job.release.set()
        sched.stop()
    ran: list[object] = []
    again = ThreadedScheduler(
        state_dir=crash, clock=FakeClock(T0 + timedelta(minutes=10)), commit_delay=0.5
    )
    with again:
        again.add_agent(
            Agent("a", job=lambda info: ran.append(info.scheduled_for), schedules={"s": schedule()})
            if kind == "once"
            else Agent("a", job=lambda info: ran.append(info.scheduled_for))
        )
        again.run_pending()
        assert again.wait_until_idle(10)
        history = [r.status for r in again.history("a", "s")]
        status = again.store.get_schedule_state("a", "s").status
    assert ran == []
    assert history == [RunStatus.INTERRUPTED]
    assert status is (Status.COMPLETED if kind == "once" else Status.IDLE)


def test_a_run_of_a_removed_schedule_that_ended_is_recorded_once(tmp_path: Path) -> None:
    crash = crash_after_removing_s(tmp_path, start_committed=True, ends=True)
    assert (crash / "claims.log").read_text() == ""  # its record written: its claim went
    history = history_after_recovery(crash)
    assert [r.status for r in history] == [RunStatus.SUCCESS]


def _dead_leader_left_a_removed_run(store: StateStore, *, removed: bool = True) -> RunClaim:
    """What a leader leaves when it dies after s was removed during s's run: the claim, the
    start committed, the state removed (kept, when s was only left out of the next leader's
    fleet), no record."""
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
    if removed:
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
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace, clock=FakeClock(T0))
    assert store.load_claims() == [claim]
    sched = ThreadedScheduler(store=store)
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


def test_postgres_records_the_run_of_a_schedule_the_next_leaders_fleet_lacks(
    postgres_dsn: str, pg_namespace: str
) -> None:
    from herdsched.store.postgres import PostgresStateStore

    dead = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    _dead_leader_left_a_removed_run(dead, removed=False)
    dead.close()
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace, clock=FakeClock(T0))
    sched = ThreadedScheduler(store=store)
    sched.add_agent(_fleet(lambda info: None, "o"))
    with sched:
        history = sched.history("a", "s")
    store.close()
    assert [(r.run_id, r.status) for r in history] == [
        ("run-s", RunStatus.INTERRUPTED),
        ("run-0", RunStatus.SUCCESS),
    ]
    with PostgresStateStore(postgres_dsn, namespace=pg_namespace) as later:
        assert later.load_claims() == []
        state = later.get_schedule_state("a", "s")
    assert (state.status, state.running_run_id, state.last_result) == (
        Status.IDLE,
        None,
        RunStatus.INTERRUPTED,
    )
    assert state.removed_at is not None


# -- claims that must not stay: runs whose fate the store already holds ----------------------

StoreMaker = Callable[..., StateStore]


@pytest.fixture(params=["yaml", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreMaker:
    """A maker of stores on one state directory or namespace, as successive processes open,
    on the clock and with the commit delay given."""
    if request.param == "yaml":
        return lambda clock=None, delay=0.5: YamlStateStore(
            tmp_path / "state", clock=clock, commit_delay=delay
        )
    from herdsched.store.postgres import PostgresStateStore

    dsn = request.getfixturevalue("postgres_dsn")
    namespace = request.getfixturevalue("pg_namespace")
    return lambda clock=None, delay=0.5: PostgresStateStore(
        dsn, namespace=namespace, clock=clock, commit_delay=delay
    )


class _NoWork:
    def get_next_work_item(self, agent: str, schedule: str) -> None:
        return None

    def report_outcome(self, item: object, outcome: object) -> None:
        raise AssertionError("no item was handed out")


def _restart(make_store: StoreMaker, fleet: Agent) -> tuple[list[RunRecord], ScheduleState]:
    """Start a scheduler on the store with ``fleet``: the history of a/s and the state of s."""
    store = make_store(FakeClock(T0.replace(hour=20)))
    sched = ThreadedScheduler(store=store)
    sched.add_agent(fleet)
    with sched:
        history = store.get_history("a", "s", READ_ALL_HISTORY)
        state = store.get_schedule_state("a", "s")
    store.close()
    return history, state


def test_runs_that_find_no_work_leave_no_claim_behind(make_store: StoreMaker) -> None:
    """A run that finds no work writes no record: the state showing its end is its fate. Its
    claim stayed for as long as the process ran, and a restart after its schedule's removal
    recorded each such run as interrupted."""
    store, sched = runs_without_work(make_store, run_now=False)
    try:
        sched.remove_schedule("a", "s")
    finally:
        sched.stop()
    store.close()
    history, _ = _restart(make_store, _fleet(lambda info: None, "o"))
    assert history == []


def test_a_run_without_work_whose_schedule_is_removed_before_its_end_is_written_leaves_no_claim(
    make_store: StoreMaker,
) -> None:
    """A run that found no work has no record: the state showing its end is its fate. Removed
    before that state was committed, the schedule took the end with it, its claim stayed, and
    the next start recorded the run as interrupted, which it was not."""
    store, sched, _ = _without_work(make_store)
    with sched:
        sched.run_pending()
        assert sched.wait_until_idle(10)  # s found no work: its end waits for the commit
        assert "s" in [c.schedule for c in store.load_claims()]
        sched.remove_schedule("a", "s")
    assert store.load_claims() == []
    store.close()
    history, _ = _restart(make_store, _fleet(lambda info: None, "o"))
    assert history == []


def test_a_run_without_work_whose_schedule_was_removed_while_it_ran_says_so(
    make_store: StoreMaker,
) -> None:
    """Its record said "the once schedule ends without running" of an interval schedule."""
    asked, release = threading.Event(), threading.Event()

    class SlowNoWork(_NoWork):
        def get_next_work_item(self, agent: str, schedule: str) -> None:
            asked.set()
            release.wait(10)

    store = make_store(FakeClock(T0))
    sched = ThreadedScheduler(store=store, work_sources={"q": SlowNoWork()})
    sched.add_agent(
        Agent("a", job=lambda info: None, schedules={"s": Schedule.interval("1m", work_source="q")})
    )
    with sched:
        sched.run_pending()
        assert asked.wait(10)
        sched.remove_schedule("a", "s")
        release.set()
        assert sched.wait_until_idle(10)
    [record] = store.get_history("a", "s")
    store.close()
    assert (record.status, record.error) == (
        RunStatus.SKIPPED,
        "its work source had no work (its schedule was removed while it ran)",
    )


def test_a_schedule_added_again_does_not_take_the_removed_ones_run(make_store: StoreMaker) -> None:
    """s is removed while its job runs and added again; the old run fails afterwards. After a
    clean restart the new s must not carry the old run's failure."""
    job = Blocker()

    def work(info: object) -> None:
        job(info)
        raise RuntimeError("the old run failed")

    store = make_store(FakeClock(T0))
    sched = ThreadedScheduler(store=store)
    sched.add_agent(_fleet(lambda info: None, "o"))
    with sched:
        sched.add_schedule("a", "s", Schedule.interval("1h", job=work))
        sched.run_pending()
        assert job.began.wait(10)
        store.flush()
        sched.remove_schedule("a", "s")
        sched.add_schedule("a", "s", Schedule.cron("0 3 * * *"))
        job.release.set()
        assert sched.wait_until_idle(10)
        store.flush()
        assert store.load_claims() == []  # its record is written: the claim went
    store.close()
    fleet = _fleet(lambda info: None, "o")
    history, state = _restart(make_store, fleet.with_schedule("s", Schedule.cron("0 3 * * *")))
    assert [r.status for r in history] == [RunStatus.FAILED]  # the old run, recorded once
    assert (state.last_result, state.consecutive_failures, state.last_error) == (None, 0, None)


def test_forgetting_a_removed_schedule_leaves_no_claim_behind(make_store: StoreMaker) -> None:
    """`purge_history` (`herdsched forget`) while the removed schedule's record is pending: the
    record is dropped with the history, and its claim must go too, or a restart writes an
    interrupted record into the history the user cleared."""
    job = Blocker()
    store = make_store(FakeClock(T0), 3600)
    sched = ThreadedScheduler(store=store)
    sched.add_agent(_fleet(lambda info: job(info) if info.schedule == "s" else None, "s", "o"))
    with sched:
        sched.run_pending()
        assert job.began.wait(10)
        store.flush()
        sched.remove_schedule("a", "s")
        job.release.set()
        assert sched.wait_until_idle(10)  # its record is pending (a commit is an hour away)
        sched.purge_history("a", "s")
        store.flush()
        assert store.load_claims() == []
    store.close()
    history, _ = _restart(make_store, _fleet(lambda info: None, "o"))
    assert history == []


def test_a_run_left_by_a_schedule_registered_after_start_is_recorded_once_and_not_run_again(
    tmp_path: Path,
) -> None:
    """An agent added after ``start()``; a dead process left only the claim of its schedule's
    run (the state shows the run before). The claim waits for the schedule's registration,
    which takes it up as recovery at start would. Before, recovery took it for a removed
    schedule's run (recorded interrupted) and the slot ran again."""
    with YamlStateStore(tmp_path) as dead:
        dead.update_schedule_state("a", "s", next_run_at=T0, type="interval", cadence="every 1h")
        dead.claim_runs([RunClaim("a", "s", "run-s", T0, T0)])  # then killed
    ran: list[str] = []
    sched = ThreadedScheduler(state_dir=tmp_path, clock=FakeClock(T0), commit_delay=0.5)
    sched.start()
    try:
        sched.add_agent(_fleet(lambda info: ran.append(info.schedule), "s", "o"))
        sched.run_pending()
        assert sched.wait_until_idle(10)
        history = [(r.run_id, r.status) for r in sched.history("a", "s")]
    finally:
        sched.stop()
    assert history == [("run-s", RunStatus.INTERRUPTED)]
    assert "s" not in ran  # at most once per slot


def test_a_run_without_work_followed_by_a_run_now_leaves_no_claim(make_store: StoreMaker) -> None:
    """Its claim is no longer the schedule's latest when the commit writes its end: the end
    that state shows after it tells its fate (it left no record to wait for)."""
    store, sched = runs_without_work(make_store, run_now=True)
    sched.stop()
    store.close()


def _without_work(make_store: StoreMaker) -> tuple[StateStore, ThreadedScheduler, FakeClock]:
    """A scheduler, not started, whose a/s finds no work (a/o runs beside it), committing an
    hour apart unless told to."""
    clock = FakeClock(T0)
    store = make_store(clock, 3600)
    sched = ThreadedScheduler(store=store, work_sources={"q": _NoWork()})
    schedules = {"s": Schedule.interval("1m", work_source="q"), "o": Schedule.interval("1h")}
    sched.add_agent(Agent("a", job=lambda info: None, schedules=schedules))
    return store, sched, clock


def runs_without_work(
    make_store: StoreMaker, *, run_now: bool
) -> tuple[StateStore, ThreadedScheduler]:
    """Three slots of a schedule whose work source has nothing (and as many run-nows of it
    before each commit, ``run_now``), each flushed: no claim may stay. The scheduler runs on."""
    store, sched, clock = _without_work(make_store)
    sched.start()
    for slot in range(3):
        if slot:  # not after the last: no fourth run may race the caller's next step
            clock.advance(61)
        sched.run_pending()
        assert sched.wait_until_idle(10)
        if run_now:
            sched.trigger("a", "s", wait=True)  # finds no work either
        store.flush()
    assert store.load_claims() == []
    return store, sched


def test_an_ad_hoc_run_a_dead_leader_left_is_recorded_at_the_next_ad_hoc_run(
    make_store: StoreMaker,
) -> None:
    dead = make_store()
    before = T0.replace(hour=11)
    dead.update_schedule_state(
        "a", "manual", type="manual", last_run_at=before, last_finished_at=before
    )
    dead.claim_runs([RunClaim("a", "manual", "run-m", T0, None)])  # then killed
    dead.close()
    store = make_store(FakeClock(T0.replace(hour=13)))
    sched = ThreadedScheduler(store=store)
    sched.add_agent(_fleet(lambda info: None, "o"))
    with sched:
        sched.run_pending()  # o's first run, which would take the agent's one slot
        assert sched.wait_until_idle(10)
        later = sched.trigger("a", wait=True)
        assert later.success, later
        store.flush()
        history = [(r.run_id, r.status) for r in store.get_history("a", "manual")]
        assert store.load_claims() == []
    store.close()
    assert history == [(later.run_id, RunStatus.SUCCESS), ("run-m", RunStatus.INTERRUPTED)]
