"""The leader lock: one active scheduler per state directory, across threads, forks, processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from herdsched import Agent, Schedule, ThreadedScheduler
from herdsched.leader import LeaderLock, read_leader_info
from herdsched.testing import as_separate_processes


def test_one_holder_at_a_time_and_the_holder_is_recorded(tmp_path: Path) -> None:
    first, second = LeaderLock(tmp_path), LeaderLock(tmp_path)
    assert first.try_acquire()
    assert first.try_acquire()  # idempotent for the holder
    assert not second.try_acquire()
    info = read_leader_info(tmp_path)
    assert info is not None and info["pid"] == os.getpid()
    assert second.holder() == info
    first.release()
    first.release()
    assert read_leader_info(tmp_path) is None
    assert second.try_acquire()
    second.release()


def test_stale_content_without_a_holder_is_not_reported(tmp_path: Path) -> None:
    (tmp_path / "scheduler.lock").write_text('{"pid": 999999, "host": "gone"}')
    assert read_leader_info(tmp_path) is None
    (tmp_path / "scheduler.lock").write_text("not json")
    assert read_leader_info(tmp_path) is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_does_not_believe_it_holds_the_lock(tmp_path: Path) -> None:
    lock = LeaderLock(tmp_path)
    assert lock.try_acquire()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read_end)
        verdict = b"held" if lock.held else b"free"
        os.write(write_end, verdict)
        os._exit(0)
    os.close(write_end)
    verdict = os.read(read_end, 10)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert verdict == b"free"
    # The child's exit must not have released the parent's lock.
    assert lock.held
    assert not LeaderLock(tmp_path).try_acquire()
    lock.release()


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
            if planned.next_run_at is not None:
                break
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
