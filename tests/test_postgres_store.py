"""The PostgreSQL store on a real server: namespaces, migrations, bad input, the lease on the
server's clock, fencing, notifications and reconnection (see tests/postgres_server.py)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from postgres_server import run_sql, start_server, unique_namespace
from psycopg import errors as pg_errors
from scheduler_helpers import wait_until

from herdsched.errors import ConflictError, LeadershipLostError, StateError, StoreSpecError
from herdsched.models import RunRecord, Status
from herdsched.store.base import Lease, RunClaim
from herdsched.store.postgres import PostgresStateStore, rows
from herdsched.store.postgres import leases as pg_leases
from herdsched.store.postgres import store as store_module
from herdsched.store.postgres.connection import state_error

T0 = datetime(2026, 11, 24, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def stores(postgres_dsn: str, pg_namespace: str) -> Iterator[list[PostgresStateStore]]:
    """Two stores on one namespace, as two hosts would have."""
    made = [PostgresStateStore(postgres_dsn, namespace=pg_namespace) for _ in range(2)]
    yield made
    for store in made:
        store.close()


def eventually(get: Callable[[], Lease | None], timeout: float = 5.0) -> Lease | None:
    """``get()`` until it returns a lease (the server ends a terminated session on its own time)."""
    deadline = time.monotonic() + timeout
    while (value := get()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def run(run_id: str) -> RunRecord:
    return RunRecord(
        run_id=run_id, agent="a", schedule="s", trigger_type="interval", status="success"
    )


def claim(run_id: str) -> RunClaim:
    return RunClaim("a", "s", run_id, T0)


def test_namespaces_share_a_database_without_seeing_each_other(postgres_dsn: str) -> None:
    one = PostgresStateStore(postgres_dsn, namespace=unique_namespace())
    two = PostgresStateStore(postgres_dsn, namespace=unique_namespace())
    one.update_schedule_state("a", "s", status="paused")
    one.save_definition("a", "s", {"type": "interval", "interval": "5m"})
    one.request_trigger("a", "s")
    assert one.acquire_lease("h1", 30) is not None
    assert two.get_all_schedule_states() == {}
    assert two.load_definitions() == {}
    assert two.trigger_requests() == []
    assert two.acquire_lease("h2", 30) is not None  # each namespace has its own lease
    one.close()
    two.close()


def test_hosts_starting_at_once_create_the_tables_once(fresh_database: str) -> None:
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            PostgresStateStore(fresh_database, namespace="n").close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert run_sql(fresh_database, "SELECT version FROM herdsched_schema") == [(1,)]


def test_a_newer_table_layout_is_refused_naming_both_versions(fresh_database: str) -> None:
    PostgresStateStore(fresh_database).close()
    run_sql(fresh_database, "UPDATE herdsched_schema SET version = 99")
    with pytest.raises(StateError, match=r"layout 99, newer than this herdsched reads \(layout 1"):
        PostgresStateStore(fresh_database)


def test_a_store_that_must_not_create_tables_refuses_a_database_without_them(
    fresh_database: str,
) -> None:
    with pytest.raises(StateError, match="There are no herdsched tables in the PostgreSQL store"):
        PostgresStateStore(fresh_database, create_tables=False)
    tables = "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'herdsched%'"
    assert run_sql(fresh_database, tables) == [(0,)]
    PostgresStateStore(fresh_database).close()  # creates them
    PostgresStateStore(fresh_database, create_tables=False).close()  # and uses them


@pytest.mark.parametrize(
    ("option", "words"),
    [
        ("sslmode=bogus", 'invalid sslmode value: "bogus"'),
        ("keepalives=yes", 'invalid integer value "yes" for connection option "keepalives"'),
        ("target_session_attrs=xx", 'invalid target_session_attrs value: "xx"'),
    ],
)
def test_an_option_value_libpq_refuses_is_bad_input(
    postgres_dsn: str, option: str, words: str
) -> None:
    dsn = postgres_dsn.replace("postgres@", "postgres:s3cret@", 1) + f"?{option}"
    with pytest.raises(StateError) as caught:
        PostgresStateStore(dsn)
    if option == "keepalives=yes" and psycopg.pq.version() < 180000:
        # libpq 16 (psycopg 3.2.1's wheels) checks this value only once it connects: it was
        # told with the hint for an unreachable server
        assert "keepalives parameter must be an integer" in str(caught.value)
        assert "a connection option of the DSN has a value libpq refuses" in str(caught.value)
    else:
        assert isinstance(caught.value, StoreSpecError)
        assert f"is not valid: {words}" in str(caught.value)
    assert "unreachable" not in str(caught.value) and "s3cret" not in str(caught.value)


@pytest.mark.slow
def test_a_server_shutting_down_is_not_blamed_on_the_dsn() -> None:
    with start_server() as server:
        PostgresStateStore(server.dsn).close()
        held = psycopg.connect(server.dsn, autocommit=True)  # a smart shutdown waits for it
        stopping = subprocess.Popen(
            [str(server.binaries / "pg_ctl"), "-D", str(server.data), "-m", "smart", "stop"],
            user="postgres" if os.geteuid() == 0 else None,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    PostgresStateStore(server.dsn, connect_timeout=2).close()
                except StateError as exc:
                    if "shutting down" in str(exc):
                        caught = exc
                        break
                assert time.monotonic() < deadline, "the server never said it was shutting down"
                time.sleep(0.1)
        finally:
            held.close()
            stopping.wait(60)
    assert "Could not connect to the PostgreSQL store at " in str(caught)
    assert "the server is starting up or shutting down: try again in a moment" in str(caught)
    assert "check the user, password and database name" not in str(caught)


@pytest.mark.parametrize(
    ("dsn", "words"),
    [
        ("not a dsn", "is not valid"),
        # libpq's own message quotes a malformed URL whole: the password was in it
        ("postgresql://app:s3cret@[::1/app", r"DSN 'postgresql://app:\*\*\*@\[::1/app' is not"),
        ("postgresql://app:s3cret@127.0.0.1:1/app", "Connection refused"),
        ("postgresql://app@127.0.0.1:99999/app", "port '99999' is not a number from 1 to 65535"),
        ("host=127.0.0.1 dbname=app bogus=1", 'invalid connection option "bogus"; give a URL'),
    ],
)
def test_bad_dsns_and_refused_connections_are_state_errors(dsn: str, words: str) -> None:
    with pytest.raises(StateError, match=words) as caught:
        PostgresStateStore(dsn, connect_timeout=2)
    assert "s3cret" not in str(caught.value)
    # a DSN libpq cannot read is bad input (the command line exits 2), a refusal is not
    assert isinstance(caught.value, StoreSpecError) == ("refused" not in words)


def test_a_missing_database_is_named(postgres_dsn: str) -> None:
    dsn = postgres_dsn.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(StateError, match="does not exist") as caught:
        PostgresStateStore(dsn)
    # the server answered: it was said to be unreachable, and to be retried "on its next call"
    refused = "the server refused the connection for that reason: check the user, password and"
    assert f"{refused} database name of the DSN" in str(caught.value)
    assert "unreachable" not in str(caught.value)


def test_missing_privileges_say_which(postgres_dsn: str, fresh_database: str) -> None:
    user = unique_namespace("user")
    run_sql(postgres_dsn, f"CREATE ROLE {user} LOGIN")
    dsn = fresh_database.replace("postgres@", f"{user}@", 1)
    # PostgreSQL 15 grants no CREATE on the public schema to other users
    with pytest.raises(StateError, match="lacks a privilege herdsched needs"):
        PostgresStateStore(dsn)
    PostgresStateStore(fresh_database).close()  # the owner creates the tables once
    run_sql(fresh_database, f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {user}")
    reader = PostgresStateStore(dsn, create_tables=False)  # a look needs no more
    with pytest.raises(StateError, match="lacks a privilege"):
        reader.update_schedule_state("a", "s", status="paused")
    reader.close()
    # a scheduler's store is told at its start, not at its first commit (the bug: a user
    # without USAGE on the sequences started, then every group commit failed)
    grant = "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO"
    run_sql(fresh_database, f"{grant} {user}")
    with pytest.raises(StateError) as caught:
        PostgresStateStore(dsn)
    lacking = "claims_seq_seq, herdsched_rejected_seq_seq, herdsched_requests_seq_seq"
    message = str(caught.value)
    assert f"may not use herdsched_{lacking}, herdsched_runs_seq_seq in" in message
    assert "USAGE on their sequences" in str(caught.value)
    run_sql(fresh_database, f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {user}")
    writer = PostgresStateStore(dsn)
    writer.update_schedule_state("a", "s", status="paused")
    writer.request_trigger("a", "s")  # a row with a serial column
    writer.append_run(run("r1"))
    writer.flush()
    assert [r.run_id for r in writer.get_history("a", "s")] == ["r1"]
    writer.close()


def test_a_lease_is_on_the_servers_clock_and_a_hung_holder_loses_it_after_its_ttl(
    stores: list[PostgresStateStore],
) -> None:
    first, second = stores
    lease = first.acquire_lease("h1", 1.0)
    assert lease is not None and lease.epoch == 1
    assert second.acquire_lease("h2", 1.0) is None
    time.sleep(1.3)  # the holder's session lives on: only the ttl frees the lease
    taken = second.acquire_lease("h2", 1.0)
    assert taken is not None and taken.epoch == 2
    with pytest.raises(LeadershipLostError):
        first.renew_lease(lease, 1.0)
    with pytest.raises(LeadershipLostError):
        first.claim_runs([claim("late")])
    assert second.load_claims() == []  # the refused claim was not written


def test_a_host_whose_clock_is_off_reads_the_leases_expiry_on_the_servers_clock(
    stores: list[PostgresStateStore],
) -> None:
    """``status`` on a host whose clock ran a minute ahead called a live leader's lease
    expired (a hung leader), and one a minute behind called a hung leader's lease live."""
    first, second = stores
    held = first.acquire_lease("h1", 30.0)
    assert held is not None
    lease = second.current_lease()
    assert lease is not None and lease.read_at is not None
    ahead = datetime.now(timezone.utc) + timedelta(minutes=1)
    assert lease.describe(ahead)["expired"] is False
    first.release_lease(held)
    assert first.acquire_lease("h1", 0.2) is not None
    time.sleep(0.4)  # the holder's session lives on; only its lease ran out
    hung = second.current_lease()
    assert hung is not None
    behind = datetime.now(timezone.utc) - timedelta(minutes=1)
    assert hung.describe(behind)["expired"] is True


def test_a_holder_whose_session_ends_is_replaced_before_its_lease_expires(
    postgres_dsn: str, stores: list[PostgresStateStore]
) -> None:
    first, second = stores
    lease = first.acquire_lease("h1", 4)  # taken for dead 3.3 s after, expiring after 4
    assert lease is not None
    assert second.acquire_lease("h2", 4) is None
    run_sql(postgres_dsn, f"SELECT pg_terminate_backend({first._db.backend_pid})")
    taken = eventually(lambda: second.acquire_lease("h2", 4), timeout=10)
    assert taken is not None and taken.epoch == lease.epoch + 1
    # the old holder reconnects, and its run writes are refused
    first.record_transition("a", "s", status="running", last_run_at=T0)
    first.append_run(run("r1"))
    with pytest.raises(LeadershipLostError, match="epoch 2"):
        first.flush()
    assert first.flush_deadline() is None  # its pending work was dropped, not retried
    assert second.get_history("a") == []
    assert second.get_schedule_state("a", "s").status is Status.IDLE
    first.update_schedule_state("a", "s", status="paused")  # user intent is never fenced
    assert second.get_schedule_state("a", "s").status is Status.PAUSED


def test_a_takeover_waits_for_a_fenced_write_in_flight(
    stores: list[PostgresStateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """FOR SHARE: a claim whose fence check passed commits before the lease can change hands,
    so no stale claim commits after a takeover (a plain read could not promise that)."""
    # a write still open 0.5 s into a takeover is taken for hung and its session ended (tested
    # below); this one is only slow, and a loaded machine must not make it look hung
    monkeypatch.setattr(pg_leases, "_HUNG_WRITE", 10.0)
    first, second = stores
    assert first.acquire_lease("h1", 0.5) is not None
    order: list[str] = []
    with first._db.transaction("hold a fenced write open") as cursor:
        first._lease.check_fence(cursor)
        time.sleep(0.8)  # the lease expires while the write is in flight

        def take_over() -> None:
            second.acquire_lease("h2", 30)
            order.append("takeover")

        thief = threading.Thread(target=take_over)
        thief.start()
        time.sleep(0.5)
        order.append("fenced write commits")
    thief.join(timeout=10)
    assert order == ["fenced write commits", "takeover"]


def test_a_session_stopped_inside_a_change_holds_up_other_hosts_only_briefly(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """The bug: a process stopped (SIGSTOP, a paused VM) inside any change held the namespace's
    row lock, so every other host's writes waited until it resumed. The server now ends a
    session idle inside a transaction after the store's ``lease_ttl`` (never sooner: a leader
    stuck that long has stepped down by its own deadline), and its commit fails."""
    stopped = PostgresStateStore(postgres_dsn, namespace=pg_namespace, lease_ttl=0.3)
    other = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    with other._db.transaction("read the limit") as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        assert cursor.fetchone() == ("30s",)  # the default lease_ttl
    written = threading.Event()

    def pause() -> None:
        other.update_schedule_state("a", "s", status=Status.PAUSED)
        written.set()

    writer = threading.Thread(target=pause)
    with (
        pytest.raises(
            StateError,
            match=r"Could not change, then stop .* idle-in-transaction timeout .*ended the session",
        ),
        stopped._db.transaction("change, then stop") as cursor,
    ):
        rows.bump(cursor, pg_namespace)  # holds the namespace's row, as every change does
        writer.start()
        assert written.wait(10)  # while this transaction is still open
    writer.join(timeout=10)
    assert other.get_schedule_state("a", "s").status is Status.PAUSED
    stopped.update_schedule_state("a", "s", status=Status.IDLE)  # reconnects on its next call
    assert other.get_schedule_state("a", "s").status is Status.IDLE
    stopped.close()
    other.close()


def test_a_leader_stopped_inside_a_group_commit_holds_the_lease_row_so_a_standby_ends_it(
    postgres_dsn: str, pg_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group commit locks the lease row before the namespace's: a leader stopped anywhere
    after its first statement is found by a standby's takeover, which ends its session, and
    other writes go on. (Locked the other way round, a leader stopped between the two held the
    namespace's row while the standby took over freely, holding up every write.)"""
    leader, standby = (PostgresStateStore(postgres_dsn, namespace=pg_namespace) for _ in range(2))
    assert leader.acquire_lease("h1", 0.5) is not None
    leader.record_transition("a", "s", status=Status.RUNNING)
    resume, stopped, written = threading.Event(), threading.Event(), threading.Event()
    real_bump = store_module.bump

    def bump_then_stop(cursor: Any, namespace: str) -> int:
        number = real_bump(cursor, namespace)
        if threading.current_thread().name == "commit":
            stopped.set()
            resume.wait(30)
        return number

    monkeypatch.setattr(store_module, "bump", bump_then_stop)
    failed: list[BaseException] = []

    def commit() -> None:
        try:
            leader.flush()
        except BaseException as exc:
            failed.append(exc)

    def take_over_and_pause() -> None:
        assert standby.acquire_lease("h2", 30) is not None
        standby.update_schedule_state("a", "s", status=Status.PAUSED)
        written.set()

    committer = threading.Thread(target=commit, name="commit")
    committer.start()
    try:
        assert stopped.wait(10)
        time.sleep(0.6)  # the lease expires
        threading.Thread(target=take_over_and_pause, daemon=True).start()
        assert written.wait(10)  # while the leader is still stopped
    finally:
        resume.set()
        committer.join(timeout=10)
    assert len(failed) == 1 and isinstance(failed[0], StateError)
    assert standby.get_schedule_state("a", "s").status is Status.PAUSED
    leader.close()
    standby.close()


def test_a_claim_behind_a_takeover_in_flight_waits_and_is_refused(
    stores: list[PostgresStateStore],
) -> None:
    """The claim statement locks the lease row FOR SHARE: it waits for a takeover that holds the
    row, then finds the new holder and writes nothing."""
    first, second = stores
    assert first.acquire_lease("h1", 0.5) is not None
    time.sleep(0.8)
    outcome: list[BaseException | None] = []

    def claim_late() -> None:
        try:
            first.claim_runs([claim("late")])
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    with second._db.transaction("take over, slowly") as cursor:
        assert second._lease.acquire(cursor, "h2", 30) is not None
        claimer = threading.Thread(target=claim_late)
        claimer.start()
        claimer.join(timeout=0.5)
        assert claimer.is_alive()  # waiting for the takeover to commit
    claimer.join(timeout=10)
    assert len(outcome) == 1 and isinstance(outcome[0], LeadershipLostError)
    assert "epoch 2" in str(outcome[0])
    assert second.load_claims() == []


def _liveness_locks(dsn: str, store: PostgresStateStore) -> int:
    """How many sessions hold an advisory lock of ``store``'s namespace."""
    key = store._lease.key & 0xFFFFFFFF
    rows_ = run_sql(
        dsn, f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = {key}"
    )
    return int(rows_[0][0])


def test_a_renewal_on_a_new_session_takes_the_liveness_lock_again(
    postgres_dsn: str, stores: list[PostgresStateStore]
) -> None:
    """The advisory lock that tells standbys the holder lives ends with its session; the next
    renewal, made on a new session, takes it again."""
    first, second = stores
    lease = first.acquire_lease("h1", 60)
    assert lease is not None
    run_sql(postgres_dsn, f"SELECT pg_terminate_backend({first._db.backend_pid})")
    assert wait_until(lambda: _liveness_locks(postgres_dsn, first) == 0, timeout=10)
    renewed = first.renew_lease(lease, 60)
    assert renewed.epoch == lease.epoch and renewed.expires_at >= lease.expires_at
    assert _liveness_locks(postgres_dsn, first) == 1
    assert second.current_lease() is not None
    assert second.acquire_lease("h2", 60) is None


def test_a_holder_whose_session_was_cut_keeps_the_lease_and_its_renewal_takes_the_lock_back(
    postgres_dsn: str, stores: list[PostgresStateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader whose session the server ended (pg_terminate_backend, a restart) but which
    lives on is not taken for dead while its next renewal is not overdue, and that renewal
    takes its liveness lock back: it leads on under its epoch, and every host names it all
    along. Before, a standby took the lease about a second after the cut, beside the
    leader's running jobs, and every status said nobody led."""
    monkeypatch.setattr(pg_leases, "RENEWAL_MARGIN", 0.2)
    first, second = stores
    lease = first.acquire_lease("h1", 3)  # renewed every second; overdue 1.5 s after one
    assert lease is not None
    for _ in range(2):
        run_sql(postgres_dsn, f"SELECT pg_terminate_backend({first._db.backend_pid})")
        assert wait_until(lambda: _liveness_locks(postgres_dsn, first) == 0, timeout=10)
        assert second.acquire_lease("h2", 3) is None
        named = second.current_lease()
        assert named is not None and (named.holder, named.epoch) == ("h1", lease.epoch)
        assert 0 < second.lease_retry_in(3) <= 1.6
        lease = first.renew_lease(lease, 3)  # on time: a third of the lease after the last
        assert _liveness_locks(postgres_dsn, first) == 1
        time.sleep(1.6)  # past the time it would have been taken for dead
        assert second.acquire_lease("h2", 3) is None
        lease = first.renew_lease(lease, 3)


def test_a_holder_whose_session_is_gone_for_good_is_replaced_once_its_renewal_is_overdue(
    postgres_dsn: str, stores: list[PostgresStateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead leader (kill -9: its session ends and no renewal comes) is replaced once its
    renewal is overdue, before its lease would expire, and a standby tries again just then."""
    monkeypatch.setattr(pg_leases, "RENEWAL_MARGIN", 0.2)
    first, second = stores
    lease = first.acquire_lease("h1", 6)  # overdue 3 s after its renewal, expiring after 6
    assert lease is not None
    taken_at = time.monotonic()
    run_sql(postgres_dsn, f"SELECT pg_terminate_backend({first._db.backend_pid})")
    assert wait_until(lambda: _liveness_locks(postgres_dsn, first) == 0, timeout=10)
    assert second.acquire_lease("h2", 6) is None
    assert second.lease_retry_in(6) <= 3.1 - (time.monotonic() - taken_at) + 0.1
    taken = eventually(lambda: second.acquire_lease("h2", 6), timeout=10)
    assert taken is not None and taken.epoch == lease.epoch + 1
    assert 2.9 <= time.monotonic() - taken_at < 5.5
    with pytest.raises(LeadershipLostError):  # the old holder, back, cannot renew
        first.renew_lease(lease, 6)


def test_a_renewal_that_finds_its_lock_taken_by_another_session_tries_again(
    postgres_dsn: str, stores: list[PostgresStateStore], caplog: pytest.LogCaptureFixture
) -> None:
    """After a cut, the server may keep the holder's old session (and its lock) a while: the
    renewal on a new session then did not get the lock, said nothing, and never tried again,
    so the holder was taken for dead once that old session ended."""
    first, _ = stores
    lease = first.acquire_lease("h1", 60)
    assert lease is not None
    key, lock = first._lease.key, pg_leases._int4(lease.epoch)
    with psycopg.connect(postgres_dsn, autocommit=True) as other:
        run_sql(postgres_dsn, f"SELECT pg_terminate_backend({first._db.backend_pid})")
        assert wait_until(lambda: _liveness_locks(postgres_dsn, first) == 0, timeout=10)
        other.execute("SELECT pg_advisory_lock(%s, %s)", (key, lock))  # the old session's
        with caplog.at_level(logging.WARNING, "herdsched"):
            lease = first.renew_lease(lease, 60)
        assert "advisory lock is held by another session" in caplog.text
    assert wait_until(lambda: _liveness_locks(postgres_dsn, first) == 0, timeout=10)
    first.renew_lease(lease, 60)
    assert _liveness_locks(postgres_dsn, first) == 1


def test_a_standby_that_found_the_holder_alive_tries_again_when_it_could_be_taken(
    stores: list[PostgresStateStore],
) -> None:
    """Its next try came a third of the lease later, though the holder, should it die right
    after the try, could be taken sooner: a dead leader was replaced up to a third of the lease
    after the documented time."""
    first, second = stores
    assert first.acquire_lease("h1", 6) is not None  # overdue 4 s after, if its lock is gone
    time.sleep(2.5)
    assert second.acquire_lease("h2", 6) is None
    assert second.lease_retry_in(6) < 1.7  # at 4 s, not at 2.5 + 2 s


def test_a_takeover_that_does_not_get_its_lock_says_so_and_takes_it_at_a_renewal(
    postgres_dsn: str,
    stores: list[PostgresStateStore],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The takeover counted the lock as taken whatever its try answered, so no renewal took
    it again: once the session holding it ended, the new leader had no liveness lock at all."""
    monkeypatch.setattr(pg_leases, "RENEWAL_MARGIN", 0.2)
    first, second = stores
    lease = first.acquire_lease("h1", 3)
    assert lease is not None
    with psycopg.connect(postgres_dsn, autocommit=True) as other:
        other.execute(  # the next epoch's lock, held by a session a cut left behind
            "SELECT pg_advisory_lock(%s, %s)",
            (first._lease.key, pg_leases._int4(lease.epoch + 1)),
        )
        run_sql(postgres_dsn, f"SELECT pg_terminate_backend({first._db.backend_pid})")
        with caplog.at_level(logging.WARNING, "herdsched"):
            taken = eventually(lambda: second.acquire_lease("h2", 60), timeout=10)
        assert taken is not None and taken.epoch == lease.epoch + 1
        assert "was taken, but its advisory lock is held by another session" in caplog.text
    assert wait_until(lambda: _liveness_locks(postgres_dsn, second) == 0, timeout=10)
    second.renew_lease(taken, 60)
    assert _liveness_locks(postgres_dsn, second) == 1


def test_a_takeover_whose_commit_fails_leaves_the_store_holding_nothing(
    postgres_dsn: str, stores: list[PostgresStateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store took a lease for its own as soon as its row was written, before the commit:
    one whose commit failed (the session cut at that moment) left the store believing it held
    a lease of an epoch never stored, whose lock its next sessions then took."""
    first, _ = stores
    real = first._db.transaction

    @contextlib.contextmanager
    def failing_at_commit(doing: str) -> Iterator[Any]:
        with real(doing) as cursor:
            yield cursor
            raise StateError(f"Could not {doing}: the connection was lost at commit")

    monkeypatch.setattr(first._db, "transaction", failing_at_commit)
    with pytest.raises(StateError, match="lost at commit"):
        first.acquire_lease("h1", 60)
    monkeypatch.setattr(first._db, "transaction", real)
    assert first._lease.held is None and not first._lease.fenced
    assert first.current_lease() is None
    assert _liveness_locks(postgres_dsn, first) == 0  # no lock of an epoch never stored


def test_a_renewal_and_a_standbys_try_are_one_statement_each(
    stores: list[PostgresStateStore],
) -> None:
    """Idle cost: the leader's heartbeat and a standby's try each send one statement (one round
    trip, no BEGIN/COMMIT), and a claim is one statement whatever the number of runs."""
    first, second = stores
    lease = first.acquire_lease("h1", 60)
    assert lease is not None
    sent = []
    for call in (
        lambda: first.renew_lease(lease, 60),
        lambda: second.acquire_lease("h2", 60),
        lambda: first.claim_runs([claim(f"r{i}") for i in range(25)]),
    ):
        databases = (first._db, first._claims_db, second._db, second._claims_db)
        before = sum(db.transactions for db in databases)
        call()
        sent.append(sum(db.transactions for db in databases) - before)
    assert sent == [1, 1, 1]
    assert len(second.load_claims()) == 25


def test_a_standby_is_advised_to_try_every_third_of_the_ttl_or_at_the_expiry_it_saw(
    stores: list[PostgresStateStore],
) -> None:
    first, second = stores
    started = time.monotonic()
    assert first.acquire_lease("h1", 1.5) is not None
    assert second.lease_retry_in(60) == 20  # nothing seen yet: a third of the ttl
    assert second.acquire_lease("h2", 1.5) is None
    retry = second.lease_retry_in(60)  # the holder's lease expires sooner: that is the advice
    assert 1.45 - (time.monotonic() - started) <= retry <= 1.55
    time.sleep(second.lease_retry_in(60))
    taken = second.acquire_lease("h2", 60)  # a hung holder is replaced at its expiry
    assert taken is not None and taken.epoch == 2
    assert first.lease_retry_in(60) == 20 and second.lease_retry_in(60) == 20


def test_a_standby_whose_tries_fail_past_the_expiry_it_saw_keeps_its_pace(
    stores: list[PostgresStateStore],
) -> None:
    """With the database down past the expiry a standby had seen, every failed try left the
    passed expiry as the advice: 20 tries (and warnings) a second until the server was back."""
    first, second = stores
    assert first.acquire_lease("h1", 1.0) is not None
    assert second.acquire_lease("h2", 1.0) is None
    time.sleep(second.lease_retry_in(60))  # just past the expiry it saw: one quick try is due
    second._busy_until = second.clock.monotonic() - 5  # the try failed: the server is down
    assert second.lease_retry_in(60) == 20


def test_release_lets_a_watching_standby_know_at_once(stores: list[PostgresStateStore]) -> None:
    first, second = stores
    lease = first.acquire_lease("h1", 60)
    assert lease is not None
    heard = threading.Event()
    second.watch(heard.set)
    wait_until(second._listener.connected.is_set, timeout=10)  # type: ignore[union-attr]
    heard.clear()
    first.release_lease(lease)
    assert heard.wait(5)
    assert second.acquire_lease("h2", 60) is not None


def watched(store: PostgresStateStore) -> threading.Event:
    """Listen on ``store`` and bring its view up to date; the event is set at each change
    another store makes from now on."""
    heard = threading.Event()
    store.watch(heard.set)
    wait_until(store._listener.connected.is_set, timeout=10)  # type: ignore[union-attr]
    store.refresh()
    heard.clear()
    return heard


def test_a_change_on_one_host_wakes_the_other_and_a_watched_view_costs_no_queries(
    stores: list[PostgresStateStore],
) -> None:
    first, second = stores
    heard = watched(second)
    before = second._db.transactions
    for _ in range(50):
        assert second.refresh() is False
        second.get_schedule_state("a", "s")
    assert second._db.transactions == before  # idle: nothing asked of the server
    first.update_schedule_state("a", "s", status="paused")
    assert heard.wait(5)
    assert second.refresh() is True
    assert second.get_schedule_state("a", "s").status is Status.PAUSED


def test_a_change_refused_for_one_its_view_had_not_heard_of_brings_the_view_up_to_it(
    stores: list[PostgresStateStore],
) -> None:
    """A change refused by the writing transaction for another host's change still on its way
    as a notification left the view without that change: the host answered from the old
    definition (a retry with its revision was refused again) until the notification came."""
    first, second = stores
    heard = watched(second)
    first.save_definition("a", "s", {"type": "interval", "interval": "5m"}, exists=False)
    assert heard.wait(5)
    second._stale = False  # as if the notification were still on its way
    with pytest.raises(ConflictError, match="already exists"):
        second.save_definition("a", "s", {"type": "interval", "interval": "1h"}, exists=False)
    assert second.load_definitions() == {"a": {"s": {"type": "interval", "interval": "5m"}}}


def test_a_creation_refused_for_a_name_its_view_had_not_heard_of_clears_no_state(
    stores: list[PostgresStateStore],
) -> None:
    """A creation cleared the state its name had (left by a removed namesake, as far as its
    view knew) before its write was refused: when another host had created that name
    meanwhile, the winner's first run was wiped from its state. The clearing now looks for a
    definition in its own transaction."""
    from herdsched import Agent, Schedule, ThreadedScheduler

    first, second = stores
    heard = watched(second)
    first.update_schedule_state("a", "s", status="idle", consecutive_failures=2)  # left over
    assert heard.wait(5)
    second.refresh()
    heard.clear()
    first.save_definition("a", "s", {"type": "interval", "interval": "5m"}, exists=False)
    first.update_schedule_state("a", "s", last_run_at=T0, last_result="success")  # it ran
    assert heard.wait(5)
    second._stale = False  # as if the notifications were still on their way
    sched = ThreadedScheduler(store=second, timezone="UTC")
    sched.add_agent(Agent("a", job=lambda info: None, schedules={}))
    with pytest.raises(ConflictError, match="already exists"):
        sched.add_schedule("a", "s", Schedule.interval("1h"), persist=True)
    assert first.get_schedule_state("a", "s").last_run_at == T0


def test_a_terminated_session_is_replaced_without_an_error(
    postgres_dsn: str, stores: list[PostgresStateStore]
) -> None:
    first, _ = stores
    first.update_schedule_state("a", "s", status="paused")
    old_pid = first._db.backend_pid
    run_sql(postgres_dsn, f"SELECT pg_terminate_backend({old_pid})")
    time.sleep(0.2)
    first.update_schedule_state("a", "s", status="idle")  # a new session, the same call
    assert first._db.backend_pid != old_pid
    assert first.get_schedule_state("a", "s").status is Status.IDLE


@pytest.mark.slow
def test_a_restarted_server_loses_nothing_committed_and_the_store_reconnects() -> None:
    with start_server() as server:
        store = PostgresStateStore(server.dsn, namespace="n")
        store.update_schedule_state("a", "s", status="paused")
        store.append_run(run("r1"))
        store.flush()
        run_id = store.request_trigger("a", "s")
        lease = store.acquire_lease("h1", 8)  # taken for dead 4.7 s after
        assert lease is not None
        server.stop("immediate")
        with pytest.raises(StateError, match=r"Could not .* (in|to) the PostgreSQL store at"):
            store.update_schedule_state("a", "s", status="idle")
        server.start()
        other = PostgresStateStore(server.dsn, namespace="n")
        assert other.get_schedule_state("a", "s").status is Status.PAUSED
        assert [r.run_id for r in other.get_history("a")] == ["r1"]
        assert [r.run_id for r in other.trigger_requests()] == [run_id]
        # the holder's session ended with the server and no renewal comes: its lease is
        # free once that renewal is overdue, the epoch goes on
        taken = eventually(lambda: other.acquire_lease("h2", 8), timeout=20)
        assert taken is not None and taken.epoch == 2
        with pytest.raises(LeadershipLostError):
            store.renew_lease(lease, 8)
        store.close()
        other.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_store_made_before_fork_works_in_the_children_and_the_parent(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """gunicorn --preload: the app (and its store) is made once, then the workers fork."""
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    lease = store.acquire_lease("parent", 60)
    assert lease is not None
    store.update_schedule_state("a", "parent", status="paused")
    children = []
    for index in range(3):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit status
            code = 0
            try:
                for n in range(30):
                    store.update_schedule_state("a", f"child{index}", consecutive_failures=n)
                store.claim_runs([claim(f"child{index}")])  # the parent's lease is not its own
                code = 3
            except LeadershipLostError:
                code = 0
            except BaseException:
                code = 2
            os._exit(code)
        children.append(pid)
    for n in range(30):
        store.update_schedule_state("a", "parent", consecutive_failures=n)
    statuses = [os.waitpid(pid, 0)[1] for pid in children]
    assert [os.waitstatus_to_exitcode(status) for status in statuses] == [0, 0, 0]
    states = store.get_agent_schedule_states("a")
    assert {name: s.consecutive_failures for name, s in states.items()} == {
        "parent": 29,
        "child0": 29,
        "child1": 29,
        "child2": 29,
    }
    assert store.renew_lease(lease, 60).epoch == lease.epoch  # the parent's session lives on
    store.close()


def test_a_closed_store_with_nothing_pending_flushes_quietly(postgres_dsn: str) -> None:
    """The scheduler's exit hook flushes; an app may have closed the store before that."""
    store = PostgresStateStore(postgres_dsn, namespace=unique_namespace())
    store.record_transition("a", "s", status="running", last_run_at=T0)
    store.close()  # commits what was pending
    store.flush()
    with pytest.raises(StateError, match="is closed"):
        store.update_schedule_state("a", "s", status="paused")
    other = PostgresStateStore(postgres_dsn, namespace=store.namespace)
    assert other.get_schedule_state("a", "s").last_run_at == T0
    other.close()


def test_a_callback_that_raises_does_not_stop_the_listening(
    stores: list[PostgresStateStore],
) -> None:
    first, second = stores
    heard: list[int] = []

    def flaky() -> None:
        heard.append(1)
        if len(heard) == 2:
            raise RuntimeError("a callback bug")

    second.watch(flaky)
    assert second._listener is not None
    assert wait_until(second._listener.connected.is_set, timeout=10)
    first.update_schedule_state("a", "s", status="paused")  # heard, and the callback raises
    assert wait_until(lambda: len(heard) >= 2, timeout=5)
    wait_until(lambda: len(heard) >= 3, timeout=10)  # listening again tells "changed" once
    count = len(heard)
    first.update_schedule_state("a", "s", status="idle")
    assert wait_until(lambda: len(heard) > count, timeout=5)


def test_each_time_the_listener_stops_and_listens_again_is_told(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its session ended three times, it listened again each time, but only the first stop
    was logged and nothing ever said it listened again. A stop is a WARNING and its return an
    INFO line, once a minute: a server ending idle sessions every few seconds would fill the
    log (the stops in between are at DEBUG)."""
    store = PostgresStateStore(postgres_dsn, namespace=unique_namespace())
    store.watch(lambda: None)
    listener = store._listener
    assert listener is not None and listener.connected.wait(10)
    with caplog.at_level(logging.DEBUG, logger="herdsched"):
        for levels in (("WARNING", "INFO"), ("DEBUG", "DEBUG")):
            ended = run_sql(
                postgres_dsn,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'herdsched' AND query LIKE 'LISTEN%'",
            )
            assert ended
            assert wait_until(lambda: not listener.connected.is_set(), timeout=10)
            assert listener.connected.wait(10)
            assert wait_until(lambda: "Listening again" in caplog.text, timeout=5)
            told = [(r.levelname, r.getMessage().split(" for ")[0]) for r in caplog.records]
            caplog.clear()
            assert [line for line in told if "istening" in line[1]] == [
                (levels[0], "Stopped listening"),
                (levels[1], "Listening again"),
            ]
    store.close()


def test_a_group_commit_of_thousands_of_schedules_trims_their_history_through_the_index(
    fresh_database: str,
) -> None:
    """The trim beyond ``max_run_history`` keeps each schedule's newest records when a commit
    touches thousands of schedules on new tables (no statistics yet), and stays cheap: the
    session's statement_timeout (15 s, for work of well under a second) turns a plan that joins
    every stored run with every key into a failed commit."""
    from psycopg.conninfo import make_conninfo

    dsn = make_conninfo(fresh_database, options="-c statement_timeout=15s")
    store = PostgresStateStore(dsn, max_run_history=2)
    try:
        for round_ in range(3):
            for i in range(4000):
                store.append_run(
                    RunRecord(
                        run_id=f"r{round_}-{i}",
                        agent="a",
                        schedule=f"s{i}",
                        trigger_type="interval",
                        status="success",
                    )
                )
            store.flush()
        assert [r.run_id for r in store.get_history("a", "s7")] == ["r2-7", "r1-7"]
        assert run_sql(fresh_database, "SELECT count(*) FROM herdsched_runs") == [(8000,)]
    finally:
        store.close()


def test_the_leases_statements_tell_an_idle_view_it_is_current(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """Idle cost: the renewal and a standby's try return the namespace's change number, so a
    watched view whose last own look is older than ``max_staleness`` asks nothing more."""
    from herdsched.testing import FakeClock

    clock = FakeClock(T0)
    leader, standby, writer = (
        PostgresStateStore(postgres_dsn, namespace=pg_namespace, max_staleness=60, clock=clock)
        for _ in range(3)
    )
    try:
        for store in (leader, standby):
            store.watch(lambda: None)
            wait_until(store._listener.connected.is_set, timeout=10)  # type: ignore[union-attr]
            store.refresh()
        lease = leader.acquire_lease("h1", 60)
        assert lease is not None
        clock.advance(50)
        leader.renew_lease(lease, 60)
        assert standby.acquire_lease("h2", 60) is None
        clock.advance(20)  # 70 s since the views' own looks, 20 s since the lease statements
        before = [leader._db.transactions, standby._db.transactions]
        leader.get_schedule_state("a", "s")
        standby.get_schedule_state("a", "s")
        assert [leader._db.transactions, standby._db.transactions] == before
        writer.update_schedule_state("a", "s", status="paused")
        wait_until(lambda: standby.get_schedule_state("a", "s").status is Status.PAUSED)
    finally:
        for store in (leader, standby, writer):
            store.close()


def test_libpqs_lines_are_told_as_sentences() -> None:
    """Its lines were run together: "...closed the connection unexpectedly This probably
    means ...", "...Connection refused Is the server running ..."."""
    closed = psycopg.OperationalError(
        "server closed the connection unexpectedly\n\tThis probably means the server "
        "terminated abnormally\n\tbefore or while processing the request."
    )
    message = str(state_error(closed, "renew the scheduler lease", "postgresql://app@db/app"))
    assert (
        ": server closed the connection unexpectedly. This probably means the server "
        "terminated abnormally before or while processing the request." in message
    )
    refused = psycopg.OperationalError(
        "connection failed: Connection refused\n\tIs the server running on that host?"
    )
    message = str(state_error(refused, "connect", "postgresql://app@db/app"))
    assert "Connection refused. Is the server running on that host?" in message


@pytest.mark.parametrize(
    "fatal", ["sorry, too many clients already", "remaining connection slots are reserved for"]
)
def test_a_server_out_of_connections_is_named_so(fatal: str) -> None:
    refused = psycopg.OperationalError(
        f'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  {fatal}'
    )
    message = str(state_error(refused, "connect", "postgresql://app@db:5432/app"))
    assert message.startswith("Could not connect to the PostgreSQL store at postgresql://app@db")
    assert "the server has no connection to spare: raise its max_connections" in message
    assert "check the user, password" not in message


@pytest.mark.parametrize(
    ("error", "hint"),
    [
        (
            psycopg.OperationalError(
                'connection to server at "127.0.0.1", port 5432 failed: FATAL:  too many '
                'connections for role "app"'
            ),
            "the database user may open no more connections (its CONNECTION LIMIT)",
        ),
        (
            psycopg.OperationalError(
                'connection to server at "127.0.0.1", port 5432 failed: FATAL:  could not '
                "write init file"
            ),
            "the database server's disk is full",
        ),
        (
            pg_errors.DiskFull('could not extend file "base/5/16384": No space left on device'),
            "the database server's disk is full",
        ),
        (
            pg_errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"),
            "the database takes no writes (a hot standby, or default_transaction_read_only is "
            "on): point the DSN at the primary",
        ),
        (
            pg_errors.QueryCanceled("canceling statement due to statement timeout"),
            "a statement_timeout set for the user or the database",
        ),
    ],
)
def test_server_side_refusals_say_what_to_do(error: Exception, hint: str) -> None:
    """Each was told as an unreachable server ("check that it runs and that the DSN's host
    and port are right") or a bad DSN ("check the user, password and database name")."""
    message = str(state_error(error, "claim 1 run(s)", "postgresql://app@db:5432/app"))
    assert hint in message
    assert "unreachable" not in message and "check the user, password" not in message


def test_a_server_that_asks_for_a_password_none_was_given_for_is_named_so() -> None:
    """It was told as an unreachable server ("check that it runs and that the DSN's host and
    port are right"), though the server had answered and asked for a password."""
    refused = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 54329 failed: '
        "fe_sendauth: no password supplied"
    )
    message = str(state_error(refused, "connect", "postgresql://hs@127.0.0.1:54329/postgres"))
    assert "the server asks for a password and none was given: put it in the DSN, in " in message
    assert "PGPASSWORD or in ~/.pgpass" in message
    assert "unreachable" not in message


@contextlib.contextmanager
def _session_stopped(store: PostgresStateStore) -> Iterator[int]:
    """The store's query session stopped (SIGSTOP) for the block: a server that no longer
    answers, as a network cut neither side notices looks to the client."""
    stopped = store._db.backend_pid
    assert stopped is not None
    os.kill(stopped, signal.SIGSTOP)
    try:
        yield stopped
    finally:
        os.kill(stopped, signal.SIGCONT)


def _leading_with_an_outcome_pending(store: PostgresStateStore) -> Lease:
    """``store`` leads and holds a transition and a run record not yet committed."""
    lease = store.acquire_lease("me", 30)
    assert lease is not None
    store.commit_delay = 3600
    store.record_transition("a", "s", status=Status.PAUSED)
    store.append_run(run("r1"))
    return lease


def _nothing_written_when_it_leads_again(store: PostgresStateStore, dsn: str) -> None:
    assert store.acquire_lease("me", 30) is not None
    store.flush()
    other = PostgresStateStore(dsn, namespace=store.namespace)
    assert other.get_history("a", "s") == []
    assert other.get_schedule_state("a", "s").status is Status.IDLE
    for each in (store, other):
        each.close()


def test_a_call_the_server_leaves_unanswered_fails_and_the_next_reconnects(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """The bug: a call whose server session stopped answering (SIGSTOP here; a network cut
    neither side notices is the same to the client) waited for ever, and every other call of
    the process queued behind it. It now fails a second after the store's lease with a
    ``StateError`` saying so, and the next call reconnects."""
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace, lease_ttl=1)
    store.update_schedule_state("a", "s", status=Status.PAUSED)
    errors: list[BaseException] = []

    def pause() -> None:
        try:
            store.update_schedule_state("a", "s", status=Status.IDLE)
        except StateError as exc:
            errors.append(exc)

    callers = [threading.Thread(target=pause) for _ in range(2)]
    with _session_stopped(store) as stopped:
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(timeout=20)
        assert not any(caller.is_alive() for caller in callers)
    # the first fails; the one queued behind it then gets a new session and succeeds
    assert len(errors) == 1
    assert "did not answer for 2 s" in str(errors[0])
    assert "postgresql://postgres@127.0.0.1" in str(errors[0])
    assert store._db.backend_pid != stopped
    assert store.get_schedule_state("a", "s").status is Status.IDLE
    store.close()


def test_a_schedulers_new_namespace_beside_others_that_hold_schedules_is_warned_of(
    fresh_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The bug: a mistyped namespace (``HERDSCHED_NAMESPACE="prodd"``) silently started a
    second fleet beside the first, which ran every job again; only the command line's looks
    said anything. A store that may create tables (a scheduler's) now warns when its namespace
    holds nothing while others of the database do."""
    caplog.set_level(logging.WARNING, logger="herdsched")
    PostgresStateStore(fresh_database, namespace="first").close()  # the first of all: quiet
    fleet = PostgresStateStore(fresh_database, namespace="prod")
    fleet.update_schedule_state("a", "s", status=Status.PAUSED)
    assert not caplog.records
    typo = PostgresStateStore(fresh_database, namespace="prodd")
    warned = [record.getMessage() for record in caplog.records]
    assert typo.location.endswith("(namespace prodd)")
    assert warned == [
        f"The PostgreSQL store at {typo.location} holds no schedules yet, while the namespaces "
        "'prod' of this database do: if this fleet ran before, check the namespace setting "
        "(another namespace is another fleet, which runs every job again)."
    ]
    caplog.clear()
    look = PostgresStateStore(fresh_database, namespace="prodd", create_tables=False)
    again = PostgresStateStore(fresh_database, namespace="prod")
    assert not caplog.records  # a look says it in its own words; a namespace in use is quiet
    for store in (fleet, typo, look, again):
        store.close()


def test_work_pending_when_the_lease_is_given_up_is_not_written_under_a_later_one(
    postgres_dsn: str, pg_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The bug (a partition probe: four slots ran twice): a leader whose group commits failed
    stepped down at its own deadline and gave the lease up, but its store kept the pending
    outcome and wrote it with its first commit after it led again, setting the schedule back
    to before the other host's runs. What is pending when the lease is given up is dropped."""
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace)
    store.release_lease(_leading_with_an_outcome_pending(store))
    assert "1 schedule transition(s) and 1 run record(s) of" in caplog.text
    _nothing_written_when_it_leads_again(store, postgres_dsn)


def test_a_group_commit_that_fails_after_its_lease_was_given_up_is_not_tried_again(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """The bug (the partition probe again: 2 of 12 cut-offs still ran a slot twice): a group
    commit was in flight, unanswered, when the leader stepped down and gave the lease up; the
    commit then failed and put what it had taken back, to be written once the process led
    again. A commit that fails after its lease was given up drops its work."""
    store = PostgresStateStore(postgres_dsn, namespace=pg_namespace, lease_ttl=1)
    lease = _leading_with_an_outcome_pending(store)
    errors: list[StateError] = []

    def commit() -> None:
        try:
            store.flush()
        except StateError as exc:
            errors.append(exc)

    committer = threading.Thread(target=commit)
    with _session_stopped(store):
        committer.start()
        assert wait_until(lambda: store._db._waiting is not None)  # the commit waits
        store.release_lease(lease)  # the leader steps down meanwhile
        committer.join(timeout=20)
    assert errors and "did not answer" in str(errors[0])
    _nothing_written_when_it_leads_again(store, postgres_dsn)


def test_a_long_listener_stop_soon_after_one_that_was_told_is_told_too(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A stop told at WARNING, its return at INFO, then a second stop 20 s later that lasted
    hours: nothing above DEBUG said so, the last line read "Listening again"."""
    from herdsched.store.postgres import listener as listener_module

    now = [1000.0]
    tries = iter(["down", "up", *["down"] * 30])

    class Session:
        def __enter__(self) -> Session:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def execute(self, query: str) -> None:
            return None

        def notifies(self, timeout: float) -> list[object]:
            raise OSError("server closed the connection unexpectedly")

    def connect(*args: object, **kwargs: object) -> Session:
        if next(tries, "down") == "down":
            raise OSError("connection refused")
        return Session()

    # this module's names only: other threads keep the real clock and psycopg
    monkeypatch.setattr(listener_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(listener_module, "psycopg", SimpleNamespace(connect=connect))
    listener = listener_module.Listener("dsn", "ns", lambda: None, lambda: None, "db")
    waits = [0]

    def wait(seconds: float) -> bool:  # each try 20 s after the one before
        now[0] += 20.0
        waits[0] += 1
        return waits[0] > 30

    monkeypatch.setattr(listener._stop, "wait", wait)
    monkeypatch.setattr(listener._stop, "is_set", lambda: waits[0] > 30)
    with caplog.at_level(logging.INFO, logger="herdsched"):
        listener._run()
    told = [(r.levelname, r.getMessage().split(" for ")[0]) for r in caplog.records]
    assert told == [
        ("WARNING", "Stopped listening"),
        ("INFO", "Listening again"),
        ("WARNING", "Stopped listening"),  # the second stop, once it lasted past a minute
    ]
