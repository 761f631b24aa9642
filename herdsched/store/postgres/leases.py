"""The leadership lease in PostgreSQL: one row per namespace, times on the server's clock.

Who gets the lease and with which epoch is decided by :mod:`herdsched.store.lease_rules`, as for
every store; this module supplies the two things a store decides itself:

* **now** is the database server's clock (``statement_timestamp()``), so the hosts' clocks
  never matter;
* **the holder is dead** when its database session is gone: a holder keeps a session-level
  advisory lock keyed by namespace and epoch on its connection, which the server releases the
  moment that session ends (a ``kill -9``, a terminated backend, a dropped network connection
  noticed by the server). A hung holder keeps its session and is replaced once its lease
  expires.

Fencing: :func:`check_fence` locks the lease row ``FOR SHARE`` inside the caller's write
transaction, so a takeover (which updates the row) waits for that write to commit, and a write
that started after a takeover sees the new epoch and is refused. A plain read would not do:
under READ COMMITTED it could check an epoch that a takeover changes before the write commits.
"""

from __future__ import annotations

import zlib
from datetime import datetime
from typing import Any

import psycopg

from herdsched.store.base import Lease
from herdsched.store.lease_rules import check_fence as check_same_lease
from herdsched.store.lease_rules import grant, renewed

__all__ = ["LeaseRow"]

_COLUMNS = "holder, epoch, acquired_at, renewed_at, expires_at, pid, host"
#: Whether the session that took the lease of epoch ``{epoch}`` still holds its advisory lock
#: (keys as pg_locks shows a two-key lock: classid, objid, objsubid 2).
_ALIVE = (
    "EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database()) AND "
    "classid = %(key)s::oid AND objid = ({epoch} %% 4294967296)::oid AND objsubid = 2)"
)


def _lock_key(namespace: str) -> int:
    """The first key of the namespace's advisory locks (a signed 32-bit number)."""
    return zlib.crc32(f"herdsched:{namespace}".encode()) - 2**31


def _lease_of(row: tuple[Any, ...] | None) -> Lease | None:
    if row is None or row[0] is None:
        return None
    holder, epoch, acquired, renewed_at, expires, pid, host = row[:7]
    return Lease(holder, int(epoch), acquired, renewed_at, expires, pid=pid, host=host)


class LeaseRow:
    """The lease row of one namespace, and the lease this store handed to its scheduler."""

    def __init__(self, namespace: str, where: str) -> None:
        self.namespace = namespace
        self.where = where
        self.key = _lock_key(namespace)
        self.held: Lease | None = None
        #: whether this store ever handed out a lease (from then on its run writes are fenced)
        self.fenced = False

    def _select(self, cursor: psycopg.Cursor[Any], lock: str = "") -> Lease | None:
        cursor.execute(
            f"SELECT {_COLUMNS} FROM herdsched_leases WHERE ns = %s {lock}", (self.namespace,)
        )
        return _lease_of(cursor.fetchone())

    def _holder_alive(self, cursor: psycopg.Cursor[Any], lease: Lease) -> bool:
        """Whether the session that took ``lease`` still holds its advisory lock."""
        alive = _ALIVE.format(epoch="%(epoch)s::bigint")
        cursor.execute(f"SELECT {alive}", {"key": self.key & 0xFFFFFFFF, "epoch": lease.epoch})
        row = cursor.fetchone()
        return bool(row and row[0])

    def busy(self, cursor: psycopg.Cursor[Any], holder: str) -> bool:
        """Whether another live holder keeps an unexpired lease: one read without row locks,
        so a standby's regular try costs a single statement while the leader is well."""
        cursor.execute(
            "SELECT holder IS NOT NULL AND holder <> %(holder)s AND expires_at > "
            f"statement_timestamp() AND {_ALIVE.format(epoch='epoch')} "
            "FROM herdsched_leases WHERE ns = %(ns)s",
            {"holder": holder, "ns": self.namespace, "key": self.key & 0xFFFFFFFF},
        )
        row = cursor.fetchone()
        return bool(row and row[0])

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
        current = self._select(cursor, "FOR UPDATE")
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
        cursor.execute("SELECT pg_advisory_lock(%s, %s)", (self.key, _int4(lease.epoch)))
        self.held, self.fenced = lease, True
        return lease

    def renew(self, cursor: psycopg.Cursor[Any], lease: Lease, ttl: float) -> Lease:
        """Extend ``lease`` on the server's clock; ``LeadershipLostError`` when it changed hands.

        Taken again on a new connection, the advisory lock follows the holder's session."""
        current = self._select(cursor, "FOR UPDATE")
        check_same_lease(lease, current, self.where)
        fresh = renewed(lease, ttl, self._now(cursor))
        cursor.execute(
            "UPDATE herdsched_leases SET renewed_at = %s, expires_at = %s WHERE ns = %s",
            (fresh.renewed_at, fresh.expires_at, self.namespace),
        )
        if not self._holder_alive(cursor, fresh):
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", (self.key, _int4(fresh.epoch)))
        self.held = fresh
        return fresh

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
