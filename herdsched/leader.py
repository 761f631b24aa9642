"""One active scheduler per state directory, across threads, processes and ``fork()``.

The active scheduler holds a non-blocking exclusive portalocker lock on
``<state_dir>/scheduler.lock`` and writes who it is (pid, host, start time) into the file, so
others can say who holds it. The operating system releases the lock when the holder dies, even by
``kill -9``, so a standby scheduler takes over on its next attempt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import weakref
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import portalocker

from herdsched.timestamps import format_timestamp

__all__ = ["LEADER_LOCK_NAME", "LeaderLock", "read_leader_info"]

LEADER_LOCK_NAME = "scheduler.lock"
_log = logging.getLogger("herdsched")
_live_locks: weakref.WeakSet[LeaderLock] = weakref.WeakSet()


def _forget_in_child() -> None:
    for lock in list(_live_locks):
        lock._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class LeaderLock:
    """The leader lock of one state directory; :meth:`try_acquire` never blocks."""

    def __init__(self, state_dir: Path | str) -> None:
        self.path = Path(state_dir) / LEADER_LOCK_NAME
        self._handle: IO[str] | None = None
        self._mutex = threading.Lock()
        _live_locks.add(self)

    @property
    def held(self) -> bool:
        return self._handle is not None

    def try_acquire(self) -> bool:
        """Take the lock if it is free; returns whether this object now holds it."""
        with self._mutex:
            if self._handle is not None:
                return True
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held while leading
            try:
                portalocker.lock(handle, portalocker.LOCK_EX | portalocker.LOCK_NB)
            except (portalocker.exceptions.LockException, OSError):
                handle.close()
                return False
            info = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started_at": format_timestamp(datetime.now(timezone.utc)),
            }
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(info))
            handle.flush()
            self._handle = handle
            _log.info("leader lock %s acquired (pid %s)", self.path, info["pid"])
            return True

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        with self._mutex:
            handle, self._handle = self._handle, None
            if handle is None:
                return
            try:
                handle.seek(0)
                handle.truncate()
                handle.flush()
                portalocker.unlock(handle)
            finally:
                handle.close()
            _log.info("leader lock %s released", self.path)

    def _forget_after_fork(self) -> None:
        # The child shares the parent's open file description: unlocking here would release the
        # parent's lock, so the child only drops its copy of the descriptor.
        handle, self._handle = self._handle, None
        self._mutex = threading.Lock()
        if handle is not None:
            with contextlib.suppress(OSError):
                os.close(handle.fileno())

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock, as recorded in the lock file (None when nobody does)."""
        return read_leader_info(self.path.parent)


def read_leader_info(state_dir: Path | str) -> dict[str, Any] | None:
    """The pid, host and start time of the active scheduler of ``state_dir``, or None.

    The file keeps its content only while a scheduler holds the lock; a holder killed with
    ``kill -9`` leaves stale content, so the lock itself is probed too.
    """
    path = Path(state_dir) / LEADER_LOCK_NAME
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not text:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    if not isinstance(info, dict) or _lock_is_free(path):
        return None
    return info


def _lock_is_free(path: Path) -> bool:
    try:
        with open(path, "a+", encoding="utf-8") as handle:
            try:
                portalocker.lock(handle, portalocker.LOCK_EX | portalocker.LOCK_NB)
            except (portalocker.exceptions.LockException, OSError):
                return False
            portalocker.unlock(handle)
            return True
    except OSError:
        return False
