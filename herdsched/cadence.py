"""Pure time arithmetic: intervals, cron expressions, one-shot times (no I/O, no threads).

The rules (ARCHITECTURE §2): intervals are measured from completion and are elapsed UTC time;
anchored intervals sit on the grid ``anchor + k·every`` and never return a past time; cron is
evaluated on the wall clock of an IANA time zone with DST handled explicitly (the cron math
lives in :mod:`herdsched.cron`; its public names are re-exported here); a one-shot schedule
fires once.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, ClassVar, Protocol
from zoneinfo import ZoneInfo

import attrs

from herdsched.cron import (
    CronExpression,
    calculate_next_cron_trigger,
    is_valid_cron_expression,
    iter_cron_triggers,
    parse_cron_expression,
    resolve_cron_zone,
)
from herdsched.cron_gaps import closest_fires
from herdsched.errors import IntervalParseError, InvalidScheduleError, quoted
from herdsched.timestamps import (
    format_timestamp,
    parse_timestamp,
    pytz_zone_name,
    resolve_timezone,
    to_utc,
    zone_name,
)

__all__ = [
    "CADENCE_FIELDS",
    "Cadence",
    "Cron",
    "CronExpression",
    "Interval",
    "Once",
    "calculate_next_cron_trigger",
    "calculate_next_trigger",
    "coerce_interval",
    "describe_duration",
    "format_interval",
    "is_schedule_due",
    "is_valid_cron_expression",
    "iter_cron_triggers",
    "kind_with_article",
    "parse_cron_expression",
    "parse_interval",
]

# --------------------------------------------------------------------------------------------
# Intervals

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_VALID_UNITS = "s, m, h, d"
_TOKEN = re.compile(r"([0-9]+)([a-z]*)")
# timedelta cannot hold more than 999999999 days.
_MAX_SECONDS = timedelta.max.days * 86400 + timedelta.max.seconds
# Instants are kept to the millisecond (the state file's precision): a shorter interval would
# land on the same instant and be due again at once.
MIN_INTERVAL = timedelta(milliseconds=1)
# The last instant a run may be planned for (the state file has four-digit years).
_LATEST = datetime.max.replace(tzinfo=timezone.utc)
_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)
# Where a cron is checked from: a verdict never depends on the day it is asked.
_FIXED_MONDAY = datetime(2026, 1, 5, tzinfo=timezone.utc)


#: the longest duration text read (``"999999999d23h59m59s"`` has 19 characters)
_MAX_DURATION_TEXT = 100


def _interval_error(problem: str, raw: object, what: str = "interval") -> IntervalParseError:
    return IntervalParseError(f"{problem} in {what} {quoted(raw)}", input=raw, field=what)


def parse_interval(text: str, *, allow_zero: bool = False, what: str = "interval") -> timedelta:
    """Parse ``"30s"``, ``"5m"``, ``"1h"``, ``"2d"`` or a compound such as ``"1h30m"``.

    Units are ``s m h d`` (any case); a compound lists each unit at most once, largest first.
    ``"0s"`` is refused unless ``allow_zero`` (a setting such as ``min_interval``, not a cadence).
    Raises :class:`IntervalParseError` whose message names the problem and the input; ``what``
    names the setting the duration is for (``"timeout"``), so its errors speak of a duration of
    that setting rather than of an interval.
    """
    raw = text
    kind = "interval" if what == "interval" else "duration"
    if not isinstance(text, str):
        raise IntervalParseError(
            f'{what.capitalize()} must be a duration string such as "5m", got '
            f"{type(text).__name__} {text!r}: not a duration string",
            input=raw,
            field=what,
        )

    def fail(problem: str) -> IntervalParseError:
        return _interval_error(problem, raw, what)

    if len(text) > _MAX_DURATION_TEXT:
        raise IntervalParseError(
            f"{what.capitalize()} is too long ({len(text)} characters; at most "
            f"{_MAX_DURATION_TEXT}): {quoted(text[:20])}...",
            raw,
            field=what,
        )
    body = text.strip().lower()
    if not body:
        raise IntervalParseError(
            f"{what.capitalize()} cannot be empty (got {raw!r})", raw, field=what
        )
    if body.startswith("-"):
        raise fail(f"Negative {kind}s are not allowed")
    if re.search(r"[0-9][.,]|[.,][0-9]", body):
        raise fail("Decimal values are not supported")
    missing_unit = (
        'Missing time unit (expected format "{number}{unit}", units: ' + _VALID_UNITS + ")"
    )
    if re.fullmatch(r"[0-9]+", body):
        raise fail(missing_unit)
    if "a" <= body[0] <= "z":
        raise fail("Missing numeric value")
    too_large = f"{kind.capitalize()} is too large (at most 999999999 days)"
    total = 0
    pos = 0
    seen: list[str] = []
    while pos < len(body):
        match = _TOKEN.match(body, pos)
        if match is None:
            raise fail(f"Invalid character {quoted(body[pos])}")
        number, unit = match.groups()
        if not unit and match.end() < len(body):
            raise fail(f"Invalid character {quoted(body[match.end()])}")
        if not unit:
            raise fail(missing_unit)
        if unit not in _UNITS:
            raise IntervalParseError(
                f'Invalid time unit "{unit}" in {what} "{raw}". Valid units are: {_VALID_UNITS}',
                input=raw,
                field=what,
            )
        order = list(_UNITS)
        if seen and order.index(unit) <= order.index(seen[-1]):
            raise fail("Units must appear once each, largest first (d, h, m, s)")
        seen.append(unit)
        if len(number.lstrip("0")) > 15:
            raise fail(too_large)
        total += int(number) * _UNITS[unit]
        pos = match.end()
    if total == 0 and not allow_zero:
        raise fail(f"Zero {kind} is not allowed")
    if total > _MAX_SECONDS:
        raise fail(too_large)
    return timedelta(seconds=total)


def coerce_interval(
    value: timedelta | float | str,
    *,
    what: str = "interval",
    allow_zero: bool = False,
    field: str | None = None,
) -> timedelta:
    """Accept a duration string, a :class:`timedelta` or a number of seconds (Python API).

    An error is worded with ``what`` and blames ``field`` (``what`` unless given) in its
    ``.field``, so a bad ``timeout`` or ``backoff`` names its own setting, not the interval.
    """
    culprit = what if field is None else field
    kind = "interval" if what == "interval" else "duration"
    if isinstance(value, str):
        try:
            return parse_interval(value, allow_zero=allow_zero, what=what)
        except IntervalParseError as exc:
            if culprit == exc.field:
                raise
            raise IntervalParseError(exc.message, value, exc, field=culprit) from exc
    if isinstance(value, bool) or not isinstance(value, (timedelta, int, float)):
        raise IntervalParseError(
            f"{what} must be a duration string, timedelta or seconds, got {value!r}",
            value,
            field=culprit,
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise IntervalParseError(f"{what} must be finite, got {value!r}", value, field=culprit)
    try:
        delta = value if isinstance(value, timedelta) else timedelta(seconds=value)
    except OverflowError as exc:
        raise IntervalParseError(
            f"{what} {value!r} is too large (at most 999999999 days)", value, exc, field=culprit
        ) from exc
    if delta < timedelta(0):
        message = f"Negative {kind}s are not allowed: {what} {value!r}"
        raise IntervalParseError(message, value, field=culprit)
    positive = delta > timedelta(0) or (not isinstance(value, timedelta) and value > 0)
    if delta == timedelta(0) and not positive and not allow_zero:
        raise IntervalParseError(
            f"Zero {kind} is not allowed: {what} {value!r}", value, field=culprit
        )
    if positive and delta < MIN_INTERVAL:
        raise IntervalParseError(
            f"{what} {value!r} is shorter than the minimum of 1 millisecond "
            "(herdsched keeps times to the millisecond)",
            value,
            field=culprit,
        )
    return delta


def format_interval(every: timedelta, *, what: str = "interval") -> str:
    """The shortest duration string for ``every`` (``5400 s`` → ``"1h30m"``).

    Only whole seconds can be written so that :func:`parse_interval` reads them back; anything
    else raises :class:`~herdsched.errors.InvalidScheduleError` naming ``what`` (the setting
    the duration is for): a fraction of a second, which Python takes, has no written form.
    """
    seconds = every.total_seconds()
    if seconds <= 0 or seconds != int(seconds):
        raise InvalidScheduleError(
            f'{what} {seconds:g}s cannot be written as a duration string such as "1m30s" '
            "(whole seconds only): a schedule with it can be changed from Python, but not "
            "stored or changed as fleet-file fields (persist=True, the REST API)",
            field=what,
            value=every,
        )
    remaining = int(seconds)
    text = ""
    for unit, size in _UNITS.items():
        count, remaining = divmod(remaining, size)
        if count:
            text += f"{count}{unit}"
    return text


def _check_jitter(jitter_percent: float) -> float:
    if isinstance(jitter_percent, bool) or not isinstance(jitter_percent, (int, float)):
        raise ValueError(f"jitter_percent must be a number from 0 to 100, got {jitter_percent!r}")
    if not 0 <= jitter_percent <= 100:
        raise ValueError(f"jitter_percent must be from 0 to 100, got {jitter_percent!r}")
    return float(jitter_percent)


def _check_own_jitter(jitter_percent: float | None) -> float | None:
    return None if jitter_percent is None else _check_jitter(jitter_percent)


def _jitter(interval: timedelta, jitter_percent: float, rng: random.Random | None) -> timedelta:
    if jitter_percent <= 0:
        return timedelta(0)
    fraction = (rng or random).uniform(0, jitter_percent / 100.0)
    return timedelta(seconds=interval.total_seconds() * fraction)


def _now_or(now: datetime | None) -> datetime:
    return to_utc(now) if now is not None else to_utc(datetime.now(timezone.utc))


def calculate_next_trigger(
    last_completed_at: datetime | None,
    interval: timedelta | float | str,
    jitter_percent: float = 0,
    *,
    now: datetime | None = None,
    rng: random.Random | None = None,
) -> datetime:
    """When an interval schedule should next run, measured from the last completion.

    No history → ``now``. A result in the past (after downtime or clock skew) → ``now``.
    Jitter adds a uniform 0..``jitter_percent`` % of the interval.
    """
    every = coerce_interval(interval)
    jitter = _check_jitter(jitter_percent)
    current = _now_or(now)
    if last_completed_at is None:
        return current
    try:
        candidate = to_utc(last_completed_at) + every + _jitter(every, jitter, rng)
    except OverflowError as exc:
        raise IntervalParseError(
            f"Interval {interval!r} is too large: the next run would fall after the year 9999",
            input=interval,
            cause=exc,
        ) from exc
    return max(to_utc(candidate), current)


def is_schedule_due(next_run_at: datetime | None, now: datetime | None = None) -> bool:
    """``next_run_at <= now``; ``None`` (never computed) counts as due."""
    if next_run_at is None:
        return True
    return to_utc(next_run_at) <= _now_or(now)


# --------------------------------------------------------------------------------------------
# Cadence types


class Cadence(Protocol):
    """What the scheduler asks of a cadence; each cadence answers for itself, so no code outside
    this module needs to know which kind it holds."""

    #: the keyword names ``update_schedule`` (and the fleet file) use for this cadence's fields
    FIELDS: ClassVar[frozenset[str]]
    #: whether the next run is measured from the previous one's completion (no overlap rule)
    measured_from_completion: ClassVar[bool]
    #: whether the schedule is done (``completed``) after its one run
    runs_once: ClassVar[bool]

    @property
    def kind(self) -> str: ...

    def describe(self, zone: tzinfo | None = None) -> str:
        """One line a person reads: ``every 5m``, ``cron 0 9 * * 1-5 (Europe/Berlin)``.

        ``zone``: the scheduler's, named for a cron that has none of its own (it fires in it)."""

    def to_fields(self) -> dict[str, Any]:
        """The fleet-file fields of this cadence (the ones :attr:`FIELDS` names), as text."""

    def with_fields(self, changes: Mapping[str, Any]) -> Cadence:
        """A copy with some of :attr:`FIELDS` changed (validated like a new one)."""

    def check(self, *, min_interval: timedelta, zone: tzinfo, now: datetime | None) -> None:
        """Raise :class:`~herdsched.errors.InvalidScheduleError` when this cadence fires more
        often than ``min_interval``, or (``now`` given) can never fire again."""

    def after_no_work(self, now: datetime) -> datetime | None:
        """When to look again after the work source had nothing (``None``: the normal plan)."""

    @property
    def waits_elapsed_time(self) -> bool:
        """Whether its waits are lengths of time (they move back with a wall clock set back),
        not points on the wall clock."""

    def first_due(self, now: datetime, zone: tzinfo) -> datetime | None:
        """The first due time for a schedule with no history."""

    def next_due(
        self,
        *,
        slot: datetime,
        finished_at: datetime,
        now: datetime,
        zone: tzinfo,
        rng: random.Random | None = None,
        default_jitter: float = 0.0,
    ) -> datetime | None:
        """The next due time after the run for ``slot`` finished at ``finished_at``;
        ``default_jitter`` (percent) applies to a cadence that jitters but has none of its own."""


def describe_duration(every: timedelta) -> str:
    """``every`` for a person, as durations are written here: ``5m``, ``1h30m``; a fraction of
    a second as seconds (``0.5s``). Messages and records use it, never ``str(timedelta)``."""
    seconds = every.total_seconds()
    if seconds == int(seconds):
        return format_interval(every)
    return f"{seconds:g}s"


def kind_with_article(kind: str) -> str:
    """A schedule type with its article, for messages: ``"an interval"``, ``"a cron"``,
    ``"a once"`` (said with a w), ``"a manual"``."""
    return f"{'an' if kind[:1] in 'aeiu' else 'a'} {kind}"


def _changed_cadence(
    kind: str, fields: frozenset[str], changes: Mapping[str, Any], build: Any
) -> Any:
    """Build a cadence from ``changes`` after checking that each changed field is one of ours."""
    unknown = sorted(set(changes) - fields)
    if unknown:
        raise InvalidScheduleError(
            f"{kind_with_article(kind)} schedule has no field {unknown[0]!r} "
            f"(its fields: {', '.join(sorted(fields))})",
            field=unknown[0],
        )
    try:
        return build()
    except InvalidScheduleError:
        raise
    except (TypeError, ValueError) as exc:
        field = next(iter(changes))
        raise InvalidScheduleError(str(exc), field=field, value=changes[field], cause=exc) from exc


def _opt_anchor(value: object) -> datetime | None:
    return None if value is None else parse_timestamp(value, what="interval anchor")


def _opt_start_at(value: object) -> datetime | None:
    return None if value is None else parse_timestamp(value, what="interval start_at")


@attrs.frozen
class Interval:
    """Every ``every``, measured from completion; optional grid ``anchor`` and ``start_at``."""

    every: timedelta = attrs.field(converter=coerce_interval)
    anchor: datetime | None = attrs.field(default=None, converter=_opt_anchor)
    start_at: datetime | None = attrs.field(default=None, converter=_opt_start_at)
    #: ``None``: the scheduler's ``jitter_percent``; ``0`` turns jitter off for this schedule
    jitter_percent: float | None = attrs.field(default=None, converter=_check_own_jitter)

    @property
    def kind(self) -> str:
        return "interval"

    FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"interval", "anchor", "start_at", "jitter_percent"}
    )
    measured_from_completion: ClassVar[bool] = True
    runs_once: ClassVar[bool] = False

    def describe(self, zone: tzinfo | None = None) -> str:
        text = f"every {describe_duration(self.every)}"
        if self.anchor is not None:
            text += f" from {self.anchor.isoformat()}"
        return text

    def to_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"interval": format_interval(self.every)}
        if self.anchor is not None:
            fields["anchor"] = format_timestamp(self.anchor)
        if self.start_at is not None:
            fields["start_at"] = format_timestamp(self.start_at)
        if self.jitter_percent is not None:
            jitter = self.jitter_percent
            fields["jitter_percent"] = int(jitter) if jitter.is_integer() else jitter
        return fields

    def with_fields(self, changes: Mapping[str, Any]) -> Interval:
        return _changed_cadence(  # type: ignore[no-any-return]
            "interval",
            self.FIELDS,
            changes,
            lambda: Interval(
                changes.get("interval", self.every),
                anchor=changes.get("anchor", self.anchor),
                start_at=changes.get("start_at", self.start_at),
                jitter_percent=changes.get("jitter_percent", self.jitter_percent),
            ),
        )

    def __attrs_post_init__(self) -> None:
        self._check_reachable(_now_or(None))

    def _check_reachable(self, now: datetime) -> None:
        """Refuse an interval whose next run, from ``now`` (or the later anchor or start) and
        with the largest jitter, would fall after the year 9999: the run after the first could
        never be planned, and the schedule would stay ``running`` for good."""
        base = max(to_utc(now), self.anchor or _EARLIEST, self.start_at or _EARLIEST)
        longest = self.every.total_seconds() * (1 + (self.jitter_percent or 0) / 100.0)
        if longest < (_LATEST - base).total_seconds():
            return
        # the culprit: a start or anchor that is later than now and sets the base, else the step
        late = [
            (name, when)
            for name, when in (("start_at", self.start_at), ("anchor", self.anchor))
            if when is not None and when == base and when > to_utc(now)
        ]
        if not late:
            raise InvalidScheduleError(
                f"interval {describe_duration(self.every)} is too long: the next run would fall "
                "after the year 9999",
                field="interval",
                value=self.every,
            )
        name, when = late[0]
        raise InvalidScheduleError(
            f"{name} {format_timestamp(when)} is too late for interval "
            f"{describe_duration(self.every)}: the run after it would fall after the year 9999",
            field=name,
            value=when,
        )

    def check(self, *, min_interval: timedelta, zone: tzinfo, now: datetime | None) -> None:
        if self.every < min_interval:
            raise InvalidScheduleError(
                f"interval {describe_duration(self.every)} is shorter than min_interval "
                f"{describe_duration(min_interval)}",
                field="interval",
                value=self.every,
            )
        self._check_reachable(_now_or(now))

    def after_no_work(self, now: datetime) -> datetime | None:
        return now + self.every

    @property
    def waits_elapsed_time(self) -> bool:
        return self.anchor is None

    def _grid_after(self, moment: datetime, *, strictly: bool) -> datetime:
        assert self.anchor is not None
        step = self.every
        if moment < self.anchor:
            return self.anchor
        k = (moment - self.anchor) // step
        point = self.anchor + k * step
        if point < moment or (strictly and point == moment):
            point += step
        return point

    def first_due(self, now: datetime, zone: tzinfo) -> datetime | None:
        now = to_utc(now)  # a naive now is local time, as everywhere
        start = max(now, self.start_at) if self.start_at is not None else now
        if self.anchor is not None:
            return self._grid_after(start, strictly=False)
        return start

    def next_due(
        self,
        *,
        slot: datetime,
        finished_at: datetime,
        now: datetime,
        zone: tzinfo,
        rng: random.Random | None = None,
        default_jitter: float = 0.0,
    ) -> datetime | None:
        if self.anchor is not None:
            return self._grid_after(max(to_utc(finished_at), to_utc(now)), strictly=True)
        if finished_at.tzinfo is not timezone.utc or now.tzinfo is not timezone.utc:
            finished_at, now = to_utc(finished_at), to_utc(now)  # add real time, not wall time
        try:  # the fields are checked already: skip calculate_next_trigger's re-validation
            own = self.jitter_percent
            jitter = _jitter(self.every, default_jitter if own is None else own, rng)
            due = finished_at + self.every + jitter
        except OverflowError:  # let the public function word the error
            return calculate_next_trigger(
                finished_at, self.every, self.jitter_percent or 0, now=now, rng=rng
            )
        if due.microsecond % 1000:  # jitter: keep the state file's millisecond precision
            due = to_utc(due)
        return due if due > now else now


def _to_cron(value: str | CronExpression) -> CronExpression:
    return value if isinstance(value, CronExpression) else parse_cron_expression(value)


def _to_zone_name(value: str | tzinfo | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, ZoneInfo) and value.key:
        value = value.key  # checked as the name is
    elif isinstance(value, tzinfo):
        value = pytz_zone_name(value) or value
    if not isinstance(value, str):
        raise InvalidScheduleError(
            f"time zone must be an IANA name such as 'Europe/Berlin', got {value!r}",
            field="timezone",
            value=value,
        )
    resolve_cron_zone(value)  # raises InvalidScheduleError on unknown zones
    return value.strip()


@attrs.frozen
class Cron:
    """A cron expression evaluated in an IANA time zone (``None``: the scheduler's zone)."""

    expression: CronExpression = attrs.field(converter=_to_cron)
    timezone: str | None = attrs.field(default=None, converter=_to_zone_name)

    @property
    def kind(self) -> str:
        return "cron"

    FIELDS: ClassVar[frozenset[str]] = frozenset({"cron", "timezone"})
    measured_from_completion: ClassVar[bool] = False
    runs_once: ClassVar[bool] = False
    waits_elapsed_time: ClassVar[bool] = False  # its times are points on the wall clock

    def describe(self, zone: tzinfo | None = None) -> str:
        name = self.timezone or (zone_name(zone) if zone is not None else None)
        return (
            f"cron {self.expression.source} ({name})" if name else f"cron {self.expression.source}"
        )

    def to_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"cron": self.expression.source}
        if self.timezone is not None:
            fields["timezone"] = self.timezone
        return fields

    def with_fields(self, changes: Mapping[str, Any]) -> Cron:
        return _changed_cadence(  # type: ignore[no-any-return]
            "cron",
            self.FIELDS,
            changes,
            lambda: Cron(
                changes.get("cron", self.expression),
                timezone=changes.get("timezone", self.timezone),
            ),
        )

    def check(self, *, min_interval: timedelta, zone: tzinfo, now: datetime | None) -> None:
        self.first_due(_FIXED_MONDAY, zone)  # refuses one whose every match falls in a DST gap
        close = closest_fires(self.expression, min_interval)
        if close is not None:
            raise InvalidScheduleError(
                f"cron {self.expression.source!r} fires only {describe_duration(close.gap)} apart "
                f"({close.where}), more often than min_interval {describe_duration(min_interval)}",
                field="cron",
                value=self.expression.source,
            )

    def after_no_work(self, now: datetime) -> datetime | None:
        return None

    def zone(self, default: tzinfo) -> tzinfo:
        return resolve_timezone(self.timezone) if self.timezone else default

    def first_due(self, now: datetime, zone: tzinfo) -> datetime | None:
        return calculate_next_cron_trigger(self.expression, now, self.zone(zone))

    def next_due(
        self,
        *,
        slot: datetime,
        finished_at: datetime,
        now: datetime,
        zone: tzinfo,
        rng: random.Random | None = None,
        default_jitter: float = 0.0,
    ) -> datetime | None:
        return calculate_next_cron_trigger(self.expression, slot, self.zone(zone))


def _to_once(value: object) -> datetime:
    return parse_timestamp(value, what="once time 'at'")


@attrs.frozen
class Once:
    """A single run at ``at``; afterwards the schedule is ``completed``."""

    at: datetime = attrs.field(converter=_to_once)

    @property
    def kind(self) -> str:
        return "once"

    FIELDS: ClassVar[frozenset[str]] = frozenset({"at"})
    measured_from_completion: ClassVar[bool] = False
    runs_once: ClassVar[bool] = True
    waits_elapsed_time: ClassVar[bool] = False

    def describe(self, zone: tzinfo | None = None) -> str:
        precision = "milliseconds" if self.at.microsecond else "seconds"  # as stored
        return f"once at {self.at.isoformat(timespec=precision)}"

    def to_fields(self) -> dict[str, Any]:
        return {"at": format_timestamp(self.at)}

    def with_fields(self, changes: Mapping[str, Any]) -> Once:
        return _changed_cadence(  # type: ignore[no-any-return]
            "once", self.FIELDS, changes, lambda: Once(changes.get("at", self.at))
        )

    def check(self, *, min_interval: timedelta, zone: tzinfo, now: datetime | None) -> None:
        if now is not None and self.at <= now:
            raise InvalidScheduleError(
                f"once time {self.at.isoformat()} has already passed", field="at", value=self.at
            )

    def after_no_work(self, now: datetime) -> datetime | None:
        return None

    def first_due(self, now: datetime, zone: tzinfo) -> datetime | None:
        return self.at

    def next_due(
        self,
        *,
        slot: datetime,
        finished_at: datetime,
        now: datetime,
        zone: tzinfo,
        rng: random.Random | None = None,
        default_jitter: float = 0.0,
    ) -> datetime | None:
        return None


#: every field name any cadence has (``update_schedule`` keywords that change a cadence)
CADENCE_FIELDS: frozenset[str] = Interval.FIELDS | Cron.FIELDS | Once.FIELDS
