"""How close together a cron expression's fires come: the check behind ``min_interval``.

A cron expression's fires are not evenly spaced: ``0 1,12,13 * * *`` fires 11 h, 1 h and 12 h
apart, ``0 9 * * 1-5`` a day and three days apart. Iterating a year of fires would find every
gap but costs a second for a cron that fires every minute, so the gaps are found from their two
sources instead:

* **within a day**: every matching day fires at the same times of day, so the closest two follow
  from the second, minute and hour values alone;
* **from one matching day to the next**: the last time of a day and the first of the next
  matching day, the days found by scanning four years of dates (a leap day included).

Gaps are measured on the wall clock, as the expression is written. On a day the zone changes
its UTC offset two fires can come closer by the change (usually an hour: ``0 1,3 * * *`` in New
York fires 1 h apart in real time when the clocks spring forward); a limit is a guard against
schedules that fire too often, and a daily schedule is not refused a ``1d`` limit for it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import date, timedelta
from itertools import pairwise

import attrs
from croniter import croniter

from herdsched.cron import CronExpression, matching_dates

__all__ = ["CloseFires", "closest_fires"]

_REFERENCE = date(2026, 1, 5)  # a Monday: verdicts never depend on the day they are asked
_DAY = 86_400
_DATE_SCAN = timedelta(days=4 * 366)  # a leap day included


@attrs.frozen
class CloseFires:
    """Two successive fires closer than a limit: how far apart, and which (in words)."""

    gap: timedelta
    where: str


@functools.lru_cache(maxsize=1024)
def closest_fires(parsed: CronExpression, limit: timedelta) -> CloseFires | None:
    """The closest two successive fires of ``parsed`` (on the wall clock) when they are less
    than ``limit`` apart; ``None`` when no two are.

    Fires fall on whole minutes (whole seconds with a seconds field), so a limit of a minute
    (a second) or less is kept by every expression and costs nothing. Cached: a fleet repeats
    a handful of expressions and limits thousands of times.
    """
    if limit <= timedelta(seconds=1 if parsed.has_seconds else 60):
        return None
    day = _TimesOfDay.of(parsed)
    found = [day.closest(), _across_days(parsed, day, limit)]
    close = [pair for pair in found if pair is not None and pair.gap < limit]
    return min(close, key=lambda pair: pair.gap, default=None)


@attrs.frozen
class _TimesOfDay:
    """The second, minute and hour values of an expression, each sorted."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    show_seconds: bool

    @classmethod
    def of(cls, parsed: CronExpression) -> _TimesOfDay:
        fields = parsed.fields()
        text = f"{fields['minute']} {fields['hour']} * * * {fields.get('second', '0')}"
        expanded = croniter.expand(text)[0]  # seconds last, croniter's own order
        return cls(
            seconds=_values(expanded[5], 59),
            minutes=_values(expanded[0], 59),
            hours=_values(expanded[1], 23),
            show_seconds=parsed.has_seconds,
        )

    @property
    def first(self) -> int:
        """The first fire of a day, in seconds after midnight."""
        return self.hours[0] * 3600 + self.minutes[0] * 60 + self.seconds[0]

    @property
    def last(self) -> int:
        """The last fire of a day, in seconds after midnight."""
        return self.hours[-1] * 3600 + self.minutes[-1] * 60 + self.seconds[-1]

    def closest(self) -> CloseFires | None:
        """The closest two fires of one day: within a minute, from one minute to the next
        (last second to first), or from one hour to the next (last minute to first)."""
        hour, minute, seconds, minutes = self.hours[0], self.minutes[0], self.seconds, self.minutes
        pairs = [((hour, minute, a), (hour, minute, b)) for a, b in pairwise(seconds)]
        pairs += [((hour, a, seconds[-1]), (hour, b, seconds[0])) for a, b in pairwise(minutes)]
        pairs += [
            ((a, minutes[-1], seconds[-1]), (b, minutes[0], seconds[0]))
            for a, b in pairwise(self.hours)
        ]
        if not pairs:
            return None
        first, second = min(pairs, key=lambda pair: _seconds(pair[1]) - _seconds(pair[0]))
        return CloseFires(
            timedelta(seconds=_seconds(second) - _seconds(first)),
            f"{self.show(first)} and {self.show(second)}",
        )

    def show(self, moment: tuple[int, int, int]) -> str:
        hour, minute, second = moment
        shown = f"{hour:02d}:{minute:02d}"
        return f"{shown}:{second:02d}" if self.show_seconds else shown


def _values(items: Sequence[object], highest: int) -> tuple[int, ...]:
    if list(items) == ["*"]:
        return tuple(range(highest + 1))
    return tuple(sorted(int(str(item)) for item in items))


def _seconds(moment: tuple[int, int, int]) -> int:
    hour, minute, second = moment
    return hour * 3600 + minute * 60 + second


def _across_days(parsed: CronExpression, day: _TimesOfDay, limit: timedelta) -> CloseFires | None:
    """The closest pair from the last fire of a matching day to the first of the next."""
    span = day.last - day.first
    if timedelta(seconds=_DAY - span) >= limit:
        return None  # not closer than the limit even on successive days
    start = _REFERENCE
    closest: tuple[date, date] | None = None
    dates = matching_dates(parsed, start, start + _DATE_SCAN)
    for earlier, later in pairwise(dates):
        if closest is None or later - earlier < closest[1] - closest[0]:
            closest = (earlier, later)
            if (later - earlier).days == 1:
                break
    if closest is None:
        return None
    earlier, later = closest
    last = (day.hours[-1], day.minutes[-1], day.seconds[-1])
    first = (day.hours[0], day.minutes[0], day.seconds[0])
    return CloseFires(
        later - earlier - timedelta(seconds=span),
        f"{day.show(last)} on {earlier} and {day.show(first)} on {later}",
    )
