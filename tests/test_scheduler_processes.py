"""Several real scheduler processes on one state directory, and real ``kill -9``."""

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

from herdsched import Agent, RunStatus, Schedule, Status, ThreadedScheduler
from herdsched.store.leases import read_leader_info
from herdsched.store.yaml_store import YamlStateStore

pytestmark = pytest.mark.slow
CHILD = Path(__file__).parent / "procs" / "scheduler_child.py"


def spawn(state_dir: Path, log: Path, mode: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(state_dir), str(log), mode],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stderr:
            proc.stderr.close()


def wait_for(condition: Callable[[], object], timeout: float = 15.0) -> bool:
    return wait_until(condition, timeout, step=0.05)


def runs(log: Path) -> list[tuple[int, str]]:
    if not log.exists():
        return []
    rows = [line.split() for line in log.read_text().splitlines() if line.strip()]
    return [(int(pid), slot) for pid, _, slot in rows]


def test_two_processes_never_run_a_slot_twice_and_standby_takes_over_after_kill_9(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "runs.log"
    first = spawn(tmp_path, log, "tick")
    procs.append(first)
    assert wait_for(lambda: read_leader_info(tmp_path) is not None)
    second = spawn(tmp_path, log, "tick")
    procs.append(second)
    assert wait_for(lambda: len(runs(log)) >= 3)
    leader_pid = read_leader_info(tmp_path)["pid"]  # type: ignore[index]
    standby = second if leader_pid == first.pid else first
    leader = first if standby is second else second
    os.kill(leader.pid, signal.SIGKILL)
    leader.wait(10)
    killed_at = len(runs(log))
    # The standby retries the lock at least every max_sleep (0.5 s) and takes over.
    assert wait_for(lambda: any(pid == standby.pid for pid, _ in runs(log)), timeout=15)
    assert wait_for(lambda: len(runs(log)) >= killed_at + 3)
    rows = runs(log)
    slot_counts = Counter(slot for _, slot in rows)
    assert max(slot_counts.values()) == 1, slot_counts.most_common(3)
    assert {pid for pid, _ in rows} == {leader.pid, standby.pid}
    assert all(pid == leader.pid for pid, _ in rows[:killed_at])
    assert all(pid == standby.pid for pid, _ in rows[killed_at:])


def test_a_run_left_running_by_a_killed_process_becomes_interrupted(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "runs.log"
    victim = spawn(tmp_path, log, "hang")
    procs.append(victim)
    store = YamlStateStore(tmp_path)

    def persisted_running() -> bool:
        store.refresh()
        return store.get_schedule_state("a", "s").status is Status.RUNNING

    assert wait_for(persisted_running)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)
    ran: list[str] = []
    sched = ThreadedScheduler(state_dir=tmp_path, max_sleep=0.5)
    sched.add_agent(
        Agent("a", job=lambda info: ran.append("again"), schedules={"s": Schedule.interval("1h")})
    )
    sched.start()
    try:
        records = sched.history("a", "s")
        assert [r.status for r in records] == [RunStatus.INTERRUPTED]
        # recorded under the id the job ran with, so its own logs and the history agree
        assert records[0].run_id == Path(f"{log}.run-id").read_text()
        assert sched.get_status().schedules[0].status is Status.IDLE
        time.sleep(0.5)
        assert ran == []  # at most once per slot: the interrupted run is not re-run at once
    finally:
        sched.stop()
    assert len(runs(log)) == 1


def test_restart_after_downtime_fires_each_missed_schedule_exactly_once(tmp_path: Path) -> None:
    now = datetime.now(timezone.utc)
    store = YamlStateStore(tmp_path)
    for name in ("every-minute", "hourly"):
        store.update_schedule_state(
            "a", name, next_run_at=now - timedelta(hours=3), last_run_at=now - timedelta(hours=4)
        )
    store.close()
    fired: list[tuple[str, datetime | None]] = []
    sched = ThreadedScheduler(state_dir=tmp_path, max_sleep=0.5)
    sched.add_agent(
        Agent(
            "a",
            job=lambda info: fired.append((info.schedule, info.scheduled_for)),
            schedules={
                "every-minute": Schedule.cron("* * * * *"),
                "hourly": Schedule.cron("0 * * * *"),
            },
        )
    )
    started = datetime.now(timezone.utc)
    with sched:
        assert wait_for(lambda: len(fired) >= 2)
        time.sleep(1.0)
    # the missed slots run once each (not one run per missed minute); a minute boundary
    # during the test (even before the scheduler caught up) may add one newer slot
    slots = {name: [slot for n, slot in fired if n == name] for name in ("every-minute", "hourly")}
    assert len(slots["hourly"]) == 1, fired
    assert 1 <= len(slots["every-minute"]) <= 2, fired
    assert len(set(slots["every-minute"])) == len(slots["every-minute"]), fired
    assert all(slot is not None and slot <= started + timedelta(minutes=1) for _, slot in fired)
    state = YamlStateStore(tmp_path).get_schedule_state("a", "hourly")
    assert state.next_run_at is not None and state.next_run_at > now


def test_run_forever_stops_gracefully_on_sigterm(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "runs.log"
    proc = spawn(tmp_path, log, "tick")
    procs.append(proc)
    assert wait_for(lambda: len(runs(log)) >= 1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    assert read_leader_info(tmp_path) is None
    store = YamlStateStore(tmp_path)
    assert store.get_schedule_state("a", "s").status is Status.IDLE


def test_a_claim_only_in_the_journal_still_prevents_a_second_run_after_kill_9(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "runs.log"
    victim = spawn(tmp_path, log, "hang-unflushed")
    procs.append(victim)
    assert wait_for(lambda: len(runs(log)) == 1)  # the job started
    store = YamlStateStore(tmp_path)
    assert store.get_schedule_state("a", "s").status is not Status.RUNNING  # not in state.yaml
    assert [c.schedule for c in store.load_claims()] == ["s"]  # but durably claimed
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)
    ran: list[str] = []
    sched = ThreadedScheduler(state_dir=tmp_path, max_sleep=0.5)
    sched.add_agent(
        Agent("a", job=lambda info: ran.append("again"), schedules={"s": Schedule.interval("1h")})
    )
    sched.start()
    try:
        time.sleep(0.5)
        assert ran == []
        records = sched.history("a", "s")
        assert [r.status for r in records] == [RunStatus.INTERRUPTED]
        assert records[0].run_id == Path(f"{log}.run-id").read_text()
    finally:
        sched.stop()
    assert YamlStateStore(tmp_path).load_claims() == []  # the flush at stop covered it


def test_runs_waiting_for_a_slot_that_never_started_run_after_kill_9(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "runs.log"
    victim = spawn(tmp_path, log, "hang-queue")
    procs.append(victim)
    journal = tmp_path / "claims.log"

    def claims() -> int:
        return journal.read_text().count('"run_id"') if journal.exists() else 0

    # s runs and hangs; t and u wait for the one slot, unclaimed
    assert wait_for(lambda: len(runs(log)) == 1 and claims() == 1)
    time.sleep(0.3)
    assert claims() == 1
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)
    assert [c.schedule for c in YamlStateStore(tmp_path).load_claims()] == ["s"]
    ran: list[str] = []
    sched = ThreadedScheduler(state_dir=tmp_path, max_sleep=0.5)
    every = Schedule.interval("1h")
    sched.add_agent(
        Agent(
            "a",
            job=lambda info: ran.append(info.schedule),
            max_concurrent=1,
            schedules={"s": every, "t": every, "u": every},
        )
    )
    sched.start()
    try:
        assert wait_for(lambda: sorted(ran) == ["t", "u"], timeout=10)
        time.sleep(0.3)
        assert sorted(ran) == ["t", "u"]  # s started before the kill: it is not run again
        assert [r.status for r in sched.history("a", "s")] == [RunStatus.INTERRUPTED]
        for name in ("t", "u"):
            assert [r.status for r in sched.history("a", name)] == [RunStatus.SUCCESS]
    finally:
        sched.stop()
    assert [pid for pid, _ in runs(log)] == [victim.pid]
