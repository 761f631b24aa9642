"""Time as the scheduler sees it.

The scheduler never calls :func:`time.time` or :func:`datetime.now` directly: it asks a
:class:`Clock`, so tests (ours and our users') can drive time with
:class:`herdsched.testing.FakeClock` instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Protocol, runtime_checkable

from herdsched.timestamps import truncate_ms

__all__ = ["Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """What the scheduler needs from time."""

    def now(self) -> datetime:
        """The current wall-clock time as an aware UTC datetime."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (used to detect wall-clock jumps)."""

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Block until ``event`` is set or ``timeout`` seconds of this clock pass.

        Returns whether the event was set.
        """


class SystemClock:
    """The real clock: :func:`datetime.now` in UTC and :func:`time.monotonic`.

    ``now()`` has millisecond precision, the precision of the state file, so an instant kept in
    memory equals the one read back from disk.
    """

    def now(self) -> datetime:
        return truncate_ms(datetime.now(timezone.utc))

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(None if timeout is None else max(0.0, timeout))

    def __repr__(self) -> str:
        return "SystemClock()"
