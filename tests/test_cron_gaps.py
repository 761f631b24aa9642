"""min_interval against cron expressions whose fires are not evenly spaced.

The check used to measure the gap between the first two fires after a fixed Monday, so an
expression with one short gap a day or a week passed any limit. It now finds the closest two
fires; the differential test compares it with every fire cronsim (an independent cron engine)
lists for two years.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from herdsched import Agent, InvalidScheduleError, Schedule, ThreadedScheduler
from herdsched.cron import parse_cron_expression
from herdsched.cron_gaps import closest_fires


def _refused(expression: str, min_interval: str, timezone: str = "UTC") -> str:
    """The message a scheduler with ``min_interval`` refuses ``expression`` with."""
    sched = ThreadedScheduler(state_dir=None, min_interval=min_interval, timezone=timezone)
    with pytest.raises(InvalidScheduleError) as info:
        sched.add_agent(Agent("bot", job=print, schedules={"s": Schedule.cron(expression)}))
    assert info.value.field == "cron"
    return str(info.value)


def _accepted(expression: str, min_interval: str, timezone: str = "UTC") -> bool:
    sched = ThreadedScheduler(state_dir=None, min_interval=min_interval, timezone=timezone)
    sched.add_agent(Agent("bot", job=print, schedules={"s": Schedule.cron(expression)}))
    return len(sched.get_status().schedules) == 1


@pytest.mark.parametrize(
    ("expression", "min_interval", "message"),
    [
        # one short gap a day: the first two fires (01:00, 12:00) are 11 h apart
        ("0 1,12,13 * * *", "2h", "fires only 1h apart (12:00 and 13:00)"),
        ("0,1 0 * * *", "5m", "fires only 1m apart (00:00 and 00:01)"),
        ("0,30 9,10 * * *", "45m", "fires only 30m apart (09:00 and 09:30)"),
        # from the last fire of a day to the first of the next
        ("0 0,23 * * *", "2h", "fires only 1h apart (23:00 on 2026-01-05 and 00:00 on 2026-01-06)"),
        # on weekdays only: a day apart from Monday to Friday, three days over the weekend
        ("0 9 * * 1-5", "2d", "fires only 1d apart (09:00 on 2026-01-05 and 09:00 on 2026-01-06)"),
        # twice a year, but on successive days in a leap year
        (
            "0 0 28,29 2 *",
            "2d",
            "fires only 1d apart (00:00 on 2028-02-28 and 00:00 on 2028-02-29)",
        ),
        ("0 0 1 * *", "29d", "fires only 28d apart (00:00 on 2026-02-01 and 00:00 on 2026-03-01)"),
        ("*/15 * * * * *", "20s", "fires only 15s apart (00:00:00 and 00:00:15)"),
        ("10-20/5 * * * * *", "1m", "fires only 5s apart (00:00:10 and 00:00:15)"),
        ("0 10-20/5 * * * *", "6m", "fires only 5m apart (00:10:00 and 00:15:00)"),
    ],
)
def test_a_cron_is_refused_for_its_closest_two_fires(
    expression: str, min_interval: str, message: str
) -> None:
    text = _refused(expression, min_interval)
    assert f"bot/s: cron {expression!r} {message}, more often than min_interval" in text


@pytest.mark.parametrize(
    ("expression", "min_interval", "timezone"),
    [
        ("0 */2 * * *", "2h", "UTC"),
        ("0 9 * * 1", "7d", "UTC"),
        ("0 1,12,13 * * *", "1h", "UTC"),
        ("* * * * *", "1m", "UTC"),
        ("0 0 1 1 *", "365d", "UTC"),
        # measured on the wall clock: the day the clocks spring forward does not refuse it
        ("@daily", "1d", "America/New_York"),
        ("0 1,3 * * *", "2h", "America/New_York"),
    ],
)
def test_a_cron_that_keeps_the_limit_is_accepted(
    expression: str, min_interval: str, timezone: str
) -> None:
    assert _accepted(expression, min_interval, timezone)


def test_a_limit_of_a_minute_costs_nothing_for_a_five_field_cron() -> None:
    parsed = parse_cron_expression("* * * * *")
    assert closest_fires(parsed, timedelta(minutes=1)) is None
    assert closest_fires(parsed, timedelta(seconds=61)) is not None


# ------------------------------------------------------------------ against cronsim

_REFERENCE = datetime(2026, 1, 5)
_WINDOW = timedelta(days=792)  # to 2028-03-06: a leap day included
_LIMITS = [timedelta(minutes=m) for m in (2, 30, 90, 360)] + [
    timedelta(days=d) for d in (1, 2, 4, 8)
]


def _values(low: int, high: int, most: int) -> st.SearchStrategy[str]:
    return st.lists(st.integers(low, high), min_size=1, max_size=most, unique=True).map(
        lambda values: ",".join(str(v) for v in sorted(values))
    )


@st.composite
def _sparse_crons(draw: st.DrawFn) -> str:
    """5-field expressions with at most four fires a day, so that cronsim lists two years fast."""
    minute, hour = draw(_values(0, 59, 2)), draw(_values(0, 23, 2))
    dom = draw(st.one_of(st.just("*"), _values(1, 29, 3)))
    month = draw(st.one_of(st.just("*"), _values(1, 12, 3)))
    dow = draw(st.one_of(st.just("*"), _values(0, 6, 3)))
    return f"{minute} {hour} {dom} {month} {dow}"


def _oracle_closest(expression: str) -> timedelta:
    fires = itertools.takewhile(
        lambda fire: fire < _REFERENCE + _WINDOW, CronSim(expression, _REFERENCE)
    )
    return min(later - earlier for earlier, later in itertools.pairwise(fires))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(expression=_sparse_crons(), limit=st.sampled_from(_LIMITS))
def test_the_closest_fires_match_every_fire_cronsim_lists(
    expression: str, limit: timedelta
) -> None:
    expected = _oracle_closest(expression)
    found = closest_fires(parse_cron_expression(expression), limit)
    if expected < limit:
        assert found is not None and found.gap == expected, (expression, limit, found)
    else:
        assert found is None, (expression, limit, expected)
