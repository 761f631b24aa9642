"""Typed, frozen events the scheduler emits to listeners (``add_listener``).

Listeners run on the thread that caused the event (timer or worker); a listener that raises is
logged and ignored, and must not block for long.
"""

from __future__ import annotations

from datetime import datetime

import attrs

from herdsched.models import RunRecord, SkipReason

__all__ = [
    "Event",
    "JobDeferred",
    "JobFailed",
    "JobMissed",
    "JobSkipped",
    "JobStarted",
    "JobSubmitted",
    "JobSucceeded",
    "ScheduleDisabled",
    "SchedulePaused",
    "ScheduleResumed",
    "SchedulerStarted",
    "SchedulerStopped",
    "StateErrorOccurred",
]


@attrs.frozen
class Event:
    """Base class: every event carries the time it happened."""

    at: datetime


@attrs.frozen
class SchedulerStarted(Event):
    status: str  # "running" or "standby"


@attrs.frozen
class SchedulerStopped(Event):
    timed_out: bool = False
    running_job_count: int = 0


@attrs.frozen
class _ScheduleEvent(Event):
    agent: str
    schedule: str


@attrs.frozen
class JobSubmitted(_ScheduleEvent):
    run_id: str
    scheduled_for: datetime | None


@attrs.frozen
class JobStarted(_ScheduleEvent):
    run_id: str


@attrs.frozen
class JobSucceeded(_ScheduleEvent):
    record: RunRecord


@attrs.frozen
class JobFailed(_ScheduleEvent):
    """A run failed or timed out (``record.status`` says which)."""

    record: RunRecord


@attrs.frozen
class JobDeferred(_ScheduleEvent):
    """A job raised :class:`~herdsched.Deferred`: not a failure; the next run is the deferral's
    delay away (``record.error`` holds its reason)."""

    record: RunRecord


@attrs.frozen
class JobSkipped(_ScheduleEvent):
    reason: SkipReason
    #: the run that found no work (its ``JobSubmitted`` and ``JobStarted`` carry it too)
    run_id: str | None = None


@attrs.frozen
class JobMissed(_ScheduleEvent):
    scheduled_for: datetime


@attrs.frozen
class ScheduleDisabled(_ScheduleEvent):
    reason: str


@attrs.frozen
class SchedulePaused(_ScheduleEvent):
    pass


@attrs.frozen
class ScheduleResumed(_ScheduleEvent):
    pass


@attrs.frozen
class StateErrorOccurred(Event):
    """The state store failed; the scheduler keeps its in-memory truth and retries."""

    error: str
    agent: str | None = None
    schedule: str | None = None
