"""The lease: one active scheduler per state directory, across threads, forks, processes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from scheduler_helpers import T0, Recorder, running

from herdsched import Agent, Schedule, ThreadedScheduler
from herdsched.errors import LeadershipLostError
from herdsched.store.base import Lease, RunClaim
from herdsched.store.leases import read_leader_info
from herdsched.store.memory import MemoryStateStore
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock, as_separate_processes


def test_one_holder_at_a_time_and_the_holder_is_recorded(tmp_path: Path) -> None:
    first, second = YamlStateStore(tmp_path), YamlStateStore(tmp_path)
    lease = first.acquire_lease("first", 30)
    assert lease is not None
    assert first.acquire_lease("first", 30) == first.current_lease()  # the holder renews
    assert second.acquire_lease("second", 30) is None
    info = read_leader_info(tmp_path)
    assert info is not None and info["pid"] == os.getpid() and info["epoch"] == 1
    current = second.current_lease()
    assert current is not None and current.holder == "first"
    first.release_lease(lease)
    first.release_lease(lease)
    assert read_leader_info(tmp_path) is None
    taken = second.acquire_lease("second", 30)
    assert taken is not None and taken.epoch == 2
    second.close()  # closing a store gives its lease up
    assert read_leader_info(tmp_path) is None
    first.close()


def test_a_record_without_a_live_holder_is_not_reported(tmp_path: Path) -> None:
    store = YamlStateStore(tmp_path)
    assert store.acquire_lease("gone", 30) is not None
    store._leases._liveness.release()  # type: ignore[union-attr]  # as the kernel does at kill -9
    assert read_leader_info(tmp_path) is None
    (tmp_path / "lease.json").write_text("not json")
    assert read_leader_info(tmp_path) is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_does_not_believe_it_holds_the_lease(tmp_path: Path) -> None:
    store = YamlStateStore(tmp_path)
    lease = store.acquire_lease("parent", 30)
    assert lease is not None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read_end)
        verdict = b"held" if store._leases.held is not None else b"free"
        try:
            store.claim_runs([RunClaim("a", "s", "child", lease.acquired_at)])
            verdict += b" claimed"
        except LeadershipLostError:
            verdict += b" refused"
        os.write(write_end, verdict)
        os._exit(0)
    os.close(write_end)
    verdict = os.read(read_end, 30)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert verdict == b"free refused"
    # The child's exit must not have released the parent's liveness lock.
    assert read_leader_info(tmp_path) is not None
    assert YamlStateStore(tmp_path).acquire_lease("other", 30) is None
    store.release_lease(lease)
    store.close()


def test_second_scheduler_in_one_process_stands_by_and_takes_over(tmp_path: Path) -> None:
    def build() -> ThreadedScheduler:
        sched = ThreadedScheduler(state_dir=tmp_path, max_sleep=0.2)
        sched.add_agent(Agent("a", job=lambda info: None, schedules={"s": Schedule.manual()}))
        return sched

    first, second = build(), build()
    with as_separate_processes():  # as in two processes
        first.start()
        second.start()
    try:
        assert first.status == "running"
        assert second.status == "standby"
        assert second.get_status().leader is not None
        queued = second.trigger("a", "s")  # a standby queues the request for the leader
        assert queued.success and queued.run_id
        assert first.wait_until_idle(5)
        first.stop()
        import time

        deadline = time.monotonic() + 10
        while second.status != "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert second.status == "running"
    finally:
        first.stop()
        second.stop()


def test_a_standby_shares_runtime_schedules_and_never_overwrites_the_leaders_plan(
    tmp_path: Path,
) -> None:
    import time

    from herdsched.store.yaml_store import YamlStateStore

    ran: list[str] = []

    def build() -> ThreadedScheduler:
        sched = ThreadedScheduler(state_dir=tmp_path, max_sleep=0.2, poll_interval=0.1)
        sched.add_agent(Agent("a", job=lambda info: ran.append(info.schedule)))
        return sched

    leader, standby = build(), build()
    with as_separate_processes():  # as in two processes
        leader.start()
        standby.start()
    try:
        assert standby.status == "standby"
        standby.add_schedule("a", "added-elsewhere", Schedule.interval("1h"), persist=True)
        deadline = time.monotonic() + 10
        while "added-elsewhere" not in ran and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ran == ["added-elsewhere"]  # run once, by the leader
        deadline = time.monotonic() + 10  # run transitions reach the file with the group commit
        while time.monotonic() < deadline:
            planned = YamlStateStore(tmp_path).get_schedule_state("a", "added-elsewhere")
            if planned.next_run_at is not None and planned.last_finished_at is not None:
                break  # the plan after the run (an interval counts from its end)
            time.sleep(0.05)
        assert planned.next_run_at is not None
        standby.stop()  # flushing the standby must not touch the leader's plan
        after = YamlStateStore(tmp_path).get_schedule_state("a", "added-elsewhere")
        assert after.next_run_at == planned.next_run_at
        standby_2 = build()
        assert "added-elsewhere" in {s.schedule for s in standby_2.get_status().schedules}
        standby_2.stop()
        with as_separate_processes():
            standby.start()
        standby.remove_schedule("a", "added-elsewhere")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
            s.schedule == "added-elsewhere" for s in leader.get_status().schedules
        ):
            time.sleep(0.05)
        assert all(s.schedule != "added-elsewhere" for s in leader.get_status().schedules)
    finally:
        standby.stop()
        leader.stop()


class _WatchedStore(MemoryStateStore):
    """A memory store that, like the database store, tells its scheduler of other hosts'
    changes (``watch``), and counts the scheduler's tries to take the lease."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.tries = 0
        self.on_change: Callable[[], None] | None = None

    def watch(self, on_change: Callable[[], None]) -> None:
        self.on_change = on_change

    def unwatch(self) -> None:
        self.on_change = None

    def acquire_lease(self, holder: str, ttl: float) -> Lease | None:
        if holder != "elsewhere":
            self.tries += 1
        return super().acquire_lease(holder, ttl)


def test_a_standby_told_of_each_commit_of_a_busy_leader_tries_to_lead_at_most_once_a_second() -> (
    None
):
    clock = FakeClock(T0)
    store = _WatchedStore(clock)
    assert store.acquire_lease("elsewhere", 3600) is not None  # a leader on another host
    with running(store=store, clock=clock) as (sched, _):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1h")}))
        sched.start()
        sched.run_pending()
        assert not sched.is_leader
        tried = store.tries
        assert tried >= 1 and store.on_change is not None
        for _ in range(10):  # the leader commits: each commit notifies
            store.on_change()
            sched.run_pending()
        assert store.tries == tried  # not a try per notification
        clock.advance("1s")
        store.on_change()  # a notification a second later is worth a try (a release is one)
        sched.run_pending()
        assert store.tries == tried + 1
