"""Text a job hands over is text every store keeps.

A job's output, an exception's message or a session id may carry a lone surrogate (a file name
``os.fsdecode()`` could not decode, a command's output read with ``surrogateescape``) or a NUL.
One such output failed every group commit after it, for every schedule of the fleet, until the
scheduler stopped (and then blamed the lease); PostgreSQL refuses a NUL in text.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest
from scheduler_helpers import T0, step

from herdsched import Agent, JobResult, RunStatus, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.models import MAX_TRACEBACK, RunRecord
from herdsched.store.base import StateStore
from herdsched.store.postgres import PostgresStateStore
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock

NAME = os.fsdecode(b"caf\xe9.txt")  # "caf\udce9.txt"


class Scan:
    """First run: output naming an undecodable file; second: raises with it and a NUL;
    third: hands back a session id with it; then plain output."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, info: TriggerInfo) -> object:
        self.calls += 1
        if self.calls == 1:
            return f"found {NAME}"
        if self.calls == 2:
            raise ValueError(f"cannot parse {NAME}\x00")
        if self.calls == 3:
            return JobResult(output="resumed", session_id=f"s-{NAME}\x00")
        return "found nothing"


@pytest.fixture(params=["yaml", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., StateStore]]:
    """Opens the store, as often as asked (a second opening reads what reached the disk), with
    the given clock and commit delay."""
    opened: list[StateStore] = []

    def open_store(clock: FakeClock | None = None, commit_delay: float = 0.5) -> StateStore:
        if request.param == "yaml":
            store: StateStore = YamlStateStore(tmp_path, clock=clock, commit_delay=commit_delay)
        else:
            dsn = request.getfixturevalue("postgres_dsn")
            namespace = request.getfixturevalue("pg_namespace")
            store = PostgresStateStore(
                dsn, namespace=namespace, clock=clock, commit_delay=commit_delay
            )
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


def test_a_jobs_undecodable_text_is_stored_escaped_and_the_store_keeps_working(
    opener: Callable[..., StateStore], caplog: pytest.LogCaptureFixture
) -> None:
    # the failure's log line holds the surrogate as raised, which pytest-xdist cannot carry
    caplog.set_level(logging.CRITICAL, logger="herdsched")
    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=None, store=opener(clock), clock=clock)  # group commits
    scan = Scan()
    sched.add_agent(
        Agent("files", job=scan, schedules={"scan": Schedule.interval("1m", persist_session=True)})
    )
    sched.add_agent(Agent("other", job=lambda info: "ok", schedules={"t": Schedule.interval("1m")}))
    sched.start()
    try:
        for _ in range(4):
            step(sched, clock, "1m")
    finally:
        sched.stop()
    assert scan.calls == 4
    store = opener()  # what reached the disk or the database
    records = list(reversed(store.get_history("files", "scan", limit=10)))
    assert [r.status for r in records] == [RunStatus.SUCCESS, RunStatus.FAILED] + [
        RunStatus.SUCCESS
    ] * 2
    assert records[0].output_summary == "found caf\\udce9.txt"
    assert records[1].error == "ValueError: cannot parse caf\\udce9.txt\\x00"
    assert records[1].traceback is not None and "caf\\udce9.txt\\x00" in records[1].traceback
    assert records[2].session_id == "s-caf\\udce9.txt\\x00"
    state = store.get_schedule_state("files", "scan")
    assert state.session_id == "s-caf\\udce9.txt\\x00" and state.consecutive_failures == 0
    assert len(store.get_history("other", "t", limit=10)) == 4  # the rest of the fleet too


def test_text_is_escaped_before_it_is_cut_to_its_bounds() -> None:
    """Cut first, escaped after: a summary of 500 lone surrogates became 3,000 characters and
    a traceback of NULs four times its 8 KiB, and the record read back was not the one made."""
    record = RunRecord(
        run_id="r",
        agent="a",
        schedule="s",
        trigger_type="manual",
        status="failed",
        output_summary="\udce9" * 500,
        traceback="\x00" * 3000,
    )
    assert record.output_summary is not None and len(record.output_summary) == 500
    assert record.traceback is not None and len(record.traceback) == MAX_TRACEBACK
    assert attrs.evolve(record) == record


def test_a_session_id_from_a_run_now_is_stored_escaped(
    opener: Callable[..., StateStore],
) -> None:
    """On PostgreSQL the run-now's state transition carried the job's session id as given:
    every group commit after it failed ("unsupported Unicode escape sequence"), for the whole
    fleet."""
    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=None, store=opener(clock, 0.05), clock=clock)
    sessions = {"a": f"s-{NAME}\x00"}
    sched.add_agent(
        Agent(
            "a",
            job=lambda info: JobResult(output="x", session_id=sessions["a"]),
            schedules={"m": Schedule.manual(persist_session=True)},
        )
    )
    sched.add_agent(Agent("b", job=lambda info: "fine", schedules={"n": Schedule.manual()}))
    with sched:
        assert sched.trigger("a", "m", wait=True).success
        for _ in range(2):
            assert sched.trigger("b", "n", wait=True).success
    store = opener()
    assert store.get_schedule_state("a", "m").session_id == "s-caf\\udce9.txt\\x00"
    assert len(store.get_history("b", "n")) == 2
