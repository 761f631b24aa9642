"""The lease across real processes: a hung (SIGSTOP) leader is replaced, a killed one at once.

Every process runs a 1-second cron whose job appends ``pid schedule slot`` to a ledger; no slot
may appear twice, whoever leads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from scheduler_helpers import wait_until

from herdsched.store.leases import read_leader_info
from herdsched.timestamps import parse_timestamp

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP/SIGCONT"),
]
CHILD = Path(__file__).parent / "procs" / "lease_child.py"
PRE_LEASE = Path(__file__).parent / "procs" / "pre_lease_leader.py"


class Fleet:
    """Scheduler processes on one state directory, with their ledger and logs."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.ledger = state_dir.parent / "ledger.log"
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, ttl: float) -> subprocess.Popen[bytes]:
        index = len(self.procs)
        with open(self.state_dir.parent / f"proc{index}.err", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(CHILD), str(self.state_dir), str(self.ledger), str(ttl)],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        self.procs.append(proc)
        return proc

    def log_of(self, proc: subprocess.Popen[bytes]) -> str:
        index = self.procs.index(proc)
        return (self.state_dir.parent / f"proc{index}.err").read_text(errors="replace")

    def leader_pid(self) -> int | None:
        info = read_leader_info(self.state_dir)
        return int(info["pid"]) if info else None

    def rows(self) -> list[tuple[int, str]]:
        if not self.ledger.exists():
            return []
        lines = self.ledger.read_text().splitlines()
        return [(int(pid), slot) for pid, _, slot in (line.split() for line in lines if line)]

    def assert_no_slot_twice(self) -> None:
        counts = Counter(slot for _, slot in self.rows())
        assert counts and max(counts.values()) == 1, counts.most_common(3)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    made = Fleet(state_dir)
    yield made
    for proc in made.procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(10)


def wait_for(condition: Callable[[], object], timeout: float = 20.0) -> bool:
    return wait_until(condition, timeout, step=0.05)


def test_a_stopped_leader_is_replaced_within_its_ttl_and_after_sigcont_runs_and_writes_nothing(
    fleet: Fleet,
) -> None:
    ttl = 2.0
    first = fleet.spawn(ttl)
    assert wait_for(lambda: fleet.leader_pid() == first.pid)
    second, third = fleet.spawn(ttl), fleet.spawn(ttl)
    assert wait_for(lambda: len(fleet.rows()) >= 3)
    os.kill(first.pid, signal.SIGSTOP)
    stopped_at, stopped_wall = time.monotonic(), datetime.now(timezone.utc)
    before_stop = len(fleet.rows())
    # a stopped process keeps its liveness lock: only the lease's expiry can unseat it
    assert wait_for(lambda: fleet.leader_pid() not in (None, first.pid), timeout=ttl + 10)
    took_over_after = time.monotonic() - stopped_at
    new_leader = fleet.leader_pid()
    assert new_leader in (second.pid, third.pid)
    assert took_over_after < ttl + 3, took_over_after
    assert wait_for(lambda: any(pid == new_leader for pid, _ in fleet.rows()))
    # the third process must not take the live new holder for dead (the stopped one still
    # holds its old lock): the lead stays put
    for _ in range(20):
        time.sleep(0.1)
        assert fleet.leader_pid() == new_leader
    os.kill(first.pid, signal.SIGCONT)
    assert wait_for(lambda: "lost the lead" in fleet.log_of(first), timeout=10)
    resumed_rows = len(fleet.rows())
    # its schedules fall due each second: a woken leader that still ran them would have
    # started one (its ledger line is written as its job starts) within a second
    time.sleep(1.0)
    # the new leader goes on: a run within these two seconds
    assert wait_for(lambda: len(fleet.rows()) > resumed_rows, timeout=1.0)
    assert fleet.leader_pid() == new_leader
    assert first.poll() is None  # it lives on, standing by
    # nothing ran in the old leader for a slot after it was stopped (a job it had claimed just
    # before SIGSTOP may only write its ledger line once it is resumed)
    late = [
        slot
        for pid, slot in fleet.rows()[before_stop:]
        if pid == first.pid and parse_timestamp(slot) > stopped_wall + timedelta(seconds=1)
    ]
    assert late == [], late
    log = fleet.log_of(first)
    assert "nothing was written" in log and "ERROR" in log
    fleet.assert_no_slot_twice()


def test_a_killed_leader_is_replaced_at_once_not_after_its_ttl(fleet: Fleet) -> None:
    ttl = 30.0  # expiry cannot explain a takeover within seconds
    first = fleet.spawn(ttl)
    assert wait_for(lambda: fleet.leader_pid() == first.pid)
    second = fleet.spawn(ttl)
    assert wait_for(lambda: len(fleet.rows()) >= 3)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    killed_at = time.monotonic()
    assert wait_for(lambda: fleet.leader_pid() == second.pid, timeout=10)
    assert time.monotonic() - killed_at < 5
    assert wait_for(lambda: sum(pid == second.pid for pid, _ in fleet.rows()) >= 2)
    fleet.assert_no_slot_twice()


def test_a_version_before_the_lease_and_this_one_never_lead_one_state_directory_at_once(
    fleet: Fleet,
) -> None:
    """During an upgrade an older herdsched (leading through ``scheduler.lock``) and this one
    share a state directory: whichever leads first, the other stands by; no slot runs twice."""

    def older(seconds: float) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(PRE_LEASE), str(fleet.state_dir), str(fleet.ledger), str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        fleet.procs.append(proc)  # type: ignore[arg-type]  # stopped by the fixture
        return proc

    first = older(4.0)
    assert wait_for(lambda: any(pid == first.pid for pid, _ in fleet.rows()))
    new = fleet.spawn(ttl=1.5)
    assert wait_for(lambda: "an older herdsched leads" in fleet.log_of(new))
    assert fleet.leader_pid() is None  # it stands by while the older version leads
    assert first.communicate(timeout=20)[0].strip() == "led"
    assert wait_for(lambda: fleet.leader_pid() == new.pid)
    assert wait_for(lambda: any(pid == new.pid for pid, _ in fleet.rows()))
    # an older version (re)started while this one leads stands by (it tries every 0.2 s: a
    # second and a half is seven tries)
    second = older(1.5)
    assert second.communicate(timeout=20)[0].strip() == "stood by"
    assert not any(pid == second.pid for pid, _ in fleet.rows())
    assert fleet.leader_pid() == new.pid
    fleet.assert_no_slot_twice()
