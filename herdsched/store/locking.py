"""The lock that serialises every read-modify-write of one file, across threads and processes.

Two layers: a :class:`threading.Lock` shared by every lock object on the same path inside this
process (threads wait on it efficiently, with a timeout), then an exclusive, non-blocking
portalocker lock on a sidecar ``<file>.lock`` retried until the timeout (other processes).
The sidecar is never the data file itself: the data file is swapped by :func:`os.replace`, so a
lock on its inode would protect nothing after the first write. The operating system drops the
portalocker lock when its holder dies, even by ``kill -9``, so a crashed writer never blocks
the others.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import portalocker

from herdsched.errors import StateError, StateLockTimeoutError

__all__ = ["FileLock"]

#: Seconds between two attempts at the portalocker lock while another process holds it.
CHECK_INTERVAL = 0.005

_registry: dict[str, Any] = {"guard": threading.Lock(), "locks": {}}


def _reset_after_fork() -> None:  # pragma: no cover - runs in forked children
    # A lock held by a thread of the parent would never be released in the child.
    _registry["guard"] = threading.Lock()
    _registry["locks"] = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _thread_lock_for(path: str) -> threading.Lock:
    locks: dict[str, threading.Lock] = _registry["locks"]
    with _registry["guard"]:
        lock = locks.get(path)
        if lock is None:
            lock = locks[path] = threading.Lock()
        return lock


class FileLock:
    """Exclusive lock on ``lock_path`` guarding ``data_path``; use it as a context manager.

    Not reentrant: a thread that already holds it and asks again waits for itself and gets
    :class:`~herdsched.errors.StateLockTimeoutError` after ``timeout`` seconds.
    """

    def __init__(self, lock_path: Path, data_path: Path, timeout: float) -> None:
        self.lock_path = Path(lock_path)
        self.data_path = Path(data_path)
        self.timeout = timeout
        self._key = os.path.abspath(self.lock_path)
        self._held: portalocker.Lock[IO[Any]] | None = None
        self._thread_lock: threading.Lock | None = None

    def acquire(self, deadline: float | None = None) -> None:
        """Take the lock or raise ``StateLockTimeoutError`` (timeout) / ``StateError`` (I/O).

        ``deadline`` (monotonic) ends the wait earlier than ``timeout`` from now: for a caller
        that already waited for something else within the same timeout.
        """
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        thread_lock = _thread_lock_for(self._key)
        if not thread_lock.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            raise self._timeout_error("another thread of this process holds it")
        try:
            remaining = max(0.0, deadline - time.monotonic())
            lock: portalocker.Lock[IO[Any]] = portalocker.Lock(
                str(self.lock_path),
                mode="a",
                timeout=remaining,
                check_interval=CHECK_INTERVAL,
                fail_when_locked=False,
                flags=portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING,
            )
            try:
                lock.acquire()
            except portalocker.AlreadyLocked:
                raise self._timeout_error("another process holds it") from None
            except (portalocker.LockException, OSError) as exc:
                raise StateError(
                    f"Cannot lock {self.data_path}: opening or locking {self.lock_path} "
                    f"failed ({exc}); is the state directory writable and on a local "
                    "filesystem?",
                    self.lock_path,
                    cause=exc,
                ) from exc
        except BaseException:
            thread_lock.release()
            raise
        self._held = lock
        self._thread_lock = thread_lock

    def release(self) -> None:
        lock, thread_lock = self._held, self._thread_lock
        self._held = self._thread_lock = None
        try:
            if lock is not None:
                lock.release()
        finally:
            if thread_lock is not None:
                thread_lock.release()

    def _timeout_error(self, holder: str) -> StateLockTimeoutError:
        return StateLockTimeoutError(
            f"Could not lock {self.data_path} within {self.timeout:g} s: {holder} "
            f"(lock file {self.lock_path})",
            self.lock_path,
            self.timeout,
        )

    @contextmanager
    def after(self, local: threading.RLock, what: str) -> Iterator[None]:
        """Hold ``local`` (a lock of this process guarding the same file), then this lock,
        both taken within one :attr:`timeout`.

        Without it a writer waiting for ``local`` while another thread waits for the file
        lock would wait twice the timeout its error names. ``what`` says who holds ``local``
        when it times out.
        """
        deadline = time.monotonic() + self.timeout
        if not local.acquire(timeout=max(self.timeout, 0.0)):
            raise self._timeout_error(what)
        try:
            self.acquire(deadline)
            try:
                yield
            finally:
                self.release()
        finally:
            local.release()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
