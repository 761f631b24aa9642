"""ThreadedScheduler on the PostgreSQL store, with real threads and a real server: runs and
history, a pause from another host applied at once through NOTIFY (the poll is far away), run-now
requests from another host, and a standby taking over when the leader stops."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone

import psycopg
import pytest
from network_cut import CuttableLink
from postgres_server import run_sql
from scheduler_helpers import wait_until

from herdsched import (
    Agent,
    RevisionMismatchError,
    Schedule,
    ThreadedScheduler,
    TriggerInfo,
    schedule_revision,
)
from herdsched.api import ApiResponse, RestApi
from herdsched.models import Status
from herdsched.store.postgres import PostgresStateStore
from herdsched.testing import as_separate_processes


class Ledger:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, object]] = []
        self._lock = threading.Lock()

    def job(self, name: str) -> object:
        def run(info: TriggerInfo) -> str:
            with self._lock:
                self.rows.append((name, info.run_id, info.scheduled_for))
            return "ok"

        return run


def ticking_on(store: PostgresStateStore, every: str = "1h") -> ThreadedScheduler:
    """A scheduler on ``store`` whose one schedule runs every ``every``."""
    agent = Agent("ag", schedules={"tick": Schedule.interval(every)})
    return ThreadedScheduler([agent], on_trigger=lambda info: "ok", store=store, state_dir=None)


@contextlib.contextmanager
def table_locked(dsn: str, table: str) -> Iterator[None]:
    """``table`` locked ``ACCESS EXCLUSIVE`` by another session for the block (a migration,
    ``VACUUM FULL``), so that every statement touching it waits."""
    locked, done = threading.Event(), threading.Event()

    def hold() -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            locked.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        yield
    finally:
        done.set()
        holder.join(10)


@pytest.fixture
def scheduler_on(postgres_dsn: str, pg_namespace: str) -> Iterator[object]:
    made: list[ThreadedScheduler] = []

    def make(name: str, ledger: Ledger, **options: object) -> ThreadedScheduler:
        agent = Agent("ag", schedules={"tick": Schedule.interval("1s")})
        store = PostgresStateStore(postgres_dsn, namespace=pg_namespace, lease_ttl=2)
        sched = ThreadedScheduler(
            [agent], on_trigger=ledger.job(name), store=store, state_dir=None, **options
        )
        made.append(sched)
        return sched

    with as_separate_processes():
        yield make
        for sched in made:
            sched.stop()
            sched.store.close()


def test_runs_are_recorded_in_the_database_and_seen_by_another_host(
    scheduler_on, postgres_dsn: str, pg_namespace: str
) -> None:
    ledger = Ledger()
    sched = scheduler_on("a", ledger)
    sched.start()
    assert sched.is_leader
    assert wait_until(lambda: len(ledger.rows) >= 2, timeout=10)
    sched.store.flush()
    other = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    history = other.get_history("ag", "tick")
    assert {r.run_id for r in history} <= {row[1] for row in ledger.rows}
    assert len(history) >= 2
    lease = other.current_lease()
    assert lease is not None and lease.pid is not None
    other.close()


def test_a_pause_from_another_host_is_applied_at_once_through_a_notification(
    scheduler_on, postgres_dsn: str, pg_namespace: str
) -> None:
    ledger = Ledger()
    sched = scheduler_on("a", ledger, poll_interval=3600)  # only a notification can tell it
    sched.start()
    assert wait_until(lambda: len(ledger.rows) >= 1, timeout=10)
    other = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    other.update_schedule_state("ag", "tick", status="paused")
    # the leader's own entry, not get_status() (which would read the database itself)
    entry = sched._core.entries["ag", "tick"]
    assert wait_until(lambda: entry.state.status == "paused", timeout=10)
    assert sched.wait_until_idle(10)  # a run on its way when the pause arrived may finish
    count = len(ledger.rows)
    time.sleep(2.5)
    assert len(ledger.rows) == count  # nothing ran while paused
    other.close()


@contextlib.contextmanager
def notifications_held(sched: ThreadedScheduler) -> Iterator[None]:
    """The notifications to ``sched``'s store held back for the block, as when they are still
    on their way (a busy host, a slow network): what the listener tells arrives after it."""
    listener = sched.store._listener
    assert listener is not None and listener.connected.wait(10)
    told, arrived = listener._on_change, threading.Event()

    def late() -> None:
        arrived.wait(30)
        told()

    listener._on_change = late
    try:
        yield
    finally:
        arrived.set()
        listener._on_change = told


@pytest.mark.parametrize("role", ["leader", "standby"])
def test_a_change_made_a_moment_ago_on_another_host_is_in_the_next_answer(
    scheduler_on, postgres_dsn: str, pg_namespace: str, role: str
) -> None:
    """A status asked right after another host paused a schedule answered from the view as the
    listener last left it: ``paused`` only once the notification arrived (REST through one web
    worker, then a read through another, showed the schedule still idle)."""
    leader = scheduler_on("a", Ledger(), poll_interval=3600)
    leader.start()
    sched = leader
    if role == "standby":
        sched = scheduler_on("b", Ledger(), poll_interval=3600)
        sched.start()
        assert not sched.is_leader
    assert sched.get_status().schedules[0].status != "paused"
    other = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    try:
        with notifications_held(sched):
            other.update_schedule_state("ag", "tick", status="paused")
            assert sched.get_status().schedules[0].status == "paused"
    finally:
        other.close()


def test_a_rest_request_looks_at_the_database_once_whatever_it_shows(
    scheduler_on, postgres_dsn: str, pg_namespace: str
) -> None:
    """Each schedule a list or a page showed asked for its definition, and each such question
    looked at the database: a page of 50 schedules cost 51 reads on a standby, per refresh."""
    leader = scheduler_on("a", Ledger(), poll_interval=3600)
    leader.start()
    for n in range(30):
        leader.add_schedule("ag", f"s{n:02}", Schedule.interval("1h"), persist=True)
    standby = scheduler_on("b", Ledger(), poll_interval=3600)
    standby.start()
    store = standby.store
    looks: list[bool] = []
    sync = store._sync

    def counted() -> bool:
        looks.append(True)
        return sync()

    store._sync = counted
    api = RestApi(standby)
    status, body = api.handle("GET", "/api/schedule", query={"limit": "50"})
    assert (status, len(body["schedules"]), len(looks)) == (200, 31, 1)
    looks.clear()
    status, _ = api.handle("GET", "/api/schedule/ag/s07")
    assert (status, len(looks)) == (200, 1)
    looks.clear()
    assert len(standby.get_status().schedules) == 31 and len(looks) == 1  # no request: one each


def test_a_leader_with_no_connection_to_spare_for_its_claims_claims_on_its_main_one(
    fresh_database: str, pg_namespace: str
) -> None:
    """A database user allowed two connections (``CONNECTION LIMIT 2``): the leader took the
    lease on its main connection and listened on a second, then every claim failed for want
    of a third, and no run started on any host while its lease held."""
    role = f"limited_{pg_namespace}"
    run_sql(fresh_database, f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 2")
    run_sql(fresh_database, f"GRANT ALL ON SCHEMA public TO {role}")
    dsn = fresh_database.replace("postgres@", f"{role}@", 1)
    ledger = Ledger()
    store = PostgresStateStore(dsn, namespace=pg_namespace, lease_ttl=3)
    agent = Agent("ag", schedules={"tick": Schedule.interval("1s")})
    sched = ThreadedScheduler([agent], on_trigger=ledger.job("a"), store=store, state_dir=None)
    sched.start()
    try:
        assert sched.is_leader and store._listener is not None
        assert store._listener.connected.wait(10)
        assert wait_until(lambda: len(ledger.rows) >= 2, timeout=10)
        assert not store._claims_db.connected  # the server refused it a third
    finally:
        sched.stop()
        store.close()


def test_a_run_now_from_another_host_runs_once_under_its_id(
    scheduler_on, postgres_dsn: str, pg_namespace: str
) -> None:
    ledger = Ledger()
    sched = scheduler_on("a", ledger, poll_interval=3600)
    sched.start()
    other = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    run_id = other.request_trigger("ag", "tick", prompt="now")
    assert wait_until(lambda: any(row[1] == run_id for row in ledger.rows), timeout=10)
    assert wait_until(lambda: run_id in {r.run_id for r in other.get_history("ag")}, timeout=10)
    assert [row[1] for row in ledger.rows].count(run_id) == 1
    other.close()


def test_a_standby_leads_when_the_leader_stops_and_no_slot_runs_twice(scheduler_on) -> None:
    ledger = Ledger()
    first = scheduler_on("a", ledger)
    second = scheduler_on("b", ledger)
    first.start()
    second.start()
    assert first.is_leader and not second.is_leader
    assert wait_until(lambda: len(ledger.rows) >= 2, timeout=10)
    first.stop()
    assert wait_until(lambda: second.is_leader, timeout=3)  # released: told at once
    assert wait_until(lambda: any(row[0] == "b" for row in ledger.rows), timeout=10)
    second.stop()
    slots = [row[2] for row in ledger.rows]
    assert len(slots) == len(set(slots))


@pytest.mark.slow
def test_a_leader_whose_sessions_the_server_ends_keeps_the_lead_and_its_running_jobs(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """Every session of both hosts terminated (as a server restart does), twice: the
    leader, alive, reconnects and goes on leading under the same epoch, its running job is
    not recorded interrupted and started again beside itself, and its status names it
    throughout. Before, the standby's listener came back after a second and took the lease,
    while the leader's renewal (a third of the lease later) had not taken its lock back yet."""
    release, started = threading.Event(), threading.Event()

    def job(info: TriggerInfo) -> str:
        started.set()
        release.wait(30)
        return "ok"

    def make() -> ThreadedScheduler:
        store = PostgresStateStore(postgres_dsn, namespace=pg_namespace, lease_ttl=6)
        agent = Agent("ag", schedules={"long": Schedule.interval("1s", overlap="skip")})
        return ThreadedScheduler([agent], on_trigger=job, store=store, state_dir=None)

    since = run_sql(postgres_dsn, "SELECT now()")[0][0]
    with as_separate_processes():
        leader, standby = make(), make()
        try:
            leader.start()
            standby.start()
            assert leader.is_leader and not standby.is_leader and started.wait(10)
            epoch = leader.get_status().leader["epoch"]
            for _ in range(2):
                run_sql(
                    postgres_dsn,
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE application_name = 'herdsched' AND backend_start >= '{since}'",
                )
                end = time.monotonic() + 4.5  # past the time a dead leader is taken over (4 s)
                while time.monotonic() < end:
                    assert leader.is_leader and not standby.is_leader
                    assert leader.get_status().leader["epoch"] == epoch
                    time.sleep(0.2)
            assert standby.is_leader is False and leader.get_status().leader["epoch"] == epoch
            release.set()

            def recorded() -> list[str]:
                leader.store.flush()
                return [r.status for r in leader.store.get_history("ag", "long")]

            assert wait_until(recorded, timeout=10)
            assert "interrupted" not in recorded()
        finally:
            release.set()
            for sched in (leader, standby):
                sched.stop()
                sched.store.close()


def test_the_several_hosts_page_examples_run(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_docs_examples import DOCS, python_blocks

    monkeypatch.setenv("HERDSCHED_STORE", postgres_dsn)
    namespace: dict[str, object] = {}
    blocks = python_blocks((DOCS / "hosts.md").read_text())
    assert blocks
    with as_separate_processes():
        for line, code in blocks:
            exec(compile(code, f"hosts.md:{line}", "exec"), namespace)


def test_registering_an_agent_reads_its_stored_states_once_not_per_schedule(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """A fleet's start costs a round trip per agent, not per schedule (a database on another
    host made 10,000 schedules take seconds to register), and stored states still come back."""
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    store.update_schedule_state("big", "s7", status="paused", consecutive_failures=2)
    databases = (store._db, store._claims_db)
    sched = ThreadedScheduler(store=store, state_dir=None)
    try:
        before = sum(db.transactions for db in databases)
        schedules = {f"s{i}": Schedule.interval("1h") for i in range(40)}
        sched.add_agent(Agent("big", job=lambda info: None, schedules=schedules))
        sent = sum(db.transactions for db in databases) - before
        assert sent <= 3  # the states, the definitions; never one per schedule (40)
        shown = {s.schedule: s for s in sched.get_status().schedules}
        assert len(shown) == 40
        assert (shown["s7"].status, shown["s7"].consecutive_failures) == ("paused", 2)
        assert {name for name, s in shown.items() if s.status == "paused"} == {"s7"}
    finally:
        store.close()


@pytest.mark.slow
def test_a_scheduler_stopped_just_after_its_server_restarted_commits_what_it_holds() -> None:
    """Its last group commit met the connection the restart had closed, failed, and the
    transitions and records it held were dropped (at DEBUG: the same failure as before)."""
    from postgres_server import start_server

    from herdsched.models import RunStatus
    from herdsched.testing import FakeClock

    clock = FakeClock(
        datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
    )  # no timer retries: the stop's commit is the first after the restart
    with start_server() as server:
        store = PostgresStateStore(server.dsn, clock=clock)
        sched = ThreadedScheduler(store=store, clock=clock, timezone="UTC")
        sched.add_agent(Agent("bot", job=lambda info: "ok", schedules={"now": Schedule.manual()}))
        sched.start()
        sched.run_pending()  # its first commit: the schedule's description
        server.restart("immediate")
        result = sched.trigger("bot", "now")  # the claim meets the closed connection
        sched.stop()
        store.close()
        other = PostgresStateStore(server.dsn)
        try:
            records = other.get_history("bot", "now")
            assert [(r.run_id, r.status) for r in records] in (
                [(result.run_id, RunStatus.SUCCESS)],  # the claim was retried and it ran
                [(result.run_id, RunStatus.SKIPPED)],  # or it did not start, and says so
            )
            assert other.get_schedule_state("bot", "now").cadence == "manual"
        finally:
            other.close()


def test_a_leader_whose_database_stops_answering_stands_by_and_stops_promptly(
    scheduler_on,
) -> None:
    """The bug: a call the server left unanswered (its session stopped, a network cut neither
    side notices) waited for ever, so a leader hung in its renewal: ``stop()`` never returned
    and the process stayed frozen until the server answered again. The call now fails a second
    after the lease's length, and the leader stands by while the other host leads."""
    ledger = Ledger()
    first = scheduler_on("a", ledger)
    second = scheduler_on("b", ledger)
    first.start()
    second.start()
    assert wait_until(lambda: len(ledger.rows) >= 1, timeout=10)
    store = first.store
    stopped = {store._db.backend_pid, store._claims_db.backend_pid} - {None}
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        assert wait_until(lambda: second.is_leader, timeout=20)
        assert wait_until(lambda: not first.is_leader, timeout=10)
        assert wait_until(lambda: any(row[0] == "b" for row in ledger.rows), timeout=10)
        stopping = threading.Thread(target=first.stop)
        stopping.start()
        stopping.join(timeout=20)
        assert not stopping.is_alive()  # did not wait for the stopped sessions
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    second.stop()
    slots = [row[2] for row in ledger.rows]
    assert len(slots) == len(set(slots))


@pytest.mark.slow
def test_a_stop_cut_off_from_its_database_waits_no_longer_than_the_lease_has_left(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """The last commit and the lease's release each waited for the server as long as any call
    may (``lease_ttl`` + 1 s, or to connect again): a graceful stop against a frozen server
    took 24 s with a 6 s lease. Past the lease nothing can be written, so they share the time
    the lease has left (here 3 s; they took 8 s and more)."""
    link = CuttableLink(postgres_dsn)
    store = PostgresStateStore(link.dsn, namespace=pg_namespace, lease_ttl=3, commit_delay=3600)
    sched = ticking_on(store, "1h")
    sched.start()
    try:
        assert wait_until(lambda: sched.wait_until_idle(0) and sched.history("ag", "tick"), 10)
        assert store.flush_deadline() is not None  # the run's end waits for the last commit
        sched._leadership.heartbeat()  # renewed, if due: the lease has about 3 s left
        link.cut()
        began = time.monotonic()
        sched.stop()  # the last commit could not be written: logged, and left to the next
        assert time.monotonic() - began < 6  # the lease's 3 s and a second's slack, twice
        assert sched.status == "stopped"
    finally:
        link.heal()
        link.close()
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("every", ["1h", "1s"])  # idle, or claiming a run every second
def test_a_leader_cut_off_from_its_database_stops_leading_when_its_lease_runs_out(
    postgres_dsn: str, pg_namespace: str, caplog: pytest.LogCaptureFixture, every: str
) -> None:
    """The bug (seen by a probe): a leader cut off from its database went on saying it led
    well past its own lease (22-52 s into a cut with a 30 s lease) while a standby led too,
    since its renewal waited for the server as long as any call may (``lease_ttl`` + 1 s). The
    renewal now waits no longer than the lease has left: the leader steps down when its lease
    runs out (here, before: 12 s after it)."""
    link = CuttableLink(postgres_dsn)
    store = PostgresStateStore(link.dsn, namespace=pg_namespace, lease_ttl=3)
    sched = ticking_on(store, every)
    sched.start()
    try:
        assert wait_until(lambda: sched.is_leader, timeout=10)
        time.sleep(0.5)  # its start's commits are done
        link.cut()
        time.sleep(0.3)  # a renewal answered just before the cut has been taken in
        deadline = sched._leadership._deadline  # no renewal succeeds from now on
        assert wait_until(lambda: not sched.is_leader, timeout=15)
        stepped_down = time.monotonic()
        assert -0.1 < stepped_down - deadline < 1.2
        assert "left of this scheduler's lease" in caplog.text
    finally:
        link.heal()
        sched.stop()
        store.close()
        link.close()


def test_a_web_request_on_a_host_whose_database_stops_answering_answers_503_in_time(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """The bug: a REST request makes several store calls, each bounded on its own (a lease's
    length to answer, ``connect_timeout`` to connect), so on a host cut off from its database
    one request took 45 s, past gunicorn's 30 s worker timeout (which kills the worker). The
    calls of one request now share its ``request_timeout``: it answers 503 in time."""
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace, lease_ttl=30)
    sched = ticking_on(store, "1h")
    api = RestApi(sched, request_timeout=2)
    assert api.handle("GET", "/api/schedule/ag/tick").status == 200
    answers: list[object] = []

    def requests() -> None:
        answers.append(api.handle("PATCH", "/api/schedule/ag/tick", body={"enabled": False}))
        answers.append(api.status_page_update())  # its store calls share the bound

    pause = threading.Thread(target=requests)
    stopped = store._db.backend_pid
    assert stopped is not None
    os.kill(stopped, signal.SIGSTOP)
    try:
        began = time.monotonic()
        pause.start()
        pause.join(timeout=15)  # before: 31 s for the first call alone
        assert not pause.is_alive()
        took = time.monotonic() - began
    finally:
        os.kill(stopped, signal.SIGCONT)
    assert took < 10
    refused, page = answers
    assert isinstance(refused, ApiResponse) and refused.status == 503
    assert "the request's 2 s for the store" in refused.body["error"]
    assert isinstance(page, dict)  # the page, from what this process last read
    # nothing was applied; once the server answers, the same request goes through
    assert store.get_schedule_state("ag", "tick").status is not Status.PAUSED
    assert api.handle("PATCH", "/api/schedule/ag/tick", body={"enabled": False}).status == 200
    assert store.get_schedule_state("ag", "tick").status is Status.PAUSED
    store.close()


def test_a_request_past_its_deadline_on_a_healthy_server_leaves_the_leaders_session_alone(
    scheduler_on, postgres_dsn: str
) -> None:
    """The bug (found in review): a leader's request waiting for a table another session held
    (``VACUUM FULL``, a migration) was cut at its deadline by closing the shared session, and
    the leader's advisory lock went with it: a standby took the lead from a healthy leader long
    before its lease ran out. The server now ends the statement at the deadline itself."""
    ledger = Ledger()
    leader, standby = scheduler_on("a", ledger), scheduler_on("b", ledger)
    leader.start()
    standby.start()
    session = leader.store._db.backend_pid
    with table_locked(postgres_dsn, "herdsched_runs"):
        began = time.monotonic()
        answer = RestApi(leader, request_timeout=1).handle("GET", "/api/schedule/ag/tick/history")
        took = time.monotonic() - began
    assert answer.status == 503
    assert "the request's 1 s for the store are over" in answer.body["error"]
    assert took < 5
    assert leader.store._db.backend_pid == session  # the session and its lock live on
    time.sleep(3)  # a standby finding the lock gone would take over within lease_ttl / 3
    assert leader.is_leader and not standby.is_leader


@pytest.mark.slow
def test_a_requests_single_statement_read_past_its_deadline_leaves_the_session_alone(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """The same for a read that runs outside a transaction block (the namespace's change
    number, which each request reads first): it had no statement timeout, so it was cut two
    seconds after the deadline by closing the session, the leader's advisory lock with it."""
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace, lease_ttl=30)
    sched = ticking_on(store, "1h")
    sched.start()
    assert wait_until(lambda: sched.is_leader, timeout=10)
    session = store._db.backend_pid
    with table_locked(postgres_dsn, "herdsched_namespaces"):  # the change numbers
        store._stale = True  # the request reads the change number first
        answer = RestApi(sched, request_timeout=1).handle("GET", "/api/schedule/ag/tick")
        time.sleep(2.5)  # past the cut that closed the session before
    assert answer.status in (200, 503)  # from the view it last read, or the store's error
    assert store._db.backend_pid == session  # the session and the lease's lock live on
    assert sched.is_leader
    sched.stop()
    store.close()


def test_of_two_hosts_changing_one_revision_at_once_exactly_one_wins(scheduler_on) -> None:
    """The revision is the same on both hosts although the database reorders the keys it
    keeps (JSONB), and its check is part of the writing transaction."""
    one, two = scheduler_on("a", Ledger()), scheduler_on("b", Ledger())
    one.start()
    two.start()
    # JSONB reorders keys, keeps 1e16 as 10000000000000000 and -0.0 as 0
    metadata = {"zeta": 1, "alpha": {"y": 2, "b": 3}, "big": 1e16, "zero": -0.0}
    one.add_schedule("ag", "shared", Schedule.interval("1h", metadata=metadata), persist=True)
    # the other host takes the new schedule in at its NOTIFY (a loaded machine: not at once)
    assert wait_until(lambda: "shared" in {s.schedule for s in two.get_status().schedules})
    revision = schedule_revision(one.get_schedule("ag", "shared"))
    assert schedule_revision(two.get_schedule("ag", "shared")) == revision
    barrier = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def change(sched: ThreadedScheduler, prompt: str) -> None:
        barrier.wait()
        try:
            sched.update_schedule("ag", "shared", if_revision=revision, prompt=prompt)
            outcomes[prompt] = "changed"
        except RevisionMismatchError:
            outcomes[prompt] = "refused"

    threads = [threading.Thread(target=change, args=(s, p)) for s, p in ((one, "1"), (two, "2"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert sorted(outcomes.values()) == ["changed", "refused"], outcomes
    winner = next(prompt for prompt, outcome in outcomes.items() if outcome == "changed")
    for sched in (one, two):  # the loser reads what it was refused for, NOTIFY or not
        assert sched.get_schedule("ag", "shared").prompt == winner
