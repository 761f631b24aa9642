"""Property tests for the time rules, and a differential test against cronsim.

cronsim is a test-only oracle with its own, independent cron engine and Debian-cron DST rules.
The two agree on every case generated here (tests/test_cron_debian.py draws the day fields,
``L`` and ``#`` too). Where herdsched differs from cronsim on purpose, the generators stay out
of the way (and docs/scheduling.md lists the difference):

* a stepped range with equal ends (``0-0/1``): herdsched reads it as the single value (as Vixie
  cron does), cronsim as ``0/1`` (from 0 to the end of the field). Generated stepped ranges have
  two different ends.
* 6-field expressions: cronsim applies its DST rules only to 5-field expressions; herdsched
  applies the same rules to 6-field ones. Fixed-time 6-field expressions are compared only in
  zones without DST.
* wildcard/step hours across Lord Howe's 30-minute DST shift: cronsim steps hours in whole real
  hours and skips the first match after the change; herdsched follows real time (test_dst.py
  has the hand-computed vectors). Non-fixed expressions are not compared in Lord Howe.
* a start inside a repeated (fall-back) hour with a fixed-time expression: cronsim may return
  a time before its start; herdsched never does. Such starts are excluded from the comparison.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from cronsim import CronSim
from cronsim.cronsim import Field as Field_
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from herdsched.cadence import (
    Interval,
    calculate_next_trigger,
    iter_cron_triggers,
    parse_cron_expression,
)

UTC = timezone.utc
DST_ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Europe/Dublin",
    "Australia/Lord_Howe",
    "America/Sao_Paulo",
    "America/St_Johns",
]
FLAT_ZONES = ["UTC", "Asia/Tokyo", "Asia/Kolkata", "Asia/Kathmandu"]
ZONES = DST_ZONES + FLAT_ZONES

# Instants just before interesting transitions; starts are drawn around them.
TRANSITIONS = [
    datetime(2026, 3, 8, 7, tzinfo=UTC),
    datetime(2026, 11, 1, 6, tzinfo=UTC),
    datetime(2026, 3, 29, 1, tzinfo=UTC),
    datetime(2026, 10, 25, 1, tzinfo=UTC),
    datetime(2026, 4, 4, 15, tzinfo=UTC),
    datetime(2026, 10, 3, 15, 30, tzinfo=UTC),
    datetime(2018, 2, 18, 2, tzinfo=UTC),
    datetime(2018, 11, 4, 3, tzinfo=UTC),
    datetime(2026, 3, 8, 5, 30, tzinfo=UTC),
    datetime(2026, 11, 1, 4, 30, tzinfo=UTC),
]

PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)


# --------------------------------------------------------------------------------------------
# Strategies


def _field(low: int, high: int, *, star: bool = True, steps: bool = True) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    plain = st.one_of(
        number.map(str),
        st.lists(number, min_size=2, max_size=4, unique=True).map(
            lambda xs: ",".join(str(x) for x in sorted(xs))
        ),
        st.tuples(number, number).map(lambda ab: f"{min(ab)}-{max(ab)}"),
    )
    options = [plain]
    if steps:
        options.append(
            st.tuples(number, number, st.integers(1, max(1, (high - low) // 2)))
            .filter(lambda abk: abk[0] != abk[1])
            .map(lambda abk: f"{min(abk[:2])}-{max(abk[:2])}/{abk[2]}")
        )
    if star:
        options.append(st.just("*"))
        if steps:
            options.append(st.integers(1, max(1, (high - low) // 2)).map(lambda k: f"*/{k}"))
    return st.one_of(*options)


@st.composite
def cron_expressions(draw: st.DrawFn, *, seconds: bool | None = None) -> str:
    minute = draw(_field(0, 59))
    hour = draw(_field(0, 23))
    dom = draw(st.one_of(st.just("*"), _field(1, 28, star=False, steps=False)))
    month = draw(st.one_of(st.just("*"), _field(1, 12, star=False)))
    if dom == "*":
        dow = draw(st.one_of(st.just("*"), _field(0, 6, steps=False)))
    else:
        dow = draw(st.one_of(st.just("*"), _field(0, 6, star=False, steps=False)))
    fields = [minute, hour, dom, month, dow]
    with_seconds = draw(st.booleans()) if seconds is None else seconds
    if with_seconds:
        fields.insert(0, draw(_field(0, 59)))
    return " ".join(fields)


@st.composite
def starts(draw: st.DrawFn) -> datetime:
    if draw(st.booleans()):
        base = draw(st.sampled_from(TRANSITIONS))
        return base + timedelta(seconds=draw(st.integers(-2 * 86400, 2 * 86400)))
    seconds = draw(st.integers(0, 13 * 365 * 86400))
    return datetime(2017, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)


def _is_fixed(expression: str) -> bool:
    return parse_cron_expression(expression).fixed_time


def _ambiguous(moment: datetime, zone: ZoneInfo) -> bool:
    wall = moment.astimezone(zone).replace(tzinfo=None)
    return wall.replace(tzinfo=zone, fold=0).astimezone(UTC) != wall.replace(
        tzinfo=zone, fold=1
    ).astimezone(UTC)


def _ours(expression: str, start: datetime, zone: str, n: int) -> list[datetime]:
    return list(itertools.islice(iter_cron_triggers(expression, start, zone), n))


# --------------------------------------------------------------------------------------------
# Properties of herdsched alone


@PROPERTY_SETTINGS
@given(expression=cron_expressions(), start=starts(), zone=st.sampled_from(ZONES))
def test_fire_times_strictly_increase_and_match(
    expression: str, start: datetime, zone: str
) -> None:
    fires = _ours(expression, start, zone, 12)
    assert fires[0] > start
    assert all(a < b for a, b in itertools.pairwise(fires))
    parsed = parse_cron_expression(expression)
    tz = ZoneInfo(zone)
    for fire in fires:
        assert fire.tzinfo == UTC
        wall = fire.astimezone(tz).replace(tzinfo=None)
        if croniter.match(parsed.canonical, wall, second_at_beginning=parsed.has_seconds):
            continue
        # The only fires whose wall time does not match: a fixed-time expression whose wall
        # time fell into a spring-forward gap fires at the jump.
        assert parsed.fixed_time, (expression, zone, fire)
        before = (fire - timedelta(seconds=1)).astimezone(tz).utcoffset()
        assert before is not None and before < fire.astimezone(tz).utcoffset()  # type: ignore[operator]


@PROPERTY_SETTINGS
@given(
    minute=st.integers(0, 59),
    hour=st.integers(0, 23),
    start=st.sampled_from(TRANSITIONS).flatmap(
        lambda base: st.integers(-3 * 86400, 0).map(lambda s: base + timedelta(seconds=s))
    ),
    zone=st.sampled_from(DST_ZONES),
)
def test_fixed_time_never_fires_twice_on_one_local_date(
    minute: int, hour: int, start: datetime, zone: str
) -> None:
    fires = _ours(f"{minute} {hour} * * *", start, zone, 8)
    tz = ZoneInfo(zone)
    per_date = Counter(f.astimezone(tz).date() for f in fires)
    assert max(per_date.values()) == 1
    # one fire per day: consecutive fires are 23-25 hours apart (Lord Howe: 23.5-24.5)
    for a, b in itertools.pairwise(fires):
        assert timedelta(hours=22) <= b - a <= timedelta(hours=26)


@PROPERTY_SETTINGS
@given(
    start=starts(),
    every=st.integers(1, 3 * 86400).map(lambda s: timedelta(seconds=s)),
    zone=st.sampled_from(ZONES),
)
def test_interval_math_is_exact_elapsed_time(start: datetime, every: timedelta, zone: str) -> None:
    tz = ZoneInfo(zone)
    local_start = start.astimezone(tz)
    result = calculate_next_trigger(local_start, every, now=local_start)
    assert result - start == every
    # on the wall clock the difference is the interval plus the change of UTC offset
    local_result = result.astimezone(tz)
    wall_delta = local_result.replace(tzinfo=None) - local_start.replace(tzinfo=None)
    offset_change = local_result.utcoffset() - local_start.utcoffset()  # type: ignore[operator]
    assert wall_delta == every + offset_change


@PROPERTY_SETTINGS
@given(
    anchor=starts(),
    finished=starts(),
    lag=st.integers(0, 86400).map(lambda s: timedelta(seconds=s)),
    every=st.integers(1, 86400).map(lambda s: timedelta(seconds=s)),
)
def test_anchor_grid_is_the_next_point_after_completion(
    anchor: datetime, finished: datetime, lag: timedelta, every: timedelta
) -> None:
    cadence = Interval(every, anchor=anchor)
    now = finished + lag
    result = cadence.next_due(slot=finished, finished_at=finished, now=now, zone=UTC)
    assert result is not None
    assert result > finished and result >= now
    if now >= anchor:
        assert (result - anchor) % every == timedelta(0)
        assert result - now <= every
    else:
        assert result == anchor


# --------------------------------------------------------------------------------------------
# A brute-force oracle: every minute of a window, checked against the rules of ARCHITECTURE §2


def _wall_matcher(expression: str) -> Callable[[datetime], bool]:
    """Whether a wall time matches a 5-field expression (field sets parsed by cronsim)."""
    minute, hour, dom, month, dow = (
        Field.parse(text.upper())
        for Field, text in zip(
            (Field_.MINUTE, Field_.HOUR, Field_.DAY, Field_.MONTH, Field_.DOW),
            expression.split(),
            strict=True,
        )
    )
    dom_text, dow_text = expression.split()[2], expression.split()[4]
    both = not (dom_text.startswith("*") or dow_text.startswith("*"))

    def match(wall: datetime) -> bool:
        weekday = (wall.weekday() + 1) % 7
        dom_ok = wall.day in dom
        dow_ok = weekday in dow or (weekday == 0 and 7 in dow)
        day_ok = (dom_ok or dow_ok) if both else (dom_ok and dow_ok)
        return wall.minute in minute and wall.hour in hour and wall.month in month and day_ok

    return match


def _oracle(expression: str, start: datetime, end: datetime, tz: ZoneInfo) -> list[datetime]:
    match = _wall_matcher(expression)
    fires: set[datetime] = set()
    if not parse_cron_expression(expression).fixed_time:
        # real time: every real minute whose wall time matches
        moment = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
        while moment <= end:
            if match(moment.astimezone(tz).replace(tzinfo=None)):
                fires.add(moment)
            moment += timedelta(minutes=1)
        return sorted(fires)
    # fixed time: every matching wall minute, at its first occurrence, gaps at the jump
    wall = start.astimezone(tz).replace(tzinfo=None, second=0, microsecond=0) - timedelta(hours=3)
    last = end.astimezone(tz).replace(tzinfo=None) + timedelta(hours=3)
    while wall <= last:
        if match(wall):
            first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
            second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
            if first.astimezone(tz).replace(tzinfo=None) == wall:  # exists (maybe twice)
                instant = min(first, second)
            else:  # skipped: the first instant with the new offset
                instant = max(first, second)
                while (instant - timedelta(minutes=1)).astimezone(tz).utcoffset() == (
                    instant.astimezone(tz).utcoffset()
                ):
                    instant -= timedelta(minutes=1)
            if start < instant <= end:
                fires.add(instant)
        wall += timedelta(minutes=1)
    return sorted(fires)


@settings(PROPERTY_SETTINGS, max_examples=80)
@given(
    expression=cron_expressions(seconds=False),
    start=st.sampled_from(TRANSITIONS).flatmap(
        lambda base: st.integers(-8 * 3600, 3600).map(lambda s: base + timedelta(seconds=s))
    ),
    zone=st.sampled_from(ZONES),
)
def test_matches_brute_force_oracle(expression: str, start: datetime, zone: str) -> None:
    tz = ZoneInfo(zone)
    end = start + timedelta(hours=10)
    expected = _oracle(expression, start, end, tz)
    ours = list(itertools.takewhile(lambda t: t <= end, iter_cron_triggers(expression, start, tz)))
    assert ours == expected


# --------------------------------------------------------------------------------------------
# Differential test against cronsim


def _cronsim(expression: str, start: datetime, zone: str, n: int) -> list[datetime]:
    it = CronSim(expression, start.astimezone(ZoneInfo(zone)))
    return [moment.astimezone(UTC) for moment in itertools.islice(it, n)]


@PROPERTY_SETTINGS
@given(expression=cron_expressions(seconds=False), start=starts(), zone=st.sampled_from(ZONES))
def test_five_field_matches_cronsim(expression: str, start: datetime, zone: str) -> None:
    if _is_fixed(expression):
        assume(not _ambiguous(start, ZoneInfo(zone)))
    else:
        assume(zone != "Australia/Lord_Howe")
    assert _ours(expression, start, zone, 12) == _cronsim(expression, start, zone, 12)


@PROPERTY_SETTINGS
@given(expression=cron_expressions(seconds=True), start=starts(), zone=st.sampled_from(ZONES))
def test_six_field_matches_cronsim(expression: str, start: datetime, zone: str) -> None:
    # cronsim applies no DST rules to 6-field expressions: compare fixed-time ones without DST.
    assume(zone in FLAT_ZONES if _is_fixed(expression) else zone != "Australia/Lord_Howe")
    assert _ours(expression, start, zone, 12) == _cronsim(expression, start, zone, 12)


@pytest.mark.parametrize(
    ("expression", "start", "zone", "ours", "theirs"),
    [
        # "0-0/1" in the hour field: hour 0 for us (Vixie cron), every hour for cronsim.
        (
            "0 0-0/1 * * *",
            datetime(2026, 1, 1, 12, tzinfo=UTC),
            "UTC",
            "2026-01-02",
            "2026-01-01T13:00",
        ),
        # every third hour after Lord Howe's 30-minute fall back: 03:00 +10:30 exists and fires.
        (
            "0 */3 * * *",
            datetime(2017, 4, 1, 14, tzinfo=UTC),
            "Australia/Lord_Howe",
            "2017-04-01T16:30",
            "2017-04-01T19:30",
        ),
        # a spring-forward gap that swallows midnight: cronsim steps to the next Sunday, lands
        # on the nonexistent 00:00 and fires "*/11" hours at the jump (01:00 -02); skipped
        # wall times of a wildcard hour do not fire (Debian), so the next is 11:00.
        (
            "0 */11 * * 0",
            datetime(2018, 11, 3, 15, tzinfo=UTC),
            "America/Sao_Paulo",
            "2018-11-04T13:00",
            "2018-11-04T03:00",
        ),
        # 6-field fixed time inside a repeated hour: we fire once, cronsim twice.
        (
            "0 30 1 * * *",
            datetime(2026, 11, 1, 5, 31, tzinfo=UTC),
            "America/New_York",
            "2026-11-02T06:30",
            "2026-11-01T06:30",
        ),
    ],
)
def test_documented_differences_from_cronsim(
    expression: str, start: datetime, zone: str, ours: str, theirs: str
) -> None:
    def utc(text: str) -> datetime:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)

    assert _ours(expression, start, zone, 1) == [utc(ours)]
    assert _cronsim(expression, start, zone, 1) == [utc(theirs)]


def test_cronsim_may_go_backwards_from_inside_a_repeated_hour() -> None:
    # From 01:10 EST (the second pass), cronsim's next 01:30 is the *first* 01:30 (EDT), which
    # lies before its start. herdsched moves on to the next day.
    start = datetime(2026, 11, 1, 6, 10, tzinfo=UTC)
    assert _cronsim("30 1 * * *", start, "America/New_York", 1)[0] < start
    assert _ours("30 1 * * *", start, "America/New_York", 1) == [
        datetime(2026, 11, 2, 6, 30, tzinfo=UTC)
    ]
