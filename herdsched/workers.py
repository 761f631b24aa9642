"""A lean bounded pool of daemon worker threads, one per agent.

Why not :class:`concurrent.futures.ThreadPoolExecutor`: the scheduler never needs a
:class:`~concurrent.futures.Future` (a run reports through its own state), and building one plus
its work item and condition for every run cost more than the rest of dispatching. Here a submit
is one put on a :class:`queue.SimpleQueue`, and a thread is started only while every existing
one is busy, up to ``size``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["WorkerPool"]

_log = logging.getLogger("herdsched")

_Task = tuple[Callable[[Any], None], Any]


class WorkerPool:
    """At most ``size`` daemon threads named ``{name}_{n}`` running submitted calls in order."""

    def __init__(self, size: int, name: str) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"a worker pool needs a positive integer size, got {size!r}")
        self.size = size
        self.name = name
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._outstanding = 0  # submitted and not yet finished
        self._closed = False

    @property
    def thread_count(self) -> int:
        """Threads started so far (they live until :meth:`shutdown`)."""
        return len(self._threads)

    @property
    def busy(self) -> int:
        """Calls submitted and not finished yet."""
        return self._outstanding

    def submit(self, func: Callable[[Any], None], arg: Any) -> None:
        """Run ``func(arg)`` on a pool thread; exceptions are logged, never propagated."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"worker pool {self.name!r} is shut down")
            self._outstanding += 1
            if self._outstanding > len(self._threads) and len(self._threads) < self.size:
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}_{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            # under the lock: a concurrent shutdown() queues its stop signals after this call
            self._tasks.put((func, arg))

    def shutdown(self) -> None:
        """Let every thread finish its current call and what is queued, then exit; no waiting."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            count = len(self._threads)
        for _ in range(count):
            self._tasks.put(None)

    def _work(self) -> None:
        tasks = self._tasks
        while True:
            task = tasks.get()
            if task is None:
                return
            func, arg = task
            try:
                func(arg)
            except BaseException:  # a worker thread never dies of what it runs
                _log.exception("worker %s: %r raised", threading.current_thread().name, func)
            finally:
                with self._lock:
                    self._outstanding -= 1
