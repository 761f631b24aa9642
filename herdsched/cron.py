"""Cron expressions: validation, Debian cron's day rules, and next fire times in a time zone.

croniter parses and expands each field. herdsched adds what croniter reads differently from
Debian's cron (whose rules cronsim implements; the test suite compares the two):

* A day field is *restricted* unless its text starts with ``*``. When both day fields are
  restricted a day matches either of them (OR), otherwise both (AND). croniter decides by the
  expanded values instead and lets ``L`` and ``#`` ignore the other field, so herdsched hands it
  *streams*: expressions whose day fields croniter cannot misread (at most one restricted day
  field in the OR case; one ``L`` or ``#`` item per stream), and merges their matches.
* ``a/k`` in the day of week runs to 7 (Sunday), and a range starting at 7 starts on Sunday.
* DST rules (fixed-time expressions fire once and after a gap) are applied on top of croniter's
  naive wall-clock matches (:func:`calculate_next_cron_trigger`).
"""

from __future__ import annotations

import functools
import heapq
import re
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta, timezone, tzinfo

import attrs
from croniter import croniter
from croniter.croniter import CroniterBadDateError, CroniterError

from herdsched.errors import CronParseError, InvalidScheduleError, quoted
from herdsched.timestamps import resolve_timezone, to_utc, zone_name

__all__ = [
    "CronExpression",
    "calculate_next_cron_trigger",
    "is_valid_cron_expression",
    "iter_cron_triggers",
    "matching_dates",
    "parse_cron_expression",
    "resolve_cron_zone",
]

_SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS5 = ("minute", "hour", "day of month", "month", "day of week")
_FIELDS6 = ("second", *_FIELDS5)
_DOM = "day of month"
_DOW = "day of week"
_RANGES = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    _DOM: (1, 31),
    "month": (1, 12),
    _DOW: (0, 7),
}
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAY = timedelta(days=1)
_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
_NAMES = {
    "month": {name: number for number, name in enumerate(_MONTHS, start=1)},
    _DOW: {name: number for number, name in enumerate(_DAYS)},
}
# A reference start for validity checks, so a verdict never depends on today's date.
_REFERENCE = datetime(2000, 1, 1)
# The Gregorian calendar repeats every 400 years, weekdays included: a stream of matches that
# has none within 400 years has none at all, and one that has any has one in every such window.
_MAX_YEARS = 400
_DAY_SPECIAL = re.compile(r"(?P<day>\d+|[a-z]{3})(?:#(?P<nth>.*)|l)|l(?P<lday>\d+|[a-z]{3})")


@attrs.frozen
class CronExpression:
    """A validated cron expression.

    ``canonical`` is the normalised text; ``streams`` are the croniter expressions whose
    matches, merged, are the expression's matches under Debian's day rules.
    """

    source: str
    canonical: str
    has_seconds: bool
    fixed_time: bool
    streams: tuple[str, ...] = ()

    def fields(self) -> dict[str, str]:
        """Field name → field text (``second`` only for 6-field expressions)."""
        names = _FIELDS6 if self.has_seconds else _FIELDS5
        return dict(zip(names, self.canonical.split(), strict=True))


#: the longest expression read (a list of every minute and hour is under 250 characters)
_MAX_LENGTH = 1000


def _error(expression: str, problem: str, field: str | None = None) -> CronParseError:
    return CronParseError(f'Invalid cron expression "{expression}" - {problem}', expression, field)


def _check_field(expression: str, name: str, text: str) -> None:
    """Check a field of plain items (numbers, names, ranges, steps, ``*``) against its range."""
    low, high = _RANGES[name]
    names = _NAMES.get(name, {})
    for part in text.split(","):
        if not part:
            raise _error(expression, f"{name} has an empty list item", name)
        base, slash, step = part.partition("/")
        if slash and (not step.isascii() or not step.isdigit() or int(step) == 0):
            raise _error(expression, f'{name} step "{step}" must be a positive integer', name)
        if base.upper().startswith("H"):
            raise _error(
                expression,
                f'{name} uses a hashed value "{part}", which is not supported '
                f"({name} must be {low}-{high})",
                name,
            )
        if base == "*":
            continue
        bounds = base.split("-")
        if len(bounds) > 2 or not all(bounds):
            raise _error(
                expression,
                f'{name} value "{base}" is not a number or range ({name} must be {low}-{high})',
                name,
            )
        for bound in bounds:
            value = bound.lower()
            if value in names:
                continue
            if not (value.isascii() and value.isdigit()):
                raise _error(
                    expression,
                    f'{name} value "{bound}" is not a number ({name} must be {low}-{high})',
                    name,
                )
            if not low <= int(value) <= high:
                raise _error(expression, f"{name} must be {low}-{high}", name)


def _bound_value(name: str, bound: str) -> int | None:
    text = bound.lower()
    if text.isascii() and text.isdigit():
        return int(text)
    return _NAMES.get(name, {}).get(text)


def _collapse_equal_ranges(name: str, text: str) -> str:
    """Rewrite ``5-5`` (and ``5-5/k``) as ``5``, its meaning in standard cron.

    croniter 7 reads a range whose two ends are equal as the whole cycle, so ``5-5 * * * *``
    would fire every minute; Vixie cron, cronsim and the crontab manual read it as minute 5.
    """
    items = []
    for part in text.split(","):
        low, dash, high = part.partition("/")[0].partition("-")
        value = _bound_value(name, low) if dash else None
        items.append(
            str(value) if value is not None and value == _bound_value(name, high) else part
        )
    return ",".join(items)


def _unwrap_ranges(name: str, text: str) -> str:
    """Rewrite each range that wraps around (``22-2``, ``40-4/3``) as the list of its values:
    from its start, every ``k``-th value, on past the field's end to its own end (``19-1/2``
    is 19, 21, 23 and 1). croniter expands a stepped one wrongly (``19-1/2`` without 1,
    ``40-4/3`` as 2), so it is given the values instead."""
    low, high = _RANGES[name]
    size = 7 if name == _DOW else high - low + 1  # 7 and 0 are both Sunday
    items = []
    for part in text.split(","):
        base, _, step = part.partition("/")
        start, dash, end = base.partition("-")
        first, last = _bound_value(name, start), _bound_value(name, end) if dash else None
        if first is None or last is None or first <= last:
            items.append(part)
            continue
        span = (last - first) % size
        offsets = range(0, span + 1, int(step) if step else 1)
        items.extend(str(low + (first - low + offset) % size) for offset in offsets)
    return ",".join(items)


def _debian_weekdays(item: str) -> str:
    """A plain day-of-week item as Debian reads it, in a form croniter reads the same way.

    ``a/k`` runs from ``a`` to 7 (Sunday) in Debian; croniter stops at 6. A range starting at
    7 starts on Sunday: ``7-0`` is Sunday (croniter: every day), ``7/2`` is Sunday.
    """
    base, slash, step = item.partition("/")
    low, dash, high = base.partition("-")
    if _bound_value(_DOW, low) == 7:
        if not dash or _bound_value(_DOW, high) == 7:  # "7/k", "7-7": Sunday, nothing more
            return low
        low = "0"
    if slash and not dash and low != "*":
        high, dash = "7", "-"
    return f"{low}{dash}{high}{slash}{step}"


def _weekday_number(expression: str, text: str) -> int:
    value = _bound_value(_DOW, text)
    if value is None or value > 7:
        problem = f'day of week value "{text}" is not a weekday (day of week must be 0-7)'
        raise _error(expression, problem, _DOW)
    return value % 7


def _dow_special(expression: str, item: str) -> str:
    """Canonical croniter text of a ``5L`` / ``L5`` (last Friday) or ``5#2`` item."""
    match = _DAY_SPECIAL.fullmatch(item.lower())
    if match is None:
        if item.lower() == "l":
            problem = "needs a weekday: 5L is the last Friday of the month"
        elif "#" in item:
            problem = "must be one weekday, #, and a number 1-5 (5#2: the second Friday)"
        else:
            problem = "must be one weekday and L (5L: the last Friday of the month)"
        raise _error(expression, f'day of week "{item}" {problem}', _DOW)
    day = _weekday_number(expression, match["day"] or match["lday"])
    nth = match["nth"]
    if nth is None:
        return f"l{day}"
    if not (nth.isascii() and nth.isdigit() and 1 <= int(nth) <= 5):
        raise _error(expression, f'day of week "{item}": the number after # must be 1-5', _DOW)
    return f"{day}#{int(nth)}"


def _dom_special(expression: str, item: str) -> str:
    """``L`` (the last day of the month); ``W`` and other uses of ``L`` are refused."""
    upper = item.upper()
    if upper == "L":
        return "l"
    if "W" in upper:
        raise _error(
            expression,
            f'day of month "{item}" uses W (nearest weekday), which is not supported',
            _DOM,
        )
    raise _error(
        expression, f'day of month "{item}": L (the last day of the month) must stand alone', _DOM
    )


def _day_groups(expression: str, name: str, text: str) -> tuple[str, list[str]]:
    """A day field's canonical text and its groups: the plain items together, each special alone.

    Matches of a list are the union of its items' matches, so each group can be its own stream.
    The text keeps its first item first: whether it starts with ``*`` decides whether the field
    is restricted (``L,*/7`` is, ``*/7,L`` is not).
    """
    plain: list[str] = []
    special: list[str] = []
    first_special = False
    for index, item in enumerate(text.split(",")):
        lowered = item.lower()
        is_special = ("l" in lowered or "#" in lowered) if name == _DOW else "l" in lowered
        if name == _DOM and "w" in lowered:
            is_special = True
        if is_special and item:
            special.append(
                _dow_special(expression, item) if name == _DOW else _dom_special(expression, item)
            )
            first_special = first_special or index == 0
        else:
            plain.append(item)
    if plain:
        _check_field(expression, name, ",".join(plain))
        if name == _DOW:
            plain = [_debian_weekdays(item) for item in plain]
        plain = [_unwrap_ranges(name, _collapse_equal_ranges(name, ",".join(plain)))]
    groups = special + plain if first_special else plain + special
    return ",".join(groups), groups


def _streams(parts: list[str], day_groups: tuple[list[str], list[str]]) -> tuple[str, ...]:
    """croniter expressions whose matches together are the expression's (Debian's day rules).

    A day field is restricted unless it starts with ``*``. Both restricted: a day matches
    either field, so each field gets its own streams with the other field ``*``. Otherwise
    a day must match both: one stream per pair of groups (croniter ANDs with ``day_or=False``).
    """
    offset = len(parts) - 5
    dom_text, dow_text = parts[offset + 2], parts[offset + 4]
    head, month = parts[: offset + 2], parts[offset + 3]
    doms, dows = day_groups
    if dom_text.startswith("*") or dow_text.startswith("*"):
        pairs = [(dom, dow) for dom in doms for dow in dows]
    else:
        pairs = [(dom, "*") for dom in doms] + [("*", dow) for dow in dows]
    streams = (" ".join([*head, dom, month, dow]) for dom, dow in pairs)
    return tuple(dict.fromkeys(streams))


def parse_cron_expression(expression: object) -> CronExpression:
    """Validate a cron expression and return its canonical form.

    Accepts 5 fields (``minute hour day-of-month month day-of-week``), 6 fields with **seconds
    first**, and the shorthands ``@yearly @annually @monthly @weekly @daily @midnight @hourly``
    (any case). Expressions that never match a real date (``0 0 31 2 *``) are rejected.
    """
    if isinstance(expression, str):
        return _parse_cron_cached(expression)
    return _parse_cron(expression)


@functools.lru_cache(maxsize=4096)
def _parse_cron_cached(expression: str) -> CronExpression:
    # A fleet repeats a handful of expressions thousands of times: parse each text once.
    return _parse_cron(expression)


def _split_fields(expression: object) -> list[str]:
    """The fields of ``expression`` (shorthands expanded), or a :class:`CronParseError`."""
    if not isinstance(expression, str):
        raise CronParseError(
            f'Invalid cron expression {expression!r} - must be a string such as "0 9 * * 1-5" '
            f"(got {type(expression).__name__}; quote it in YAML)",
            str(expression),
        )
    if len(expression) > _MAX_LENGTH:
        raise CronParseError(
            f"Invalid cron expression {quoted(expression[:30])}... - is too long "
            f"({len(expression)} characters; at most {_MAX_LENGTH})",
            expression,
        )
    text = " ".join(expression.split())
    if not text:
        raise CronParseError('Invalid cron expression "" - cannot be empty', expression)
    if text.startswith("@"):
        canonical = _SHORTHANDS.get(text.lower())
        if canonical is None:
            raise _error(expression, "unknown shorthand; valid: " + ", ".join(_SHORTHANDS))
        text = canonical
    parts = text.split(" ")
    if len(parts) not in (5, 6):
        raise _error(expression, f"expected 5 fields, got {len(parts)} (or 6 with seconds first)")
    return parts


def _parse_cron(expression: object) -> CronExpression:
    """Uncached :func:`parse_cron_expression`."""
    parts = _split_fields(expression)
    assert isinstance(expression, str)
    names = _FIELDS6 if len(parts) == 6 else _FIELDS5
    groups: dict[str, list[str]] = {}
    for index, name in enumerate(names):
        if name in (_DOM, _DOW):
            if parts[index] == "?":  # a croniter extension: the same as "*"
                parts[index] = "*"
            parts[index], groups[name] = _day_groups(expression, name, parts[index])
        else:
            _check_field(expression, name, parts[index])
            parts[index] = _unwrap_ranges(name, _collapse_equal_ranges(name, parts[index]))
    has_seconds = len(parts) == 6
    streams = _live_streams(expression, _streams(parts, (groups[_DOM], groups[_DOW])), has_seconds)
    minute, hour = parts[len(parts) - 5 : len(parts) - 3]
    fixed = not minute.startswith("*") and not hour.startswith("*")
    return CronExpression(expression, " ".join(parts), has_seconds, fixed, streams)


def _live_streams(expression: str, streams: tuple[str, ...], has_seconds: bool) -> tuple[str, ...]:
    """The streams that match some real date; an error when none does."""
    live = []
    for stream in streams:
        try:
            _croniter(stream, _REFERENCE, has_seconds).get_next(datetime)
        except CroniterBadDateError:
            continue  # never matches (the 31st of February): the other streams may
        except CroniterError as exc:
            raise CronParseError(
                f'Invalid cron expression "{expression}" - {exc}', expression, cause=exc
            ) from exc
        live.append(stream)
    if not live:
        raise _error(
            expression,
            "it never matches a real date (no date has such a day of month, month and day of week)",
            _DOM,
        )
    return tuple(live)


def _croniter(stream: str, start: datetime, has_seconds: bool) -> croniter:
    return croniter(
        stream,
        start,
        ret_type=datetime,
        day_or=False,  # streams are built so that AND is right (see _streams)
        second_at_beginning=has_seconds,
        max_years_between_matches=_MAX_YEARS,
    )


def is_valid_cron_expression(expression: str) -> bool:
    """Whether :func:`parse_cron_expression` accepts ``expression`` (never raises)."""
    try:
        parse_cron_expression(expression)
    except CronParseError:
        return False
    return True


def resolve_cron_zone(name: str | tzinfo | None) -> tzinfo:
    """:func:`~herdsched.timestamps.resolve_timezone`, an unknown zone an InvalidScheduleError."""
    try:
        return resolve_timezone(name)
    except ValueError as exc:
        raise InvalidScheduleError(str(exc), field="timezone", value=name, cause=exc) from exc


def _wall(instant: datetime, zone: tzinfo) -> datetime:
    """The naive wall-clock reading of ``instant`` in ``zone``."""
    return instant.astimezone(zone).replace(tzinfo=None)


def _transition(low: datetime, high: datetime, zone: tzinfo) -> datetime:
    """The first whole second in ``(low, high]`` whose UTC offset in ``zone`` is that of ``high``.

    ``low`` and ``high`` are aware instants with different offsets and one transition between.
    """
    offset_low = low.astimezone(zone).utcoffset()
    low = low.replace(microsecond=0)
    while high - low > timedelta(seconds=1):
        mid = (low + (high - low) / 2).replace(microsecond=0)
        if mid.astimezone(zone).utcoffset() == offset_low:
            low = mid
        else:
            high = mid
    return high


def _gap_end(naive: datetime, zone: tzinfo) -> datetime:
    """The first real instant after the DST gap that swallows the wall time ``naive``.

    By PEP 495 the two folds of a skipped wall time read it with the offsets before and after
    the jump; a zone that ignores ``fold`` (written before PEP 495) reads both alike, so the
    offsets are taken a day before and after instead."""
    early = naive.replace(tzinfo=zone, fold=1).astimezone(timezone.utc)
    late = naive.replace(tzinfo=zone, fold=0).astimezone(timezone.utc)
    if early == late:
        before, after = ((early + shift).astimezone(zone).utcoffset() for shift in (-_DAY, _DAY))
        if before is None or after is None or before == after:
            raise _not_pep_495(zone)
        early = (naive - before).replace(tzinfo=timezone.utc)
        late = (naive - after).replace(tzinfo=timezone.utc)
    return _transition(min(early, late), max(early, late), zone)


def _instants(naive: datetime, zone: tzinfo, fixed_time: bool) -> list[datetime]:
    """The real instants at which a cron match on wall time ``naive`` fires in ``zone``."""
    utc_first = naive.replace(tzinfo=zone, fold=0).astimezone(timezone.utc)
    utc_second = naive.replace(tzinfo=zone, fold=1).astimezone(timezone.utc)
    exists = _wall(utc_first, zone) == naive  # not in a gap (a zone ignoring fold says so here)
    if utc_first == utc_second and exists:
        return [utc_first]
    if exists:  # ambiguous: the wall time happens twice (fall back)
        pair = sorted([utc_first, utc_second])
        return pair[:1] if fixed_time else pair
    # nonexistent: skipped by a spring-forward jump
    return [_gap_end(naive, zone)] if fixed_time else []


def calculate_next_cron_trigger(
    expression: str | CronExpression,
    after: datetime,
    timezone: str | tzinfo | None = None,
) -> datetime:
    """The first fire time strictly after ``after``, as aware UTC.

    ``timezone`` is an IANA name (default: the system zone; unknown: InvalidScheduleError). DST
    rules: a *fixed-time* expression (minute and hour fields that do not start with ``*``)
    fires once on a fall-back day, at the first occurrence, and a time swallowed by a
    spring-forward gap fires right after the jump. Other expressions follow real time: both
    occurrences of a repeated wall time fire, skipped wall times do not.
    """
    return next(iter_cron_triggers(expression, after, timezone))


def iter_cron_triggers(
    expression: str | CronExpression,
    after: datetime,
    timezone: str | tzinfo | None = None,
) -> Iterator[datetime]:
    """Successive fire times strictly after ``after`` (see :func:`calculate_next_cron_trigger`)."""
    parsed = (
        expression if isinstance(expression, CronExpression) else parse_cron_expression(expression)
    )
    zone = resolve_cron_zone(timezone)
    current = to_utc(after)
    while True:
        current = _next_instant(parsed, current, zone)
        yield current


def _stream_matches(stream: str, has_seconds: bool, start: datetime) -> Iterator[datetime]:
    """Naive wall times matching one stream at or after ``start``; ends with the calendar."""
    try:
        it = _croniter(stream, start - timedelta(seconds=1), has_seconds)
        while True:
            yield it.get_next(datetime)
    except (CroniterError, OverflowError, ValueError):
        return  # no match before the end of year 9999


def _matches(parsed: CronExpression, wall_from: datetime) -> Iterator[datetime]:
    """Naive wall times matching ``parsed`` at or after ``wall_from`` (whole seconds), in order."""
    start = wall_from.replace(microsecond=0)
    if start < wall_from:
        start += timedelta(seconds=1)
    streams = parsed.streams or (parsed.canonical,)
    if len(streams) == 1:
        yield from _stream_matches(streams[0], parsed.has_seconds, start)
        return
    previous = None
    merged = heapq.merge(*(_stream_matches(s, parsed.has_seconds, start) for s in streams))
    for moment in merged:
        if moment != previous:
            yield moment
            previous = moment


def matching_dates(parsed: CronExpression, start: date, end: date) -> Iterator[date]:
    """The dates in ``[start, end)`` on which ``parsed`` matches at some time of day."""
    times = 3 if parsed.has_seconds else 2  # the leading second, minute and hour fields
    streams = tuple(
        " ".join(["0"] * times + stream.split()[times:])
        for stream in parsed.streams or (parsed.canonical,)
    )
    for moment in _matches(attrs.evolve(parsed, streams=streams), datetime.combine(start, time())):
        if moment.date() >= end:
            return
        yield moment.date()


def _next_instant(parsed: CronExpression, after: datetime, zone: tzinfo) -> datetime:
    """:func:`_next_instant_uncached`, cached when the zone can be a cache key.

    Schedules sharing an expression ask the same question at the same slot, and a fleet of
    thousands shares a handful of expressions. A question the calendar cannot answer (the
    next fire time after the last hours of the year 9999, or local times before the year 1)
    is an :class:`InvalidScheduleError`, as for a fire time past the year 9999.
    """
    try:
        try:
            hash(zone)
        except TypeError:
            return _next_instant_uncached(parsed, after, zone)
        return _next_instant_cached(parsed, after, zone)
    except OverflowError as exc:
        raise InvalidScheduleError(
            f'cron expression "{parsed.source}" has no fire time after {after.isoformat()} '
            "within the calendar (the years 1 to 9999)",
            field="cron",
            value=parsed.source,
        ) from exc


@functools.lru_cache(maxsize=8192)
def _next_instant_cached(parsed: CronExpression, after: datetime, zone: tzinfo) -> datetime:
    return _next_instant_uncached(parsed, after, zone)


def _next_instant_uncached(parsed: CronExpression, after: datetime, zone: tzinfo) -> datetime:
    """The first fire time strictly after the aware instant ``after``.

    Wall-clock matches are visited in wall order; each maps to zero, one or two real instants
    (:func:`_instants`). Wall order equals real order except in a repeated (fall-back) hour, so
    one case needs care: when ``after`` lies in the *first* pass of a repeated hour, real time
    runs through the rest of the first pass and then starts the repeat from its beginning.
    """
    wall = _wall(after, zone)
    pending = _matches(parsed, wall + timedelta(microseconds=1))
    first_pass_end: datetime | None = None
    repeat_start = wall
    if not parsed.fixed_time:
        second = wall.replace(tzinfo=zone, fold=1).astimezone(timezone.utc)
        if second > after:  # ``wall`` happens again later: ``after`` is in the first pass
            jump = _transition(after, second, zone)
            first_pass_end = wall + (jump - after)
            repeat_start = _wall(jump, zone)
    while True:
        candidate = next(pending, None)
        if candidate is None:
            raise InvalidScheduleError(
                f'cron expression "{parsed.source}" has no fire time after {after.isoformat()} '
                "(the calendar ends with the year 9999)",
                field="cron",
                value=parsed.source,
            )
        if first_pass_end is not None and candidate >= first_pass_end:
            pending = _matches(parsed, repeat_start)
            first_pass_end = None
            continue
        instants = [i for i in _instants(candidate, zone, parsed.fixed_time) if i > after]
        if instants:
            return min(instants)
        if (
            not parsed.fixed_time
            and _wall(candidate.replace(tzinfo=zone).astimezone(timezone.utc), zone) != candidate
        ):
            # A wall time swallowed by a spring-forward gap: resume at the end of the gap.
            if candidate.year > wall.year + _MAX_YEARS:  # the calendar and the zone's rule
                raise _never_fires(parsed, zone)  # repeated: every match falls in a gap
            resume = _wall(_gap_end(candidate, zone), zone)
            if resume <= candidate:  # a zone that maps gap times before the jump: no progress
                raise _not_pep_495(zone)
            pending = _matches(parsed, resume)


def _not_pep_495(zone: tzinfo) -> InvalidScheduleError:
    return InvalidScheduleError(
        f"time zone {zone!r} does not follow PEP 495 on DST days (a wall time skipped by a "
        "spring-forward jump must land after the jump, as zoneinfo zones do): give the IANA "
        "name instead",
        field="timezone",
        value=zone,
    )


def _never_fires(parsed: CronExpression, zone: tzinfo) -> InvalidScheduleError:
    return InvalidScheduleError(
        f'cron expression "{parsed.source}" never fires in {zone_name(zone)}: every time it '
        "matches falls in a gap the clocks skip when daylight saving time begins (only a "
        "fixed-time expression, minute and hour without *, fires at the end of such a gap)",
        field="cron",
        value=parsed.source,
    )
