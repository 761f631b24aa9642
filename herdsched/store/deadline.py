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

The leader's lease renewal keeps a deadline too, a *strict* one: the time its lease has left.
A renewal still unanswered then is cut at once (its session may go: the leader steps down
anyway), so a leader cut off from its store stops leading when its lease runs out, not a
call's whole time limit later.
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
    """When the calls of the block must have answered, on the monotonic clock.

    ``budget`` names the time in messages ("the request's 20 s for the store"); ``strict``:
    a call may be cut at the deadline itself, its session lost, rather than left a moment for
    the server to end it and keep the session."""

    __slots__ = ("at", "budget", "strict", "thread")

    def __init__(self, seconds: float, *, budget: str | None = None, strict: bool = False) -> None:
        self.at = time.monotonic() + seconds
        self.thread = threading.get_ident()
        self.budget = budget or f"the request's {seconds:g} s for the store"
        self.strict = strict

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
def answer_within(
    seconds: float | None, *, budget: str | None = None, strict: bool = False
) -> Iterator[None]:
    """Store calls made inside the block give up ``seconds`` after it began (``None``: no
    limit); an outer, earlier deadline still holds. ``budget`` and ``strict``: see
    :class:`Deadline`."""
    outer = current_deadline()
    if seconds is None or (outer is not None and outer.left() <= seconds):
        yield
        return
    token = _deadline.set(Deadline(seconds, budget=budget, strict=strict))
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
            f"Could not {doing} within {deadline.budget}: this process is "
            "still waiting for its state store (a network cut, or a stopped server?); try "
            "again later"
        )
    try:
        yield
    finally:
        lock.release()
