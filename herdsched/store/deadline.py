"""A time limit on the store calls of one request, so that a web request always gets an answer.

A request served by the REST API or the status page may make several store calls (read the
changes of other processes, the lease, the history). Each call of the PostgreSQL store is
bounded on its own (``connect_timeout`` to connect, a lease's length to answer), so on a host cut
off from its database the calls of one request added up to 45 s: past gunicorn's default 30 s
worker timeout, which kills the worker, and long after the client gave up. Inside
:func:`answer_within` every store call shares one deadline: a call still unanswered at the
deadline is cut, and the calls after it fail at once, so the request answers 503 in time. The
engine's locks a request takes first (:func:`held`) are waited for no longer either: the
scheduler's own threads may hold them through a store call of their own (a standby trying to
take the lease), which has only its own bound.

The deadline lives in a context variable and names the thread that set it: it holds for the
request's thread and nothing else, also where new threads inherit the context (free-threaded
Python), so the scheduler's own threads (timer, flusher, the job threads a request may start)
keep their own bounds.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator

from herdsched.errors import StateError

__all__ = ["Deadline", "answer_within", "current_deadline", "held"]


class Deadline:
    """When the calls of the block must have answered, on the monotonic clock."""

    __slots__ = ("at", "seconds", "thread")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.thread = threading.get_ident()

    def left(self) -> float:
        """Seconds still left (negative once passed)."""
        return self.at - time.monotonic()


_deadline: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "herdsched_store_deadline", default=None
)


def current_deadline() -> Deadline | None:
    """The deadline the store calls of this thread must keep, or ``None``."""
    deadline = _deadline.get()
    return deadline if deadline is not None and deadline.thread == threading.get_ident() else None


@contextlib.contextmanager
def answer_within(seconds: float | None) -> Iterator[None]:
    """Store calls made inside the block give up ``seconds`` after it began (``None``: no
    limit); an outer, earlier deadline still holds."""
    outer = current_deadline()
    if seconds is None or (outer is not None and outer.left() <= seconds):
        yield
        return
    token = _deadline.set(Deadline(seconds))
    try:
        yield
    finally:
        _deadline.reset(token)


@contextlib.contextmanager
def held(lock: threading.RLock, doing: str) -> Iterator[None]:
    """Hold ``lock`` for the block; inside :func:`answer_within` wait for it no longer than
    the deadline, then raise a :class:`StateError` saying what could not be done (``doing``).

    Only for a lock a request takes before it changes anything, so that giving up leaves
    nothing half done."""
    deadline = current_deadline()
    if deadline is None:
        lock.acquire()
    elif not lock.acquire(timeout=max(0.0, deadline.left())):
        raise StateError(
            f"Could not {doing} within the request's {deadline.seconds:g} s: this process is "
            "still waiting for its state store (a network cut, or a stopped server?); try "
            "again later"
        )
    try:
        yield
    finally:
        lock.release()
