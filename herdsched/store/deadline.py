"""A time limit on the store calls of one request, so that a web request always gets an answer.

A request served by the REST API or the status page may make several store calls (read the
changes of other processes, the lease, the history). Each call of the PostgreSQL store is
bounded on its own (``connect_timeout`` to connect, a lease's length to answer), so on a host cut
off from its database the calls of one request added up to 45 s: past gunicorn's default 30 s
worker timeout, which kills the worker, and long after the client gave up. Inside
:func:`answer_within` every store call shares one deadline: a call still unanswered at the
deadline is cut, and the calls after it fail at once, so the request answers 503 in time.

The deadline lives in a context variable: it follows the request's thread and nothing else, so
the scheduler's own threads (timer, flusher) keep their own bounds.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

__all__ = ["Deadline", "answer_within", "current_deadline"]


class Deadline:
    """When the calls of the block must have answered, on the monotonic clock."""

    __slots__ = ("at", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds still left (negative once passed)."""
        return self.at - time.monotonic()


_deadline: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "herdsched_store_deadline", default=None
)


def current_deadline() -> Deadline | None:
    """The deadline the store calls of this thread must keep, or ``None``."""
    return _deadline.get()


@contextlib.contextmanager
def answer_within(seconds: float | None) -> Iterator[None]:
    """Store calls made inside the block give up ``seconds`` after it began (``None``: no
    limit); an outer, earlier deadline still holds."""
    outer = _deadline.get()
    if seconds is None or (outer is not None and outer.left() <= seconds):
        yield
        return
    token = _deadline.set(Deadline(seconds))
    try:
        yield
    finally:
        _deadline.reset(token)
