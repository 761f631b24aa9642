"""One scheduler per state directory per process: the one started last takes over.

This is what a notebook needs when an edited cell is run again: the older scheduler stops
dispatching, its running job finishes and is recorded, its threads end, and the newer one leads
at once, without waiting for a standby's next attempt.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.store import MemoryStateStore
from herdsched.testing import FakeClock, as_separate_processes


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def build(state_dir: Path, job: Callable[[TriggerInfo], Any], **options: Any) -> ThreadedScheduler:
    # max_sleep 60: a standby would try the lock again only after 5 s
    sched = ThreadedScheduler(state_dir=state_dir, max_sleep=60, commit_delay=0.05, **options)
    sched.add_agent(Agent("nb", job=job, schedules={"s": Schedule.manual()}))
    return sched


def timers() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "herdsched-timer")


def test_an_idle_older_scheduler_hands_over_at_once(tmp_path: Path) -> None:
    before = timers()
    old = build(tmp_path, lambda info: "old")
    old.start()
    new = build(tmp_path, lambda info: "new")
    try:
        new.start()
        assert old.status == "stopped"
        assert new.status == "running"
        assert new.trigger("nb", "s").success
        assert new.wait_until_idle(10)
        assert new.history("nb", "s")[0].output_summary == "new"  # the edited code runs
        wait_for(lambda: timers() == before + 1)  # the old timer thread ended
    finally:
        new.stop()
        old.stop()


def test_a_busy_older_scheduler_finishes_its_job_then_the_newer_one_leads(
    tmp_path: Path,
) -> None:
    gate, started = threading.Event(), threading.Event()

    def slow(info: TriggerInfo) -> str:
        started.set()
        gate.wait(10)
        return "old finished"

    old = build(tmp_path, slow)
    old.start()
    new = build(tmp_path, lambda info: "new")
    try:
        assert old.trigger("nb", "s").success
        assert started.wait(10)
        new.start()  # returns at once, while the old job runs
        assert new.status == "standby"
        # the old one is asked to stop by a thread of its own: soon, not necessarily yet
        wait_for(lambda: old.status == "stopping")  # it dispatches nothing more
        assert old.trigger("nb", "s").success is False
        gate.set()
        wait_for(lambda: new.status == "running", timeout=4)  # sooner than a standby's retry
        assert old.status == "stopped"
        records = new.history("nb", "s")
        assert [r.output_summary for r in records] == ["old finished"]  # recorded, not lost
        assert new.trigger("nb", "s").success
        assert new.wait_until_idle(10)
        assert new.history("nb", "s")[0].output_summary == "new"
        wait_for(lambda: not any(t.name == "herdsched-handover" for t in threading.enumerate()))
    finally:
        gate.set()
        new.stop()
        old.stop()


def test_a_job_that_ignores_its_timeout_holds_the_hand_over_a_few_seconds_not_for_ever(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The cell run again while a job went on past its timeout, ignoring its cancel event: the
    newer scheduler stood by for ever, and nothing of the fleet ran again."""
    gate, started = threading.Event(), threading.Event()

    def stuck(info: TriggerInfo) -> None:
        started.set()
        gate.wait(30)  # ignores info.cancel_event

    clock = FakeClock(datetime(2026, 1, 5, 12, tzinfo=timezone.utc))
    old = ThreadedScheduler(state_dir=tmp_path, clock=clock, max_sleep=60)
    old.add_agent(Agent("nb", job=stuck, schedules={"s": Schedule.manual(timeout="2s")}))
    new = build(tmp_path, lambda info: "new", clock=clock)
    old.start()
    try:
        assert old.trigger("nb", "s").success
        assert started.wait(10)
        clock.advance(3)  # past its timeout: recorded, told to stop
        wait_for(lambda: old.history("nb", "s"))
        with caplog.at_level(logging.WARNING, logger="herdsched"):
            new.start()
            assert new.status == "standby"
            time.sleep(0.2)
            assert new.status == "standby"  # a few seconds more for the job to return
            clock.advance(5)
            wait_for(lambda: new.status == "running")
        assert old.status == "stopped"
        assert [r.status.value for r in new.history("nb", "s")] == ["timeout"]
        assert new.trigger("nb", "s").success
        assert new.wait_until_idle(10)
        assert new.history("nb", "s")[0].output_summary == "new"
        assert (
            "The newer scheduler takes the lead while the job(s) of nb/s, started by the "
            "older one, run on in this process" in caplog.text
        )
    finally:
        gate.set()
        new.stop()
        old.stop()


def test_separate_processes_keep_a_standby(tmp_path: Path) -> None:
    first = build(tmp_path, lambda info: None)
    second = build(tmp_path, lambda info: None)
    with as_separate_processes():
        first.start()
        second.start()
    try:
        assert (first.status, second.status) == ("running", "standby")
    finally:
        second.stop()
        first.stop()


def test_the_standby_notice_is_an_info_record_not_stderr_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    first = build(tmp_path, lambda info: None)
    second = build(tmp_path, lambda info: None)
    caplog.set_level(logging.INFO, logger="herdsched")
    with as_separate_processes():
        first.start()
        second.start()
    try:
        notices = [r for r in caplog.records if "standing by" in r.getMessage()]
        assert [r.levelno for r in notices] == [logging.INFO]
        # below WARNING, so logging's last-resort handler prints nothing when the app
        # configured no logging (a notebook)
        assert "standing by" not in capfd.readouterr().err
    finally:
        second.stop()
        first.stop()


def test_schedulers_of_other_directories_are_left_alone(tmp_path: Path) -> None:
    one = build(tmp_path / "one", lambda info: None)
    two = build(tmp_path / "two", lambda info: None)
    one.start()
    two.start()
    try:
        assert (one.status, two.status) == ("running", "running")
    finally:
        two.stop()
        one.stop()


def test_a_second_scheduler_in_memory_running_the_same_agents_is_warned_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A notebook cell with ``state_dir=None`` run again started a second scheduler beside the
    first without a word, and each fired every schedule: nothing hands over without a state
    directory. The newer one now says so, naming the agents both run; other fleets are quiet."""

    def memory(*agents: str) -> ThreadedScheduler:
        sched = ThreadedScheduler(state_dir=None, max_sleep=60)
        for name in agents:
            sched.add_agent(Agent(name, job=lambda info: None, schedules={"s": Schedule.manual()}))
        return sched

    first, second, other = memory("nb", "solo"), memory("nb"), memory("elsewhere")
    first.start()
    try:
        with caplog.at_level(logging.WARNING, logger="herdsched"):
            other.start()
            assert not caplog.records
            second.start()
        (record,) = caplog.records
        assert "runs agent(s) 'nb' too" in record.getMessage()
        assert "(state in memory)" in record.getMessage()
        assert "give both the same state_dir" in record.getMessage()
        assert (first.status, second.status) == ("running", "running")
    finally:
        for sched in (first, second, other):
            sched.stop()
    # two schedulers on one store object: its lease decides, and the second stands by
    shared = MemoryStateStore()
    leading, standing_by = ThreadedScheduler(store=shared), ThreadedScheduler(store=shared)
    for sched in (leading, standing_by):
        sched.add_agent(Agent("nb", job=lambda info: None, schedules={"s": Schedule.manual()}))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="herdsched"):
        leading.start()
        standing_by.start()
    try:
        assert (leading.status, standing_by.status) == ("running", "standby")
        assert not [r for r in caplog.records if "both fire" in r.getMessage()]
    finally:
        standing_by.stop()
        leading.stop()


def test_an_agent_added_after_start_beside_a_twin_in_memory_is_warned_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The notebook's other habit: a cell starts a scheduler, the next adds its agents. Run
    both cells again and the agents came after ``start()``, which alone compared them: both
    schedulers fired every schedule without a word."""

    def agent(name: str) -> Agent:
        return Agent(name, job=lambda info: None, schedules={"s": Schedule.manual()})

    first, second = ThreadedScheduler(state_dir=None), ThreadedScheduler(state_dir=None)
    first.start()
    try:
        first.add_agent(agent("nb"))
        with caplog.at_level(logging.WARNING, logger="herdsched"):
            second.start()
            second.add_agent(agent("solo"))
            assert not caplog.records
            second.add_agent(agent("nb"))
            (record,) = caplog.records
            assert "runs agent(s) 'nb' too" in record.getMessage()
            caplog.clear()
            second.set_agents([agent("solo"), agent("nb")])  # a hot reload says it again
            (record,) = caplog.records
            assert "runs agent(s) 'nb' too" in record.getMessage()
    finally:
        second.stop()
        first.stop()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="herdsched"):
        second.add_agent(agent("later"))  # not running: nothing to warn of
        first.start()
        first.set_agents([agent("nb")])  # the twin is stopped
    first.stop()
    assert not caplog.records


@pytest.mark.parametrize(
    ("before", "after"), [("one", None), ("one", "two"), (None, "one")], ids=str
)
def test_a_cell_run_again_with_its_state_dir_edited_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, before: str | None, after: str | None
) -> None:
    """The hand-over goes by state directory: a cell run again with ``state_dir`` edited left
    the old scheduler firing the old code beside the new one, without a word (the warning
    compared schedulers with no state directory only)."""

    def cell(state: str | None) -> ThreadedScheduler:
        sched = ThreadedScheduler(
            state_dir=None if state is None else tmp_path / state, commit_delay=0
        )
        sched.add_agent(Agent("nb", job=lambda info: None, schedules={"s": Schedule.manual()}))
        sched.start()
        return sched

    old = cell(before)
    try:
        with caplog.at_level(logging.WARNING, logger="herdsched"):
            new = cell(after)
        try:
            (record,) = [r for r in caplog.records if "runs agent(s)" in r.getMessage()]
            where = "state in memory" if before is None else f"state in {tmp_path / before}"
            assert f"({where}) runs agent(s) 'nb' too" in record.getMessage()
            assert (old.status, new.status) == ("running", "running")
        finally:
            new.stop()
    finally:
        old.stop()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="herdsched"):  # the same place: handed over
        first = cell("one")
        second = cell("one")
    assert wait_for(lambda: first.status == "stopped")
    second.stop()
    assert not [r for r in caplog.records if "runs agent(s)" in r.getMessage()]


def _fleet(state_dir: Path, *agents: str) -> ThreadedScheduler:
    sched = ThreadedScheduler(state_dir=state_dir, max_sleep=60, commit_delay=0.05)
    for name in agents:
        sched.add_agent(Agent(name, job=lambda info: None, schedules={"s": Schedule.manual()}))
    return sched


def test_a_standby_of_another_fleet_warns_that_it_runs_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two apps on one state directory (the default ``.herdsched`` of one project directory):
    before, the second stood by with an INFO line, and its jobs silently never ran."""
    first = _fleet(tmp_path, "mail", "reports")
    same = _fleet(tmp_path, "reports")
    other = _fleet(tmp_path, "crawler")
    caplog.set_level(logging.INFO, logger="herdsched")
    with as_separate_processes():
        first.start()
        state_file = tmp_path / "state.yaml"
        wait_for(lambda: state_file.exists() and "reports" in state_file.read_text())
        same.start()
        other.start()
    try:
        assert (first.status, same.status, other.status) == ("running", "standby", "standby")
        notices = [r for r in caplog.records if "standing by" in r.getMessage()]
        assert [r.levelno for r in notices] == [logging.INFO]  # a standby of the same app
        # the holder in words (it was a Python dict: "({'holder': ..., 'expired': False})")
        said = notices[0].getMessage()
        assert re.search(r"\(pid \d+ on \S+, lease epoch 1, since \d{4}-", said), said
        assert "{" not in said
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, warnings
        assert (
            "the store has schedules of agents mail, reports and none of this one's "
            in (warnings[0])
        )
        assert "(crawler)" in warnings[0] and "give each its own state directory" in warnings[0]
    finally:
        other.stop()
        same.stop()
        first.stop()


def test_taking_over_from_another_fleet_warns_that_its_schedules_are_marked_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = _fleet(tmp_path, "mail")
    first.start()
    first.stop()
    renamed = _fleet(tmp_path, "mail", "digest")  # shares an agent: no warning
    with caplog.at_level(logging.INFO, logger="herdsched"):
        renamed.start()
        renamed.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    caplog.clear()
    other = _fleet(tmp_path, "crawler")
    with caplog.at_level(logging.INFO, logger="herdsched"):
        other.start()
        other.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    wanted = "shares no agent with the fleet that ran on its store before it (agents digest, mail)"
    assert wanted in warnings[0]
    assert "2 schedule(s) with state in the store are not in this scheduler's fleet" in (
        caplog.text
    )
