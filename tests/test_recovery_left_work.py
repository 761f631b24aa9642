"""What a leader that died between its writes leaves, and what the next one makes of it.

Each test writes a state directory as a leader killed at one moment would have left it (its
claims, its state, its history), through the store's own calls, then starts a scheduler on it
and checks the promise: every run that started has a record, and no slot runs twice.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from attrs import evolve
from scheduler_helpers import crash_copy

from herdsched import Agent, RunStatus, Schedule, Status, ThreadedScheduler, TriggerInfo
from herdsched.models import RunRecord, TriggerType
from herdsched.store.base import RunClaim
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)
SLOT = T0 + timedelta(minutes=1)


class Ledger:
    def __init__(self) -> None:
        self.slots: list[datetime | None] = []

    def __call__(self, info: TriggerInfo) -> str:
        self.slots.append(info.scheduled_for)
        return "ok"


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def next_leader(tmp_path: Path, ledger: Ledger) -> Iterator[ThreadedScheduler]:
    """The scheduler that starts on what the dead leader left, a minute after ``SLOT``."""
    clock = FakeClock(SLOT + timedelta(seconds=30))
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, lease_ttl=5)
    sched.add_agent(Agent("a", job=ledger, schedules={"s": Schedule.interval("5m")}))
    yield sched
    sched.stop()


def left_behind(tmp_path: Path, *, claims: list[RunClaim], **state: object) -> YamlStateStore:
    """A store on ``tmp_path`` holding ``claims`` and ``state`` for a/s, as a leader wrote them."""
    store = YamlStateStore(tmp_path)
    store.update_schedule_state(
        "a", "s", type="interval", cadence="every 5m", last_finished_at=T0, **state
    )
    store.claim_runs(claims)
    return store


def records(tmp_path: Path, sched: ThreadedScheduler) -> dict[str, RunRecord]:
    """a/s's records as another process reads them once ``sched`` committed."""
    sched.store.flush()
    store = YamlStateStore(tmp_path)
    try:
        return {record.run_id: record for record in store.get_history("a", "s", 100)}
    finally:
        store.close()


def ended_run() -> RunRecord:
    """The record of the run of slot ``SLOT``, which succeeded."""
    return RunRecord(
        run_id="ended",
        agent="a",
        schedule="s",
        trigger_type=TriggerType.INTERVAL,
        scheduled_for=SLOT,
        started_at=SLOT,
        finished_at=SLOT + timedelta(seconds=2),
        status=RunStatus.SUCCESS,
    )


def test_every_unfinished_claim_of_a_schedule_is_recorded_not_only_the_last(
    tmp_path: Path, next_leader: ThreadedScheduler
) -> None:
    """A run ended, a run-now waiting for the schedule started at once, and the leader died
    before its group commit: the run that had ended had no record at all."""
    timer = RunClaim("a", "s", "timer-run", SLOT, SLOT)
    run_now = RunClaim("a", "s", "run-now", SLOT + timedelta(seconds=4), None)
    left_behind(tmp_path, claims=[timer, run_now]).close()
    next_leader.start()
    found = records(tmp_path, next_leader)
    assert found["timer-run"].status is RunStatus.INTERRUPTED
    assert found["timer-run"].trigger_type is TriggerType.INTERVAL
    assert found["timer-run"].scheduled_for == SLOT
    assert found["run-now"].status is RunStatus.INTERRUPTED
    assert found["run-now"].trigger_type is TriggerType.MANUAL


def test_a_run_the_state_shows_going_on_is_recorded_when_a_later_claim_takes_its_place(
    tmp_path: Path, next_leader: ThreadedScheduler
) -> None:
    """The state showed the timer's run going on (its claim dropped, since the state carried
    it); the run-now after it had a claim: only the run-now was recorded."""
    run_now = RunClaim("a", "s", "run-now", SLOT + timedelta(seconds=4), None)
    left_behind(
        tmp_path,
        claims=[run_now],
        status="running",
        last_run_at=SLOT,
        last_slot_at=SLOT,
        running_run_id="timer-run",
        next_run_at=SLOT,
    ).close()
    next_leader.start()
    found = records(tmp_path, next_leader)
    assert set(found) == {"timer-run", "run-now"}
    assert {record.status for record in found.values()} == {RunStatus.INTERRUPTED}


@pytest.mark.parametrize("status", ["running", "paused"])
def test_a_run_recorded_whose_end_did_not_reach_the_state_is_taken_up_and_its_slot_not_run(
    tmp_path: Path, next_leader: ThreadedScheduler, ledger: Ledger, status: str
) -> None:
    """The group commit appended the run's record, then could not write the state (a full
    disk) and the leader died. Paused, a resume ran the slot again; running, the success was
    recorded a second time, as interrupted."""
    store = left_behind(
        tmp_path,
        claims=[],
        status=status,
        last_run_at=SLOT,
        last_slot_at=SLOT,
        running_run_id="ended",
        next_run_at=SLOT,
    )
    store.append_run(ended_run())
    store.flush()
    store.close()
    next_leader.start()
    if status == "paused":
        next_leader.resume("a", "s")
    next_leader.run_pending()
    assert next_leader.wait_until_idle(10)
    assert SLOT not in ledger.slots
    found = records(tmp_path, next_leader)
    assert [r.status for r in found.values()] == [RunStatus.SUCCESS]
    state = next_leader.store.get_schedule_state("a", "s")
    assert state.running_run_id is None and state.last_result is RunStatus.SUCCESS
    assert state.next_run_at is not None and state.next_run_at > SLOT


def test_a_run_recorded_interrupted_by_a_takeover_that_could_not_write_the_state_is_not_run_again(
    tmp_path: Path, next_leader: ThreadedScheduler, ledger: Ledger
) -> None:
    """A leader claimed the slot and died; the next recorded the run interrupted but could not
    write the state (a full disk) and died too. The record has no end time, so it was taken
    for a stale run older than the state's last end: the third leader ran the slot again."""
    store = left_behind(
        tmp_path, claims=[RunClaim("a", "s", "cut-short", SLOT, SLOT)], next_run_at=SLOT
    )
    # the slot's run as a takeover records it: interrupted, with no end
    cut_short = ended_run()
    store.append_run(
        evolve(cut_short, run_id="cut-short", finished_at=None, status=RunStatus.INTERRUPTED)
    )
    store.flush()  # the history's append, the first write of the group commit
    store.close()
    next_leader.start()
    next_leader.run_pending()
    assert next_leader.wait_until_idle(10)
    assert SLOT not in ledger.slots
    found = records(tmp_path, next_leader)
    assert [r.status for r in found.values()] == [RunStatus.INTERRUPTED]
    state = next_leader.store.get_schedule_state("a", "s")
    assert state.running_run_id is None
    assert state.next_run_at is not None and state.next_run_at > SLOT


def test_a_once_schedule_paused_while_its_run_went_on_is_completed_and_not_run_again(
    tmp_path: Path,
) -> None:
    clock = FakeClock(T0)
    ran: list[datetime | None] = []
    started, finish = threading.Event(), threading.Event()

    def job(info: TriggerInfo) -> str:
        ran.append(info.scheduled_for)
        started.set()
        assert finish.wait(10)
        return "ok"

    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock)
    sched.add_agent(Agent("a", job=job, schedules={"o": Schedule.once(SLOT)}))
    sched.start()
    try:
        clock.advance(timedelta(minutes=2))
        sched.run_pending()
        assert started.wait(10)
        sched.pause("a", "o")  # while its run goes on
        finish.set()
        assert sched.wait_until_idle(10)
        sched.resume("a", "o")
        clock.advance(timedelta(minutes=1))
        sched.run_pending()
        assert sched.wait_until_idle(10)
        assert ran == [SLOT]
        assert sched.store.get_schedule_state("a", "o").status is Status.COMPLETED
    finally:
        sched.stop()


def test_a_change_by_a_person_writes_the_pending_run_records_before_the_states(
    tmp_path: Path,
) -> None:
    """A pause wrote every pending transition along (a run's end among them) but not the run
    records, which wait for the group commit: a crash then left a run ended with no record."""
    store = YamlStateStore(tmp_path, commit_delay=60)
    store.record_transition(
        "a",
        "s",
        status="idle",
        last_finished_at=SLOT + timedelta(seconds=2),
        running_run_id=None,
        last_result="success",
    )
    store.append_run(ended_run())
    store.update_schedule_state("a", "t", status="paused")  # the state file is written now
    # a crash here: what another process reads
    after_crash = YamlStateStore(tmp_path)
    assert after_crash.get_schedule_state("a", "s").last_finished_at == ended_run().finished_at
    assert [r.run_id for r in after_crash.get_history("a", "s", 10)] == ["ended"]
    after_crash.close()
    store.close()


@pytest.mark.parametrize("earlier", [False, True])
def test_a_claim_waiting_for_its_schedule_to_be_registered_outlives_a_second_crash(
    tmp_path: Path, ledger: Ledger, earlier: bool
) -> None:
    """The schedule is registered only after ``start()``: its claim waited in memory, and the
    new leader's first group commit took it out of the journal, so a leader killed before the
    registration left the run with no record that any later leader would write. So did a
    claim before the schedule's last (``earlier``: a run-now started as it ended), once the
    first fix took the claims it read for recorded: the state showed an earlier run."""
    claims = [RunClaim("a", "s", "left", SLOT, SLOT)]
    if earlier:
        claims.append(RunClaim("a", "s", "run-now", SLOT + timedelta(seconds=4), None))
    left_behind(tmp_path, claims=claims, last_run_at=T0 if earlier else None).close()
    clock = FakeClock(SLOT + timedelta(seconds=30))
    second = ThreadedScheduler(state_dir=tmp_path, clock=clock, lease_ttl=5)
    second.add_agent(Agent("b", job=ledger, schedules={"t": Schedule.interval("5m")}))
    try:
        second.start()  # a/s is not registered yet
        second.store.flush()
        crash = crash_copy(tmp_path, tmp_path.parent / f"{tmp_path.name}-crash")  # killed before
    finally:
        second.stop()
    third = ThreadedScheduler(state_dir=crash, clock=clock, lease_ttl=5)
    try:
        third.start()
        third.add_agent(Agent("a", job=ledger, schedules={"s": Schedule.interval("5m")}))
        found = records(crash, third)
    finally:
        third.stop()
    assert found["left"].status is RunStatus.INTERRUPTED
    assert found["left"].scheduled_for == SLOT
    assert [r.status for r in found.values()] == [RunStatus.INTERRUPTED] * len(claims)
    # the state shows the runs it recorded, so the claims went with that commit
    reader = YamlStateStore(crash)
    assert reader.get_schedule_state("a", "s").last_run_at == claims[-1].run_at
    assert [claim.agent for claim in reader.load_claims()] in ([], ["b"])  # b/t may run now
    reader.close()


@pytest.mark.parametrize("paused", [False, True], ids=["idle", "paused"])
def test_a_run_now_of_a_once_schedule_cut_by_a_crash_before_its_time_keeps_that_time(
    tmp_path: Path, paused: bool
) -> None:
    """A test run (run-now) of a once schedule an hour before its time, the process killed
    while it ran: the next leader completed the schedule, so its one real run never came. It
    is recorded interrupted, and the schedule runs at its time (a pause made before stays)."""
    clock = FakeClock(T0)
    at = T0 + timedelta(hours=1)
    ran: list[TriggerType] = []
    started, finish = threading.Event(), threading.Event()

    def job(info: TriggerInfo) -> str:
        ran.append(info.trigger_type)
        if info.trigger_type is TriggerType.MANUAL:
            started.set()
            assert finish.wait(10)
        return "ok"

    def fleet() -> Agent:
        return Agent("a", job=job, schedules={"o": Schedule.once(at)})

    live = tmp_path / "live"
    sched = ThreadedScheduler(state_dir=live, clock=clock, commit_delay=0)
    sched.add_agent(fleet())
    with sched:
        if paused:
            sched.pause("a", "o")
        sched.trigger("a", "o")
        assert started.wait(10)
        sched.store.flush()
        crashed = crash_copy(live, tmp_path / "crashed")
        finish.set()
    ran.clear()
    after = ThreadedScheduler(state_dir=crashed, clock=clock, commit_delay=0)
    after.add_agent(fleet())
    with after:
        after.run_pending()
        state = after.store.get_schedule_state("a", "o")
        assert state.status is (Status.PAUSED if paused else Status.IDLE)
        assert state.next_run_at == at
        if paused:
            after.resume("a", "o")
        clock.advance(timedelta(hours=1))
        after.run_pending()
        assert after.wait_until_idle(10)
        history = [(r.trigger_type, r.status) for r in after.history("a", "o")]
        assert after.store.get_schedule_state("a", "o").status is Status.COMPLETED
    assert ran == [TriggerType.ONCE]
    assert history == [
        (TriggerType.ONCE, RunStatus.SUCCESS),
        (TriggerType.MANUAL, RunStatus.INTERRUPTED),
    ]
