"""Run statistics over a schedule's (or an agent's) run history."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta

import attrs

from herdsched.models import RunRecord, RunStatus
from herdsched.timestamps import to_utc

__all__ = ["RunStats", "compute_run_stats"]

_FINISHED = (RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.TIMEOUT)


@attrs.frozen(kw_only=True)
class RunStats:
    """Counts by status, success rate over finished runs, durations, last success/failure.

    *Finished* runs are those that succeeded, failed or timed out: ``success_rate`` is
    successes over finished runs, and the durations are theirs (``p95_duration`` by the
    nearest-rank method). Deferred, skipped, missed and interrupted runs are only counted.
    Every field is ``None`` (``counts`` empty) when there is nothing to summarise.
    """

    total: int
    counts: dict[str, int]
    success_rate: float | None
    mean_duration: timedelta | None
    p95_duration: timedelta | None
    last_success_at: datetime | None
    last_failure_at: datetime | None


def compute_run_stats(records: Iterable[RunRecord], since: datetime | None = None) -> RunStats:
    """Summarise ``records`` (those started, or scheduled if they never started, at or after
    ``since`` when it is given). The scheduler passes the bounded run history, so at most
    ``max_run_history`` runs per schedule are counted."""
    if since is not None:
        if not isinstance(since, datetime):
            raise TypeError(
                f"since must be a datetime or None, got {type(since).__name__} {since!r}"
            )
        since = to_utc(since)
    chosen = [
        r
        for r in records
        if since is None or (r.started_at or r.scheduled_for or r.finished_at or since) >= since
    ]
    counts = Counter(str(r.status) for r in chosen)
    finished = [r for r in chosen if r.status in _FINISHED]
    successes = [r for r in finished if r.status is RunStatus.SUCCESS]
    failures = [r for r in finished if r.status is not RunStatus.SUCCESS]
    durations = sorted(d for r in finished if (d := r.duration) is not None)
    mean = sum(durations, timedelta(0)) / len(durations) if durations else None
    p95 = durations[max(0, math.ceil(0.95 * len(durations)) - 1)] if durations else None
    return RunStats(
        total=len(chosen),
        counts=dict(counts),
        success_rate=len(successes) / len(finished) if finished else None,
        mean_duration=mean,
        p95_duration=p95,
        last_success_at=max((r.finished_at for r in successes if r.finished_at), default=None),
        last_failure_at=max((r.finished_at for r in failures if r.finished_at), default=None),
    )
