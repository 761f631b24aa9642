"""Shared helpers for scheduler tests: a FakeClock-driven scheduler and recording jobs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from herdsched import ThreadedScheduler, TriggerInfo
from herdsched.testing import FakeClock

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)  # a Monday


class Recorder:
    """A job that records every call; ``action`` decides what each call does."""

    def __init__(self, action: Callable[[TriggerInfo], Any] | None = None) -> None:
        self.calls: list[TriggerInfo] = []
        self.action = action
        self._lock = threading.Lock()

    def __call__(self, info: TriggerInfo) -> Any:
        with self._lock:
            self.calls.append(info)
        return self.action(info) if self.action else "done"

    def slots(self) -> list[datetime | None]:
        return [c.scheduled_for for c in self.calls]

    def schedules(self) -> list[str]:
        return [c.schedule for c in self.calls]


def step(sched: ThreadedScheduler, clock: FakeClock | None = None, by: object = None) -> None:
    """Advance the clock (optionally), run one timer pass, wait for the jobs it started."""
    if clock is not None and by is not None:
        clock.advance(by)  # type: ignore[arg-type]
    sched.run_pending()
    assert sched.wait_until_idle(10)
    sched.run_pending()  # settle: fire what completions made due at this same instant
    assert sched.wait_until_idle(10)


@contextmanager
def running(**kwargs: Any) -> Iterator[tuple[ThreadedScheduler, FakeClock]]:
    """A started in-memory scheduler on a FakeClock at T0, stopped afterwards."""
    clock = kwargs.pop("clock", None) or FakeClock(T0)
    kwargs.setdefault("state_dir", None)
    kwargs.setdefault("timezone", "UTC")
    sched = ThreadedScheduler(clock=clock, **kwargs)
    try:
        yield sched, clock
    finally:
        sched.stop(timeout=5)


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, step: float = 0.005) -> bool:
    """Poll ``predicate`` (real seconds) until it is true or ``timeout`` passes; its last answer.

    For what real threads and processes do on their own time; fake time needs no polling.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return bool(predicate())
        threading.Event().wait(step)
    return True
