"""Shared helpers for the agent-feature tests: a list-backed work source, a scripted job, a
FakeClock-driven scheduler that is always stopped afterwards."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

from herdsched import ThreadedScheduler, TriggerInfo, WorkItem, WorkOutcome
from herdsched.testing import FakeClock

START = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)  # a Monday


class ListSource:
    """A work source backed by a list: hands out items in order, records every report."""

    def __init__(self, items: list[WorkItem] | None = None) -> None:
        self.items = list(items or [])
        self.claims: list[tuple[str, str]] = []
        self.reports: list[tuple[WorkItem, WorkOutcome]] = []
        self._lock = threading.Lock()

    def get_next_work_item(self, agent: str, schedule: str) -> WorkItem | None:
        with self._lock:
            self.claims.append((agent, schedule))
            return self.items.pop(0) if self.items else None

    def report_outcome(self, item: WorkItem, outcome: WorkOutcome) -> None:
        with self._lock:
            self.reports.append((item, outcome))


class Script:
    """A job that records each call and does the next scripted step (a value, an exception,
    or a callable of the TriggerInfo); once the script is used up it returns ``default``."""

    def __init__(self, *steps: Any, default: Any = "done") -> None:
        self.steps = list(steps)
        self.default = default
        self.calls: list[TriggerInfo] = []
        self._lock = threading.Lock()

    def __call__(self, info: TriggerInfo) -> Any:
        with self._lock:
            self.calls.append(info)
            step = self.steps.pop(0) if self.steps else self.default
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            return step(info)
        return step

    @property
    def prompts(self) -> list[str]:
        return [call.prompt for call in self.calls]


def step(sched: ThreadedScheduler, clock: FakeClock | None = None, by: Any = None) -> None:
    """Advance the clock (optionally), run one timer pass and wait for the jobs it started."""
    if clock is not None and by is not None:
        clock.advance(by)
    sched.run_pending()
    assert sched.wait_until_idle(10)


@contextmanager
def running(**kwargs: Any) -> Iterator[tuple[ThreadedScheduler, FakeClock]]:
    """A started in-memory scheduler on a FakeClock at START, stopped afterwards."""
    clock = kwargs.pop("clock", None) or getattr(kwargs.get("store"), "clock", None)
    if not isinstance(clock, FakeClock):  # a given store's own fake clock, else one at START
        clock = FakeClock(START)
    kwargs.setdefault("state_dir", None)
    kwargs.setdefault("timezone", "UTC")
    sched = ThreadedScheduler(clock=clock, **kwargs)
    sched.start()
    try:
        yield sched, clock
    finally:
        sched.stop(timeout=5)


def advancing(clock: FakeClock, seconds: float, then: Any = "done") -> Callable[[Any], Any]:
    """A job step that lets ``seconds`` of fake time pass, then returns or raises ``then``."""

    def run(info: Any) -> Any:
        clock.advance(timedelta(seconds=seconds))
        if isinstance(then, BaseException):
            raise then
        return then

    return run
