"""Runs dispatched ahead of a free slot: the ready queue, its workers, what stops a run in it."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from scheduler_helpers import T0, Recorder, running, wait_until

from herdsched import Agent, JobSubmitted, Schedule, SkipReason, Status, ThreadedScheduler
from herdsched.store import MemoryStateStore, YamlStateStore
from herdsched.testing import FakeClock


class Gate:
    """A job that records its schedule and blocks the first one until released; counts overlap."""

    def __init__(self, blocked: str = "first") -> None:
        self.blocked = blocked
        self.release = threading.Event()
        self.order: list[str] = []
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()

    def __call__(self, info: Any) -> None:
        with self._lock:
            self.order.append(info.schedule)
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if info.schedule == self.blocked:
                assert self.release.wait(10)
        finally:
            with self._lock:
                self.running -= 1


def three_due(job: Any, slots: int = 1) -> Agent:
    due = Schedule.interval("1h", start_at=T0)
    return Agent(
        "a", job=job, max_concurrent=slots, schedules={"first": due, "second": due, "third": due}
    )


def first_holds_the_slot(sched: ThreadedScheduler, job: Any, gate: Gate) -> None:
    """Register the three schedules, dispatch them, and wait until "first" runs (and blocks)."""
    sched.add_agent(three_due(job))
    sched.start()
    sched.run_pending()
    assert wait_until(lambda: gate.order == ["first"])


def statuses(sched: ThreadedScheduler) -> dict[str, tuple[SkipReason | None, int]]:
    return {s.schedule: (s.skip_reason, s.running) for s in sched.get_status().schedules}


def test_runs_beyond_the_free_slots_wait_ready_and_start_in_due_order() -> None:
    gate = Gate()
    with running() as (sched, _clock):
        first_holds_the_slot(sched, gate, gate)
        assert sched.get_running_job_count("a") == 1
        assert statuses(sched) == {
            "first": (SkipReason.ALREADY_RUNNING, 1),
            "second": (SkipReason.AT_CAPACITY, 0),  # dispatched, waiting for the slot
            "third": (SkipReason.AT_CAPACITY, 0),
        }
        refused = sched.trigger("a", "second")
        assert refused.skip_reason is SkipReason.ALREADY_RUNNING
        assert "about to run" in (refused.error or "")
        gate.release.set()
        assert sched.wait_until_idle(10)
        assert gate.order == ["first", "second", "third"]
        assert gate.most == 1


def test_a_schedule_paused_while_its_run_waits_does_not_run_until_resumed() -> None:
    gate = Gate()
    with running() as (sched, _clock):
        first_holds_the_slot(sched, gate, gate)
        sched.pause("a", "second")
        sched.remove_schedule("a", "third")
        gate.release.set()
        assert sched.wait_until_idle(10)
        assert gate.order == ["first"]
        second = next(s for s in sched.get_status().schedules if s.schedule == "second")
        assert second.status is Status.PAUSED and second.running == 0
        sched.resume("a", "second")
        sched.run_pending()
        assert sched.wait_until_idle(10)
        assert gate.order == ["first", "second"]  # the slot it waited for, caught up once


def test_a_schedule_changed_while_its_run_waits_runs_its_new_definition() -> None:
    gate = Gate()
    prompts: dict[str, str | None] = {}

    def job(info: Any) -> None:
        prompts[info.schedule] = info.prompt
        gate(info)

    with running() as (sched, _clock):
        first_holds_the_slot(sched, job, gate)
        sched.update_schedule("a", "second", prompt="new words")
        gate.release.set()
        assert sched.wait_until_idle(10)
        sched.run_pending()  # the run taken back is due again at once
        assert sched.wait_until_idle(10)
        assert sorted(gate.order) == ["first", "second", "third"]
        assert prompts["second"] == "new words"  # not the definition it was dispatched with


def test_stop_takes_back_the_runs_that_had_not_started(tmp_path: Path) -> None:
    gate = Gate()
    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    first_holds_the_slot(sched, gate, gate)
    threading.Timer(0.2, gate.release.set).start()
    sched.stop(timeout=10)
    assert gate.order == ["first"]
    store = YamlStateStore(tmp_path)
    try:
        for name in ("second", "third"):
            state = store.get_schedule_state("a", name)
            assert state.status is Status.IDLE and state.last_run_at is None
            assert state.next_run_at == T0  # still due: it runs when the scheduler is back
        assert store.load_claims() == []
    finally:
        store.close()
    assert (tmp_path / "claims.log").read_text() == ""  # the void claims were dropped too


def test_a_store_without_start_tracking_gets_no_runs_ahead() -> None:
    class PlainStore(MemoryStateStore):
        """A store that does not offer TracksClaimStarts."""

        claims: list[Any]

        def __init__(self) -> None:
            super().__init__()
            self.claims = []

        def claim_runs(self, claims: Any) -> None:
            self.claims.extend(claims)

        mark_started = None  # type: ignore[assignment]
        release_claims = None  # type: ignore[assignment]

    store = PlainStore()
    gate = Gate()
    with running(store=store) as (sched, _clock):
        first_holds_the_slot(sched, gate, gate)
        assert [c.schedule for c in store.claims] == ["first"]
        assert not any(c.ready for c in store.claims)
        gate.release.set()
        for _ in range(4):
            sched.run_pending()
            assert sched.wait_until_idle(10)
        assert gate.order == ["first", "second", "third"]
        assert not any(c.ready for c in store.claims)


def test_claims_made_ahead_say_so_and_the_rest_do_not() -> None:
    class Watching(MemoryStateStore):
        def __init__(self) -> None:
            super().__init__()
            self.claims: list[Any] = []
            self.started: list[str] = []

        def claim_runs(self, claims: Any) -> None:
            self.claims.extend(claims)

        def mark_started(self, run_id: str) -> None:
            self.started.append(run_id)

    store = Watching()
    gate = Gate()
    with running(store=store) as (sched, _clock):
        sched.add_agent(three_due(gate))
        sched.start()
        sched.run_pending()
        gate.release.set()
        assert sched.wait_until_idle(10)
    assert [(c.schedule, c.ready) for c in store.claims] == [
        ("first", False),
        ("second", True),
        ("third", True),
    ]
    ahead = [c.run_id for c in store.claims if c.ready]
    assert store.started == ahead  # each marked before its job ran, in order


def test_a_waiting_run_starts_beside_a_long_job_in_real_time() -> None:
    """One worker drains the queue; when its job takes long, another joins within milliseconds."""
    both = threading.Barrier(2, timeout=10)
    finished: list[str] = []

    def job(info: Any) -> None:
        both.wait()  # returns only once the two jobs run at the same time
        finished.append(info.schedule)

    sched = ThreadedScheduler(state_dir=None, max_sleep=0.2)
    due = Schedule.interval("1h")
    sched.add_agent(Agent("a", job=job, max_concurrent=2, schedules={"x": due, "y": due}))
    began = time.monotonic()
    with sched:
        assert wait_until(lambda: len(finished) == 2, timeout=10)
    assert time.monotonic() - began < 10
    assert sorted(finished) == ["x", "y"]


# -- found by review: each failed before its fix ---------------------------------------------


def test_removing_an_agent_whose_runs_wait_leaves_the_scheduler_usable() -> None:
    gate = Gate()
    with running() as (sched, _clock):
        first_holds_the_slot(sched, gate, gate)
        sched.remove_agent("a")
        gate.release.set()
        assert sched.wait_until_idle(10)
        assert gate.order == ["first"]
        sched.add_agent(three_due(Recorder()))  # the lock is free, the timer still plans
    assert sched.status == "stopped"


def test_runs_dispatched_ahead_never_start_without_a_durable_claim() -> None:
    class FirstClaimFails(MemoryStateStore):
        def __init__(self) -> None:
            super().__init__()
            self.durable: set[str] = set()
            self.failed = False

        def claim_runs(self, claims: Any) -> None:
            if not self.failed:
                self.failed = True
                raise OSError("disk hiccup")
            self.durable.update(claim.run_id for claim in claims)

    store = FirstClaimFails()
    unclaimed: list[str] = []

    def job(info: Any) -> None:
        if info.schedule != "first" and info.run_id not in store.durable:
            unclaimed.append(info.schedule)

    submitted: list[str] = []
    with running(store=store) as (sched, clock):
        sched.add_listener(lambda event: submitted.append(event.run_id), JobSubmitted)
        sched.add_agent(three_due(job))
        sched.start()
        for _ in range(4):
            clock.advance(6)  # past the retry pause that follows a failed claim
            sched.run_pending()
            assert sched.wait_until_idle(10)
        records = sched.history("a")
    assert sorted(record.schedule for record in records) == ["first", "second", "third"]
    assert unclaimed == []  # "first" started at dispatch, as before, when its claim failed
    assert sorted(submitted) == sorted(record.run_id for record in records)  # none taken back


def test_wait_until_idle_wakes_when_the_last_waiting_run_is_taken_back() -> None:
    gate = Gate()
    due = Schedule.interval("1h", start_at=T0)
    agent = Agent("a", job=gate, max_concurrent=1, schedules={"first": due, "second": due})
    with running() as (sched, _clock):
        execute = sched._execute

        def slow_after(run: Any) -> None:  # the worker dwells before it looks at the queue
            execute(run)
            time.sleep(0.3)

        sched._execute = slow_after  # type: ignore[method-assign]
        sched.add_agent(agent)
        sched.start()
        sched.run_pending()
        assert wait_until(lambda: gate.order == ["first"])
        sched.pause("a", "second")
        gate.release.set()
        began = time.monotonic()
        assert sched.wait_until_idle(5)
        assert time.monotonic() - began < 4  # woken, not timed out
        assert gate.order == ["first"]


def test_a_run_taken_back_because_its_schedule_changed_starts_without_waiting_for_max_sleep() -> (
    None
):
    gate = Gate()
    sched = ThreadedScheduler(state_dir=None, max_sleep=30)
    due = Schedule.interval("1h")
    sched.add_agent(Agent("a", job=gate, max_concurrent=1, schedules={"first": due, "second": due}))
    with sched:
        assert wait_until(lambda: gate.order == ["first"])
        time.sleep(0.2)  # the timer has planned its sleep: up to max_sleep
        sched.update_schedule("a", "second", prompt="changed")
        time.sleep(0.2)
        gate.release.set()
        assert wait_until(lambda: gate.order == ["first", "second"], timeout=10)


def test_more_slots_start_the_runs_waiting_in_the_queue() -> None:
    gate = Gate()
    with running() as (sched, _clock):
        agent = three_due(gate)
        sched.add_agent(agent)
        sched.start()
        sched.run_pending()
        assert wait_until(lambda: gate.order == ["first"])
        sched.set_agents([Agent("a", job=gate, max_concurrent=3, schedules=agent.schedules)])
        started = wait_until(lambda: sorted(gate.order) == ["first", "second", "third"], 5)
        gate.release.set()
        assert started  # while "first" still ran
        assert sched.wait_until_idle(10)


def test_a_run_started_at_dispatch_is_not_stuck_behind_one_claimed_ahead() -> None:
    class SlowPlainClaim(MemoryStateStore):
        def claim_runs(self, claims: Any) -> None:
            if not any(claim.ready for claim in claims):
                time.sleep(0.3)  # the first pass's claim syncs slowly

    ran: list[str] = []
    with running(store=SlowPlainClaim()) as (sched, clock):
        sched.add_agent(
            Agent(
                "a",
                job=lambda info: ran.append(info.schedule),
                max_concurrent=1,
                schedules={
                    "x": Schedule.interval("1h", start_at=T0),
                    "y": Schedule.interval("1h", start_at=T0 + timedelta(minutes=1)),
                },
            )
        )
        sched.start()
        first_pass = threading.Thread(target=sched.run_pending)
        first_pass.start()  # x starts at dispatch; its claim takes 0.3 s
        time.sleep(0.1)
        clock.advance(60)
        sched.run_pending()  # y is claimed ahead and queued before x
        first_pass.join()
        assert sched.wait_until_idle(10)
    assert ran == ["x", "y"]


def test_a_scheduler_that_stops_leaves_no_start_marks_behind(tmp_path: Path) -> None:
    from herdsched.store.start_marks import _prefix, marks_directory

    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    job = Recorder()
    sched.add_agent(three_due(job))
    sched.start()
    for _ in range(3):
        sched.run_pending()
        assert sched.wait_until_idle(10)
    assert sorted(job.schedules()) == ["first", "second", "third"]
    sched.stop()
    journal = tmp_path / "claims.log"
    assert list(marks_directory(tmp_path).glob(f"{_prefix(journal)}*")) == []
