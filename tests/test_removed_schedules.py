"""Schedules taken out of the fleet: shown as removed, not steered, and back when added again.

Before, a schedule removed from the fleet file kept its stored state: ``herdsched status`` and
``list`` showed it ``idle`` with a next run that never came, and ``pause``/``trigger`` on it
succeeded (the run was queued, then skipped by the scheduler).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import Blocker, Recorder

import herdsched.events as ev
from herdsched import Agent, RunStatus, Schedule, Status, ThreadedScheduler
from herdsched.api import RestApi
from herdsched.cli import main
from herdsched.errors import ScheduleNotFoundError
from herdsched.store.base import StateStore
from herdsched.store.postgres import PostgresStateStore
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock, as_separate_processes

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


def _run_fleet(
    state_dir: Path, clock: FakeClock, schedules: list[str], store: StateStore | None = None
) -> None:
    """One start, pass and stop of agent ``bot`` with ``schedules`` (each every hour)."""
    where: dict[str, Any] = {"store": store} if store is not None else {"state_dir": state_dir}
    sched = ThreadedScheduler(**where, clock=clock, timezone="UTC")
    agent = Agent("bot", job=Recorder(), schedules={n: Schedule.interval("1h") for n in schedules})
    sched.add_agent(agent)
    with sched:
        sched.run_pending()
        assert sched.wait_until_idle(10)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


def test_the_leader_marks_what_its_fleet_lost_and_clears_it_when_it_comes_back(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    _run_fleet(tmp_path, clock, ["keep", "gone"])
    clock.advance(60)
    with caplog.at_level(logging.INFO, logger="herdsched"):
        _run_fleet(tmp_path, clock, ["keep"])
    assert "1 schedule(s) with state in the store are not in this scheduler's fleet (bot/gone)" in (
        caplog.text
    )
    store = YamlStateStore(tmp_path)
    gone, keep = store.get_schedule_state("bot", "gone"), store.get_schedule_state("bot", "keep")
    assert gone.removed_at == T0.replace(minute=1)
    # its plan stays, for a program that registers it after start(): nobody shows it
    assert gone.next_run_at == T0.replace(hour=10)
    assert gone.last_run_at == T0  # what it did stays
    assert keep.removed_at is None and keep.next_run_at is not None
    store.close()
    clock.advance(60)
    _run_fleet(tmp_path, clock, ["keep", "gone"])
    store = YamlStateStore(tmp_path)
    back = store.get_schedule_state("bot", "gone")
    assert back.removed_at is None and back.next_run_at == T0.replace(hour=10)
    store.close()


def test_a_hot_reload_marks_what_it_drops_and_clears_what_it_brings_back(
    tmp_path: Path, clock: FakeClock
) -> None:
    def fleet(*names: str) -> list[Agent]:
        return [Agent("bot", job=Recorder(), schedules={n: Schedule.interval("1h") for n in names})]

    def state_after(*reloads: tuple[str, ...]) -> Any:
        sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
        sched.set_agents(fleet("keep", "gone"))
        with sched:
            sched.run_pending()
            assert sched.wait_until_idle(10)
            clock.advance(60)
            for names in reloads:
                sched.set_agents(fleet(*names))
        store = YamlStateStore(tmp_path)
        try:
            return store.get_schedule_state("bot", "gone")
        finally:
            store.close()

    dropped = state_after(("keep",))
    assert dropped.removed_at == T0.replace(minute=1) and dropped.next_run_at is None
    assert state_after(("keep",), ("keep", "gone")).removed_at is None


def test_a_postgresql_store_carries_the_mark_across_hosts(
    postgres_dsn: str, pg_namespace: str, clock: FakeClock, tmp_path: Path
) -> None:
    def store() -> PostgresStateStore:
        return PostgresStateStore(postgres_dsn, namespace=pg_namespace, clock=clock)

    _run_fleet(tmp_path, clock, ["keep", "gone"], store())
    _run_fleet(tmp_path, clock, ["keep"], store())
    other_host = store()
    try:
        gone = other_host.get_schedule_state("bot", "gone")
        assert gone.removed_at == T0 and gone.next_run_at == T0.replace(hour=10)  # kept
    finally:
        other_host.close()
    _run_fleet(tmp_path, clock, ["keep", "gone"], store())
    other_host = store()
    try:
        assert other_host.get_schedule_state("bot", "gone").removed_at is None
    finally:
        other_host.close()


def test_stored_definitions_and_ad_hoc_runs_are_not_marked(
    tmp_path: Path, clock: FakeClock
) -> None:
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    sched.add_agent(Agent("bot", job=Recorder()))
    with sched:
        sched.add_schedule("bot", "stored", Schedule.interval("1h"), persist=True)
        assert sched.trigger("bot").success  # an ad hoc run: recorded as bot/manual
        sched.run_pending()
        assert sched.wait_until_idle(10)
    _run_fleet(tmp_path, clock, [])  # the same agent, nothing in code: both are its own
    store = YamlStateStore(tmp_path)
    states = store.get_agent_schedule_states("bot")
    assert set(states) == {"stored", "manual"}
    assert [name for name, state in states.items() if state.removed_at is not None] == []
    store.close()


def test_stored_definitions_of_an_agent_gone_from_the_fleet_are_marked_and_can_be_forgotten(
    tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run-time schedule whose agent left the fleet stayed ``idle`` with a next run that
    never came, and ``forget`` refused it as "not removed from the fleet"."""
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    sched.add_agent(Agent("bot", job=Recorder()))
    sched.add_agent(Agent("other", job=Recorder(), schedules={"tick": Schedule.interval("1h")}))
    with sched:
        sched.add_schedule("bot", "mine", Schedule.interval("2h"), persist=True, owner="alice")
        sched.run_pending()
        assert sched.wait_until_idle(10)
    clock.advance(60)
    later = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    later.add_agent(Agent("other", job=Recorder(), schedules={"tick": Schedule.interval("1h")}))
    with later:
        later.run_pending()
        assert later.wait_until_idle(10)
    store = YamlStateStore(tmp_path)
    mine = store.get_schedule_state("bot", "mine")
    assert mine.removed_at == T0.replace(minute=1)
    assert mine.next_run_at == T0.replace(hour=11)  # kept, should its agent come back
    store.close()
    code, out, err = _cli(capsys, "status", "--state-dir", str(tmp_path))
    [row] = [line.split() for line in out.splitlines() if "mine" in line.split()]
    assert code == 0 and "removed" in row, err
    code, out, err = _cli(capsys, "forget", "bot", "--state-dir", str(tmp_path))
    assert (code, out) == (0, "bot/mine: forgotten, with its state and 1 run record(s)\n"), err
    store = YamlStateStore(tmp_path)
    assert store.get_all_schedule_states().get("bot", {}) == {}
    assert store.load_definitions().get("bot", {}) == {}  # its definition went with it
    store.close()
    back = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    back.add_agent(Agent("bot", job=Recorder()))  # the agent is back: nothing comes back with it
    assert back.get_status().schedules == []


def test_a_definition_written_by_hand_for_an_agent_not_in_the_fleet_is_marked_removed(
    tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """A definition in ``schedules.yaml`` with no state yet (written by hand, as state.md
    shows one) whose agent is not in the fleet was shown ``idle`` for good, and ``forget``
    refused it; it is marked removed, and registered later it is planned as any other."""
    (tmp_path / "schedules.yaml").write_text(
        "format_version: 1\nagents:\n  triage:\n    schedules:\n"
        '      nightly: {type: cron, cron: "0 3 * * *", prompt: "Summarise the day."}\n'
    )
    fleet = {"tick": Schedule.interval("1h")}
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    sched.add_agent(Agent("bot", job=Recorder(), schedules=fleet))
    with sched:
        sched.run_pending()
        assert sched.wait_until_idle(10)
    code, out, _ = _cli(capsys, "status", "--state-dir", str(tmp_path))
    [row] = [line.split() for line in out.splitlines() if "nightly" in line.split()]
    assert code == 0 and "removed" in row, out
    later = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    later.add_agent(Agent("bot", job=Recorder(), schedules=fleet))
    with later:
        later.run_pending()
        later.add_agent(Agent("triage", job=Recorder()))  # registered after the start
        [nightly] = [s for s in later.get_status().schedules if s.agent == "triage"]
        assert (nightly.status, nightly.next_run_at) == (Status.IDLE, T0.replace(day=3, hour=3))
    code, out, _ = _cli(capsys, "status", "--state-dir", str(tmp_path))
    [row] = [line.split() for line in out.splitlines() if "nightly" in line.split()]
    assert code == 0 and "idle" in row, out
    _run_fleet(tmp_path, clock, ["tick"])
    code, out, _ = _cli(capsys, "forget", "triage", "--state-dir", str(tmp_path))
    assert (code, out) == (0, "triage/nightly: forgotten, with its state and 0 run record(s)\n")
    store = YamlStateStore(tmp_path)
    assert store.load_definitions().get("triage", {}) == {}
    store.close()


def test_a_stored_definition_registered_after_the_start_catches_up_its_missed_slot(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A program that starts its scheduler first and registers its agents after (a later
    notebook cell, an app factory): the mark of a run-time schedule whose agent was not
    registered yet wiped its next run, so the slot missed while no process ran was lost."""
    ran: list[str] = []
    first = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    first.add_agent(Agent("triage", job=lambda info: ran.append(info.schedule)))
    with first:
        first.add_schedule("triage", "nightly", Schedule.cron("0 3 * * *"), persist=True)
    clock.advance(timedelta(days=1))  # down over the 03:00 slot
    later = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    with later:
        later.run_pending()  # leads, the agent not registered yet: marked removed for now
        later.add_agent(Agent("triage", job=lambda info: ran.append(info.schedule)))
        later.run_pending()
        assert later.wait_until_idle(10)
    assert ran == ["nightly"]  # the missed slot, caught up once
    state = YamlStateStore(tmp_path).get_schedule_state("triage", "nightly")
    assert state.removed_at is None and state.next_run_at == T0.replace(day=4, hour=3)


def test_a_schedule_in_code_registered_after_the_start_catches_up_its_missed_slots(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The same for a schedule defined in code, whose agent a program registers after
    ``start()``: marked removed at the start, it lost its plan, and the cron slots missed
    while no process ran were neither run nor recorded missed (registered before the start,
    the first runs once at once, as ``catch_up="once"`` says)."""

    def agent(ran: list[datetime | None]) -> Agent:
        hourly = Schedule.cron("0 * * * *")
        return Agent(
            "bot", job=lambda info: ran.append(info.scheduled_for), schedules={"h": hourly}
        )

    for registered_late in (False, True):
        directory, ran = tmp_path / str(registered_late), []
        sched = ThreadedScheduler(state_dir=directory, clock=FakeClock(T0), timezone="UTC")
        sched.add_agent(agent(ran))
        with sched:
            sched.run_pending()
        clock_after = FakeClock(T0 + timedelta(hours=3, minutes=30))  # down over 10, 11, 12
        later = ThreadedScheduler(state_dir=directory, clock=clock_after, timezone="UTC")
        if not registered_late:
            later.add_agent(agent(ran))
        with later:
            later.run_pending()
            if registered_late:
                later.add_agent(agent(ran))
                later.run_pending()
            assert later.wait_until_idle(10)
            (status,) = later.get_status().schedules
            history = later.history("bot", "h")
        assert ran == [T0.replace(hour=10)], registered_late  # the first missed slot, once
        assert status.next_run_at == T0.replace(hour=13)
        assert [r.status for r in history] == [RunStatus.SUCCESS]


def test_a_schedule_put_back_in_the_fleet_after_a_restart_plans_afresh(
    tmp_path: Path,
) -> None:
    """Taken out of the fleet file, the scheduler restarted, put back a month later: the plan
    kept at the removal (for a late registration) made it run at once for a slot a month old.
    Put back in a later lead, it waits for its next slot, as before plans were kept."""
    ran: list[datetime | None] = []

    def fleet(*names: str) -> Agent:
        schedules = {n: Schedule.cron("0 3 * * *") for n in names}
        return Agent("bot", job=lambda info: ran.append(info.scheduled_for), schedules=schedules)

    def lead(at: datetime, *names: str) -> None:
        sched = ThreadedScheduler(state_dir=tmp_path, clock=FakeClock(at), timezone="UTC")
        sched.add_agent(fleet(*names))
        with sched:
            sched.run_pending()
            assert sched.wait_until_idle(10)

    lead(T0, "keep", "nightly")
    lead(T0 + timedelta(hours=1), "keep")  # nightly taken out of the fleet file
    month_later = T0 + timedelta(days=30)
    lead(month_later, "keep", "nightly")  # and put back
    assert ran == [T0.replace(day=3, hour=3)]  # keep's catch-up after the month down, only
    with YamlStateStore(tmp_path) as store:
        nightly = store.get_schedule_state("bot", "nightly")
    assert nightly.removed_at is None
    assert nightly.next_run_at == datetime(2026, 4, 2, 3, 0, tzinfo=timezone.utc)


def test_a_standby_shows_no_next_run_for_a_run_time_schedule_the_leader_marked_removed(
    tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mark keeps a run-time definition's next run (for when its agent comes back): a
    standby that has the agent showed that past time as the next run, ``not_due``."""
    first = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC", lease_ttl=None)
    first.add_agent(Agent("triage", job=Recorder()))
    with first:
        first.add_schedule("triage", "nightly", Schedule.cron("0 3 * * *"), persist=True)
    clock.advance(timedelta(days=1))
    with as_separate_processes():
        lead = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
        lead.add_agent(Agent("other", job=Recorder()))
        standby = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
        standby.add_agent(Agent("triage", job=Recorder()))
        with lead, standby:
            assert lead.is_leader and not standby.is_leader
            lead.run_pending()
            lead.store.flush()  # the mark, group-committed
            standby.run_pending()
            stored = standby.store.get_schedule_state("triage", "nightly")
            assert stored.removed_at is not None and stored.next_run_at is not None
            [item] = [i for i in standby.get_status().schedules if i.schedule == "nightly"]
            assert item.next_run_at is None
            # nor its REST answer, which previewed one from the cadence
            answer = RestApi(standby).handle("GET", "/api/schedule/triage/nightly")
            assert answer.body["next_run_at"] is None
    code, out, _ = _cli(capsys, "status", "--json", "--state-dir", str(tmp_path))
    [row] = [r for r in json.loads(out)["schedules"] if r["schedule"] == "nightly"]
    assert code == 0 and row["removed_at"] is not None and row["next_run_at"] is None


def test_a_run_time_schedule_dropped_by_a_hot_reload_catches_up_when_it_comes_back(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A hot reload that drops an agent marks its run-time schedules removed: the mark wiped
    their next run, so a slot missed before the agent came back was lost."""
    ran: list[str] = []

    def job(info: Any) -> None:
        ran.append(info.schedule)

    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    sched.add_agent(Agent("triage", job=job))
    with sched:
        sched.add_schedule("triage", "nightly", Schedule.cron("0 3 * * *"), persist=True)
        sched.set_agents([Agent("other", job=job)])
        stored = sched.store.get_schedule_state("triage", "nightly")
        assert stored.removed_at is not None and stored.next_run_at is not None
        clock.advance(timedelta(days=1))  # past the 03:00 slot, the agent gone
        sched.set_agents([Agent("other", job=job), Agent("triage", job=job)])
        sched.run_pending()
        assert sched.wait_until_idle(10)
    assert ran == ["nightly"]


def test_the_command_line_shows_removed_schedules_and_will_not_steer_them(
    tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    _run_fleet(tmp_path, clock, ["keep", "gone"])
    _run_fleet(tmp_path, clock, ["keep"])
    where = ("--state-dir", str(tmp_path))
    code, out, _ = _cli(capsys, "status", *where)
    assert code == 0 and "Schedules:       1 idle, 1 removed" in out
    gone_row = next(line for line in out.splitlines() if line.startswith("bot    gone"))
    assert gone_row.split()[5:7] == ["removed", "-"]  # after "every 1h"
    code, out, _ = _cli(capsys, "list", *where)
    assert "removed" in next(line for line in out.splitlines() if "gone" in line)
    for command in ("pause", "resume", "trigger"):
        code, out, err = _cli(capsys, command, "bot/gone", *where)
        assert code == 1 and out == "", command
        assert "bot/gone was removed from the fleet (2026-03-02T09:00:00.000Z)" in err
        assert "adding it back to the fleet runs it again" in err
    code, out, _ = _cli(capsys, "pause", "bot", *where)  # the agent: what still runs
    assert code == 0 and out == "bot/keep: paused\n"
    code, out, _ = _cli(capsys, "history", "bot/gone", *where)  # what it did stays readable
    assert code == 0 and "interval  success" in out
    _run_fleet(tmp_path, clock, [])  # the agent's last schedule goes too: "runs it" read wrong
    code, out, err = _cli(capsys, "pause", "bot", *where)
    assert code == 1 and "every schedule of bot was removed from the fleet" in err
    assert "no scheduler runs them; their state and history remain, and adding them back" in err
    store = YamlStateStore(tmp_path)
    assert store.trigger_requests() == []
    assert store.get_schedule_state("bot", "gone").status.value == "idle"
    store.close()


@pytest.fixture(params=["yaml", "postgres"])
def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Callable[[], StateStore]:
    """Opens a store on one place: a state directory, or a namespace on the test server."""
    if request.param == "yaml":
        return lambda: YamlStateStore(tmp_path, clock=clock)
    dsn = request.getfixturevalue("postgres_dsn")
    namespace = request.getfixturevalue("pg_namespace")
    return lambda: PostgresStateStore(dsn, namespace=namespace, clock=clock)


@pytest.mark.parametrize("persist", [False, True])
def test_a_run_ending_while_its_schedule_is_removed_does_not_bring_its_state_back(
    store_factory: Callable[[], StateStore],
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    persist: bool,
) -> None:
    """The run's end lands between the store's removal of the state and the entry's: before,
    its transition was written afterwards (on the YAML store), and the removed schedule showed
    in ``status`` with a state for good."""
    job = Blocker()
    store = store_factory()
    sched = ThreadedScheduler(store=store, clock=clock, timezone="UTC")
    sched.add_agent(Agent("bot", job=job, schedules={}))
    ended = threading.Event()
    sched.add_listener(lambda event: ended.set(), ev.JobSucceeded)
    # a stored definition's removal clears the state only while no namesake is defined
    removal = "remove_schedule_state_unless_defined" if persist else "remove_schedule_state"
    original = getattr(store, removal)

    def remove_then_let_the_run_end(agent: str, schedule: str) -> None:
        original(agent, schedule)
        job.release.set()
        assert ended.wait(10)

    with sched:
        sched.add_schedule("bot", "brief", Schedule.interval("1h"), persist=persist)
        sched.trigger("bot", "brief")
        assert job.began.wait(10)
        monkeypatch.setattr(store, removal, remove_then_let_the_run_end)
        sched.remove_schedule("bot", "brief")
        assert sched.wait_until_idle(10)
        store.flush()
        assert "brief" not in store.get_agent_schedule_states("bot")
        assert [s.schedule for s in sched.get_status().schedules] == []
    again = store_factory()
    try:
        assert "brief" not in again.get_agent_schedule_states("bot")
        assert [r.status for r in again.get_history("bot", "brief")] == [RunStatus.SUCCESS]
    finally:
        again.close()


def test_a_run_that_ends_after_its_schedule_was_removed_is_recorded(
    store_factory: Callable[[], StateStore], clock: FakeClock
) -> None:
    """Its job ran: before, its outcome was dropped with the entry, so neither ``history()``
    nor ``GET .../runs/<id>`` knew the run, and its events never came."""
    job = Blocker()
    store = store_factory()
    sched = ThreadedScheduler(store=store, clock=clock, timezone="UTC")
    sched.add_agent(Agent("bot", job=job, schedules={}))
    succeeded: list[ev.JobSucceeded] = []
    sched.add_listener(succeeded.append, ev.JobSucceeded)
    with sched:
        sched.add_schedule("bot", "brief", Schedule.manual(), persist=True)
        run_id = sched.trigger("bot", "brief").run_id
        assert job.began.wait(10)
        sched.remove_schedule("bot", "brief")
        job.release.set()
        assert sched.wait_until_idle(10)
        assert [e.record.run_id for e in succeeded] == [run_id]
    again = store_factory()
    try:
        assert "brief" not in again.get_agent_schedule_states("bot")
        records = again.get_history("bot", "brief")
        assert [(r.run_id, r.status) for r in records] == [(run_id, RunStatus.SUCCESS)]
    finally:
        again.close()


def test_a_namesake_added_while_the_old_run_runs_does_not_take_its_outcome(
    store_factory: Callable[[], StateStore], clock: FakeClock
) -> None:
    """The old run's end was applied to whatever schedule held the name: the new one counted
    the old one's failure, showed its error and had its plan computed from the old run."""
    began, release = threading.Event(), threading.Event()

    def job(info: object) -> None:
        began.set()
        assert release.wait(10)
        raise RuntimeError("the old schedule's job failed")

    store = store_factory()
    sched = ThreadedScheduler(store=store, clock=clock, timezone="UTC")
    sched.add_agent(Agent("bot", job=job, schedules={}))
    with sched:
        sched.add_schedule("bot", "brief", Schedule.manual(), persist=True)
        run_id = sched.trigger("bot", "brief").run_id
        assert began.wait(10)
        sched.remove_schedule("bot", "brief")
        sched.add_schedule("bot", "brief", Schedule.cron("0 12 * * *"), persist=True)
        store.flush()
        fresh = store.get_schedule_state("bot", "brief")
        release.set()
        assert sched.wait_until_idle(10)
        store.flush()
        after = store.get_schedule_state("bot", "brief")
        assert (after.consecutive_failures, after.last_result, after.last_error) == (0, None, None)
        assert after == fresh
        (status,) = [s for s in sched.get_status().schedules if s.schedule == "brief"]
        assert (status.status, status.next_run_at) == (Status.IDLE, T0 + timedelta(hours=3))
    records = store.get_history("bot", "brief")
    assert [(r.run_id, r.status) for r in records] == [(run_id, RunStatus.FAILED)]


def _leader_and_another(
    store_factory: Callable[[], StateStore], clock: FakeClock, job: Callable[[Any], Any]
) -> tuple[ThreadedScheduler, ThreadedScheduler]:
    """Two started schedulers of agent ``bot`` on one store, as two processes: the first
    leads."""
    sched, other = (
        ThreadedScheduler(store=store_factory(), clock=clock, timezone="UTC") for _ in "ab"
    )
    for each in (sched, other):
        each.add_agent(Agent("bot", job=job, schedules={}))
    with as_separate_processes():
        sched.start()
        other.start()
    return sched, other


def test_a_namesake_added_in_another_process_while_the_old_run_runs_does_not_take_its_outcome(
    store_factory: Callable[[], StateStore], clock: FakeClock
) -> None:
    """Removed and created again by another process between two looks of the leader, the
    schedule's state was fresh in the store, but the leader took the new definition for a
    change of the old one: the old run's end wrote the old outcome into the new schedule."""
    began, release = threading.Event(), threading.Event()

    def job(info: object) -> None:
        began.set()
        assert release.wait(10)
        raise RuntimeError("the old schedule's job failed")

    sched, other = _leader_and_another(store_factory, clock, job)
    try:
        sched.add_schedule("bot", "brief", Schedule.manual(), persist=True)
        run_id = sched.trigger("bot", "brief").run_id
        assert began.wait(10)
        sched.store.flush()
        other.remove_schedule("bot", "brief")
        other.add_schedule("bot", "brief", Schedule.cron("0 12 * * *"), persist=True)
        sched.refresh()  # the leader takes both in at one look
        release.set()
        assert sched.wait_until_idle(10)
        sched.store.flush()
        after = sched.store.get_schedule_state("bot", "brief")
        assert (after.consecutive_failures, after.last_result, after.last_error) == (0, None, None)
        (status,) = [s for s in sched.get_status().schedules if s.schedule == "brief"]
        assert (status.status, status.next_run_at) == (Status.IDLE, T0 + timedelta(hours=3))
        records = sched.store.get_history("bot", "brief")
        assert [(r.run_id, r.status) for r in records] == [(run_id, RunStatus.FAILED)]
    finally:
        release.set()
        for each in (other, sched):
            each.stop()
            each.store.close()


def test_a_namesake_created_in_another_process_after_a_failed_run_starts_afresh(
    store_factory: Callable[[], StateStore], clock: FakeClock
) -> None:
    """Removed and created again by another process between two looks of the leader, with no
    run going on: the leader kept the removed schedule's state in memory (its failure, its
    error, the backoff's plan), so the namesake went on from them."""
    job = Recorder(lambda info: (_ for _ in ()).throw(RuntimeError("boom")))
    sched, other = _leader_and_another(store_factory, clock, job)
    try:
        sched.add_schedule("bot", "brief", Schedule.interval("10m"), persist=True)
        sched.run_pending()
        assert sched.wait_until_idle(10)
        sched.store.flush()
        assert sched.get_status().schedules[0].consecutive_failures == 1
        other.remove_schedule("bot", "brief")
        later = Schedule.interval("10m", start_at=T0 + timedelta(hours=1))  # not run at once
        other.add_schedule("bot", "brief", later, persist=True)
        sched.refresh()  # the leader takes both in (at one look, or at two)
        (status,) = sched.get_status().schedules
        assert (status.consecutive_failures, status.last_result, status.last_run_at) == (
            0,
            None,
            None,
        )
        other.pause("bot", "brief")
        sched.refresh()
        clock.advance("2h")
        sched.run_pending()
        assert sched.wait_until_idle(10)
        assert len(job.calls) == 1  # paused: the namesake never ran
    finally:
        for each in (other, sched):
            each.stop()
            each.store.close()


def test_a_resume_from_another_process_holds_when_a_run_of_the_paused_schedule_ends(
    store_factory: Callable[[], StateStore], clock: FakeClock
) -> None:
    """The run's end carried the leader's in-memory ``paused`` into its transition and wrote
    it over the resume another process had made meanwhile (the CLI said "resumed", and every
    process showed it paused again)."""
    job = Blocker()
    store = store_factory()
    sched = ThreadedScheduler(store=store, clock=clock, timezone="UTC")
    sched.add_agent(Agent("bot", job=job, schedules={"s": Schedule.interval("1h")}))
    with sched:
        sched.run_pending()
        assert job.began.wait(10)
        sched.pause("bot", "s")
        other = store_factory()  # a CLI or a web worker: `herdsched resume bot/s`
        try:
            other.update_schedule_state("bot", "s", status="idle", consecutive_failures=0)
        finally:
            other.close()
        job.release.set()
        assert sched.wait_until_idle(10)
        store.flush()
        sched.refresh()
        assert sched.get_status().schedules[0].status is Status.IDLE
    again = store_factory()
    try:
        assert again.get_schedule_state("bot", "s").status is Status.IDLE
    finally:
        again.close()


def _bot_on(state_dir: Path, clock: FakeClock) -> ThreadedScheduler:
    """A scheduler of agent ``bot``, with no schedule of its own, on ``state_dir``."""
    sched = ThreadedScheduler(state_dir=state_dir, clock=clock, timezone="UTC")
    sched.add_agent(Agent("bot", job=Recorder(), schedules={}))
    return sched


def test_a_standby_acts_on_what_the_leader_changed_and_takes_over_without_bringing_it_back(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A standby's view was only refreshed to answer status questions: a pause it was asked for
    acted on a schedule the leader had removed (and wrote a state for it), a name the leader
    had freed was "already taken", and when it took over it wrote states back for the removed
    schedules, shown as idle for good."""

    leader, standby = _bot_on(tmp_path, clock), _bot_on(tmp_path, clock)
    with as_separate_processes():
        leader.start()
        for name in ("gone", "moved"):
            leader.add_schedule("bot", name, Schedule.interval("1h"), persist=True)
        standby.start()
        assert (leader.status, standby.status) == ("running", "standby")
        assert {s.schedule for s in standby.get_status().schedules} == {"gone", "moved"}
        leader.remove_schedule("bot", "gone")
        leader.remove_schedule("bot", "moved")
        with pytest.raises(ScheduleNotFoundError):
            standby.pause("bot", "gone")
        standby.add_schedule("bot", "moved", Schedule.interval("2h"), persist=True)
        leader.stop()
        clock.advance(60)
        standby.run_pending()
        assert standby.status == "running"
        standby.stop()
    store = YamlStateStore(tmp_path)
    try:
        assert sorted(store.get_agent_schedule_states("bot")) == ["moved"]
        assert store.get_schedule_state("bot", "moved").cadence == "every 2h"
    finally:
        store.close()


def test_a_standby_taking_over_does_not_bring_back_what_the_leader_removed(
    tmp_path: Path, clock: FakeClock
) -> None:
    leader, standby = _bot_on(tmp_path, clock), _bot_on(tmp_path, clock)
    with as_separate_processes():
        leader.start()
        leader.add_schedule("bot", "gone", Schedule.interval("1h"), persist=True)
        standby.start()
        assert [s.schedule for s in standby.get_status().schedules] == ["gone"]  # its view
        leader.remove_schedule("bot", "gone")
        leader.stop()
        clock.advance(60)
        standby.run_pending()  # nothing asked of it in between: its next pass takes over
        assert standby.status == "running"
        standby.stop()
    store = YamlStateStore(tmp_path)
    try:
        assert "gone" not in store.get_agent_schedule_states("bot")
    finally:
        store.close()


def test_a_namesake_created_elsewhere_while_the_leader_removes_the_schedule_starts_afresh(
    store_factory: Callable[[], StateStore], clock: FakeClock
) -> None:
    """The leader removed a schedule whose failed run's end was still waiting for its group
    commit, and another process created the name right after the definition's deletion: the
    compare-and-remove left the namesake's state alone, and the removed run's pending end with
    it, which the next commit wrote into the namesake (another schedule's failure count,
    error and last run)."""
    job = Recorder(lambda info: (_ for _ in ()).throw(RuntimeError("the removed one failed")))
    sched, other = _leader_and_another(store_factory, clock, job)
    delete = sched.store.delete_definition

    def delete_then_created_elsewhere(*args: Any, **kwargs: Any) -> None:
        delete(*args, **kwargs)
        other.add_schedule("bot", "brief", Schedule.cron("0 12 * * *"), persist=True)

    try:
        sched.add_schedule("bot", "brief", Schedule.manual(), persist=True)
        sched.trigger("bot", "brief")
        assert sched.wait_until_idle(10)  # its end waits for the group commit
        sched.store.delete_definition = delete_then_created_elsewhere  # type: ignore[method-assign]
        sched.remove_schedule("bot", "brief")
        sched.store.flush()
        sched.refresh()  # takes the namesake in
        after = sched.store.get_schedule_state("bot", "brief")
        assert (after.consecutive_failures, after.last_error, after.last_run_at) == (0, None, None)
        (status,) = [s for s in sched.get_status().schedules if s.schedule == "brief"]
        assert (status.status, status.next_run_at) == (Status.IDLE, T0 + timedelta(hours=3))
    finally:
        for each in (other, sched):
            each.stop()
            each.store.close()
