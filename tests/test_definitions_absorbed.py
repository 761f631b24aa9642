"""A write to ``schedules.yaml`` that takes in another process's write must not hide it.

A store re-reads ``schedules.yaml`` inside each write (so that the write keeps what others
wrote). That re-read also makes the file look "already seen", so the next ``refresh()`` must
still report the other process's change, or this process keeps answering the old definition
until somebody writes again. Two schedulers on one state directory stand for two processes.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from herdsched import Agent, Schedule, ThreadedScheduler
from herdsched.api import RestApi
from herdsched.store.definitions import DefinitionsFile
from herdsched.testing import FakeClock, as_separate_processes

START = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)


def build(state_dir: Path, clock: FakeClock) -> ThreadedScheduler:
    sched = ThreadedScheduler(state_dir=state_dir, clock=clock)
    sched.add_agent(Agent("a", job=lambda info: "ok"))
    return sched


def test_a_change_absorbed_by_a_write_is_still_taken_in(tmp_path: Path) -> None:
    clock = FakeClock(START)
    one, two = build(tmp_path, clock), build(tmp_path, clock)
    with as_separate_processes():
        one.start()
        two.start()
    try:
        for sched in (one, two):
            assert sched.status in ("running", "standby")
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
    finally:
        two.stop()
        one.stop()


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
