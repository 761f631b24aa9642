"""The leadership lease in PostgreSQL: one row per namespace, times on the server's clock.

Who gets the lease and with which epoch is decided by :mod:`herdsched.store.lease_rules`, as for
every store; this module supplies the two things a store decides itself:

* **now** is the database server's clock (``statement_timestamp()``), so the hosts' clocks
  never matter;
* **the holder is dead** when its database session is gone: a holder keeps a session-level
  advisory lock keyed by namespace and epoch on its connection, which the server releases the
  moment that session ends (a ``kill -9``, a terminated backend, a dropped network connection
  noticed by the server). A holder that lives on reconnects and takes its lock again on the
  new session at once (:meth:`LeaseRow.relock`), so a standby gives a lock gone while the lease
  runs :data:`RECONNECT_GRACE` seconds before taking over. A hung holder keeps its session and
  is replaced once its lease expires. The lock is only tried (``pg_try_advisory_lock``):
  should another lock of the database share its keys, liveness falls back to the lease's
  expiry instead of blocking.

Fencing: :func:`check_fence` locks the lease row ``FOR SHARE`` inside the caller's write
transaction, so a takeover (which updates the row) waits for that write to commit, and a write
that started after a takeover sees the new epoch and is refused. A plain read would not do:
under READ COMMITTED it could check an epoch that a takeover changes before the write commits.
"""

from __future__ import annotations

import logging
import zlib
from datetime import datetime
from typing import Any

import psycopg
from attrs import evolve
from psycopg import errors as pg_errors

from herdsched.errors import StateError
from herdsched.store.base import Lease
from herdsched.store.lease_rules import check_fence as check_same_lease
from herdsched.store.lease_rules import grant
from herdsched.store.postgres.rows import CHANGE_NUMBER

__all__ = ["LeaseRow", "retry_in"]

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
#: Seconds a standby gives a holder whose advisory lock is gone, while its lease runs, before
#: taking over: a leader whose session was cut (a terminated backend, a server restart)
#: reconnects at its next store call, within about a second (its poll, its listener), and takes
#: its lock back (:meth:`LeaseRow.relock`); a dead one is replaced this much later.
RECONNECT_GRACE = 2.0
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
        #: the epoch of a lease whose holder's lock this standby found gone, and when (monotonic)
        self.gone: tuple[int, float] | None = None

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

    def busy(
        self, cursor: psycopg.Cursor[Any], holder: str, now: float
    ) -> tuple[float | None, int]:
        """Seconds to wait before taking the lease from another holder (server clock), ``None``
        when nothing keeps ``holder`` out; and the namespace's change number. One read
        without row locks, so a standby's regular try costs a single statement while the
        leader is well, and tells its view whether anything changed.

        A holder whose advisory lock is gone while its lease runs is given
        :data:`RECONNECT_GRACE` seconds from when this store first saw it so (``now``, on the
        store's monotonic clock) to take it back: its session may only have been cut."""
        cursor.execute(
            f"SELECT ({CHANGE_NUMBER}), h.* FROM (VALUES (1)) AS one LEFT JOIN (SELECT "
            "extract(epoch FROM expires_at - statement_timestamp()), epoch, "
            f"{_ALIVE.format(epoch='epoch')} FROM herdsched_leases WHERE ns = %(ns)s AND "
            "holder IS NOT NULL AND holder <> %(holder)s AND expires_at > "
            "statement_timestamp()) AS h ON true",
            {"holder": holder, "ns": self.namespace, "key": self.key & 0xFFFFFFFF},
        )
        row = cursor.fetchone()
        assert row is not None
        number, left, epoch, alive = int(row[0]), row[1], row[2], row[3]
        if left is None or alive:
            self.gone = None
            return (float(left) if left is not None else None), number
        if self.gone is None or self.gone[0] != epoch:
            self.gone = (int(epoch), now)
        wait = self.gone[1] + RECONNECT_GRACE - now
        return (min(float(left), wait) if wait > 0 else None), number

    def relock(self, conn: psycopg.Connection[Any]) -> None:
        """On a new connection of a holder: take the advisory lock of the lease held again at
        once (the lock ended with the old session), so that a standby's grace finds it."""
        lease = self.held
        if lease is not None:
            conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (self.key, _int4(lease.epoch)))

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
        dead = current is not None and not self._holder_alive(cursor, current)
        now = self._now(cursor)
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
        self.held, self.fenced = lease, True
        return lease

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

    def renew(self, cursor: psycopg.Cursor[Any], lease: Lease, ttl: float) -> int | None:
        """Extend ``lease`` on the server's clock in one statement; the namespace's change
        number, or ``None`` when the lease changed hands (nothing written)."""
        cursor.execute(
            "UPDATE herdsched_leases SET renewed_at = statement_timestamp(), expires_at = "
            "statement_timestamp() + make_interval(secs => %(ttl)s) WHERE ns = %(ns)s AND "
            "holder = %(holder)s AND epoch = %(epoch)s "
            f"RETURNING renewed_at, expires_at, ({CHANGE_NUMBER})",
            {"ns": self.namespace, "holder": lease.holder, "epoch": lease.epoch, "ttl": ttl},
        )
        row = cursor.fetchone()
        if row is None:
            return None
        self.held = evolve(lease, renewed_at=row[0], expires_at=row[1])
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
        """The stored lease, ``None`` when released or when its holder's session is gone."""
        lease = self._select(cursor)
        if lease is None or not self._holder_alive(cursor, lease):
            return None
        return lease

    def check_fence(self, cursor: psycopg.Cursor[Any]) -> None:
        """``LeadershipLostError`` unless the stored lease is still the one handed out (the row
        locked ``FOR SHARE`` until the caller's transaction ends)."""
        check_same_lease(self.held, self._select(cursor, "FOR SHARE"), self.where)


def _int4(value: int) -> int:
    """``value`` folded into PostgreSQL's signed 32-bit range (advisory lock keys)."""
    return (value + 2**31) % 2**32 - 2**31


def retry_in(ttl: float, busy_until: float | None, now: float) -> float:
    """A standby's next try after one that found the lease held: a third of ``ttl`` (a dead
    holder is noticed by then), or just after the lease it saw expires (``busy_until``, on the
    monotonic clock that ``now`` reads) if sooner."""
    retry = ttl / 3
    left = None if busy_until is None else busy_until - now
    if left is not None and left >= 0:  # once past it, a failed try must not spin
        retry = min(retry, left + 0.05)
    return retry
