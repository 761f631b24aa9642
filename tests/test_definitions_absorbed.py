"""A write to ``schedules.yaml`` that takes in another process's write must not hide it.

A store re-reads ``schedules.yaml`` inside each write (so that the write keeps what others
wrote). That re-read also makes the file look "already seen", so the next ``refresh()`` must
still report the other process's change, or this process keeps answering the old definition
until somebody writes again. Two schedulers on one state directory stand for two processes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from herdsched import Agent, RunStatus, Schedule, ThreadedScheduler
from herdsched.api import RestApi
from herdsched.errors import ScheduleNotFoundError
from herdsched.store.definitions import DefinitionsFile
from herdsched.testing import FakeClock, as_separate_processes

START = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)


def build(state_dir: Path, clock: FakeClock) -> ThreadedScheduler:
    sched = ThreadedScheduler(state_dir=state_dir, clock=clock)
    sched.add_agent(Agent("a", job=lambda info: "ok"))
    return sched


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[ThreadedScheduler, ThreadedScheduler]]:
    """Two started schedulers on one state directory: the active one and a standby."""
    clock = FakeClock(START)
    one, two = build(tmp_path, clock), build(tmp_path, clock)
    with as_separate_processes():
        one.start()
        two.start()
    try:
        assert (one.status, two.status) == ("running", "standby")
        yield one, two
    finally:
        two.stop()
        one.stop()


def test_a_change_absorbed_by_a_write_is_still_taken_in(
    pair: tuple[ThreadedScheduler, ThreadedScheduler],
) -> None:
    one, two = pair
    one.add_schedule("a", "x", Schedule.interval("1h", prompt="old"), persist=True)
    one.add_schedule("a", "y", Schedule.interval("1h"), persist=True)
    for sched in (one, two):  # both have read the file as it is now
        assert sched.get_schedule("a", "x").prompt == "old"
    for writer, other in ((one, two), (two, one)):
        new = f"changed by {writer.status}"
        writer.update_schedule("a", "x", prompt=new)
        # ``other`` writes before it looks again: its write re-reads the file
        other.update_schedule("a", "y", prompt=f"then {new}")
        assert other.get_schedule("a", "x").prompt == new
        answer = RestApi(other).handle("GET", "/api/schedule/a/x")
        assert answer.body["prompt"] == new


def test_refresh_reports_what_a_write_or_a_load_took_in(tmp_path: Path) -> None:
    path = tmp_path / "schedules.yaml"
    mine = DefinitionsFile(path, lock_timeout=5, now=lambda: START)
    theirs = DefinitionsFile(path, lock_timeout=5, now=lambda: START)
    try:
        mine.refresh()  # the first read
        assert mine.refresh() is False  # nothing new
        theirs.save("a", "x", {"type": "interval", "interval": "1h"})
        mine.save("a", "y", {"type": "interval", "interval": "1h"})  # re-reads, then writes
        assert mine.refresh() is True
        assert mine.refresh() is False  # reported once
        theirs.save("a", "z", {"type": "interval", "interval": "1h"})
        assert set(mine.load()["a"]) == {"x", "y", "z"}  # a load reads it ...
        assert mine.refresh() is True  # ... and the next refresh still says so
        mine.save("a", "w", {"type": "interval", "interval": "1h"})
        assert mine.refresh() is False  # our own write is not a change by someone else
    finally:
        mine.close()
        theirs.close()


def test_a_reader_waits_for_the_refresh_in_progress_instead_of_answering_before_it(
    pair: tuple[ThreadedScheduler, ThreadedScheduler], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bug (a web worker answered 404 right after another worker's PUT returned 201): the
    store reports a change once, so a request that refreshed while the timer was between its
    refresh and applying it found "nothing new" and answered from the view before the change.
    """
    one, two = pair
    one.add_schedule("a", "new", Schedule.interval("1h", prompt="made"), persist=True)
    found, go = threading.Event(), threading.Event()
    real_refresh = two.store.refresh

    def refresh_then_pause() -> bool:
        changed = real_refresh()
        if threading.current_thread().name == "poll" and changed:
            found.set()  # the change is taken from the store, not yet applied
            assert go.wait(10)
        return changed

    monkeypatch.setattr(two.store, "refresh", refresh_then_pause)
    poll = threading.Thread(target=two.refresh, name="poll")
    poll.start()
    assert found.wait(10)
    answers: list[object] = []

    def ask() -> None:
        try:
            answers.append(two.get_schedule("a", "new").prompt)
        except ScheduleNotFoundError as exc:
            answers.append(exc)

    reader = threading.Thread(target=ask)
    reader.start()
    reader.join(timeout=0.5)  # answered at once before the fix: not found
    go.set()
    poll.join(timeout=10)
    reader.join(timeout=10)
    assert answers == ["made"]


def test_a_definition_written_before_a_standby_started_is_seen_by_it(tmp_path: Path) -> None:
    """The bug (a gunicorn worker answered 404 right after another worker's PUT): the worker
    started its scheduler on its first request; start() re-read the store, which then reported
    nothing new, and the standby's view never took in the definition."""
    clock = FakeClock(START)
    one, two = build(tmp_path, clock), build(tmp_path, clock)
    try:
        with as_separate_processes():
            one.start()
            one.add_schedule("a", "new", Schedule.interval("1h", prompt="made"), persist=True)
            two.start()
        assert two.status == "standby"
        assert two.get_schedule("a", "new").prompt == "made"
        assert RestApi(two).handle("GET", "/api/schedule/a/new").status == 200
    finally:
        two.stop()
        one.stop()


def test_a_definition_written_before_a_takeover_is_seen_by_the_new_leader(
    tmp_path: Path,
) -> None:
    """Restart recovery re-reads the store at a takeover: what it read must still be taken in."""
    clock = FakeClock(START)
    one, two = build(tmp_path, clock), build(tmp_path, clock)
    try:
        with as_separate_processes():
            one.start()
            two.start()
            assert two.status == "standby"
            one.add_schedule("a", "new", Schedule.interval("1h", prompt="made"), persist=True)
            one.stop()  # releases the lease: the standby takes over at its next pass
        clock.advance("6s")  # past the standby's next try
        two.run_pending()
        assert two.status == "running"
        assert two.get_schedule("a", "new").prompt == "made"
    finally:
        two.stop()
        one.stop()


def test_a_schedule_enabled_again_in_another_process_follows_the_catch_up_rule(
    tmp_path: Path,
) -> None:
    """The bug: the leader took the definition enabled again as a plan to start at once, and
    ran the slot that had passed while disabled then, standing for the time it took the change
    in, also with ``catch_up="skip"``. (A lease longer than the hours the clock jumps: the
    standby's own timer must not take the lead meanwhile.)"""
    clock = FakeClock(START)
    one, two = (ThreadedScheduler(state_dir=tmp_path, clock=clock, lease_ttl=86400) for _ in "12")
    for sched in (one, two):
        sched.add_agent(Agent("a", job=lambda info: "ok"))
    with as_separate_processes():
        one.start()
        two.start()
    try:
        _enabled_again_elsewhere(one, two, clock)
    finally:
        two.stop()
        one.stop()


def _enabled_again_elsewhere(
    one: ThreadedScheduler, two: ThreadedScheduler, clock: FakeClock
) -> None:
    assert (one.status, two.status) == ("running", "standby")
    hourly = Schedule.cron("0 * * * *", catch_up="skip")
    one.add_schedule("a", "h", hourly, persist=True)
    two.update_schedule("a", "h", enabled=False)  # the standby: a web worker, say
    clock.advance("3h10m")  # the slots of 9:00, 10:00 and 11:00 pass while disabled
    one.run_pending()
    two.update_schedule("a", "h", enabled=True)
    clock.advance("2s")
    one.run_pending()  # the leader's poll takes the change in
    assert one.wait_until_idle(10)
    history = one.history("a", "h")
    assert [(r.status, r.scheduled_for) for r in history] == [
        (RunStatus.MISSED, START + timedelta(hours=1))
    ]
    assert one.get_status().schedules[0].next_run_at == START + timedelta(hours=4)
