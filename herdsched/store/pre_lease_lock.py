"""``scheduler.lock``: the leader lock of herdsched versions before the lease, held by a leader.

Versions before the lease led while they held an exclusive ``flock`` on
``<state_dir>/scheduler.lock`` (with their pid, host and start written into it) and knew nothing
of ``lease.json``. While an older and a newer version share a state directory during an
upgrade, each would take the other for absent and both would lead. So a leader of this version
holds that lock too, with its lease holder written into it, and neither takes nor keeps the
lead while a version before the lease holds it:

- the lock is free: the leader takes it;
- it is held and its file names a lease holder: a process of this version holds it (a hung
  holder that was taken over from, or a forked child's copy); a takeover does not wait for it,
  and the new leader takes the lock once it is free;
- it is held and its file names no lease holder: a version before the lease leads. A free lease
  is not taken, and a leader renewing its lease steps down.

Once free, the file keeps the last holder's name: a version before the lease rewrites it when it
takes the lock. A file this process cannot open or lock (another user's, a read-only
directory) is logged once and not waited for: no older version can lead there unseen by the
same user's processes either way.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import weakref
from pathlib import Path

import portalocker

from herdsched.store.base import Lease
from herdsched.timestamps import format_timestamp

__all__ = ["PRE_LEASE_LOCK_NAME", "PreLeaseLock"]

PRE_LEASE_LOCK_NAME = "scheduler.lock"
log = logging.getLogger("herdsched")
_held: weakref.WeakSet[PreLeaseLock] = weakref.WeakSet()


def _forget_in_child() -> None:  # pragma: no cover - runs in forked children
    for lock in list(_held):
        lock.forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class PreLeaseLock:
    """``scheduler.lock`` of one state directory, as one lease holder takes and holds it."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / PRE_LEASE_LOCK_NAME
        self._fd: int | None = None
        self._told: str | None = None  # what was last logged, so each is logged once
        self._mutex = threading.Lock()  # a renewal and a lost lease may meet
        _held.add(self)

    def older_version_leads(self, lease: Lease) -> bool:
        """Whether a version before the lease holds the lock; otherwise this process holds it
        now (naming ``lease``'s holder), a process of this version holds it, or the file
        cannot be used."""
        with self._mutex:
            return self._older_version_leads(lease)

    def _older_version_leads(self, lease: Lease) -> bool:
        if self._fd is not None:
            return False
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            self._tell(f"cannot open it ({exc})")
            return False
        try:
            portalocker.lock(fd, portalocker.LOCK_EX | portalocker.LOCK_NB)
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(_named(lease)).encode())
        except portalocker.AlreadyLocked:
            os.close(fd)
            return self._older_version_named()
        except (portalocker.LockException, OSError) as exc:
            os.close(fd)
            self._tell(f"cannot lock it ({exc})")
            return False
        self._fd, self._told = fd, None
        return False

    def _older_version_named(self) -> bool:
        try:
            named = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            named = None
        if isinstance(named, dict) and "holder" in named:
            return False
        if self._told != "older":
            self._told = "older"
            log.warning(
                "Another process holds %s, the leader lock of herdsched versions before the "
                "lease: an older herdsched leads this state directory, so this scheduler does "
                "not lead until it stops.",
                self.path,
            )
        return True

    def _tell(self, problem: str) -> None:
        if self._told != problem:
            self._told = problem
            log.warning(
                "Cannot use %s, %s: a herdsched before the lease sharing this state directory "
                "would not see this leader.",
                self.path,
                problem,
            )

    def release(self) -> None:
        """Let the lock go (idempotent); the file keeps its holder's name."""
        with self._mutex:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor drops the flock

    def forget_after_fork(self) -> None:
        """In a forked child: drop the inherited descriptor without unlocking the parent's."""
        self._mutex = threading.Lock()
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _named(lease: Lease) -> dict[str, object]:
    """What the lock file says of its holder: what versions before the lease wrote (pid, host,
    start), and the lease holder, which tells this version's holders from theirs."""
    return {
        "pid": lease.pid,
        "host": lease.host,
        "started_at": format_timestamp(lease.acquired_at),
        "holder": lease.holder,
    }
