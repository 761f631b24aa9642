"""The timer thread survives every store error, keeps its in-memory truth and retries."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import T0, Blocker, Recorder, running, step, wait_until

from herdsched import Agent, Schedule, StateError, StateErrorOccurred, Status, ThreadedScheduler
from herdsched.engine.store_health import REPEAT_EVERY, StoreHealth
from herdsched.store import MemoryStateStore
from herdsched.testing import FakeClock


class FlakyStore(MemoryStateStore):
    """A store whose writes fail while ``broken`` is set."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.broken = False
        self.pending: list[tuple[str, str, dict[str, Any]]] = []
        self.flushes = 0

        self.unwritten = False  # what a failed commit left pending, as a real store keeps it

    def flush(self) -> None:
        if self.broken:
            self.unwritten = True
            raise StateError("disk full", "/nowhere/state.yaml")
        self.flushes += 1
        self.unwritten = False

    def flush_deadline(self) -> float | None:
        return 0.0 if self.broken or self.unwritten else None

    def update_schedule_state(self, agent: str, schedule: str, **changes: Any):  # type: ignore[no-untyped-def]
        if self.broken:
            raise StateError("disk full", "/nowhere/state.yaml")
        return super().update_schedule_state(agent, schedule, **changes)


def test_flush_failures_are_reported_and_retried_while_jobs_keep_running() -> None:
    store = FlakyStore(clock=FakeClock(T0))
    with running(store=store) as (sched, clock):
        errors: list[StateErrorOccurred] = []
        sched.add_listener(errors.append, StateErrorOccurred)
        job = Recorder()
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1m")}))
        sched.start()
        store.broken = True
        step(sched)
        step(sched, clock, "1m")
        assert len(job.calls) == 2  # the store is down, the fleet is not
        assert errors and "disk full" in errors[0].error
        before = store.flushes  # counted first: the timer thread may retry the commit at once
        store.broken = False
        step(sched, clock, "1m")
        # the retry may be the timer thread's, handed to the flusher thread: waited for
        assert wait_until(lambda: store.flushes > before)


def test_a_store_down_for_minutes_logs_once_a_minute_and_says_when_it_works_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every failed call was an ERROR line (a leader through a database outage wrote several a
    second); listeners still hear of each one."""
    store = FlakyStore(clock=FakeClock(T0))
    with running(store=store) as (sched, clock):
        errors: list[StateErrorOccurred] = []
        sched.add_listener(errors.append, StateErrorOccurred)
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1m")}))
        sched.start()
        step(sched)
        store.broken = True
        with caplog.at_level(logging.INFO, logger="herdsched"):
            for _ in range(150):  # two and a half minutes of passes, a second apart
                step(sched, clock, "1s")
            store.broken = False
            step(sched, clock, "1s")
    failures = len(errors)
    lines = [r.getMessage() for r in caplog.records if "state store" in r.getMessage()]
    # how many calls fail depends on whether the timer thread's background commit is still
    # failing when the next pass comes (a loaded CI run saw 95 for the 150 passes); each one
    # is heard, only four are logged
    assert failures > 10 * len(lines)
    heads = [line.split(":")[0].split(" (")[0] for line in lines]
    assert heads[0] == "The state store failed"
    assert heads[-1] == "The state store works again after failing for 2m30s"
    repeats = [
        re.fullmatch(r"The state store still fails after (\d)m(?:(\d+)s)?", h) for h in heads[1:-1]
    ]
    assert len(repeats) == 2 and all(repeats), heads
    after = [int(m[1]) * 60 + int(m[2] or 0) for m in repeats if m]
    # a minute apart at least; a repeat is logged at the first failure a minute past the last
    # line, and on a loaded machine some passes fail no call (one saw the first repeat at 1m10s)
    assert 60 <= after[0] < 90 and 60 <= after[1] - after[0] < 90, heads
    assert "disk full" in lines[0] and "disk full" in lines[2]
    assert lines[-1].endswith(f"({failures} failed calls).")
    assert caplog.records[-1].levelno == logging.WARNING


def test_the_notebook_view_tells_of_a_failing_store_until_it_works_again() -> None:
    """It showed a healthy fleet ("running · 0 running") while every claim and commit failed
    and slots were recorded missed: a notebook shows no log, so nothing told the user."""
    store = FlakyStore(clock=FakeClock(T0))
    with running(store=store) as (sched, clock):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1m")}))
        sched.start()
        step(sched)
        assert "store-trouble" not in sched._repr_html_()
        store.broken = True
        step(sched, clock, "1m")
        clock.advance("30s")
        html = sched._repr_html_()
        # the timer thread may retry the commit (and fail again) as the clock moves on
        assert re.search(r"The state store failed (30s|less than a second) ago \(\d+ failed", html)
        assert "none known to have reached it since): disk full" in html
        store.broken = False
        step(sched, clock, "1m")  # the retried commit reaches the store
        assert wait_until(lambda: "store-trouble" not in sched._repr_html_())


def test_a_user_intent_write_that_fails_changes_nothing_and_says_so() -> None:
    store = FlakyStore(clock=FakeClock(T0))
    with running(store=store) as (sched, clock):
        job = Recorder()
        sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1m")}))
        sched.start()
        step(sched)
        errors: list[StateErrorOccurred] = []
        sched.add_listener(errors.append, StateErrorOccurred)
        store.broken = True
        with pytest.raises(StateError, match=r"a/s was not paused: .*nothing changed"):
            sched.pause("a", "s")
        assert any(e.schedule == "s" for e in errors)  # heard at once, not at the next pass
        assert sched.get_status().schedules[0].status is not Status.PAUSED
        store.broken = False
        step(sched, clock, "5m")
        assert len(job.calls) == 2  # not paused anywhere: memory and disk agree
        assert store.get_schedule_state("a", "s").status is not Status.PAUSED


def test_an_agent_wide_pause_cut_short_by_the_store_names_what_it_paused() -> None:
    """An agent's schedules are paused one after another: with the second write failing, the
    first stayed paused (and its listeners were told) while the error said "nothing changed".
    It names the schedules paused before it now, and calling again finishes the pause."""

    class FailsOnS2(FlakyStore):
        def update_schedule_state(self, agent: str, schedule: str, **changes: Any):  # type: ignore[no-untyped-def]
            if self.broken and schedule == "s2":
                raise StateError("disk full", "/nowhere/state.yaml")
            return MemoryStateStore.update_schedule_state(self, agent, schedule, **changes)

    store = FailsOnS2(clock=FakeClock(T0))
    with running(store=store) as (sched, _clock):
        every = {name: Schedule.interval("1m") for name in ("s1", "s2", "s3")}
        sched.add_agent(Agent("a", job=Recorder(), schedules=every))
        sched.start()
        store.broken = True
        with pytest.raises(StateError) as info:
            sched.pause("a")
        assert "a/s2 was not paused" in str(info.value)
        assert "a/s1 was, the rest were not; try again" in str(info.value)
        assert store.get_schedule_state("a", "s1").status is Status.PAUSED
        store.broken = False
        sched.pause("a")
        assert {s.status for s in sched.get_status().schedules} == {Status.PAUSED}


class LookFails(MemoryStateStore):
    """A store whose look for other processes' changes fails while ``broken`` is set."""

    broken = False

    def refresh(self) -> bool:
        if self.broken:
            raise StateError("I/O error reading state.yaml", "/nowhere/state.yaml")
        return super().refresh()


def test_a_store_error_met_by_a_read_is_heard_before_the_read_returns() -> None:
    """``refresh()`` and ``get_status()`` collected the ``StateErrorOccurred`` of a failed
    look at the store and left it for the same thread's next change, which might never come."""
    store = LookFails(clock=FakeClock(T0))
    with running(store=store, poll_interval=60) as (sched, _clock):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1h")}))
        sched.start()
        errors: list[StateErrorOccurred] = []
        sched.add_listener(errors.append, StateErrorOccurred)
        store.broken = True
        sched.refresh()
        assert [e.error for e in errors][-1:] == ["I/O error reading state.yaml"]
        heard = len(errors)
        sched.get_status()
        assert len(errors) > heard


class DefinitionWritesFail(MemoryStateStore):
    """A store whose writes of definitions and states fail while ``broken`` is set."""

    broken = False

    def _fail(self) -> None:
        if self.broken:
            raise StateError("No space left on device", "/nowhere/schedules.yaml")

    def save_definition(self, *args: Any, **kwargs: Any) -> None:
        self._fail()
        super().save_definition(*args, **kwargs)

    def delete_definition(self, *args: Any, **kwargs: Any) -> None:
        self._fail()
        super().delete_definition(*args, **kwargs)

    def remove_schedule_state(self, agent: str, schedule: str) -> None:
        self._fail()
        super().remove_schedule_state(agent, schedule)


def test_every_change_refused_for_a_store_failure_is_an_event() -> None:
    """A run-time definition's failed write, and a code schedule's failed removal, raised
    ``StateError`` but told the listeners nothing, unlike a failed pause."""
    store = DefinitionWritesFail(clock=FakeClock(T0))
    with running(store=store) as (sched, _clock):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"coded": Schedule.manual()}))
        sched.add_schedule("a", "rt", Schedule.manual(), persist=True)
        sched.start()
        errors: list[StateErrorOccurred] = []
        sched.add_listener(errors.append, StateErrorOccurred)
        store.broken = True
        changes: list[Callable[[], object]] = [
            lambda: sched.add_schedule("a", "new", Schedule.manual(), persist=True),
            lambda: sched.update_schedule("a", "rt", prompt="changed"),
            lambda: sched.remove_schedule("a", "rt"),
            lambda: sched.remove_schedule("a", "coded"),
        ]
        for change in changes:
            heard = len(errors)
            with pytest.raises(StateError, match="No space left"):
                change()
            assert len(errors) == heard + 1  # heard before the call raised
        assert {"rt", "coded"} <= set(sched.get_agent("a").schedules)


def test_memory_store_transitions_never_leave_a_user_intent_status() -> None:
    store = MemoryStateStore()
    store.update_schedule_state("a", "s", status="paused")
    store.record_transition("a", "s", status="idle", last_error="x")
    assert store.get_schedule_state("a", "s").status is Status.PAUSED
    assert store.get_schedule_state("a", "s").last_error == "x"
    store.record_transition("a", "s", status="disabled")
    assert store.get_schedule_state("a", "s").status is Status.DISABLED
    store.update_schedule_state("a", "s", status="idle")
    assert store.get_schedule_state("a", "s").status is Status.IDLE


def test_store_health_logs_a_new_failure_at_once_and_old_ones_as_runs_of_their_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(T0)
    health = StoreHealth(logging.getLogger("herdsched"), clock)
    with caplog.at_level(logging.INFO, logger="herdsched"):
        health.failed(StateError("disk full", "/s/state.yaml"))
        clock.advance(1)
        health.failed(StateError("disk full", "/s/state.yaml"))  # the same: not again
        clock.advance(1)
        health.failed(StateError("permission denied", "/s/state.yaml"))  # news: at once
        health.failed(StateError("no space left", "/s/claims.log"))  # no call between them
        clock.advance(REPEAT_EVERY + 1)  # a standby: nothing commits between its failures
        health.failed(StateError("permission denied", "/s/state.yaml"))
        health.worked()
        health.worked()  # nothing left to report
    assert [r.getMessage() for r in caplog.records] == [
        "The state store failed: disk full",
        "The state store still fails after 2s (1 failed call more since the last report); "
        "the latest: permission denied",
        # was "(0 failed calls more since the last report)"
        "The state store still fails after 2s; the latest: no space left",
        "The state store failed: permission denied",
        "The state store works again after failing for less than a second (1 failed call).",
    ]


def test_store_health_logs_two_alternating_failures_once_each_per_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """On a full disk the claims and the group commit fail with two messages by turns: each
    counted as news, they made two ERROR lines a second."""
    clock = FakeClock(T0)
    health = StoreHealth(logging.getLogger("herdsched"), clock)
    claim = OSError(28, "No space left on device")
    commit = StateError("Cannot write /s/state.yaml: [Errno 28] No space left on device")
    with caplog.at_level(logging.INFO, logger="herdsched"):
        for _ in range(40):  # 20 s
            health.failed(claim)
            clock.advance(0.25)
            health.failed(commit)
            clock.advance(0.25)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2, errors
    assert "No space left" in errors[0] and "Cannot write" in errors[1]


def test_store_health_tells_a_failure_between_calls_that_work_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Claims failing every second while group commits worked (no connection to spare for the
    claims) made an ERROR and a "works again" WARNING every second."""
    clock = FakeClock(T0)
    health = StoreHealth(logging.getLogger("herdsched"), clock)
    claim = StateError("Could not claim 1 run(s): too many connections for role")
    with caplog.at_level(logging.INFO, logger="herdsched"):
        for _ in range(20):  # 20 s
            health.failed(claim)
            clock.advance(0.5)
            health.worked()  # a group commit
            clock.advance(0.5)
        clock.advance(REPEAT_EVERY)
        health.failed(claim)  # a minute on: told again
        health.worked()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", f"The state store failed: {claim}"),
        (
            "WARNING",
            "The state store works again after failing for less than a second (1 failed call).",
        ),
        ("ERROR", f"The state store failed: {claim}"),
        (
            "WARNING",
            "The state store works again after failing for less than a second (1 failed call).",
        ),
    ]


def test_store_health_tells_an_outage_after_the_store_worked_for_a_while_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An outage 25 s after the store worked again, with the same words as the one before,
    was only repeated at DEBUG (its end too): the last line an operator saw said it worked."""
    clock = FakeClock(T0)
    health = StoreHealth(logging.getLogger("herdsched"), clock)
    down = StateError("could not connect: connection refused")
    with caplog.at_level(logging.INFO, logger="herdsched"):
        health.failed(down)
        clock.advance(5)
        health.worked()
        clock.advance(25)
        for _ in range(25):
            health.failed(down)
            clock.advance(1)
        health.worked()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", f"The state store failed: {down}"),
        ("WARNING", "The state store works again after failing for 5s (1 failed call)."),
        ("ERROR", f"The state store failed: {down}"),
        ("WARNING", "The state store works again after failing for 25s (25 failed calls)."),
    ]


class DownStore(MemoryStateStore):
    """A store another scheduler leads, whose every lease call fails while ``down`` is set."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.down = False
        assert self.acquire_lease("elsewhere:1:leader", 3600.0) is not None

    def _check(self) -> None:
        if self.down:
            raise StateError("could not connect to the database")

    def acquire_lease(self, holder: str, ttl: float):  # type: ignore[no-untyped-def]
        self._check()
        return super().acquire_lease(holder, ttl)

    def current_lease(self):  # type: ignore[no-untyped-def]
        self._check()
        return super().current_lease()


def test_a_standby_tells_an_outage_once_and_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A standby commits nothing, and only a commit ended a run of failures: the standby never
    said the store worked again, a second outage soon after was "still failing after 1m",
    each try for the lease and each status display logged its own WARNING."""
    store = DownStore(clock=FakeClock(T0))
    with running(store=store) as (sched, clock):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1m")}))
        sched.start()
        assert sched.status == "standby"
        with caplog.at_level(logging.INFO, logger="herdsched"):
            for _ in range(2):  # two outages
                store.down = True
                for _ in range(10):  # ten tries for the lease, ten status displays
                    step(sched, clock, "5s")
                    assert sched.get_status().leader is None
                store.down = False
                step(sched, clock, "5s")
                assert sched.get_status().leader is not None
                clock.advance(10)
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [line.split(":")[0] for line in lines] == [
        "The state store failed",
        "The state store works again after failing for 50s (20 failed calls).",
    ] * 2, lines


class ReadOnlyStore(MemoryStateStore):
    """A store nobody leads whose lease cannot be written (a read-only database)."""

    def acquire_lease(self, holder: str, ttl: float):  # type: ignore[no-untyped-def]
        raise StateError("cannot execute INSERT in a read-only transaction")


def test_a_scheduler_that_could_not_take_a_lease_nobody_holds_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It said "Another scheduler is active for ... (holder unknown); this one is standing
    by": a fleet pointed at a read-only replica ran nothing while it looked like a standby."""
    with (
        caplog.at_level(logging.INFO, logger="herdsched"),
        running(store=ReadOnlyStore(clock=FakeClock(T0))) as (
            sched,
            _clock,
        ),
    ):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1m")}))
        sched.start()
        assert sched.status == "standby"
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert lines[:2] == [
        "The state store failed: cannot execute INSERT in a read-only transaction",
        "This scheduler could not take the lease of memory (this process only), which no "
        "scheduler holds (the store "
        "error logged before says why); it stands by and tries again.",
    ]
    assert "Another scheduler is active" not in caplog.text


def test_a_scheduler_started_again_while_its_old_jobs_run_says_why_it_stands_by(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It blamed "the store error logged before", though none was: it does not take the lease
    while a job it gave up at ``stop(wait_for_jobs=False)`` still runs."""
    job = Blocker()
    sched = ThreadedScheduler(store=MemoryStateStore(), state_dir=None)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.manual()}))
    sched.start()
    try:
        sched.trigger("a", "s")
        assert job.began.wait(10)
        sched.stop(wait_for_jobs=False)
        with caplog.at_level(logging.WARNING, logger="herdsched"):
            sched.start()
        assert sched.status == "standby"
        assert "its jobs from before it stopped still run: it leads once they end" in caplog.text
        assert "store error" not in caplog.text
    finally:
        job.release.set()
        sched.stop()


class StateRemovalFails(MemoryStateStore):
    """A store that cannot remove a schedule's state (a full disk under ``state.yaml``) but
    can delete its definition (``schedules.yaml`` is smaller)."""

    def remove_schedule_state(self, agent: str, schedule: str) -> None:
        raise StateError("No space left on device", "/nowhere/state.yaml")

    remove_schedule_state_unless_defined = remove_schedule_state


def test_a_removal_whose_state_cannot_be_cleared_is_made_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The definition was deleted, then the state write failed and ``remove_schedule`` raised:
    the caller was told nothing changed while the schedule was gone for every other process
    (and still listed by this one)."""
    store = StateRemovalFails(clock=FakeClock(T0))
    with running(store=store) as (sched, _clock):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"coded": Schedule.interval("1h")}))
        sched.add_schedule("a", "rt", Schedule.interval("1h"), persist=True)
        sched.start()
        sched.remove_schedule("a", "rt")  # raised StateError
        assert "rt" not in sched.get_agent("a").schedules
        assert "rt" not in store.load_definitions().get("a", {})
        assert "a/rt is removed, but its state could not be cleared" in caplog.text
        assert "herdsched forget a/rt" in caplog.text
        # a schedule defined in code has no definition to delete: its state is the change
        with pytest.raises(StateError, match="No space left"):
            sched.remove_schedule("a", "coded")
        assert "coded" in sched.get_agent("a").schedules


def test_a_schedule_created_over_a_state_its_removed_namesake_left_starts_afresh_or_not_at_all(
    tmp_path: Path,
) -> None:
    """A removal could not clear the state (a full disk), and the schedule created again under
    that name, its own clearing of that state failing as well, was acknowledged and took the old
    one's pause (it never ran). The creation is now undone and the caller told."""
    from herdsched.store.yaml_store import YamlStateStore

    class StateRemovalFailsOnDisk(YamlStateStore):
        fails = True

        def remove_schedule_state(self, agent: str, schedule: str) -> None:
            if self.fails:
                raise StateError("No space left on device", self.state_path)
            super().remove_schedule_state(agent, schedule)

    clock = FakeClock(T0)
    store = StateRemovalFailsOnDisk(tmp_path, clock=clock)
    with running(store=store, clock=clock) as (sched, _clock):
        sched.add_agent(Agent("a", job=Recorder(), schedules={}))
        sched.start()
        sched.add_schedule("a", "rt", Schedule.interval("1h"), persist=True)
        sched.pause("a", "rt")
        sched.remove_schedule("a", "rt")  # its paused state stays behind
        errors: list[StateErrorOccurred] = []
        sched.add_listener(errors.append, StateErrorOccurred)
        with pytest.raises(StateError, match="a/rt was not created: the state a removed"):
            sched.add_schedule("a", "rt", Schedule.interval("5m"), persist=True)
        assert [e.error for e in errors] == ["No space left on device"]  # a store failure too
        assert "rt" not in sched.get_agent("a").schedules
        assert "rt" not in store.load_definitions().get("a", {})
        store.fails = False
        sched.add_schedule("a", "rt", Schedule.interval("5m"), persist=True)  # store works
        (status,) = sched.get_status().schedules  # its first run may have started
        assert status.schedule == "rt" and status.status is not Status.PAUSED
        assert status.consecutive_failures == 0


@contextmanager
def two_processes(
    tmp_path: Path, clock: FakeClock, job: Recorder, *, first_lock_timeout: float = 10.0
) -> Iterator[tuple[ThreadedScheduler, ThreadedScheduler]]:
    """Two started schedulers of agent ``bot`` on one state directory, as two processes, the
    first leading (its store waits ``first_lock_timeout`` for a lock); stopped afterwards."""
    from herdsched.store.yaml_store import YamlStateStore
    from herdsched.testing import as_separate_processes

    first, second = (
        ThreadedScheduler(
            store=YamlStateStore(tmp_path, clock=clock, lock_timeout=timeout),
            clock=clock,
            timezone="UTC",
        )
        for timeout in (first_lock_timeout, 10.0)
    )
    for each in (first, second):
        each.add_agent(Agent("bot", job=job, schedules={}))
    with as_separate_processes():
        first.start()
        second.start()
    try:
        yield first, second
    finally:
        for each in (second, first):
            each.stop()
            each.store.close()


def test_a_schedule_created_over_a_leftover_state_runs_its_first_slot_once(
    tmp_path: Path,
) -> None:
    """The leftover state was cleared after the definition was written: a leader in another
    process that took the new schedule in and ran it in between had that run's state cleared,
    took the schedule for one removed and created again, and ran the slot a second time."""
    release = threading.Event()
    job = Recorder(lambda info: release.wait(10))
    with two_processes(tmp_path, FakeClock(T0), job) as (leader, creator):
        # what a removed namesake left: its removal could not clear its state
        creator.store.update_schedule_state("bot", "brief", status="idle", consecutive_failures=2)
        save = creator.store.save_definition

        def save_then_the_leader_runs_it(*args: Any, **kwargs: Any) -> None:
            save(*args, **kwargs)
            leader.refresh()
            leader.run_pending()  # the new schedule's first run starts
            assert wait_until(lambda: job.calls)
            leader.store.flush()

        creator.store.save_definition = save_then_the_leader_runs_it  # type: ignore[method-assign]
        try:
            creator.add_schedule("bot", "brief", Schedule.interval("1h"), persist=True)
            leader.refresh()
            leader.run_pending()
            release.set()
            assert leader.wait_until_idle(10)
            leader.run_pending()
            assert leader.wait_until_idle(10)
            assert len(job.calls) == 1
        finally:
            release.set()


def test_a_creation_clearing_the_state_a_namesake_left_wipes_no_other_creation(
    tmp_path: Path,
) -> None:
    """A creation looked for a definition of its name, found none, then cleared the state its
    removed namesake left: another process creating and running that name in between had its
    first run's state cleared, and the first creation was refused (the name was taken). The
    clearing is now a compare-and-remove under the lock every creation takes: the other
    creation waits for it (here for 0.05 s, then gives up)."""
    job = Recorder()
    with two_processes(tmp_path, FakeClock(T0), job, first_lock_timeout=0.05) as (other, creator):
        # what a removed namesake left: its removal could not clear its state
        creator.store.update_schedule_state("bot", "brief", status="idle", consecutive_failures=2)
        remove = creator.store.remove_schedule_state
        refused: list[StateError] = []

        def remove_while_the_other_creates_and_runs_it(agent: str, schedule: str) -> None:
            try:
                other.add_schedule("bot", "brief", Schedule.interval("5m"), persist=True)
            except StateError as exc:  # waits for the creator's clearing, here 0.05 s
                refused.append(exc)
            else:
                other.run_pending()  # the other's schedule runs its first slot
                assert wait_until(lambda: job.calls)
                assert other.wait_until_idle(10)
                other.store.flush()
            remove(agent, schedule)

        creator.store.remove_schedule_state = remove_while_the_other_creates_and_runs_it  # type: ignore[method-assign]
        creator.add_schedule("bot", "brief", Schedule.interval("1h"), persist=True)
        assert refused and "Could not lock" in str(refused[0])
        assert "schedules.yaml" in str(refused[0])
        assert creator.store.load_definitions()["bot"]["brief"]["interval"] == "1h"
        assert creator.store.get_schedule_state("bot", "brief").consecutive_failures == 0
        assert job.calls == []


def test_a_removal_clears_no_state_of_a_namesake_created_meanwhile(tmp_path: Path) -> None:
    """A removal deleted the definition, then cleared the state in a step of its own: another
    process creating that name in between and running it had its first run's state cleared,
    and its leader, taking the cleared state for a schedule created afresh, ran the slot
    again."""
    job = Recorder()
    with two_processes(tmp_path, FakeClock(T0), job) as (leader, remover):
        remover.add_schedule("bot", "brief", Schedule.cron("0 3 * * *"), persist=True)
        delete = remover.store.delete_definition

        def delete_then_a_namesake_is_created_and_runs(*args: Any, **kwargs: Any) -> None:
            delete(*args, **kwargs)
            leader.refresh()  # takes the removal in
            leader.add_schedule("bot", "brief", Schedule.interval("1h"), persist=True)
            leader.run_pending()  # the namesake's first run
            assert wait_until(lambda: job.calls)
            assert leader.wait_until_idle(10)
            leader.store.flush()

        remover.store.delete_definition = delete_then_a_namesake_is_created_and_runs  # type: ignore[method-assign]
        remover.remove_schedule("bot", "brief")
        assert leader.store.get_schedule_state("bot", "brief").last_run_at == T0
        leader.refresh()
        leader.run_pending()
        assert leader.wait_until_idle(10)
        assert len(job.calls) == 1


class SlowLeaseStore(MemoryStateStore):
    """A store whose lease read waits until let go (a database that does not answer)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.reading = threading.Event()
        self.answer = threading.Event()

    def current_lease(self):  # type: ignore[no-untyped-def]
        self.reading.set()
        self.answer.wait(30)
        return super().current_lease()


def test_a_status_read_waiting_for_the_store_holds_up_no_step_down() -> None:
    """The bug (a partition probe: a cut-off leader said it led for up to 42 s after another
    host took over): ``get_status()`` read the lease while holding the engine's lock, so every
    REST status request waiting for an unanswering database held up the leader's passes and
    its step-down. The lease is read before the lock is taken."""
    store = SlowLeaseStore(clock=FakeClock(T0))
    with running(store=store) as (sched, _clock):
        sched.start()
        reader = threading.Thread(target=sched.get_status)
        reader.start()
        try:
            assert store.reading.wait(10)
            assert sched._core.lock.acquire(timeout=5)  # the engine is not held up
            sched._core.lock.release()
        finally:
            store.answer.set()
            reader.join(10)


def test_a_commit_with_nothing_to_write_does_not_say_a_failing_store_works_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Reads of a damaged state file failed, then ``stop()`` committed nothing and said "The
    state store works again" while the file was as damaged as before."""
    store = FlakyStore(clock=FakeClock(T0))
    with running(store=store) as (sched, clock):
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1h")}))
        sched.start()
        step(sched)

        def damaged() -> list[Any]:
            raise StateError("state.yaml is not a valid state file", "/s/state.yaml")

        with caplog.at_level(logging.INFO, logger="herdsched"):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(store, "rejected_definitions", damaged)
                sched.get_status()  # a read of the damaged file fails
            step(sched, clock, "1s")
    lines = [r.getMessage() for r in caplog.records if "state store" in r.getMessage()]
    assert lines == ["The state store failed: state.yaml is not a valid state file"]
