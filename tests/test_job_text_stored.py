"""Text a job hands over is text every store keeps.

A job's output, an exception's message or a session id may carry a lone surrogate (a file name
``os.fsdecode()`` could not decode, a command's output read with ``surrogateescape``) or a NUL.
One such output failed every group commit after it, for every schedule of the fleet, until the
scheduler stopped (and then blamed the lease); PostgreSQL refuses a NUL in text.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from scheduler_helpers import T0, step

from herdsched import Agent, JobResult, RunStatus, Schedule, ThreadedScheduler, TriggerInfo
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
            return JobResult(output="resumed", session_id=f"s-{NAME}")
        return "found nothing"


@pytest.fixture(params=["yaml", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    if request.param == "yaml":
        opened: StateStore = YamlStateStore(tmp_path)
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        opened = PostgresStateStore(dsn, namespace=request.getfixturevalue("pg_namespace"))
    yield opened
    opened.close()


def test_a_jobs_undecodable_text_is_stored_escaped_and_the_store_keeps_working(
    store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    # the failure's log line holds the surrogate as raised, which pytest-xdist cannot carry
    caplog.set_level(logging.CRITICAL, logger="herdsched")
    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=None, store=store, clock=clock, commit_delay=0)
    scan = Scan()
    sched.add_agent(
        Agent("files", job=scan, schedules={"scan": Schedule.interval("1m", persist_session=True)})
    )
    sched.add_agent(Agent("other", job=lambda info: "ok", schedules={"t": Schedule.interval("1m")}))
    sched.start()
    try:
        for _ in range(4):
            step(sched, clock, "1m")
        store.flush()
    finally:
        sched.stop()
    assert scan.calls == 4
    records = list(reversed(store.get_history("files", "scan", limit=10)))
    assert [r.status for r in records] == [RunStatus.SUCCESS, RunStatus.FAILED] + [
        RunStatus.SUCCESS
    ] * 2
    assert records[0].output_summary == "found caf\\udce9.txt"
    assert records[1].error == "ValueError: cannot parse caf\\udce9.txt\\x00"
    assert records[1].traceback is not None and "caf\\udce9.txt\\x00" in records[1].traceback
    assert records[2].session_id == "s-caf\\udce9.txt"
    state = store.get_schedule_state("files", "scan")
    assert state.session_id == "s-caf\\udce9.txt" and state.consecutive_failures == 0
    assert len(store.get_history("other", "t", limit=10)) == 4  # the rest of the fleet too
