"""The PostgreSQL store under the interleavings a scheduler's threads and other hosts produce:
claims kept until the state showing their run is committed, a schedule removed and added again,
a write's own view never laid over a newer change adopted meanwhile, and a failed commit that
leaves nothing behind in the view (see tests/postgres_server.py for the server)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from attrs import evolve

from herdsched import Agent, Schedule, ThreadedScheduler
from herdsched.errors import LeadershipLostError, StateError
from herdsched.models import RunRecord, RunStatus, Status
from herdsched.store.base import Lease, RunClaim
from herdsched.store.postgres import PostgresStateStore
from herdsched.testing import FakeClock, as_separate_processes

T0 = datetime(2026, 11, 24, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def hosts(postgres_dsn: str, pg_namespace: str) -> Iterator[list[PostgresStateStore]]:
    """Two stores on one namespace, as two hosts would have."""
    made = [PostgresStateStore(postgres_dsn, namespace=pg_namespace) for _ in range(2)]
    yield made
    for store in made:
        store.close()


def restarted(dsn: str, store: PostgresStateStore) -> PostgresStateStore:
    """A new store on the same namespace: what a scheduler sees after the process died."""
    return PostgresStateStore(dsn, namespace=store.namespace)


def test_a_claim_is_kept_until_the_state_showing_its_run_is_committed(
    postgres_dsn: str, hosts: list[PostgresStateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timer thread starts a run (its transition, then its claim) after the flusher took
    the pending transitions but before it wrote them: that flush must not drop the claim, since
    what it writes does not show the run."""
    store = hosts[0]
    store.update_schedule_state("a", "s", next_run_at=T0)
    store.record_transition("a", "other", next_run_at=T0 + timedelta(hours=1))
    commit = store._commit

    def timer_thread_starts_a_run(*args: Any) -> Any:
        store.record_transition("a", "s", last_run_at=T0, status=Status.RUNNING)
        store.claim_runs([RunClaim("a", "s", "run-1", T0, T0)])
        return commit(*args)

    monkeypatch.setattr(store, "_commit", timer_thread_starts_a_run)
    store.flush()
    monkeypatch.undo()
    # the process dies here, before its next flush
    after = restarted(postgres_dsn, store)
    try:
        shown = after.get_schedule_state("a", "s").last_run_at == T0
        claimed = [c.run_id for c in after.load_claims()]
        assert shown or claimed == ["run-1"], "the run is neither claimed nor shown: it may rerun"
    finally:
        after.close()


def test_a_schedule_removed_then_added_again_keeps_its_transitions(
    hosts: list[PostgresStateStore],
) -> None:
    """Adding a schedule removes its namesake's state first (engine/changes.py); the new
    schedule's run transitions must then be written, as in the YAML store, and its claims kept
    until they are."""
    store, other = hosts
    store.update_schedule_state("a", "s", next_run_at=T0)
    store.remove_schedule_state("a", "s")
    store.record_transition("a", "s", next_run_at=T0 + timedelta(hours=1))
    store.flush()
    store.record_transition("a", "s", last_run_at=T0, status=Status.RUNNING)
    store.claim_runs([RunClaim("a", "s", "run-1", T0, T0)])
    store.flush()
    assert store.get_schedule_state("a", "s").last_run_at == T0
    seen = other.get_schedule_state("a", "s")
    assert seen.next_run_at == T0 + timedelta(hours=1)
    assert seen.last_run_at == T0
    assert seen.status is Status.RUNNING


def test_a_schedule_removed_by_another_host_stays_removed(
    postgres_dsn: str,
    hosts: list[PostgresStateStore],
) -> None:
    """The other side of the rule: a removal this view had not seen wins over a pending
    transition of a schedule it knew."""
    store, other = hosts
    store.update_schedule_state("a", "s", next_run_at=T0)
    store.record_transition("a", "s", last_run_at=T0)
    other.remove_schedule_state("a", "s")
    store.flush()
    assert "s" not in other.get_agent_schedule_states("a")
    with restarted(postgres_dsn, store) as after:
        assert "s" not in after.get_agent_schedule_states("a")


def after_commit(
    store: PostgresStateStore,
    monkeypatch: pytest.MonkeyPatch,
    doing: str,
    meanwhile: Callable[[], object],
) -> None:
    """Run ``meanwhile`` once, right after the store commits its next transaction whose
    description starts with ``doing`` and before it adopts what it wrote: what another thread
    of the process (or another host) may do in that moment."""
    real = store._db.transaction

    @contextlib.contextmanager
    def transaction(description: str) -> Iterator[Any]:
        with real(description) as cursor:
            yield cursor
        if description.startswith(doing):
            monkeypatch.setattr(store._db, "transaction", real)
            meanwhile()

    monkeypatch.setattr(store._db, "transaction", transaction)


def test_an_own_write_does_not_hide_a_newer_change_adopted_meanwhile(
    postgres_dsn: str, hosts: list[PostgresStateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between this store's commit and its adopting what it wrote, another host pauses the
    schedule and another thread of this process catches up: the view must end with the pause."""
    store, other = hosts
    store.update_schedule_state("a", "s", status=Status.IDLE)

    def another_host_pauses_and_the_timer_polls() -> None:
        other.update_schedule_state("a", "s", status=Status.PAUSED)
        store.refresh()

    after_commit(store, monkeypatch, "update the state", another_host_pauses_and_the_timer_polls)
    store.update_schedule_state("a", "s", session_id="session-1")
    store.refresh()
    with restarted(postgres_dsn, store) as after:
        assert after.get_schedule_state("a", "s").status is Status.PAUSED
    assert store.get_schedule_state("a", "s").status is Status.PAUSED
    assert store.get_schedule_state("a", "s").session_id == "session-1"


def test_a_run_now_request_adopted_meanwhile_is_listed_once(
    hosts: list[PostgresStateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll by another thread between the request's commit and its adoption already lists
    the request: it must not be listed twice."""
    store = hosts[0]
    after_commit(store, monkeypatch, "queue a run", store.refresh)
    run_id = store.request_trigger("a", "s")
    assert [r.run_id for r in store.trigger_requests()] == [run_id]


def test_a_definition_whose_commit_failed_is_not_in_the_view(
    postgres_dsn: str, hosts: list[PostgresStateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ends the session just before the commit: save_definition raises, and neither
    this store nor another host lists the definition."""
    store, other = hosts
    write = store._write_definition

    def and_the_session_is_terminated(*args: Any) -> None:
        write(*args)
        with psycopg.connect(postgres_dsn, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (store._db.backend_pid,))

    monkeypatch.setattr(store, "_write_definition", and_the_session_is_terminated)
    with pytest.raises(StateError):
        store.save_definition("a", "s", {"interval": "1h"}, exists=False)
    monkeypatch.undo()
    assert other.load_definitions() == {}
    assert store.load_definitions() == {}


def test_a_schedule_added_again_at_run_time_keeps_its_state(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """add_schedule(persist=True) clears a namesake's stored state before the schedule starts:
    the runs of the schedule added again must still reach the database."""
    # manual schedules: only the test's triggers run them, so a timer's run never takes the
    # agent's one slot (a trigger would answer at_capacity) or the schedule (already_running)
    agent = Agent("ag", schedules={"tick": Schedule.manual()})
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    with as_separate_processes():
        sched = ThreadedScheduler([agent], on_trigger=lambda info: "ok", store=store)
        sched.start()
        try:
            sched.add_schedule("ag", "added", Schedule.manual(), persist=True)
            assert sched.trigger("ag", "added", wait=True).success
            store.flush()
            sched.remove_schedule("ag", "added")
            sched.add_schedule("ag", "added", Schedule.manual(), persist=True)
            second = sched.trigger("ag", "added", wait=True)
            assert second.success
        finally:
            sched.stop()
            store.close()
    with PostgresStateStore(postgres_dsn, namespace=pg_namespace) as other:
        state = other.get_schedule_state("ag", "added")
        newest = other.get_history("ag", "added", limit=1)[0]
        assert newest.run_id == second.run_id
        assert newest.started_at is not None
        assert state.last_run_at is not None and state.last_finished_at is not None
        assert state.last_finished_at >= newest.started_at  # the second run's end


def test_a_run_recorded_twice_before_a_flush_keeps_its_later_record(
    hosts: list[PostgresStateStore],
) -> None:
    """Two records of one run in one group commit (as the YAML store takes them): the later
    one wins, instead of the commit failing, and failing again on every retry."""
    store, other = hosts
    first = RunRecord(run_id="r1", agent="a", schedule="s", trigger_type="manual",
                      status="interrupted")  # fmt: skip
    store.append_run(first)
    store.append_run(evolve(first, status="success"))
    store.append_run(evolve(first, run_id="r2"))
    store.flush()
    assert [(r.run_id, r.status) for r in other.get_history("a", "s")] == [
        ("r2", RunStatus.INTERRUPTED),
        ("r1", RunStatus.SUCCESS),
    ]


def test_a_removal_while_a_group_commit_is_on_its_way_is_not_undone(
    hosts: list[PostgresStateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flusher took a new schedule's transitions; another thread removes the schedule
    before they are written: the commit must not bring the state back."""
    store, other = hosts
    store.record_transition("a", "s", next_run_at=T0)
    commit = store._commit
    remover = threading.Thread(target=store.remove_schedule_state, args=("a", "s"))

    def while_another_thread_removes(*args: Any) -> Any:
        remover.start()
        remover.join(timeout=1.0)  # at once, unless the removal waits for this commit
        return commit(*args)

    monkeypatch.setattr(store, "_commit", while_another_thread_removes)
    store.flush()
    remover.join()
    assert "s" not in other.get_agent_schedule_states("a")
    assert "s" not in store.get_agent_schedule_states("a")


def test_no_commit_is_due_once_the_pending_work_is_gone(hosts: list[PostgresStateStore]) -> None:
    """A removal (or a purge) can leave nothing to commit: the flush deadline must then be
    gone too, or the scheduler's timer wakes for a commit again and again."""
    store = hosts[0]
    store.record_transition("a", "s", next_run_at=T0)
    store.remove_schedule_state("a", "s")
    store.append_run(
        RunRecord(run_id="r1", agent="a", schedule="t", trigger_type="manual", status="success")
    )
    store.purge_history("a", "t")
    store.flush()
    assert store.flush_deadline() is None


def test_a_slower_catch_up_does_not_lay_older_states_over_a_newer_one(
    hosts: list[PostgresStateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads catch up at once: the one that read the database first adopts what it
    read last. The view must keep the newer state (a pause)."""
    store, other = hosts
    store.update_schedule_state("a", "s", status=Status.IDLE)
    other.update_schedule_state("a", "s", session_id="session-1")

    def another_host_pauses_and_another_thread_catches_up() -> None:
        other.update_schedule_state("a", "s", status=Status.PAUSED)
        store.refresh()

    after_commit(
        store, monkeypatch, "read the changes", another_host_pauses_and_another_thread_catches_up
    )
    store.refresh()
    assert store.get_schedule_state("a", "s").status is Status.PAUSED
    assert store.get_schedule_state("a", "s").session_id == "session-1"


def take_over(dsn: str, first: PostgresStateStore, second: PostgresStateStore) -> Lease:
    """``first`` leads, its session ends, ``second`` takes the lease over (once ``first``'s
    renewal is overdue: a 3 s lease is renewed each second, overdue at its expiry)."""
    assert first.acquire_lease("h1", 3) is not None
    with psycopg.connect(dsn, autocommit=True) as killer:
        killer.execute("SELECT pg_terminate_backend(%s)", (first._db.backend_pid,))
    for _ in range(200):  # the server ends the session on its own time
        if (taken := second.acquire_lease("h2", 60)) is not None:
            return taken
        threading.Event().wait(0.05)
    raise AssertionError("no takeover within 10 s")


def test_a_lost_lease_drops_every_pending_transition_not_only_those_taken(
    postgres_dsn: str, hosts: list[PostgresStateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Transitions recorded while the refused group commit was on its way belong to the lost
    lease too: none of them may be written when this store leads again."""
    first, second = hosts
    first.update_schedule_state("a", "s", next_run_at=T0)
    taken = take_over(postgres_dsn, first, second)
    first.record_transition("a", "s", status=Status.RUNNING, last_run_at=T0)
    with pytest.raises(LeadershipLostError):
        first.claim_runs([RunClaim("a", "s", "run-1", T0, T0)])
    assert first.flush_deadline() is None  # the refused run's transition went with it
    assert first.get_schedule_state("a", "s").status is Status.IDLE
    first.record_transition("a", "s", next_run_at=T0 + timedelta(hours=1))
    commit = first._commit

    def while_the_timer_records_more(*args: Any) -> Any:
        first.record_transition("a", "s", status=Status.RUNNING, last_run_at=T0)
        return commit(*args)

    monkeypatch.setattr(first, "_commit", while_the_timer_records_more)
    with pytest.raises(LeadershipLostError):
        first.flush()
    monkeypatch.undo()
    assert first.flush_deadline() is None
    assert first.get_schedule_state("a", "s").status is Status.IDLE
    second.release_lease(taken)
    assert first.acquire_lease("h1", 60) is not None
    first.flush()
    state = second.get_schedule_state("a", "s")
    assert (state.status, state.last_run_at, state.next_run_at) == (Status.IDLE, None, T0)


def test_catching_up_with_its_own_removal_keeps_the_schedule_added_since(
    hosts: list[PostgresStateStore],
) -> None:
    """This store removed a schedule (while another host wrote too, so its view must catch up)
    and the schedule was added again: the catch-up that reads the removal back must not drop
    the new schedule's pending transitions as if another host had removed it."""
    store, other = hosts
    store.update_schedule_state("a", "s", next_run_at=T0)
    other.update_schedule_state("a", "elsewhere", next_run_at=T0)
    store.remove_schedule_state("a", "s")
    store.record_transition("a", "s", status=Status.RUNNING, last_run_at=T0)
    store.claim_runs([RunClaim("a", "s", "run-1", T0, T0)])
    store.refresh()
    assert store.get_schedule_state("a", "s").last_run_at == T0
    store.flush()
    assert other.get_schedule_state("a", "s").last_run_at == T0


def test_a_renewal_refused_drops_the_pending_work_of_the_lost_lease(
    postgres_dsn: str,
    hosts: list[PostgresStateStore],
) -> None:
    """As a refused claim or commit does (and the YAML store's renewal): nothing recorded under
    the lost lease is written when this store leads again."""
    first, second = hosts
    first.update_schedule_state("a", "s", next_run_at=T0)
    lease = first.acquire_lease("h1", 60)
    assert lease is not None
    taken = take_over(postgres_dsn, first, second)
    first.record_transition("a", "s", status=Status.RUNNING, last_run_at=T0)
    with pytest.raises(LeadershipLostError):
        first.renew_lease(lease, 60)
    assert first.flush_deadline() is None
    assert first.get_schedule_state("a", "s").status is Status.IDLE
    second.release_lease(taken)
    assert first.acquire_lease("h1", 60) is not None
    first.flush()
    assert second.get_schedule_state("a", "s").status is Status.IDLE


def test_the_claims_of_a_schedule_registered_after_start_outlive_the_next_leader(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """A dead leader claimed two runs of a/s after an earlier one (a run-now started as the
    timer's run ended); the next leader registered a/s only after ``start()`` and stopped
    before it did: its first group commit deleted the earlier claim, taken for recorded, so
    the run it named never got a record."""
    slot = T0 + timedelta(minutes=1)
    left = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    left.update_schedule_state("a", "s", type="interval", last_run_at=T0, last_finished_at=T0)
    left.claim_runs(
        [RunClaim("a", "s", "timer", slot, slot), RunClaim("a", "s", "run-now", slot, None)]
    )
    left.close()
    clock = FakeClock(slot + timedelta(seconds=30))

    def scheduler(*agents: Agent) -> ThreadedScheduler:
        store = PostgresStateStore(postgres_dsn, namespace=pg_namespace, clock=clock)
        return ThreadedScheduler(agents, store=store, state_dir=None, clock=clock, lease_ttl=5)

    interval = {"s": Schedule.interval("5m")}
    with as_separate_processes():
        second = scheduler(Agent("b", job=lambda info: "ok", schedules=interval))
        second.start()  # a/s is not registered yet
        second.stop()  # as a kill would leave it: a/s was never taken up
        second.store.close()
        third = scheduler()
        try:
            third.start()
            third.add_agent(Agent("a", job=lambda info: "ok", schedules=interval))
            third.store.flush()
            found = {r.run_id: r.status for r in third.store.get_history("a", "s", 50)}
        finally:
            third.stop()
            third.store.close()
    assert found == {"timer": RunStatus.INTERRUPTED, "run-now": RunStatus.INTERRUPTED}


@pytest.mark.parametrize("last", ["failure after a success", "failure that disables"])
def test_the_leaders_own_run_end_in_a_commit_under_way_is_not_taken_for_a_change_elsewhere(
    postgres_dsn: str, pg_namespace: str, last: str
) -> None:
    """While a group commit is under way its transitions are out of the view, which shows the
    state before them: the leader's look at other processes' status changes then took its own
    failure after a success for a resume elsewhere (failures reset, backoff dropped) and its
    own auto-disable for a resume (the schedule ran on)."""
    clock = FakeClock(T0)
    limit = 2 if last == "failure that disables" else None
    outcomes = iter(["fail", "ok", "fail"] if limit is None else ["fail", "fail"])

    def job(info: Any) -> str:
        if next(outcomes) == "fail":
            raise RuntimeError("boom")
        return "ok"

    # no group commit but the test's own
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace, commit_delay=3600, clock=clock)
    sched = ThreadedScheduler(
        store=store, state_dir=None, clock=clock, lease_ttl=30, timezone="UTC",
        max_consecutive_failures=limit, backoff=["1h"],
    )  # fmt: skip
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("10m")}))
    entry = sched._core.entries[("a", "s")]
    commit = store._commit
    try:
        sched.start()
        runs = 3 if limit is None else 2
        for run in range(runs):
            clock.set(entry.due or clock.now())  # type: ignore[arg-type]
            sched.run_pending()
            assert sched.wait_until_idle(10)
            if run < runs - 1:
                store.flush()  # all but the last end committed
        mine = (entry.state.status, entry.state.consecutive_failures, entry.due)

        looked = []

        def look_meanwhile(*args: Any) -> Any:  # what the timer's look could see meanwhile
            sched._others._apply_status_changes()
            looked.append(True)
            return commit(*args)

        store._commit = look_meanwhile  # type: ignore[method-assign]
        store.flush()
        store._commit = commit  # type: ignore[method-assign]
        assert looked
        assert (entry.state.status, entry.state.consecutive_failures, entry.due) == mine
    finally:
        store._commit = commit  # type: ignore[method-assign]
        sched.stop()
        store.close()


def test_the_leaders_own_run_start_in_a_commit_under_way_is_not_taken_for_a_namesake(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """While the group commit of a run's start was under way the view showed the state before
    it: the leader's look at other processes' definitions could take its own running schedule
    for one removed and created again elsewhere, and the fresh entry fire again while the run
    went on."""
    began, release = threading.Event(), threading.Event()

    def job(info: Any) -> None:
        began.set()
        assert release.wait(10)

    clock = FakeClock(T0)
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace, commit_delay=3600, clock=clock)
    sched = ThreadedScheduler(
        store=store, state_dir=None, clock=clock, lease_ttl=30, timezone="UTC"
    )
    sched.add_agent(Agent("bot", job=job, schedules={}))
    commit = store._commit
    try:
        sched.start()
        sched.add_schedule("bot", "s", Schedule.interval("10m"), persist=True)
        sched.run_pending()
        assert began.wait(10)
        entry = sched._core.entries[("bot", "s")]
        kept = []

        def look_meanwhile(*args: Any) -> Any:  # what an adopt on another thread could see
            sched._others._apply_definitions()
            kept.append(sched._core.entries[("bot", "s")] is entry)
            return commit(*args)

        store._commit = look_meanwhile  # type: ignore[method-assign]
        store.flush()  # the group commit of the run's start
        assert kept == [True]
    finally:
        store._commit = commit  # type: ignore[method-assign]
        release.set()
        sched.stop()
        store.close()
