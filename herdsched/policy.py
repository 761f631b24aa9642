"""Pure decisions about when a schedule runs next: backoff, auto-disable, catch-up, overlap.

Everything here is a function of state and time, with no I/O and no threads, so every rule can
be tested with a table of inputs and expected outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs

from herdsched.cadence import coerce_interval, format_interval
from herdsched.errors import IntervalParseError
from herdsched.models import CatchUp, Overlap, SkipReason, Status

__all__ = [
    "DEFAULT_BACKOFF",
    "CatchUpPlan",
    "backoff_delay",
    "catch_up_plan",
    "coerce_backoff",
    "next_after_failure",
    "pre_dispatch_skip_reason",
    "should_auto_disable",
    "slot_after_overlap",
]

#: The failure ladder: after failure k the next run waits at least ``DEFAULT_BACKOFF[k-1]``.
DEFAULT_BACKOFF: tuple[timedelta, ...] = (
    timedelta(seconds=30),
    timedelta(minutes=1),
    timedelta(minutes=5),
    timedelta(minutes=15),
    timedelta(minutes=60),
)
#: The longest wait a backoff step may ask for (a far longer one overflowed the retry time).
LONGEST_BACKOFF = timedelta(days=36_500)


def coerce_backoff(ladder: Sequence[timedelta | float | str] | None) -> tuple[timedelta, ...]:
    """Validate a backoff ladder (durations, seconds or strings); ``None`` → the default."""
    if ladder is None:
        return DEFAULT_BACKOFF
    if isinstance(ladder, (str, bytes)) or not isinstance(ladder, Sequence) or not ladder:
        raise ValueError(
            "backoff must be a non-empty sequence of durations such as ['30s', '5m'], "
            f"got {type(ladder).__name__} {ladder!r}"
        )
    steps = tuple(
        coerce_interval(step, what="backoff step", allow_zero=True, field="backoff")
        for step in ladder
    )
    for raw, step in zip(ladder, steps, strict=True):
        if step > LONGEST_BACKOFF:  # its retry time overflowed, and the failed run was lost
            raise IntervalParseError(
                f"backoff step {format_interval(step)} is too long: at most "
                f"{format_interval(LONGEST_BACKOFF)}",
                raw,
                field="backoff",
            )
    return steps


def backoff_delay(failures: int, ladder: Sequence[timedelta] = DEFAULT_BACKOFF) -> timedelta:
    """The minimum wait after the ``failures``-th consecutive failure (the last rung repeats)."""
    if failures < 1:
        return timedelta(0)
    return ladder[min(failures, len(ladder)) - 1]


def next_after_failure(
    normal_next: datetime | None,
    failed_at: datetime,
    failures: int,
    ladder: Sequence[timedelta] = DEFAULT_BACKOFF,
) -> datetime:
    """``max(normal_next, failed_at + ladder[k-1])``: failures never run sooner than the ladder."""
    backed_off = failed_at + backoff_delay(failures, ladder)
    if normal_next is None:
        return backed_off
    return max(normal_next, backed_off)


def should_auto_disable(failures: int, max_consecutive_failures: int | None) -> bool:
    """Whether ``failures`` in a row reach the auto-disable threshold (``None``: never)."""
    return max_consecutive_failures is not None and failures >= max_consecutive_failures


@attrs.frozen
class CatchUpPlan:
    """What to do with a schedule whose due time passed while nothing ran it.

    ``due`` is when it should now run; ``missed`` is the slot given up, if any, to be recorded.
    """

    due: datetime
    missed: datetime | None = None
    scheduled_for: datetime | None = None


def catch_up_plan(
    persisted_due: datetime,
    now: datetime,
    policy: CatchUp,
    window: timedelta | None,
    next_slot_after_now: datetime | None,
) -> CatchUpPlan:
    """Decide how a schedule that came due at ``persisted_due`` (before ``now``) resumes.

    ``once`` fires it a single time right away (never a backlog storm); ``skip`` waits for the
    next slot. A miss older than ``window`` is dropped as under ``skip``.
    """
    if persisted_due > now:
        return CatchUpPlan(due=persisted_due, scheduled_for=persisted_due)
    too_old = window is not None and now - persisted_due > window
    if policy is CatchUp.ONCE and not too_old:
        return CatchUpPlan(due=now, scheduled_for=persisted_due)
    following = next_slot_after_now if next_slot_after_now is not None else now
    return CatchUpPlan(due=following, missed=persisted_due, scheduled_for=following)


def slot_after_overlap(
    planned: datetime | None, now: datetime, overlap: Overlap
) -> tuple[datetime | None, bool]:
    """Where a cron/once schedule goes after a run that outlived its next slot.

    Returns ``(due, missed)``: with ``skip`` the passed slot is missed (the caller computes the
    next one after now); with ``buffer_one`` it runs right away.
    """
    if planned is None or planned > now:
        return planned, False
    if overlap is Overlap.BUFFER_ONE:
        return now, False
    return None, True


def pre_dispatch_skip_reason(
    *,
    enabled: bool,
    status: Status,
    fires_on_timer: bool,
    running: bool,
    agent_running: int,
    max_concurrent: int,
    total_running: int,
    max_total_concurrent: int | None,
    due: bool,
) -> SkipReason | None:
    """The first reason, in the documented order, why a schedule does not fire now."""
    if not enabled or status in (Status.DISABLED, Status.PAUSED, Status.COMPLETED):
        return SkipReason.DISABLED
    if not fires_on_timer:
        return SkipReason.UNSUPPORTED_TYPE
    if running:
        return SkipReason.ALREADY_RUNNING
    if agent_running >= max_concurrent or (
        max_total_concurrent is not None and total_running >= max_total_concurrent
    ):
        return SkipReason.AT_CAPACITY
    if not due:
        return SkipReason.NOT_DUE
    return None
