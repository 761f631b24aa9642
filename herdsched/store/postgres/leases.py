"""The leadership lease in PostgreSQL: one row per namespace, times on the server's clock.

Who gets the lease and with which epoch is decided by :mod:`herdsched.store.lease_rules`, as for
every store; this module supplies the two things a store decides itself:

* **now** is the database server's clock (``statement_timestamp()``), so the hosts' clocks
  never matter;
* **the holder is dead** when its database session is gone: a holder keeps a session-level
  advisory lock keyed by namespace and epoch on its connection, which the server releases the
  moment that session ends (a ``kill -9``, a terminated backend, a dropped network connection
  noticed by the server). A holder that lives on takes its lock again with its next renewal,
  every third of its lease, on whatever session it has then; so a lock gone is taken for a
  dead holder only once that renewal is overdue (:func:`return_by`), and till then the holder
  is still the one who leads. A hung holder keeps its session and is replaced once its lease
  expires. The lock is only tried (``pg_try_advisory_lock``): should another lock of the
  database share its keys, liveness falls back to the lease's expiry instead of blocking.

Fencing: :func:`check_fence` locks the lease row ``FOR SHARE`` inside the caller's write
transaction, so a takeover (which updates the row) waits for that write to commit, and a write
that started after a takeover sees the new epoch and is refused. A plain read would not do:
under READ COMMITTED it could check an epoch that a takeover changes before the write commits.
"""

from __future__ import annotations

import logging
import zlib
from datetime import datetime, timedelta
from typing import Any

import psycopg
from attrs import evolve
from psycopg import errors as pg_errors

from herdsched.errors import StateError
from herdsched.store.base import Lease
from herdsched.store.lease_rules import check_fence as check_same_lease
from herdsched.store.lease_rules import grant
from herdsched.store.postgres.rows import CHANGE_NUMBER

__all__ = ["LeaseRow", "retry_in", "return_by"]

log = logging.getLogger("herdsched")

_COLUMNS = "holder, epoch, acquired_at, renewed_at, expires_at, pid, host"
#: Whether the session that took the lease of epoch ``{epoch}`` still holds its advisory lock
#: (keys as pg_locks shows a two-key lock: classid, objid, objsubid 2).
_HOLDS = (
    "l.locktype = 'advisory' AND l.granted AND l.database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database()) AND "
    "l.classid = %(key)s::oid AND l.objid = ({epoch} %% 4294967296)::oid AND l.objsubid = 2"
)
_ALIVE = "EXISTS (SELECT 1 FROM pg_locks l WHERE " + _HOLDS + ")"
#: Seconds past its renewal's due time (a third of the lease after the last one) that a holder
#: whose advisory lock is gone is given to renew, and take its lock back, before it is taken
#: for dead: a statement's round trip and a retry after a failed renewal.
RENEWAL_MARGIN = 2.0
#: Seconds a takeover waits for the lease row before ending the session of a holder whose
#: lease expired (a fenced write holds the row for milliseconds).
_HUNG_WRITE = 0.5


def _lock_key(namespace: str) -> int:
    """The first key of the namespace's advisory locks (a signed 32-bit number)."""
    return zlib.crc32(f"herdsched:{namespace}".encode()) - 2**31


def _lease_of(row: tuple[Any, ...] | None) -> Lease | None:
    if row is None or row[0] is None:
        return None
    holder, epoch, acquired, renewed_at, expires, pid, host, read_at = row
    return Lease(
        holder, int(epoch), acquired, renewed_at, expires, pid=pid, host=host, read_at=read_at
    )


class LeaseRow:
    """The lease row of one namespace, and the lease this store handed to its scheduler."""

    def __init__(self, namespace: str, where: str) -> None:
        self.namespace = namespace
        self.where = where
        self.key = _lock_key(namespace)
        self.held: Lease | None = None
        #: whether this store ever handed out a lease (from then on its run writes are fenced)
        self.fenced = False
        #: the connection (``Database.generation``) that holds the advisory lock of ``held``
        self.locked_on: int | None = None
        self._lock_taken = False  # whether the last takeover got its lock

    def _select(self, cursor: psycopg.Cursor[Any], lock: str = "") -> Lease | None:
        cursor.execute(
            f"SELECT {_COLUMNS}, statement_timestamp() FROM herdsched_leases WHERE ns = %s {lock}",
            (self.namespace,),
        )
        return _lease_of(cursor.fetchone())

    def _holder_alive(self, cursor: psycopg.Cursor[Any], lease: Lease) -> bool:
        """Whether the session that took ``lease`` still holds its advisory lock."""
        alive = _ALIVE.format(epoch="%(epoch)s::bigint")
        cursor.execute(f"SELECT {alive}", {"key": self.key & 0xFFFFFFFF, "epoch": lease.epoch})
        row = cursor.fetchone()
        return bool(row and row[0])

    def busy(self, cursor: psycopg.Cursor[Any], holder: str) -> tuple[float | None, int]:
        """Seconds to wait before ``holder`` may take the lease of another holder (server
        clock), ``None`` when nothing keeps it out; and the namespace's change number. One read
        without row locks, so a standby's regular try costs a single statement while the
        leader is well, and tells its view whether anything changed. A holder whose lock is
        gone keeps the lease until its renewal is overdue (:func:`return_by`)."""
        cursor.execute(
            f"SELECT ({CHANGE_NUMBER}), h.* FROM (VALUES (1)) AS one LEFT JOIN (SELECT "
            f"renewed_at, expires_at, statement_timestamp(), {_ALIVE.format(epoch='epoch')} "
            "FROM herdsched_leases WHERE ns = %(ns)s AND holder IS NOT NULL AND holder <> "
            "%(holder)s AND expires_at > statement_timestamp()) AS h ON true",
            {"holder": holder, "ns": self.namespace, "key": self.key & 0xFFFFFFFF},
        )
        row = cursor.fetchone()
        assert row is not None
        number = int(row[0])
        renewed_at: datetime | None = row[1]
        expires_at: datetime | None = row[2]
        if renewed_at is None or expires_at is None:
            return None, number
        # a live holder too: should it die right after this try, the next one comes just then;
        # one alive past it (a renewal late, a hung holder) goes only at its expiry
        until = return_by(renewed_at, expires_at)
        if row[4] and until <= row[3]:
            until = expires_at
        left = (until - row[3]).total_seconds()
        return (left if left > 0 else None), number

    @staticmethod
    def _now(cursor: psycopg.Cursor[Any]) -> datetime:
        cursor.execute("SELECT statement_timestamp()")
        row = cursor.fetchone()
        assert row is not None
        return row[0]  # type: ignore[no-any-return]

    def acquire(self, cursor: psycopg.Cursor[Any], holder: str, ttl: float) -> Lease | None:
        """Take the lease for ``holder`` if it is free, released, dead or expired (inside the
        caller's transaction); ``None`` when a live holder has it."""
        cursor.execute(
            "INSERT INTO herdsched_leases (ns) VALUES (%s) ON CONFLICT (ns) DO NOTHING",
            (self.namespace,),
        )
        current = self._lock_row(cursor)
        cursor.execute("SELECT epoch FROM herdsched_leases WHERE ns = %s", (self.namespace,))
        epoch_row = cursor.fetchone()
        last_epoch = int(epoch_row[0]) if epoch_row else 0
        now = self._now(cursor)
        dead = current is not None and self._taken_for_dead(cursor, current, now)
        lease = grant(current, holder, ttl, now, holder_dead=dead, last_epoch=last_epoch)
        if lease is None:
            return None
        cursor.execute(
            "UPDATE herdsched_leases SET holder = %s, epoch = %s, acquired_at = %s, "
            "renewed_at = %s, expires_at = %s, pid = %s, host = %s WHERE ns = %s",
            (lease.holder, lease.epoch, lease.acquired_at, lease.renewed_at, lease.expires_at,
             lease.pid, lease.host, self.namespace),
        )  # fmt: skip
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", (self.key, _int4(lease.epoch)))
        row = cursor.fetchone()
        self._lock_taken = bool(row and row[0])
        return lease  # the store's to hold once the transaction committed (:meth:`took`)

    def took(self, lease: Lease, generation: int) -> None:
        """``lease`` was taken on connection ``generation``, its transaction committed: from
        now on this store holds it, and its run writes are fenced. A lock its takeover did not
        get (another session holds it) is tried again at each renewal."""
        self.held, self.fenced = lease, True
        self.locked_on = generation if self._lock_taken else None
        if not self._lock_taken:
            _tell_lock_held_elsewhere(self.where, "taken")

    def unlock(self, cursor: psycopg.Cursor[Any]) -> None:
        """Let go of this session's advisory locks (a takeover that did not commit took one);
        a lease still held takes its lock again at its next renewal."""
        cursor.execute("SELECT pg_advisory_unlock_all()")
        self.locked_on = None

    def _taken_for_dead(self, cursor: psycopg.Cursor[Any], lease: Lease, now: datetime) -> bool:
        """Whether ``lease``'s holder is gone: its lock is, and its renewal is overdue."""
        if now < return_by(lease.renewed_at, lease.expires_at):
            return False
        return not self._holder_alive(cursor, lease)

    def _lock_row(self, cursor: psycopg.Cursor[Any]) -> Lease | None:
        """The stored lease, its row locked ``FOR UPDATE`` for a takeover.

        The caller found the lease expired or its holder dead, so a holder still keeping the
        row locked after ``_HUNG_WRITE`` seconds is stopped inside a fenced write (SIGSTOP, a
        frozen VM, a debugger), and would keep every standby waiting for as long as it hangs
        (the server's idle-in-transaction timeout does not start for a client stopped in the
        middle of a pipeline). Its session is ended (allowed between sessions of one database
        user), which also keeps that write from ever committing, and the row is locked again.
        """
        cursor.execute(f"SET LOCAL lock_timeout = {round(_HUNG_WRITE * 1000)}")
        try:
            with cursor.connection.transaction():  # a savepoint: a timeout undoes only this
                return self._select(cursor, "FOR UPDATE")
        except pg_errors.LockNotAvailable:
            pass
        ended = self._end_holder_sessions(cursor)
        log.warning(
            "The scheduler lease of %s expired while its holder kept it locked inside a write "
            "for over %g s: ending the holder's database session(s) %s to take over.",
            self.where,
            _HUNG_WRITE,
            ended or "(none found)",
        )
        return self._select(cursor, "FOR UPDATE")

    def _end_holder_sessions(self, cursor: psycopg.Cursor[Any]) -> list[int]:
        """End the sessions holding the stored epoch's advisory lock; their backend pids.
        A clear ``StateError`` when this database user may not end them."""
        holds = _HOLDS.format(epoch="h.epoch")
        try:
            with cursor.connection.transaction():
                cursor.execute(
                    "SELECT l.pid, pg_terminate_backend(l.pid) FROM herdsched_leases h, "
                    f"pg_locks l WHERE h.ns = %(ns)s AND l.pid <> pg_backend_pid() AND {holds}",
                    {"ns": self.namespace, "key": self.key & 0xFFFFFFFF},
                )
                return [row[0] for row in cursor.fetchall()]
        except pg_errors.InsufficientPrivilege as exc:
            raise StateError(
                f"The scheduler lease of {self.where} expired but its holder keeps it locked "
                f"inside a write, and this database user may not end the holder's session "
                f"({exc.diag.message_primary or exc}): grant it the pg_signal_backend role, or "
                "let every host connect as the same user. Until then the lease changes hands "
                "only once the holder resumes or its session ends.",
                path=self.where,
                cause=exc,
            ) from exc

    def renew(
        self, cursor: psycopg.Cursor[Any], lease: Lease, ttl: float, generation: int
    ) -> int | None:
        """Extend ``lease`` on the server's clock in one statement; the namespace's change
        number, or ``None`` when the lease changed hands (nothing written).

        On a connection new since the advisory lock was taken (``generation``: the old session
        ended, and its lock with it), or after a try that did not get it, the statement takes
        the lock again: a standby takes the lease for dead once this renewal is overdue."""
        relock = generation != self.locked_on
        lock = ", pg_try_advisory_lock(%(key)s, %(lock)s)" if relock else ""
        cursor.execute(
            "UPDATE herdsched_leases SET renewed_at = statement_timestamp(), expires_at = "
            "statement_timestamp() + make_interval(secs => %(ttl)s) WHERE ns = %(ns)s AND "
            "holder = %(holder)s AND epoch = %(epoch)s "
            f"RETURNING renewed_at, expires_at, ({CHANGE_NUMBER}){lock}",
            {"ns": self.namespace, "holder": lease.holder, "epoch": lease.epoch, "ttl": ttl,
             "key": self.key, "lock": _int4(lease.epoch)},
        )  # fmt: skip
        row = cursor.fetchone()
        if row is None:
            return None
        self.held = evolve(lease, renewed_at=row[0], expires_at=row[1])
        if relock and row[3]:
            self.locked_on = generation
        elif relock:  # another session holds it: one a cut left on the server, say
            _tell_lock_held_elsewhere(self.where, "renewed")
        return int(row[2])

    def release(self, cursor: psycopg.Cursor[Any], lease: Lease) -> bool:
        """Give ``lease`` up if it is still the stored one; whether it was."""
        if self.held is not None and self.held.holder == lease.holder:
            self.held = None
        cursor.execute(
            "UPDATE herdsched_leases SET holder = NULL WHERE ns = %s AND holder = %s",
            (self.namespace, lease.holder),
        )
        released = cursor.rowcount > 0
        cursor.execute("SELECT pg_advisory_unlock_all()")
        return released

    def current(self, cursor: psycopg.Cursor[Any]) -> Lease | None:
        """The stored lease, ``None`` when released or taken for dead (see :meth:`busy`): a
        holder whose session was only cut still leads, one hung past its lease shows it."""
        lease = self._select(cursor)
        if lease is None or lease.read_at is None:
            return None
        return None if self._taken_for_dead(cursor, lease, lease.read_at) else lease

    def check_fence(self, cursor: psycopg.Cursor[Any]) -> None:
        """``LeadershipLostError`` unless the stored lease is still the one handed out (the row
        locked ``FOR SHARE`` until the caller's transaction ends)."""
        check_same_lease(self.held, self._select(cursor, "FOR SHARE"), self.where)


def _int4(value: int) -> int:
    """``value`` folded into PostgreSQL's signed 32-bit range (advisory lock keys)."""
    return (value + 2**31) % 2**32 - 2**31


def _tell_lock_held_elsewhere(where: str, done: str) -> None:
    log.warning(
        "The scheduler lease of %s was %s, but its advisory lock is held by another session "
        "(one a dropped connection left on the server, for instance): it is tried again at each "
        "renewal. Until then a standby takes this scheduler for dead once a renewal is overdue.",
        where,
        done,
    )


def return_by(renewed_at: datetime, expires_at: datetime) -> datetime:
    """When a holder renewed at ``renewed_at`` (its lease running to ``expires_at``) whose
    advisory lock is gone is taken for dead: its next renewal, a third of the lease later,
    takes the lock back (on a new session), so it is overdue :data:`RENEWAL_MARGIN` seconds
    after that, or halfway through the lease if later (never past its expiry)."""
    ttl = expires_at - renewed_at
    due = renewed_at + max(ttl / 3 + timedelta(seconds=RENEWAL_MARGIN), ttl / 2)
    return min(due, expires_at)


def retry_in(ttl: float, busy_until: float | None, now: float) -> float:
    """A standby's next try after one that found the lease held: a third of ``ttl``, or just
    after the moment the lease it saw may be taken (``busy_until``, on the monotonic clock that
    ``now`` reads: its expiry, or its holder's overdue renewal) if sooner."""
    retry = ttl / 3
    left = None if busy_until is None else busy_until - now
    if left is not None and left >= 0:  # once past it, a failed try must not spin
        retry = min(retry, left + 0.05)
    return retry
