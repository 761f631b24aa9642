"""Helpers for testing code that uses herdsched, without sleeping.

:class:`FakeClock` is a :class:`~herdsched.clock.Clock` whose time moves only when the test says
so. Give it to a scheduler and drive it step by step::

    clock = FakeClock(datetime(2026, 3, 8, 6, 0, tzinfo=timezone.utc))
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock)
    sched.add_agent(Agent("a", job=my_job, schedules={"s": Schedule.interval("5m")}))
    sched.start()                # recovery and the lead; its timer thread follows the clock too
    sched.run_pending()          # one timer pass on the calling thread: fires what is due
    sched.wait_until_idle()      # jobs still run on worker threads; wait for them
    clock.advance("5m")
    sched.run_pending()

A thread blocked in :meth:`FakeClock.wait` wakes as soon as the test advances time past its
deadline, so a started scheduler also follows a FakeClock.

Within one process the scheduler started last on a state directory takes over from an older one
(:mod:`herdsched.handover`, for notebooks). A test that imitates two processes with two
schedulers in one process, a leader and a standby, builds them inside
``with as_separate_processes():``.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

from herdsched.cadence import coerce_interval, describe_duration
from herdsched.handover import separate_processes as as_separate_processes
from herdsched.timestamps import to_utc

__all__ = ["FakeClock", "as_separate_processes"]

_POLL_SECONDS = 0.005


def _moved(now: datetime, step: timedelta, what: str) -> datetime:
    """``now + step``; a ``ValueError`` naming ``what`` past the calendar (a bare
    ``OverflowError`` said only "date value out of range")."""
    try:
        return now + step
    except OverflowError:
        raise ValueError(
            f"{what}: {now.isoformat()} moved by {'-' if step < timedelta(0) else ''}"
            f"{describe_duration(abs(step))} is outside the calendar (years 1 to 9999)"
        ) from None


class FakeClock:
    """A deterministic clock for tests: ``now()`` changes only through :meth:`advance`/:meth:`set`.

    ``start`` defaults to 2026-01-01T00:00:00Z. Naive datetimes are read as local time, like
    everywhere in herdsched.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = (
            to_utc(start) if start is not None else datetime(2026, 1, 1, tzinfo=timezone.utc)
        )
        self._monotonic = 1000.0
        self._cond = threading.Condition()
        self._waiters = 0

    def now(self) -> datetime:
        with self._cond:
            return self._now

    def monotonic(self) -> float:
        with self._cond:
            return self._monotonic

    def advance(self, delta: timedelta | float | str) -> datetime:
        """Move wall-clock and monotonic time forward together by ``delta``; returns the new now."""
        step = coerce_interval(delta, what="advance", allow_zero=True)
        with self._cond:
            self._now = _moved(self._now, step, "advance")
            self._monotonic += step.total_seconds()
            self._cond.notify_all()
            return self._now

    def set(self, when: datetime) -> datetime:
        """Move to ``when`` (forwards only) as if that much time had passed; returns the new
        now, as :meth:`advance` does."""
        target = to_utc(when)
        with self._cond:
            if target < self._now:
                raise ValueError(
                    f"FakeClock.set({target.isoformat()}) would go backwards from "
                    f"{self._now.isoformat()}; use jump_wall_clock() to simulate a clock step"
                )
            self._monotonic += (target - self._now).total_seconds()
            self._now = target
            self._cond.notify_all()
            return self._now

    def jump_wall_clock(self, delta: timedelta | float | str) -> datetime:
        """Step only the wall clock (as NTP or a user changing the time would); monotonic stays.
        Returns the new now, as :meth:`advance` does.

        ``delta`` takes what :meth:`advance` takes (``"5m"``, seconds, a timedelta) and may be
        negative (a clock set back): ``-300`` or ``-timedelta(minutes=5)``."""
        if isinstance(delta, timedelta):
            step = delta
        elif isinstance(delta, str) and delta.strip().startswith("-"):
            step = -coerce_interval(delta.strip()[1:], what="jump_wall_clock")
        elif isinstance(delta, (int, float)) and not isinstance(delta, bool) and delta < 0:
            step = -coerce_interval(-delta, what="jump_wall_clock")
        else:
            step = coerce_interval(delta, what="jump_wall_clock", allow_zero=True)
        with self._cond:
            self._now = _moved(self._now, step, "jump_wall_clock")
            self._cond.notify_all()
            return self._now

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        with self._cond:
            deadline = None if timeout is None else self._monotonic + max(0.0, timeout)
            self._waiters += 1
            self._cond.notify_all()
            try:
                while not event.is_set() and (deadline is None or self._monotonic < deadline):
                    self._cond.wait(_POLL_SECONDS)
            finally:
                self._waiters -= 1
            return event.is_set()

    @property
    def waiters(self) -> int:
        """How many threads are blocked in :meth:`wait` right now."""
        with self._cond:
            return self._waiters

    def wait_for_waiters(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block (real seconds) until ``count`` threads wait on this clock.

        Advance time only after the thread under test waits, or its deadline is computed from
        the already-advanced time.
        """
        with self._cond:
            return self._cond.wait_for(lambda: self._waiters >= count, timeout)

    def __repr__(self) -> str:
        return f"FakeClock({self._now.isoformat()})"
