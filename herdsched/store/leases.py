"""The leadership lease of a state directory: ``lease.json``, ``lease.lock`` and liveness locks.

Files::

    lease.json              the lease record: holder, epoch, since, renewed, expires, and the
                            name of the holder's liveness lock (rewritten atomically)
    lease.lock              guards lease.json: exclusive to change the lease, shared to fence
    leader-<random>.lock    one per holder, locked by it for as long as its process lives
    scheduler.lock          the leader lock of versions before the lease, also held by the leader

**Liveness.** The current holder keeps an exclusive ``flock`` on its own
``leader-<random>.lock``. The operating system drops it when the process dies, even by
``kill -9``, so a free lock means a dead holder and a standby takes over at once. Each holder has
its own file, named in the record: a hung old holder that still holds *its* lock never makes
the *current* holder look alive, and the old holder's lock going free (it died at last) never
makes the current holder look dead.

**Hung holders.** A holder that is alive but does not renew within its ttl (SIGSTOP, a debugger)
loses the lease to the next standby that asks, with the epoch raised by one; expiry is measured
on the host's wall clock, the clock every process on the host shares.

**Fencing.** Claims and group commits run inside :meth:`LeaseFile.fence`: a shared lock on
``lease.lock`` held across the check of the epoch *and* the write. A takeover needs the
exclusive lock, so it happens either before the check (the write is refused) or after the write
(the new holder's recovery reads it). Shared, so the leader's claims never wait for its own group
commit. The lease lock is always taken last (innermost), and its exclusive holders wait for
nothing while they hold it, so no two locks ever wait for each other.

**Versions before the lease** led while they held ``scheduler.lock``: a leader holds it too, and
neither takes nor keeps the lead while such a version holds it (see
:mod:`herdsched.store.pre_lease_lock`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
import weakref
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import portalocker

from herdsched.errors import LeadershipLostError, StateError, StateLockTimeoutError
from herdsched.store.base import Lease
from herdsched.store.files import atomic_write
from herdsched.store.lease_rules import check_fence, grant, renewed
from herdsched.store.pre_lease_lock import PreLeaseLock
from herdsched.timestamps import format_timestamp, parse_timestamp

__all__ = ["LEASE_FILE_NAME", "LEASE_LOCK_NAME", "LeaseFile", "read_leader_info"]

LEASE_FILE_NAME = "lease.json"
LEASE_LOCK_NAME = "lease.lock"
_LIVENESS_PREFIX = "leader-"
#: Longest wait for the exclusive lease lock: a holder stopped inside its fenced write keeps
#: the shared lock, and a standby must not block its timer for long on it (it retries).
_EXCLUSIVE_WAIT = 2.0
_CHECK_INTERVAL = 0.005

log = logging.getLogger("herdsched")
_live: weakref.WeakSet[LivenessLock] = weakref.WeakSet()
_lease_files: weakref.WeakSet[LeaseFile] = weakref.WeakSet()


def _forget_in_child() -> None:  # pragma: no cover - runs in forked children
    # A child of a leader is not the leader: it keeps no liveness lock and, since its store
    # stays fenced without a lease, writes no claim or run transition of its parent's epoch.
    for lock in list(_live):
        lock.forget_after_fork()
    for lease_file in list(_lease_files):
        lease_file.forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class LivenessLock:
    """The exclusive flock a lease holder keeps on its own file while its process lives."""

    def __init__(self, path: Path) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            portalocker.lock(fd, portalocker.LOCK_EX | portalocker.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        _live.add(self)

    def release(self) -> None:
        """Unlock and remove the file (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(fd)  # closing the last descriptor drops the flock

    def forget_after_fork(self) -> None:
        """In a forked child: drop the inherited descriptor without unlocking the parent's."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def holder_alive(path: Path) -> bool:
    """Whether a process holds the liveness lock ``path`` (a missing file: nobody does)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        portalocker.lock(fd, portalocker.LOCK_EX | portalocker.LOCK_NB)
    except (portalocker.exceptions.LockException, OSError):
        return True
    else:
        return False  # closing the descriptor below lets the lock go
    finally:
        os.close(fd)


def _encode(lease: Lease | None, epoch: int, lock_name: str | None) -> bytes:
    record: dict[str, Any] = {"format_version": 1, "epoch": epoch, "holder": None}
    if lease is not None:
        record.update(
            holder=lease.holder,
            pid=lease.pid,
            host=lease.host,
            lock=lock_name,
            acquired_at=format_timestamp(lease.acquired_at),
            renewed_at=format_timestamp(lease.renewed_at),
            expires_at=format_timestamp(lease.expires_at),
        )
    return (json.dumps(record, indent=1) + "\n").encode("utf-8")


def _decode(data: bytes, path: Path) -> tuple[Lease | None, int, str | None]:
    """(lease or None when released, highest epoch, liveness lock name) of a record."""
    try:
        raw = json.loads(data.decode("utf-8"))
        epoch = int(raw["epoch"])
        if raw.get("holder") is None:
            return None, epoch, None
        lease = Lease(
            holder=raw["holder"],
            epoch=epoch,
            acquired_at=parse_timestamp(raw["acquired_at"]),
            renewed_at=parse_timestamp(raw["renewed_at"]),
            expires_at=parse_timestamp(raw["expires_at"]),
            pid=raw.get("pid"),
            host=raw.get("host"),
        )
        return lease, epoch, str(raw["lock"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        # holders are unique, so a fresh epoch count cannot let a stale holder pass a fence
        log.error("The lease record %s is damaged (%s); the lease is treated as free.", path, exc)
        return None, 0, None


class LeaseFile:
    """The lease of one state directory, as one store (one scheduler) sees and holds it."""

    def __init__(
        self,
        state_dir: Path,
        *,
        now: Callable[[], datetime],
        lock_timeout: float,
        ensure_dir: Callable[[], None],
    ) -> None:
        self.path = state_dir / LEASE_FILE_NAME
        self.lock_path = state_dir / LEASE_LOCK_NAME
        self._now = now
        self._lock_timeout = lock_timeout
        self._ensure_dir = ensure_dir
        self._mutex = threading.Lock()  # guards the fields below (never held across I/O waits)
        self._held: Lease | None = None
        self._liveness: LivenessLock | None = None
        self._liveness_name: str | None = None
        self._pre_lease = PreLeaseLock(state_dir)  # held while leading
        #: set once this store handed out a lease: its run writes are fenced from then on
        self.fenced = False
        _lease_files.add(self)

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's lease is not the child's."""
        self._mutex = threading.Lock()
        self._held = None
        self._liveness = None
        self._liveness_name = None

    @property
    def held(self) -> Lease | None:
        """The lease this store handed out and believes it still holds."""
        with self._mutex:
            return self._held

    # -- locking and reading ---------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self, *, shared: bool, timeout: float) -> Iterator[None]:
        self._ensure_dir()
        flags = portalocker.LockFlags.SHARED if shared else portalocker.LockFlags.EXCLUSIVE
        lock: portalocker.Lock[IO[Any]] = portalocker.Lock(
            str(self.lock_path),
            mode="a",
            timeout=timeout,
            check_interval=_CHECK_INTERVAL,
            fail_when_locked=False,
            flags=flags | portalocker.LockFlags.NON_BLOCKING,
        )
        try:
            lock.acquire()
        except portalocker.AlreadyLocked:
            raise StateLockTimeoutError(
                f"Could not lock the lease {self.path} within {timeout:g} s: another process "
                f"holds {self.lock_path}",
                self.lock_path,
                timeout,
            ) from None
        except (portalocker.LockException, OSError) as exc:
            raise StateError(
                f"Cannot lock the lease {self.path}: {exc}", self.lock_path, cause=exc
            ) from exc
        try:
            yield
        finally:
            lock.release()

    def _read(self) -> tuple[Lease | None, int, str | None]:
        """The record (caller holds the lease lock)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None, 0, None
        except OSError as exc:
            raise StateError(f"Cannot read the lease {self.path}: {exc}", self.path) from exc
        return _decode(data, self.path)

    def _write(self, lease: Lease | None, epoch: int, lock_name: str | None) -> None:
        try:
            atomic_write(self.path, _encode(lease, epoch, lock_name))
        except OSError as exc:
            raise StateError(f"Cannot write the lease {self.path}: {exc}", self.path) from exc

    # -- the lease ---------------------------------------------------------------------------
    def acquire(self, holder: str, ttl: float) -> Lease | None:
        """Give the lease to ``holder`` when it is free, released, held by a dead process or
        not renewed within its ttl; ``None`` while a live holder keeps it renewed."""
        with self._locked(shared=False, timeout=min(self._lock_timeout, _EXCLUSIVE_WAIT)):
            stored, last_epoch, lock_name = self._read()
            dead = (
                stored is not None
                and stored.holder != holder
                and (lock_name is None or not holder_alive(self.path.parent / lock_name))
            )
            lease = grant(stored, holder, ttl, self._now(), holder_dead=dead, last_epoch=last_epoch)
            if lease is None:
                return None
            new_holder = stored is None or stored.holder != holder
            if new_holder and self._pre_lease.older_version_leads(lease):
                return None
            if new_holder:
                self._take_liveness()
            try:
                self._write(lease, lease.epoch, self._liveness_name)
            except BaseException:
                if self.held is None:
                    self._pre_lease.release()  # no lease, no leader lock for older versions
                raise
            with self._mutex:
                self._held = lease
                self.fenced = True
            self._sweep(keep=self._liveness_name)
        log.debug(  # the scheduler says so at INFO, with its renewal cadence
            "This process holds the scheduler lease of %s (epoch %d, expires %s).",
            self.path.parent,
            lease.epoch,
            format_timestamp(lease.expires_at),
        )
        return lease

    def _take_liveness(self) -> None:
        """A new liveness lock for a new holder (caller holds the exclusive lease lock)."""
        old = self._liveness
        name = f"{_LIVENESS_PREFIX}{secrets.token_hex(8)}.lock"
        self._liveness = LivenessLock(self.path.parent / name)
        self._liveness_name = name
        if old is not None:
            old.release()

    def _sweep(self, keep: str | None) -> None:
        """Remove liveness files of dead holders (caller holds the exclusive lease lock)."""
        for path in self.path.parent.glob(f"{_LIVENESS_PREFIX}*.lock"):
            if path.name == keep or holder_alive(path):
                continue
            with contextlib.suppress(OSError):
                path.unlink()

    def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend ``lease``; :class:`LeadershipLostError` when another holder has it now."""
        with self._locked(shared=False, timeout=min(self._lock_timeout, _EXCLUSIVE_WAIT)):
            stored, _, _ = self._read()
            with self._mutex:
                held = self._held
            try:
                check_fence(lease if held is not None else None, stored, self.path)
            except LeadershipLostError:
                self.lost()
                raise
            fresh = renewed(lease, ttl, self._now())
            # taken over from a hung holder that held scheduler.lock, this one takes it once
            # it is free; a version before the lease that took it first leads: step down
            if self._pre_lease.older_version_leads(fresh):
                self._write(None, fresh.epoch, None)
                self.lost()
                raise LeadershipLostError(
                    f"a herdsched before the lease took {self._pre_lease.path}: this scheduler "
                    "gave its lease up and does not lead until that one stops",
                    held_epoch=lease.epoch,
                    path=self.path,
                )
            self._write(fresh, fresh.epoch, self._liveness_name)
            with self._mutex:
                self._held = fresh
        return fresh

    def release(self, lease: Lease) -> None:
        """Give ``lease`` up (when it is still the stored one), then drop the liveness lock."""
        liveness = None
        with self._mutex:
            if self._held is not None and self._held.holder == lease.holder:
                liveness, self._liveness, self._liveness_name = self._liveness, None, None
                self._held = None  # not a newer lease this store took meanwhile
        try:
            with self._locked(shared=False, timeout=min(self._lock_timeout, _EXCLUSIVE_WAIT)):
                stored, last_epoch, _ = self._read()
                if liveness is not None:
                    # scheduler.lock goes first: a standby that finds the lease free takes it
                    # too, before a version before the lease can
                    self._pre_lease.release()
                if stored is not None and stored.holder == lease.holder:
                    self._write(None, last_epoch, None)
                    log.info(
                        "The scheduler lease of %s (epoch %d) was released.",
                        self.path.parent,
                        lease.epoch,
                    )
        finally:
            if liveness is not None:
                liveness.release()  # a standby sees a free lock even if the write failed
                self._pre_lease.release()

    def lost(self) -> None:
        """Forget the lease after another holder took it (fences stay on: writes refused)."""
        with self._mutex:
            liveness, self._liveness, self._liveness_name = self._liveness, None, None
            self._held = None
        if liveness is not None:
            liveness.release()
        self._pre_lease.release()

    def current(self) -> Lease | None:
        """The stored lease unless released or its holder is dead (for status displays).

        Read without the lease lock (a status display must never wait): the record is
        replaced atomically, so it is always whole."""
        return _live_lease(self.path)

    @contextlib.contextmanager
    def fence(self) -> Iterator[None]:
        """Hold the lease lock shared while the caller writes, once the epoch checked out.

        A store that never held a lease is not fenced (the CLI, web workers). Raises
        :class:`LeadershipLostError` (and forgets the lease) when another holder has it.
        """
        if not self.fenced:
            yield
            return
        with self._locked(shared=True, timeout=self._lock_timeout):
            stored, _, _ = self._read()
            with self._mutex:
                held = self._held
            try:
                check_fence(held, stored, self.path)
            except LeadershipLostError:
                self.lost()
                raise
            yield


def read_leader_info(state_dir: Path | str) -> dict[str, Any] | None:
    """Who leads ``state_dir``: the lease holder's pid, host, epoch and since when (``None``
    when nobody does: never taken, released, or its holder is dead).

    ``expired`` says whether the holder failed to renew in time (it is hung: the next standby
    that tries takes over).
    """
    lease = _live_lease(Path(state_dir) / LEASE_FILE_NAME)
    return lease.describe(datetime.now(timezone.utc)) if lease is not None else None


def _live_lease(path: Path) -> Lease | None:
    """The lease recorded in ``path`` unless released or its holder's process is gone."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    lease, _, lock_name = _decode(data, path)
    if lease is None or lock_name is None or not holder_alive(path.parent / lock_name):
        return None
    return lease
