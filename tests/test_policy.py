"""Table-driven tests of the pure run rules (backoff, auto-disable, catch-up, overlap, skips)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from herdsched.models import CatchUp, Overlap, SkipReason, Status
from herdsched.policy import (
    DEFAULT_BACKOFF,
    backoff_delay,
    catch_up_plan,
    coerce_backoff,
    next_after_failure,
    pre_dispatch_skip_reason,
    should_auto_disable,
    slot_after_overlap,
)

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
S = timedelta(seconds=1)
M = timedelta(minutes=1)


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(0, timedelta(0)), (1, 30 * S), (2, M), (3, 5 * M), (4, 15 * M), (5, 60 * M), (9, 60 * M)],
)
def test_backoff_ladder_rungs_and_last_repeats(failures: int, delay: timedelta) -> None:
    assert backoff_delay(failures) == delay


@pytest.mark.parametrize(
    ("normal", "failures", "expected"),
    [
        (T0 + 5 * M, 1, T0 + 5 * M),  # normal next already later than the 30 s rung
        (T0 + 10 * S, 1, T0 + 30 * S),  # the rung pushes it back
        (T0 + 10 * S, 3, T0 + 5 * M),
        (None, 2, T0 + M),  # no normal next (once): the rung alone
    ],
)
def test_next_after_failure_is_max_of_normal_and_rung(
    normal: datetime | None, failures: int, expected: datetime
) -> None:
    assert next_after_failure(normal, T0, failures) == expected


@pytest.mark.parametrize(
    ("failures", "limit", "disable"),
    [(4, 5, False), (5, 5, True), (6, 5, True), (100, None, False), (1, 1, True)],
)
def test_auto_disable_threshold(failures: int, limit: int | None, disable: bool) -> None:
    assert should_auto_disable(failures, limit) is disable


def test_coerce_backoff_accepts_strings_and_seconds_and_rejects_junk() -> None:
    assert coerce_backoff(None) == DEFAULT_BACKOFF
    assert coerce_backoff(["10s", 60, timedelta(hours=1)]) == (10 * S, M, 60 * M)
    with pytest.raises(ValueError, match="non-empty sequence"):
        coerce_backoff([])
    with pytest.raises(ValueError, match="non-empty sequence"):
        coerce_backoff("30s")


@pytest.mark.parametrize(
    ("due", "policy", "window", "expected_due", "missed"),
    [
        (T0 + M, CatchUp.ONCE, None, T0 + M, None),  # not missed at all
        (T0 - 3 * M, CatchUp.ONCE, None, T0, None),  # missed: fire once now
        (T0 - 3 * M, CatchUp.SKIP, None, T0 + 2 * M, T0 - 3 * M),  # wait for next slot
        (T0 - 3 * M, CatchUp.ONCE, 10 * M, T0, None),  # inside the window: fire
        (T0 - 30 * M, CatchUp.ONCE, 10 * M, T0 + 2 * M, T0 - 30 * M),  # too old: dropped
    ],
)
def test_catch_up_plan(
    due: datetime,
    policy: CatchUp,
    window: timedelta | None,
    expected_due: datetime,
    missed: datetime | None,
) -> None:
    plan = catch_up_plan(due, T0, policy, window, next_slot_after_now=T0 + 2 * M)
    assert plan.due == expected_due
    assert plan.missed == missed


@pytest.mark.parametrize(
    ("planned", "overlap", "expected"),
    [
        (T0 + M, Overlap.SKIP, (T0 + M, False)),
        (T0 - M, Overlap.SKIP, (None, True)),
        (T0 - M, Overlap.BUFFER_ONE, (T0, False)),
        (None, Overlap.SKIP, (None, False)),
    ],
)
def test_slot_after_overlap(
    planned: datetime | None, overlap: Overlap, expected: tuple[datetime | None, bool]
) -> None:
    assert slot_after_overlap(planned, T0, overlap) == expected


BASE = {
    "enabled": True,
    "status": Status.IDLE,
    "fires_on_timer": True,
    "running": False,
    "agent_running": 0,
    "max_concurrent": 1,
    "total_running": 0,
    "max_total_concurrent": None,
    "due": True,
}


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({}, None),
        ({"enabled": False}, SkipReason.DISABLED),
        ({"status": Status.PAUSED}, SkipReason.DISABLED),
        ({"status": Status.COMPLETED}, SkipReason.DISABLED),
        ({"status": Status.DISABLED, "fires_on_timer": False}, SkipReason.DISABLED),
        ({"fires_on_timer": False, "running": True}, SkipReason.UNSUPPORTED_TYPE),
        ({"running": True, "agent_running": 1}, SkipReason.ALREADY_RUNNING),
        ({"agent_running": 1, "due": False}, SkipReason.AT_CAPACITY),
        ({"total_running": 3, "max_total_concurrent": 3}, SkipReason.AT_CAPACITY),
        ({"due": False}, SkipReason.NOT_DUE),
        ({"status": Status.RUNNING}, None),
    ],
)
def test_skip_reasons_in_documented_order(changes: dict[str, object], reason: SkipReason) -> None:
    assert pre_dispatch_skip_reason(**{**BASE, **changes}) is reason  # type: ignore[arg-type]
