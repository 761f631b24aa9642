"""The leadership lease: expiry, renewal, epochs, fencing of claims and commits, stepping down.

Time is a FakeClock throughout; the YAML store's liveness locks are real flocks, held by store
objects of this process (each on its own descriptor, as separate processes would be).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from socket import gethostname
from typing import Any, NamedTuple

import portalocker
import pytest
from agent_helpers import ListSource
from scheduler_helpers import Blocker, Recorder, drop_flocks_as_at_kill, wait_until

import herdsched
from herdsched import Agent, Schedule, StateError, ThreadedScheduler, TriggerInfo, WorkItem
from herdsched.cli import main
from herdsched.errors import LeadershipLostError
from herdsched.html import format_time, status_page, status_table
from herdsched.models import RunRecord, RunStatus, TriggerType
from herdsched.store.base import Lease, RunClaim, StateStore
from herdsched.store.deadline import current_deadline
from herdsched.store.lease_rules import grant
from herdsched.store.leases import LeaseFile, read_leader_info
from herdsched.store.memory import MemoryStateStore
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock, as_separate_processes
from herdsched.timestamps import format_timestamp

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
TTL = 30.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def yaml_stores(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[[], YamlStateStore]]:
    made: list[YamlStateStore] = []

    def make() -> YamlStateStore:
        store = YamlStateStore(tmp_path, clock=clock, commit_delay=0)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


def claim(run_id: str = "r1") -> RunClaim:
    return RunClaim("a", "s", run_id, T0, T0)


# ------------------------------------------------------------------ the contract, both stores


@pytest.mark.parametrize("kind", ["memory", "yaml"])
def test_a_lease_is_renewed_with_its_epoch_and_expires_on_the_stores_clock(
    kind: str, clock: FakeClock, yaml_stores: Callable[[], YamlStateStore]
) -> None:
    store: StateStore = MemoryStateStore(clock=clock) if kind == "memory" else yaml_stores()
    lease = store.acquire_lease("h1", TTL)
    assert lease is not None
    assert (lease.holder, lease.epoch, lease.acquired_at) == ("h1", 1, T0)
    assert lease.expires_at == T0 + timedelta(seconds=TTL)
    clock.advance(10)
    renewed = store.renew_lease(lease, TTL)
    assert (renewed.epoch, renewed.acquired_at) == (1, T0)  # same lease, since the same time
    assert renewed.expires_at == T0 + timedelta(seconds=10 + TTL)
    assert store.current_lease() == renewed
    assert not renewed.expired(clock.now())
    clock.advance(TTL)
    assert renewed.expired(clock.now())
    # expired but nobody took it: the holder may still renew (the epoch proves it)
    assert store.renew_lease(renewed, TTL).epoch == 1


def test_memory_store_another_holder_waits_for_expiry_then_takes_over_with_a_new_epoch(
    clock: FakeClock,
) -> None:
    store = MemoryStateStore(clock=clock)
    first = store.acquire_lease("h1", TTL)
    assert first is not None
    clock.advance(TTL - 1)
    assert store.acquire_lease("h2", TTL) is None
    clock.advance(1)
    second = store.acquire_lease("h2", TTL)
    assert second is not None and second.epoch == 2
    with pytest.raises(LeadershipLostError) as lost:
        store.renew_lease(first, TTL)
    assert (lost.value.held_epoch, lost.value.current_epoch) == (1, 2)
    store.release_lease(second)
    third = store.acquire_lease("h3", TTL)
    assert third is not None and third.epoch == 3  # epochs never repeat after a release


def test_a_takeover_is_said_once_and_a_process_retaking_its_own_lease_is_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = datetime(2026, 11, 24, 9, 0, tzinfo=timezone.utc)
    own = Lease("vm:1:a", 3, now, now, now + timedelta(seconds=30), os.getpid(), gethostname())
    other = Lease("vm:2:b", 4, now, now, now + timedelta(seconds=30), 999999, "elsewhere")
    with caplog.at_level(logging.INFO, logger="herdsched"):
        for _ in range(3):  # a takeover whose write fails is tried again and again
            assert grant(own, "vm:1:c", 30, now, holder_dead=True, last_epoch=3) is not None
        for _ in range(3):
            assert grant(other, "vm:1:c", 30, now, holder_dead=True, last_epoch=4) is not None
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        (
            "INFO",
            "Taking the scheduler lease again (this process held it before, epoch 3): it was "
            "given up.",
        ),
        (
            "WARNING",
            "Taking over the scheduler lease of vm:2:b (pid 999999 on elsewhere, epoch 4): its "
            "holder is gone.",
        ),
    ]


def test_status_says_a_lease_not_renewed_may_have_no_standby_to_take_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    past = FakeClock(datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc))
    with YamlStateStore(tmp_path, clock=past) as store:  # this live process holds it...
        assert store.acquire_lease("vm:1:hung", 30.0) is not None  # ...renewed long ago
        assert main(["status", "--state-dir", str(tmp_path), "--tz", "UTC"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.endswith(
        " - NOT RENEWED since 2026-01-05 09:00:00 +00:00: it hangs or cannot reach the store; "
        "a standby takes over, if one runs"
    ), line


def test_lease_values_are_validated() -> None:
    with pytest.raises(ValueError, match="epoch must be a positive integer"):
        Lease("h", 0, T0, T0, T0)
    with pytest.raises(ValueError, match="acquired_at must be an aware datetime"):
        Lease("h", 1, datetime(2026, 1, 1), T0, T0)
    with pytest.raises(ValueError, match="holder must be a non-empty string"):
        Lease("", 1, T0, T0, T0)
    with pytest.raises(ValueError, match="lease_ttl must be a positive number"):
        MemoryStateStore().acquire_lease("h", 0)
    with pytest.raises(ValueError, match="lease_ttl must be a positive number"):
        ThreadedScheduler(state_dir=None, lease_ttl=-1)


# ------------------------------------------------------------------ the YAML store's files


def test_yaml_a_hung_holder_loses_the_lease_after_its_ttl_not_before(
    clock: FakeClock, yaml_stores: Callable[[], YamlStateStore]
) -> None:
    hung, standby = yaml_stores(), yaml_stores()
    old = hung.acquire_lease("old", TTL)
    assert old is not None
    clock.advance(TTL - 0.001)
    assert standby.acquire_lease("new", TTL) is None  # alive (its flock) and not expired
    clock.advance(0.001)
    new = standby.acquire_lease("new", TTL)
    assert new is not None and new.epoch == old.epoch + 1
    with pytest.raises(LeadershipLostError, match="another scheduler"):
        hung.renew_lease(old, TTL)


def test_yaml_a_dead_holder_is_replaced_at_once(
    clock: FakeClock, yaml_stores: Callable[[], YamlStateStore], tmp_path: Path
) -> None:
    dead, standby = yaml_stores(), yaml_stores()
    assert dead.acquire_lease("dead", TTL) is not None
    # what the kernel does when the holder is killed: its liveness flock goes, its record stays
    drop_flocks_as_at_kill(dead)
    lease = standby.acquire_lease("new", TTL)
    assert lease is not None and lease.epoch == 2  # no time passed
    assert [p.name for p in tmp_path.glob("leader-*.lock")] == [standby._leases._liveness_name]


def test_yaml_liveness_is_the_current_holders_not_an_old_hung_ones(
    clock: FakeClock, yaml_stores: Callable[[], YamlStateStore]
) -> None:
    hung, current, third = yaml_stores(), yaml_stores(), yaml_stores()
    assert hung.acquire_lease("hung", TTL) is not None
    clock.advance(TTL)
    taken = current.acquire_lease("current", TTL)
    assert taken is not None and taken.epoch == 2
    # the hung holder still holds its own lock: that must not make anyone think the current
    # holder alive once the current holder dies (killed: its flock goes, its record stays)
    drop_flocks_as_at_kill(current)
    third_lease = third.acquire_lease("third", TTL)
    assert third_lease is not None and third_lease.epoch == 3


def test_yaml_the_hung_old_holders_death_does_not_unseat_the_new_holder(
    clock: FakeClock, yaml_stores: Callable[[], YamlStateStore]
) -> None:
    hung, current, third = yaml_stores(), yaml_stores(), yaml_stores()
    assert hung.acquire_lease("hung", TTL) is not None
    clock.advance(TTL)
    assert current.acquire_lease("current", TTL) is not None
    drop_flocks_as_at_kill(hung)  # the hung process dies
    assert third.acquire_lease("third", TTL) is None
    info = read_leader_info(current.state_dir)
    assert info is not None and info["holder"] == "current" and info["epoch"] == 2


def test_yaml_leader_info_shows_holder_epoch_and_since(
    clock: FakeClock, yaml_stores: Callable[[], YamlStateStore], tmp_path: Path
) -> None:
    assert read_leader_info(tmp_path) is None
    store = yaml_stores()
    lease = store.acquire_lease("me", TTL)
    assert lease is not None
    info = read_leader_info(tmp_path)
    assert info is not None
    assert info["holder"] == "me" and info["epoch"] == 1
    assert info["started_at"] == "2026-03-01T12:00:00.000Z"
    assert info["expires_at"] == "2026-03-01T12:00:30.000Z"
    assert isinstance(info["pid"], int) and info["host"]
    store.release_lease(lease)
    assert read_leader_info(tmp_path) is None
    (tmp_path / "lease.json").write_text("not json")
    assert read_leader_info(tmp_path) is None


def test_yaml_release_lets_a_standby_take_over_at_once(
    clock: FakeClock, yaml_stores: Callable[[], YamlStateStore]
) -> None:
    first, second = yaml_stores(), yaml_stores()
    lease = first.acquire_lease("first", TTL)
    assert lease is not None
    assert second.acquire_lease("second", TTL) is None
    first.release_lease(lease)
    taken = second.acquire_lease("second", TTL)
    assert taken is not None and taken.epoch == 2


# ------------------------------------------------------------------ fencing


def _taken_over(
    clock: FakeClock, yaml_stores: Callable[[], YamlStateStore]
) -> tuple[YamlStateStore, YamlStateStore]:
    stale, fresh = yaml_stores(), yaml_stores()
    assert stale.acquire_lease("stale", TTL) is not None
    clock.advance(TTL)
    assert fresh.acquire_lease("fresh", TTL) is not None
    return stale, fresh


def test_yaml_a_stale_leaders_claim_is_refused_and_not_written(
    clock: FakeClock, yaml_stores: Callable[[], YamlStateStore], tmp_path: Path
) -> None:
    stale, fresh = yaml_stores(), yaml_stores()
    assert stale.acquire_lease("stale", TTL) is not None
    stale.claim_runs([claim("before")])  # while it leads, claims go through
    assert [c.run_id for c in fresh.load_claims()] == ["before"]
    clock.advance(TTL)
    assert fresh.acquire_lease("fresh", TTL) is not None
    journal = (tmp_path / "claims.log").read_bytes()
    with pytest.raises(LeadershipLostError, match="nothing was written"):
        stale.claim_runs([claim("after")])
    assert (tmp_path / "claims.log").read_bytes() == journal
    # a second writer of the stale process (its flusher thread, say) meets the fence after the
    # first forgot the lease: its error, which may be the one logged, still names the holder
    with pytest.raises(LeadershipLostError, match=r"pid \d+ on .* holds it with epoch 2") as lost:
        stale.claim_runs([claim("later")])
    assert (lost.value.held_epoch, lost.value.current_epoch) == (None, 2)
    assert (tmp_path / "claims.log").read_bytes() == journal


def _success(run_id: str) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        agent="a",
        schedule="s",
        trigger_type=TriggerType.INTERVAL,
        status=RunStatus.SUCCESS,
    )


def test_yaml_a_stale_leaders_group_commit_is_refused_and_its_work_dropped(
    clock: FakeClock, yaml_stores: Callable[[], YamlStateStore], tmp_path: Path
) -> None:
    stale, fresh = _taken_over(clock, yaml_stores)
    fresh.update_schedule_state("a", "s", last_error="written by the new leader")
    before = (tmp_path / "state.yaml").read_bytes()
    stale.record_transition("a", "s", last_error="from the stale leader")
    stale.append_run(_success("x"))
    with pytest.raises(LeadershipLostError):
        stale.flush()
    assert (tmp_path / "state.yaml").read_bytes() == before
    assert not (tmp_path / "history").exists()
    assert stale.flush_deadline() is None  # dropped: nothing is retried
    stale.flush()
    assert stale.get_schedule_state("a", "s").last_error == "written by the new leader"


def test_yaml_a_stale_leaders_history_only_commit_is_refused(
    clock: FakeClock, yaml_stores: Callable[[], YamlStateStore], tmp_path: Path
) -> None:
    stale, _ = _taken_over(clock, yaml_stores)
    stale.append_run(_success("x"))
    with pytest.raises(LeadershipLostError):
        stale.flush()
    assert stale.get_history("a", "s") == []
    assert not (tmp_path / "history").exists()


@pytest.mark.parametrize(
    ("failing", "dropped"),
    [
        ("herdsched.store.document.atomic_write", "1 schedule transition(s) and 0 run record(s)"),
        ("_append_file", "0 schedule transition(s) and 1 run record(s)"),
    ],
)
def test_yaml_a_group_commit_that_fails_after_its_lease_was_given_up_is_not_tried_again(
    failing: str,
    dropped: str,
    yaml_stores: Callable[[], YamlStateStore],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The bug (as on PostgreSQL before): a group commit was writing state.yaml or the history
    when the scheduler stepped down and gave the lease up; the write then failed and put what
    it had taken back, to be written once the process led again: an outcome of the old lease
    setting the schedule back. A write that fails after its lease was given up drops its work."""
    store = yaml_stores()
    lease = store.acquire_lease("me", TTL)
    assert lease is not None
    if failing.endswith("atomic_write"):  # the history is not reached then
        store.record_transition("a", "s", last_error="from the old lease")
    else:
        store.append_run(_success("x"))
    leases = store._leases  # type: ignore[attr-defined]
    locked = leases._locked
    forgotten = threading.Event()
    releaser = threading.Thread(target=store.release_lease, args=(lease,))

    def noting_the_release(*, shared: bool, timeout: float) -> Any:
        if not shared:  # the release forgot the lease; it waits for the write's fence
            forgotten.set()
        return locked(shared=shared, timeout=timeout)

    def stepped_down_meanwhile(*args: object, **kwargs: object) -> Any:
        releaser.start()
        assert forgotten.wait(10)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(leases, "_locked", noting_the_release)
    if failing == "_append_file":
        monkeypatch.setattr(store._history, failing, stepped_down_meanwhile)  # type: ignore[attr-defined]
    else:
        monkeypatch.setattr(failing, stepped_down_meanwhile)
    with caplog.at_level(logging.WARNING, logger="herdsched"), pytest.raises(StateError):
        store.flush()
    releaser.join(10)
    monkeypatch.undo()
    assert store.acquire_lease("me", TTL) is not None  # it leads again
    store.flush()
    other = YamlStateStore(tmp_path)
    assert other.get_history("a", "s") == []
    assert other.get_schedule_state("a", "s").last_error is None
    other.close()
    assert f"{dropped} of {tmp_path} are dropped unwritten" in caplog.text


def test_yaml_user_intent_still_works_in_a_process_that_lost_the_lease(
    clock: FakeClock, yaml_stores: Callable[[], YamlStateStore]
) -> None:
    stale, fresh = _taken_over(clock, yaml_stores)
    stale.record_transition("a", "s", last_error="stale")
    stale.update_schedule_state("a", "s", status="paused")  # a person's pause, not fenced
    state = fresh.get_schedule_state("a", "s")
    assert (state.status.value, state.last_error) == ("paused", None)


def test_yaml_a_store_that_never_held_a_lease_is_not_fenced(
    clock: FakeClock, yaml_stores: Callable[[], YamlStateStore]
) -> None:
    leader, cli = yaml_stores(), yaml_stores()
    assert leader.acquire_lease("leader", TTL) is not None
    cli.record_transition("a", "s", last_error="from the CLI")
    cli.flush()
    assert leader.get_schedule_state("a", "s").last_error == "from the CLI"


# ------------------------------------------------------------------ the scheduler


class RenewalsFail(MemoryStateStore):
    """A store whose lease calls fail while ``broken`` (a partition, a dead disk)."""

    broken = False

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        if self.broken:
            raise StateError("the store does not answer")
        return super().renew_lease(lease, ttl)

    def acquire_lease(self, holder: str, ttl: float) -> Lease | None:
        if self.broken:
            raise StateError("the store does not answer")
        return super().acquire_lease(holder, ttl)


def test_a_leader_that_cannot_renew_steps_down_at_its_deadline(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = RenewalsFail(clock=clock)
    job = Recorder()
    sched = ThreadedScheduler(state_dir=None, store=store, clock=clock, lease_ttl=TTL)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("5s")}))
    with sched:
        sched.run_pending()
        assert sched.wait_until_idle(10) and len(job.calls) == 1
        store.broken = True
        clock.advance(TTL - 1)  # renewals fail, the deadline has not passed: it still leads
        sched.run_pending()
        assert sched.wait_until_idle(10)
        assert sched.status == "running" and len(job.calls) == 2
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="herdsched"):
            clock.advance(1)
            sched.run_pending()
        assert sched.status == "standby"
        assert sched.wait_until_idle(10) and len(job.calls) == 2
        assert "could not be renewed within lease_ttl=30 s" in caplog.text
        assert any(
            r.levelno == logging.ERROR and "lost the lead" in r.message for r in caplog.records
        )
        clock.advance(10)
        sched.run_pending()
        sched.wait_until_idle(10)
        assert len(job.calls) == 2
        store.broken = False  # the store answers again: it leads again (a new epoch)
        clock.advance(10)
        sched.run_pending()
        assert sched.status == "running"
        assert store.current_lease() is not None and store.current_lease().epoch == 2  # type: ignore[union-attr]


def test_failed_renewals_are_logged_every_ten_seconds_not_every_retry(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = RenewalsFail(clock=clock)
    sched = ThreadedScheduler(state_dir=None, store=store, clock=clock, lease_ttl=TTL)
    sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1h")}))
    with sched, caplog.at_level(logging.WARNING, logger="herdsched"):
        sched.run_pending()
        store.broken = True
        clock.advance(TTL / 3)  # the first renewal is due
        for _ in range(15):  # a retry a second: 15 failed renewals
            sched.run_pending()
            clock.advance(1)
        store.broken = False
        sched.run_pending()  # renewed
        store.broken = True
        clock.advance(TTL / 3)
        sched.run_pending()  # a new run of failures is told at once
        assert sched.status == "running"
    told = [r.getMessage() for r in caplog.records if "Could not renew" in r.getMessage()]
    assert len(told) == 3, told
    assert "within 20 s" in told[0] and "within 10 s" in told[1] and "within 20 s" in told[2]


class RenewalsWaitAndFail(MemoryStateStore):
    """A store whose renewals wait ``waits`` seconds of the clock (a server that does not
    answer until a timeout), then fail; ``None``: they work."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.fake_clock = clock
        self.waits: float | None = None

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        if self.waits is None:
            return super().renew_lease(lease, ttl)
        self.fake_clock.advance(self.waits)
        raise StateError("the store did not answer")


def test_a_renewal_that_waited_is_told_with_the_time_left_after_it_and_past_the_deadline_steps_down(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The bug (seen by a probe): the time left was counted from when the failed renewal was
    asked for, so a renewal that waited logged "stops dispatching unless a renewal succeeds
    within 6.67 s" 5 s after the deadline had passed, and led on past it. The heartbeat is
    driven here without the timer thread, which the waiting renewal's clock would wake."""
    store = RenewalsWaitAndFail(clock)
    sched = ThreadedScheduler(state_dir=None, store=store, clock=clock, lease_ttl=TTL)
    leadership = sched._leadership
    with sched._core.lock:
        assert leadership.try_lead()  # it leads: the deadline is 30 s on
    with caplog.at_level(logging.WARNING, logger="herdsched"):
        store.waits = 5
        clock.advance(TTL / 3)
        assert leadership.heartbeat()  # the renewal asked at 10 s fails at 15 s
        assert sched.status == "running"
        store.waits = 10
        clock.advance(8)
        assert not leadership.heartbeat()  # the retry asked at 23 s fails at 33 s
        assert sched.status == "standby"
    told = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(told) == 2, told
    assert "Unless a renewal succeeds within 15 s this scheduler stops dispatching." in told[0]
    assert told[1].startswith("This scheduler lost the lead of")
    assert "the lease could not be renewed within lease_ttl=30 s" in told[1]
    assert "It dispatches nothing more" in told[1]


class SeenDeadline(NamedTuple):
    """A store call's deadline as the call saw it: the seconds it had left."""

    left: float
    strict: bool
    budget: str


def seen_deadline() -> SeenDeadline | None:
    deadline = current_deadline()
    if deadline is None:
        return None
    return SeenDeadline(deadline.left(), deadline.strict, deadline.budget)


class RenewalsSeeTheirDeadline(MemoryStateStore):
    """A store that notes the deadline each renewal (and each claim) is made under."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.seen: list[SeenDeadline | None] = []
        self.claimed: list[SeenDeadline | None] = []

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        self.seen.append(seen_deadline())
        return super().renew_lease(lease, ttl)

    def claim_runs(self, claims: list[RunClaim]) -> None:
        self.claimed.append(seen_deadline())
        super().claim_runs(claims)


def test_a_renewal_waits_for_its_store_no_longer_than_the_lease_has_left(
    clock: FakeClock,
) -> None:
    """The bug (seen by a probe): a leader cut off from PostgreSQL went on saying it led 22-52 s
    into the cut, past its own lease (30 s), since its renewal waited for the server as long as
    any store call may (``lease_ttl`` + 1 s) before it could step down. A renewal is now bounded
    by the time its lease has left, strictly (the store may cut its session at once); one
    asked for by a timer that ran late gets a second."""
    store = RenewalsSeeTheirDeadline(clock)
    sched = ThreadedScheduler(state_dir=None, store=store, clock=clock, lease_ttl=TTL)
    leadership = sched._leadership
    with sched._core.lock:
        assert leadership.try_lead()
    clock.advance(TTL / 3)
    assert leadership.heartbeat()
    clock.advance(TTL + 5)  # the timer was held up past the deadline (a frozen VM, say)
    assert leadership.heartbeat()  # nobody took the lease meanwhile: it leads on
    first, late = store.seen
    assert first is not None and late is not None
    assert first.strict and first.left == pytest.approx(20, abs=1)
    assert first.budget == "the 20 s left of this scheduler's lease"
    assert late.strict and 0 < late.left <= 1
    assert current_deadline() is None  # the timer's other calls keep their own bounds


def test_a_leaders_claim_waits_for_its_store_no_longer_than_the_lease_has_left(
    clock: FakeClock,
) -> None:
    """The bug (seen by a probe): cut off from PostgreSQL while its timer claimed a run, a
    leader waited for the claim as long as any store call may (``lease_ttl`` + 1 s) before
    its renewal could even start, and stepped down 2-7 s after its lease had run out (in 9
    of 11 runs). Its claims are bounded by the time its lease has left, as its renewal is."""
    store = RenewalsSeeTheirDeadline(clock)
    sched = ThreadedScheduler(state_dir=None, store=store, clock=clock, lease_ttl=TTL)
    sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1h")}))
    with sched:
        sched.run_pending()  # leads (its lease: 30 s) and claims the first run
        assert sched.wait_until_idle(10)
    (claimed,) = store.claimed
    assert claimed is not None and claimed.strict
    assert claimed.left == pytest.approx(TTL, abs=1)
    assert claimed.budget == "the 30 s left of this scheduler's lease"


def test_the_timer_wakes_for_the_heartbeat(clock: FakeClock) -> None:
    sched = ThreadedScheduler(state_dir=None, clock=clock, lease_ttl=TTL, max_sleep=3600)
    sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.interval("1h")}))
    with sched:
        sched.run_pending()
        assert sched._timer._sleep_for(plan=False) <= TTL / 3
        lease = sched.store.current_lease()
        clock.advance(TTL / 3)
        sched.run_pending()
        renewed = sched.store.current_lease()
        assert lease is not None and renewed is not None
        assert renewed.expires_at == lease.expires_at + timedelta(seconds=TTL / 3)


def _leader_on(tmp_path: Path, clock: FakeClock, job: Recorder) -> ThreadedScheduler:
    sched = ThreadedScheduler(
        state_dir=tmp_path, clock=clock, lease_ttl=TTL, commit_delay=0, timezone="UTC"
    )
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("5s")}))
    return sched


def test_a_leader_whose_lease_was_taken_runs_nothing_writes_nothing_and_stands_by(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    job = Recorder()
    sched = _leader_on(tmp_path, clock, job)
    with sched:
        sched.run_pending()
        assert sched.wait_until_idle(10) and len(job.calls) == 1
        sched.run_pending()  # commit (or the flusher thread does)
        assert wait_until(lambda: sched.store.flush_deadline() is None)
        other = YamlStateStore(tmp_path, clock=clock)
        try:
            # the leader's liveness lock is lost the way a killed process loses it, while the
            # process goes on: its heartbeat is not due yet, so only the fence can stop it
            drop_flocks_as_at_kill(sched.store)
            taken = other.acquire_lease("other", TTL)
            assert taken is not None and taken.epoch == 2
            journal = (tmp_path / "claims.log").read_bytes()
            state = (tmp_path / "state.yaml").read_bytes()
            with caplog.at_level(logging.WARNING, logger="herdsched"):
                clock.advance(5)  # due again; the heartbeat is not (every 10 s)
                sched.run_pending()
            assert sched.wait_until_idle(10)
            # the timer thread may have made the refused pass: it steps down right after
            assert wait_until(lambda: sched.status == "standby")
            assert len(job.calls) == 1  # the slot is not run
            assert (tmp_path / "claims.log").read_bytes() == journal
            assert (tmp_path / "state.yaml").read_bytes() == state
            assert "lost the lead" in caplog.text and "epoch 2" in caplog.text
            assert sched.get_status().leader["holder"] == "other"  # type: ignore[index]
            other.release_lease(taken)
            clock.advance(10)
            sched.run_pending()  # stands by, then takes the lead again with a new epoch
            sched.run_pending()  # (or the timer thread's pass does)
            assert wait_until(lambda: sched.status == "running")
            assert sched.get_status().leader["epoch"] == 3  # type: ignore[index]
        finally:
            other.close()


def test_a_leader_that_lost_its_lease_while_a_schedule_waits_for_a_slot_goes_idle(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A standby runs nothing: what waited for a slot when the lead was lost waits no more
    (``wait_until_idle()`` waited until this process led again, for ever in a long cut)."""
    blocker = Blocker()
    sched = ThreadedScheduler(
        state_dir=tmp_path, clock=clock, lease_ttl=TTL, commit_delay=0, timezone="UTC"
    )
    schedules = {
        "long": Schedule.interval("1h", start_at=clock.now(), job=blocker),
        "short": Schedule.interval("1h", start_at=clock.now() + timedelta(seconds=1)),
    }
    sched.add_agent(Agent("a", job=Recorder(), max_concurrent=1, schedules=schedules))
    with sched:
        sched.run_pending()
        assert blocker.began.wait(10)
        clock.advance(5)
        sched.run_pending()  # short waits for the slot
        other = YamlStateStore(tmp_path, clock=clock)
        try:
            drop_flocks_as_at_kill(sched.store)
            assert other.acquire_lease("other", TTL) is not None
            clock.advance(11)  # the heartbeat finds the lease taken
            sched.run_pending()
            assert wait_until(lambda: sched.status == "standby")
            waiter = threading.Thread(target=sched.wait_until_idle, daemon=True)
            waiter.start()
            blocker.release.set()
            waiter.join(10)
            assert not waiter.is_alive()
        finally:
            other.close()


def test_a_run_that_ends_after_its_leader_lost_the_lease_is_not_written_when_it_leads_again(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The job ran on while its scheduler lost the lead; its outcome waited in the store and
    was written with the first group commit after the scheduler led again, setting the
    schedule back to before the other leader's runs (on PostgreSQL, catch-up then ran a slot
    the other host had run: a double run). It finishes unrecorded, as documented, and the
    next leader records it as interrupted. The log names the store in words (it printed
    "YamlStateStore('...')"), and the interrupted run's possible causes."""
    caplog.set_level(logging.INFO, logger="herdsched")
    job = Blocker()
    sched = ThreadedScheduler(
        state_dir=tmp_path, clock=clock, lease_ttl=TTL, commit_delay=0, timezone="UTC"
    )
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
    with sched:
        sched.run_pending()
        assert job.began.wait(10)
        other = YamlStateStore(tmp_path, clock=clock)
        try:
            drop_flocks_as_at_kill(sched.store)
            taken = other.acquire_lease("other", TTL)
            assert taken is not None and taken.epoch == 2
            clock.advance(11)  # the heartbeat is due: refused, the scheduler steps down
            sched.run_pending()
            assert wait_until(lambda: sched.status == "standby")
            job.release.set()
            assert sched.wait_until_idle(10)
            other.release_lease(taken)
        finally:
            other.close()
        clock.advance(10)
        sched.run_pending()
        sched.run_pending()
        assert wait_until(lambda: sched.status == "running")
        sched.store.flush()
        statuses = [r.status for r in YamlStateStore(tmp_path).get_history("a", "s")]
        assert statuses == [RunStatus.INTERRUPTED], statuses
    messages = [r.getMessage() for r in caplog.records]
    lost = [m for m in messages if m.startswith("This scheduler lost the lead")]
    assert len(lost) == 1
    assert lost[0].startswith(f"This scheduler lost the lead of {tmp_path} (epoch 1): ")
    assert "StateStore" not in caplog.text
    interrupted = YamlStateStore(tmp_path).get_history("a", "s")[0].run_id
    assert (
        f"a/s was running when its scheduler stopped or lost the lead; its run {interrupted} is "
        "recorded as interrupted."
    ) in messages
    assert "1 running job(s) are told to stop and their outcomes are not recorded" in lost[0]


@contextmanager
def another_leader(
    tmp_path: Path, clock: FakeClock, sched: ThreadedScheduler
) -> Iterator[YamlStateStore]:
    """Another process's store on ``tmp_path`` that took the lease from ``sched``, whose
    liveness lock was lost as at a kill (its heartbeat then finds the lease taken)."""
    other = YamlStateStore(tmp_path, clock=clock)
    try:
        drop_flocks_as_at_kill(sched.store)
        assert other.acquire_lease("other", TTL) is not None
        yield other
    finally:
        other.close()


def test_a_leader_that_lost_its_lease_tells_its_running_jobs_to_stop(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The next leader runs the schedule again: a job that went on (a hung leader woke) ran
    the schedule in two processes at once. It is told to stop through its cancel event, as a
    timeout would tell it, and its outcome is not recorded; its work source hears the item
    failed (the job returned early: it was told it succeeded)."""
    began, told = threading.Event(), threading.Event()
    item = WorkItem(id="ticket-1", title="Fix it")
    source = ListSource([item])

    def job(info: TriggerInfo) -> None:
        began.set()
        if info.cancel_event.wait(10):
            told.set()

    sched = ThreadedScheduler(
        state_dir=tmp_path,
        clock=clock,
        lease_ttl=TTL,
        commit_delay=0,
        timezone="UTC",
        work_sources={"queue": source},
    )
    schedules = {"s": Schedule.interval("1h", work_source="queue")}
    sched.add_agent(Agent("a", job=job, schedules=schedules))
    with sched:
        sched.run_pending()
        assert began.wait(10)
        with another_leader(tmp_path, clock, sched) as other:
            assert not told.is_set()
            clock.advance(11)  # the heartbeat is due: refused, the scheduler steps down
            sched.run_pending()
            assert wait_until(lambda: sched.status == "standby")
            assert told.wait(10)
            assert sched.wait_until_idle(10)
            assert other.get_history("a", "s") == []
            assert wait_until(lambda: len(source.reports) == 1)
            assert source.reports[0][1].success is False
            assert (
                source.reports[0][1].error == "its scheduler lost the lead before its job finished"
            )


def test_a_trigger_waiting_for_a_run_its_scheduler_lost_the_lead_of_is_told_so(
    tmp_path: Path, clock: FakeClock
) -> None:
    """It answered ``success=True`` for the job that returned once told to stop, whose record
    the next leader writes as interrupted."""
    began = threading.Event()

    def job(info: TriggerInfo) -> None:
        began.set()
        info.cancel_event.wait(10)

    sched = ThreadedScheduler(
        state_dir=tmp_path, clock=clock, lease_ttl=TTL, commit_delay=0, timezone="UTC"
    )
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.manual()}))
    with sched:
        answers: list[Any] = []
        waiter = threading.Thread(target=lambda: answers.append(sched.trigger("a", "s", wait=True)))
        waiter.start()
        assert began.wait(10)
        with another_leader(tmp_path, clock, sched):
            clock.advance(11)  # the heartbeat is refused: it steps down, telling the job
            sched.run_pending()
            waiter.join(15)
    (answer,) = answers
    assert (answer.success, answer.error) == (
        False,
        "its scheduler lost the lead before the run ended: its outcome is not recorded",
    )


@pytest.mark.parametrize("meanwhile", ["nobody led", "another leads", "another led and left"])
def test_a_leader_cut_off_from_its_store_keeps_its_jobs_unless_another_leads_meanwhile(
    clock: FakeClock, meanwhile: str
) -> None:
    """No other leader is known when the store does not answer (with a single scheduler there
    is none): a 31-second outage must not end an hour-long job. When the store answers and
    nobody led meanwhile, the scheduler leads again with the job, whose outcome is recorded:
    it stood by until the job ended, and the fleet ran nothing for an hour. Once another
    scheduler is seen leading, or to have led (the lease's epoch skipped one), which ran the
    schedule again, the job is told to stop (it ran on beside it)."""

    class LooksFail(RenewalsFail):
        def current_lease(self) -> Lease | None:
            if self.broken:
                raise StateError("the store does not answer")
            return super().current_lease()

    store = LooksFail(clock=clock)
    began = threading.Event()
    seen: list[TriggerInfo] = []
    ticks = Recorder()

    def job(info: TriggerInfo) -> None:
        seen.append(info)
        began.set()
        info.cancel_event.wait(10)

    sched = ThreadedScheduler(state_dir=None, store=store, clock=clock, lease_ttl=TTL)
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
    sched.add_agent(Agent("b", job=ticks, schedules={"t": Schedule.interval("1m")}))
    with sched:
        sched.run_pending()
        assert began.wait(10)
        assert wait_until(lambda: sched.get_status().active_jobs == 1)  # b/t's run has ended
        store.broken = True
        clock.advance(TTL + 1)
        sched.run_pending()
        assert wait_until(lambda: sched.status == "standby")
        clock.advance(TTL / 3)
        sched.run_pending()  # a standby's try: the store still does not answer
        assert not seen[0].cancel_event.is_set()
        if meanwhile != "nobody led":  # on another host, which the store answers
            taken = MemoryStateStore.acquire_lease(store, "other", TTL)
            assert taken is not None and taken.epoch == 2
            if meanwhile == "another led and left":
                store.release_lease(taken)
        store.broken = False
        clock.advance(TTL / 3)
        sched.run_pending()  # it answers: the outage is over for the status table too
        assert sched._core.store_health.trouble() is None
        if meanwhile == "nobody led":
            assert sched.status == "running" and not seen[0].cancel_event.is_set()
            clock.advance("2m")
            sched.run_pending()
            assert wait_until(lambda: len(ticks.calls) == 2)  # the fleet runs on meanwhile
            seen[0].cancel_event.set()  # the job ends: its outcome is this lead's
            assert sched.wait_until_idle(10)
            (record,) = sched.history("a", "s")
            assert record.status is RunStatus.SUCCESS and len(seen) == 1
        else:
            assert wait_until(seen[0].cancel_event.is_set)
            assert sched.wait_until_idle(10)
            assert sched.history("a", "s") == []  # the other leader records it interrupted
        if meanwhile == "another leads":
            store.release_lease(taken)


def test_an_outcome_still_uncommitted_when_the_lead_is_lost_is_not_written_when_it_leads_again(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job ended while its scheduler led, but its group commit failed (the database cut
    off) until the scheduler stepped down at its own deadline. The store kept the outcome and
    wrote it with the first group commit after the scheduler led again, setting the schedule
    back to before the other leader's runs: on PostgreSQL a slot ran twice (found by a
    partition probe). Giving the lease up drops what is pending of it; the next leader
    records the run as interrupted from its claim."""
    job = Recorder()
    sched = ThreadedScheduler(
        state_dir=tmp_path, clock=clock, lease_ttl=TTL, commit_delay=0, timezone="UTC"
    )
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
    store = sched.store

    def cut_off(*args: object, **kwargs: object) -> Any:
        raise StateError("the store does not answer")

    with sched:
        with monkeypatch.context() as cut:
            for name in ("flush", "renew_lease", "acquire_lease"):
                cut.setattr(store, name, cut_off)
            cut.setattr(store._leases, "release", cut_off)  # type: ignore[attr-defined]
            sched.run_pending()
            assert sched.wait_until_idle(10) and len(job.calls) == 1  # its outcome is pending
            for _ in range(4):  # heartbeats fail until the deadline: it steps down
                clock.advance(TTL / 3)
                sched.run_pending()
            assert wait_until(lambda: sched.status == "standby")
        other = YamlStateStore(tmp_path, clock=clock)
        try:
            drop_flocks_as_at_kill(store)
            taken = other.acquire_lease("other", TTL)  # another host led meanwhile
            assert taken is not None and taken.epoch == 2
            other.release_lease(taken)
        finally:
            other.close()
        for _ in range(4):  # the standby's next try
            clock.advance(TTL / 6)
            sched.run_pending()
        assert wait_until(lambda: sched.status == "running")
        store.flush()
        statuses = [r.status for r in YamlStateStore(tmp_path).get_history("a", "s")]
        assert statuses == [RunStatus.INTERRUPTED], statuses
        assert len(job.calls) == 1


def test_a_hung_leader_wakes_to_find_its_lease_taken_and_steps_down(
    tmp_path: Path, clock: FakeClock
) -> None:
    job = Recorder()
    sched = _leader_on(tmp_path, clock, job)
    with sched:
        sched.run_pending()
        assert sched.wait_until_idle(10) and len(job.calls) == 1
        other = YamlStateStore(tmp_path, clock=clock)
        try:
            with sched._core.lock:  # the leader is stuck: no pass, no heartbeat
                clock.advance(TTL + 1)
                taken = other.acquire_lease("other", TTL)
            assert taken is not None and taken.epoch == 2
            sched.run_pending()
            assert sched.status == "standby"
            assert sched.wait_until_idle(10) and len(job.calls) == 1
        finally:
            other.close()


def test_a_store_without_the_lease_contract_gets_a_clear_error() -> None:
    class OldStore(MemoryStateStore):
        acquire_lease = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"missing acquire_lease.*leader_lock=False"):
        ThreadedScheduler(state_dir=None, store=OldStore())
    ThreadedScheduler(state_dir=None, store=OldStore(), leader_lock=False)


def test_status_and_the_status_page_show_holder_epoch_and_since(
    tmp_path: Path, clock: FakeClock
) -> None:
    job = Recorder()
    sched = _leader_on(tmp_path, clock, job)
    with sched:
        leader = sched.get_status().leader
        assert leader is not None
        assert leader["epoch"] == 1 and leader["started_at"] == "2026-03-01T12:00:00.000Z"
        assert leader["expired"] is False and leader["holder"].count(":") == 2
        page = status_page(sched.get_status(), [], {}, api_base="/api")
        assert "lease epoch 1 since <time datetime='2026-03-01T12:00:00.000Z'>" in page


def test_the_status_page_and_the_notebook_view_say_when_the_lease_was_last_renewed() -> None:
    """As ``herdsched status`` says it: a leader not renewed in time hangs or lost the store,
    and a standby takes over only if one runs."""
    renewed, expires = T0 + timedelta(seconds=20), T0 + timedelta(seconds=50)
    lease = Lease("vm:4242:hung", 3, T0, renewed, expires, pid=4242, host="vm")
    for now, expired in ((T0 + timedelta(seconds=49), False), (T0 + timedelta(minutes=5), True)):
        status = herdsched.SchedulerStatus(
            running=True, active_jobs=0, status="standby", leader=lease.describe(now)
        )
        page = status_page(status, [], {}, api_base="/api")
        table = status_table(status)  # the notebook view
        # the page shows its times as its other times (the browser's zone); the notebook as
        # herdsched status shows them
        for html, shown in (
            (page, lambda moment: f"<time datetime='{format_timestamp(moment)}'>"),
            (table, format_time),
        ):
            assert f"pid 4242 on vm, lease epoch 3 since {shown(T0)}" in html
            assert (f"(<b>not renewed</b> since {shown(renewed)}" in html) is expired
            wording = "it hangs or cannot reach the store; a standby takes over, if one runs)"
            assert (wording in html) is expired


def test_the_status_page_and_the_notebook_view_show_years_before_1000_with_four_digits() -> None:
    """glibc's ``%Y`` does not pad: a lease since the year 500 read ``500-03-01``."""
    since = T0.replace(year=500)
    lease = Lease("vm:4242:old", 3, since, since, since + timedelta(seconds=30), pid=4242)
    status = herdsched.SchedulerStatus(
        running=True, active_jobs=0, status="standby", leader=lease.describe(since)
    )
    page = status_page(status, [], {}, api_base="/api", timezone=timezone.utc)
    assert "<time datetime='0500-03-01T12:00:00.000Z'>0500-03-01 12:00:00 UTC</time>" in page
    assert format_time(since, timezone.utc) == "0500-03-01 12:00:00 +00:00"
    assert f"since {format_time(since)}" in status_table(status)  # the notebook view


def test_leadership_lost_is_a_state_error_that_survives_pickling() -> None:
    error = herdsched.LeadershipLostError("lost", held_epoch=1, current_epoch=2, path="/x")
    assert isinstance(error, herdsched.StateError)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.held_epoch, copy.current_epoch, str(copy.path)) == (1, 2, "/x")


def test_two_passes_renewing_at_once_both_go_on_leading() -> None:
    """``run_pending()`` on the caller's thread and the timer thread may renew together: the
    one whose renewal lands second must not take the other's fresh lease for a step-down (it
    dispatched nothing, and a test's pass then waited for nothing)."""
    clock = FakeClock(datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc))
    store = MemoryStateStore(clock=clock)
    sched = ThreadedScheduler(state_dir=None, store=store, clock=clock, lease_ttl=30)
    sched.add_agent(Agent("a", job=Recorder()))
    sched.start()
    try:
        leadership = sched._leadership
        renew = store.renew_lease
        nested: list[bool] = []
        inside = [False]

        def renew_while_another_pass_renews(lease: Lease, ttl: float) -> Lease:
            if not inside[0]:
                inside[0] = True
                nested.append(leadership.heartbeat())  # the other pass, in between
            return renew(lease, ttl)

        store.renew_lease = renew_while_another_pass_renews  # type: ignore[method-assign]
        clock.advance(11)  # a heartbeat is due (every ttl / 3)
        assert leadership.heartbeat() is True
        assert nested == [True]
        assert sched.is_leader
    finally:
        sched.stop()


class _GatedRefresh(YamlStateStore):
    """A store whose look at other processes' changes can be held: while ``armed``,
    ``refresh`` waits for ``gate``."""

    armed = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entered, self.gate = threading.Event(), threading.Event()

    def refresh(self) -> bool:
        if self.armed:
            self.entered.set()
            self.gate.wait(30)
        return super().refresh()


def test_run_pending_waits_for_the_timer_threads_pass_in_progress(
    tmp_path: Path, clock: FakeClock
) -> None:
    """run_pending() beside the timer thread used to run a pass of its own that skipped the
    thread's poll in progress: a schedule paused by another process fired all the same."""
    with as_separate_processes():
        store = _GatedRefresh(tmp_path, clock=clock, commit_delay=0)
        other = YamlStateStore(tmp_path, clock=clock, commit_delay=0)
    job = Recorder()
    sched = ThreadedScheduler(state_dir=None, store=store, clock=clock, timezone="UTC")
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1m")}))
    with sched:
        sched.run_pending()  # an interval's first run is at start
        assert sched.wait_until_idle(10) and len(job.calls) == 1
        other.update_schedule_state("a", "s", status="paused")
        other.flush()
        store.armed = True
        clock.advance(60)  # s is due; the thread's pass polls first and is held in the store
        assert store.entered.wait(10)
        beside = threading.Thread(target=sched.run_pending)
        beside.start()
        beside.join(2)  # it waits for the thread's pass (before: it fired s at once)
        store.armed = False
        store.gate.set()
        beside.join(10)
        assert sched.wait_until_idle(10)
        assert len(job.calls) == 1
        assert sched.get_status().schedules[0].status == "paused"
    other.close()


class _AdvisingStore(YamlStateStore):
    """A store that asks standbys to try the lease every 20 s (as a database store would)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tries = 0
        self.advised: list[float] = []

    def acquire_lease(self, holder: str, ttl: float) -> Lease | None:
        self.tries += 1
        return super().acquire_lease(holder, ttl)

    def lease_retry_in(self, ttl: float) -> float:
        self.advised.append(ttl)
        return 20.0


def test_a_standby_tries_the_lease_as_often_as_its_store_advises(
    tmp_path: Path, clock: FakeClock
) -> None:
    def make() -> ThreadedScheduler:
        store = _AdvisingStore(tmp_path, clock=clock, commit_delay=0)
        sched = ThreadedScheduler(state_dir=None, store=store, clock=clock, timezone="UTC")
        sched.add_agent(Agent("a", job=Recorder(), schedules={"s": Schedule.manual()}))
        return sched

    with as_separate_processes():
        leader, standby = make(), make()
        leader.start()
        standby.start()
    store = standby.store
    assert isinstance(store, _AdvisingStore)
    try:
        assert (leader.status, standby.status) == ("running", "standby")
        wait_until(lambda: store.tries == 2, timeout=10)  # at start(), then the timer's pass
        tries = store.tries
        clock.advance(6)  # past the default retry (5 s), within the advised 20 s
        standby.run_pending()
        assert store.tries == tries
        clock.advance(15)
        standby.run_pending()
        assert store.tries == tries + 1 and standby.status == "standby"
        assert set(store.advised) == {TTL}
    finally:
        standby.stop(timeout=10)
        leader.stop(timeout=10)


def test_a_claim_newer_than_a_stored_running_state_is_the_run_recovery_records(
    tmp_path: Path,
) -> None:
    """A leader died (or lost its session) after claiming slot :02 and before committing the
    end of its run of slot :00, so the stored state still showed :00 running. Recovery then
    ignored the newer claim: it recorded :00 as interrupted and planned from it, so slot :02,
    whose job had started, ran a second time."""
    t0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
    second = timedelta(seconds=2)
    with YamlStateStore(tmp_path) as dead:
        dead.update_schedule_state(
            "a", "s", status="running", last_run_at=t0, last_slot_at=t0, running_run_id="r0" * 8
        )
        dead.claim_runs([RunClaim("a", "s", "r2" * 8, t0 + second, t0 + second)])
    job = Recorder()
    clock = FakeClock(t0 + timedelta(seconds=2.2))
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.cron("*/2 * * * * *")}))
    with sched:
        sched.run_pending()
        assert sched.wait_until_idle(10)
        assert job.calls == []  # slot :02 started in the dead process: not again
        # both runs started and neither end was recorded: each has its interrupted record
        record, earlier = sched.history("a", "s")
        assert (record.run_id, record.status) == ("r2" * 8, RunStatus.INTERRUPTED)
        assert record.scheduled_for == t0 + second
        assert (earlier.run_id, earlier.status) == ("r0" * 8, RunStatus.INTERRUPTED)
        assert earlier.scheduled_for == t0
        [status] = sched.get_status().schedules
        assert status.next_run_at == t0 + 2 * second


# ------------------------------------------------------------------ versions before the lease
# scheduler.lock, their leader lock: a leader of this version holds it too, and neither takes
# nor keeps the lead while such a version holds it (across real processes:
# tests/test_lease_processes.py)


@contextmanager
def older_version_leading(state_dir: Path) -> Iterator[None]:
    """Hold ``scheduler.lock`` as a version before the lease did: pid, host and start written
    into it, no lease holder."""
    with open(state_dir / "scheduler.lock", "a+", encoding="utf-8") as handle:
        portalocker.lock(handle, portalocker.LOCK_EX | portalocker.LOCK_NB)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": 1, "host": "old", "started_at": "2026-03-01T11:00:00Z"}))
        handle.flush()
        yield
        portalocker.unlock(handle)


def free_for_an_older_version(state_dir: Path) -> bool:
    """Whether a version before the lease could take ``scheduler.lock`` now."""
    with open(state_dir / "scheduler.lock", "a+", encoding="utf-8") as handle:
        try:
            portalocker.lock(handle, portalocker.LOCK_EX | portalocker.LOCK_NB)
        except portalocker.AlreadyLocked:
            return False
        portalocker.unlock(handle)
        return True


def test_a_free_lease_is_not_taken_while_an_older_version_leads(
    yaml_stores: Callable[[], YamlStateStore], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = yaml_stores()
    with older_version_leading(tmp_path):
        assert store.acquire_lease("new", TTL) is None
        assert store.acquire_lease("new", TTL) is None
    assert caplog.text.count("an older herdsched leads this state directory") == 1
    lease = store.acquire_lease("new", TTL)
    assert lease is not None
    assert not free_for_an_older_version(tmp_path)  # it stands by behind this leader
    named = json.loads((tmp_path / "scheduler.lock").read_text())
    assert (named["holder"], named["pid"]) == ("new", lease.pid)


def test_a_leader_that_took_over_from_a_hung_one_takes_scheduler_lock_once_it_is_free(
    yaml_stores: Callable[[], YamlStateStore], clock: FakeClock, tmp_path: Path
) -> None:
    hung, current = yaml_stores(), yaml_stores()
    assert hung.acquire_lease("hung", TTL) is not None
    clock.advance(TTL)
    lease = current.acquire_lease("current", TTL)
    assert lease is not None  # the hung holder's scheduler.lock does not hold the takeover up
    assert not free_for_an_older_version(tmp_path)
    drop_flocks_as_at_kill(hung)  # the hung process dies at last
    current.renew_lease(lease, TTL)
    assert not free_for_an_older_version(tmp_path)


def test_a_leader_steps_down_when_an_older_version_took_scheduler_lock_first(
    yaml_stores: Callable[[], YamlStateStore], clock: FakeClock, tmp_path: Path
) -> None:
    """A leader that took over from a hung holder leads without the lock; when the hung one
    dies and a version before the lease takes the lock first, both led."""
    hung, current, third = yaml_stores(), yaml_stores(), yaml_stores()
    assert hung.acquire_lease("hung", TTL) is not None
    clock.advance(TTL)
    lease = current.acquire_lease("current", TTL)
    assert lease is not None
    drop_flocks_as_at_kill(hung)
    with older_version_leading(tmp_path):
        with pytest.raises(LeadershipLostError, match="before the lease"):
            current.renew_lease(lease, TTL)
        assert read_leader_info(tmp_path) is None  # the lease was given up
        assert third.acquire_lease("third", TTL) is None
    assert third.acquire_lease("third", TTL) is not None


def test_a_released_lease_lets_scheduler_lock_go_before_the_lease_reads_free(
    yaml_stores: Callable[[], YamlStateStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Else a standby of this version could take the free lease without the lock in between,
    and a version before the lease take the lock as it went: two leaders."""
    store = yaml_stores()
    lease = store.acquire_lease("me", TTL)
    assert lease is not None
    free_when_written: list[bool] = []
    write = LeaseFile._write

    def watched(self: LeaseFile, held: Any, epoch: int, lock_name: str | None) -> None:
        if held is None:
            free_when_written.append(free_for_an_older_version(tmp_path))
        write(self, held, epoch, lock_name)

    monkeypatch.setattr(LeaseFile, "_write", watched)
    store.release_lease(lease)
    assert free_when_written == [True]


def test_a_scheduler_lock_that_cannot_be_used_is_told_and_not_waited_for(
    yaml_stores: Callable[[], YamlStateStore], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "scheduler.lock").mkdir()  # nobody can open or lock it, root included
    store = yaml_stores()
    with caplog.at_level(logging.WARNING, logger="herdsched"):
        lease = store.acquire_lease("me", TTL)
        assert lease is not None
        store.renew_lease(lease, TTL)
    assert caplog.text.count("Cannot use") == 1
    assert "an older herdsched leads" not in caplog.text
