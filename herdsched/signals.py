"""Signals a job raises to tell the scheduler something that is not an error.

:class:`Deferred` ("not now, try again in ``delay``") and :class:`SessionNotFound` ("the stored
session is gone") are exceptions only because raising is how a job stops early; neither counts
as a failure.
"""

from __future__ import annotations

from datetime import timedelta

from herdsched.cadence import coerce_interval, describe_duration
from herdsched.errors import IntervalParseError
from herdsched.models import storable_text

__all__ = ["MAX_DEFER", "Deferred", "SessionNotFound"]


#: The longest a job may defer its run (:class:`Deferred`): a century.
MAX_DEFER = timedelta(days=36_525)


class Deferred(Exception):
    """Raised by a job to say "not now, try again in ``delay``" (for example: session busy).

    The run is recorded as ``deferred``; it does not count as a failure.
    """

    def __init__(self, delay: timedelta | float | str, reason: str | None = "") -> None:
        self.delay = coerce_interval(delay, what="Deferred delay", field="delay")
        if self.delay > MAX_DEFER:  # a due time past the calendar could never be planned
            raise IntervalParseError(
                f"Deferred delay {delay!r} is too long (at most {MAX_DEFER.days} days)",
                input=delay,
                field="delay",
            )
        reason = "" if reason is None else reason
        if not isinstance(reason, str):  # it becomes the state's last_error: text alone
            raise TypeError(
                f"Deferred reason must be a string, got {type(reason).__name__} {reason!r}"
            )
        self.reason = storable_text(reason)
        super().__init__(self.reason or f"deferred for {describe_duration(self.delay)}")


class SessionNotFound(Exception):
    """Raised by a job when the stored session id is unknown to its backend.

    The scheduler clears the stored id and calls the job once more in the same run without it.
    """
