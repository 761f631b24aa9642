"""DST vectors: fall-back and spring-forward days, compared in UTC with hand-computed values.

Rules (ARCHITECTURE §2): a fixed-time expression (minute and hour without ``*``) fires once on
a fall-back day, at the first occurrence of the repeated wall time, and a wall time swallowed by
a spring-forward gap fires right after the jump. Wildcard and step expressions follow real
time: both occurrences of a repeated wall time fire, skipped wall times do not.

Transitions used (all verified against tzdata in ``test_transitions_are_where_we_think``):

=====================  ===========================================  ==========================
zone                   fall back (repeated wall times)              spring forward (gap)
=====================  ===========================================  ==========================
America/New_York       2026-11-01 02:00 EDT → 01:00 EST (06:00Z)    2026-03-08 02:00 → 03:00
                                                                    (07:00Z)
Europe/Berlin          2026-10-25 03:00 CEST → 02:00 CET (01:00Z)   2026-03-29 02:00 → 03:00
                                                                    (01:00Z)
Europe/Dublin          2026-10-25 02:00 IST → 01:00 GMT (01:00Z)    2026-03-29 01:00 → 02:00
                                                                    (01:00Z)
Australia/Lord_Howe    2026-04-05 02:00 +11 → 01:30 +10:30          2026-10-04 02:00 → 02:30
                       (2026-04-04T15:00Z)                          (2026-10-03T15:30Z)
America/Sao_Paulo      2018-02-18 00:00 -02 → 2018-02-17 23:00 -03  2018-11-04 00:00 → 01:00
                       (2018-02-18T02:00Z)                          (2018-11-04T03:00Z)
=====================  ===========================================  ==========================
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from herdsched import Agent, InvalidScheduleError, Schedule, ThreadedScheduler
from herdsched.cadence import iter_cron_triggers
from herdsched.config import load_fleet
from herdsched.errors import ConfigError

UTC = timezone.utc


def Z(text: str) -> datetime:
    """``"2026-11-01T05:30"`` as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _fires(expression: str, zone: str, after: datetime, n: int) -> list[datetime]:
    it = iter_cron_triggers(expression, after, zone)
    return [next(it) for _ in range(n)]


# --------------------------------------------------------------------------------------------
# The transitions themselves


@pytest.mark.parametrize(
    ("zone", "instant", "before", "after"),
    [
        ("America/New_York", "2026-11-01T06:00", -4.0, -5.0),
        ("America/New_York", "2026-03-08T07:00", -5.0, -4.0),
        ("Europe/Berlin", "2026-10-25T01:00", 2.0, 1.0),
        ("Europe/Berlin", "2026-03-29T01:00", 1.0, 2.0),
        ("Europe/Dublin", "2026-10-25T01:00", 1.0, 0.0),
        ("Europe/Dublin", "2026-03-29T01:00", 0.0, 1.0),
        ("Australia/Lord_Howe", "2026-04-04T15:00", 11.0, 10.5),
        ("Australia/Lord_Howe", "2026-10-03T15:30", 10.5, 11.0),
        ("America/Sao_Paulo", "2018-02-18T02:00", -2.0, -3.0),
        ("America/Sao_Paulo", "2018-11-04T03:00", -3.0, -2.0),
    ],
)
def test_transitions_are_where_we_think(
    zone: str, instant: str, before: float, after: float
) -> None:
    tz = ZoneInfo(zone)
    moment = Z(instant)
    assert (moment - timedelta(seconds=1)).astimezone(tz).utcoffset() == timedelta(hours=before)
    assert moment.astimezone(tz).utcoffset() == timedelta(hours=after)


def test_dublin_uses_negative_dst() -> None:
    # tzdata models Irish time with *negative* DST: winter GMT is the "daylight saving" period
    # (dst() == -1 h) and summer IST is standard time. Our rules look only at UTC offsets, so
    # Dublin behaves like every other zone below.
    dublin = ZoneInfo("Europe/Dublin")
    winter = datetime(2026, 1, 15, 12, tzinfo=dublin)
    summer = datetime(2026, 7, 15, 12, tzinfo=dublin)
    assert winter.dst() == timedelta(hours=-1)
    assert (winter.tzname(), winter.utcoffset()) == ("GMT", timedelta(0))
    assert summer.dst() == timedelta(0)
    assert (summer.tzname(), summer.utcoffset()) == ("IST", timedelta(hours=1))


def test_sao_paulo_has_no_dst_in_2026() -> None:
    tz = ZoneInfo("America/Sao_Paulo")
    day = date(2026, 1, 1)
    while day.year == 2026:
        for hour in (0, 12):
            moment = datetime(day.year, day.month, day.day, hour, tzinfo=tz)
            assert moment.utcoffset() == timedelta(hours=-3), moment
        day += timedelta(days=1)
    # ... so midnight jobs fire at 03:00Z on the days that had a transition in 2018
    assert _fires("0 0 * * *", "America/Sao_Paulo", Z("2026-11-03T12:00"), 2) == [
        Z("2026-11-04T03:00"),
        Z("2026-11-05T03:00"),
    ]
    assert _fires("30 23 * * *", "America/Sao_Paulo", Z("2026-02-17T12:00"), 2) == [
        Z("2026-02-18T02:30"),
        Z("2026-02-19T02:30"),
    ]


# --------------------------------------------------------------------------------------------
# Fall back: a fixed time inside the repeated hour fires once, at its first occurrence

FALL_BACK_FIXED = [
    # zone, expression, start (UTC), expected fires (UTC): day before, the day, day after
    (
        "America/New_York",
        "30 1 * * *",
        "2026-10-31T00:00",
        ["2026-10-31T05:30", "2026-11-01T05:30", "2026-11-02T06:30"],
    ),
    (
        "Europe/Berlin",
        "30 2 * * *",
        "2026-10-24T00:00",
        ["2026-10-24T00:30", "2026-10-25T00:30", "2026-10-26T01:30"],
    ),
    (
        "Europe/Dublin",
        "30 1 * * *",
        "2026-10-24T00:00",
        ["2026-10-24T00:30", "2026-10-25T00:30", "2026-10-26T01:30"],
    ),
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        "2026-04-03T12:00",
        ["2026-04-03T14:45", "2026-04-04T14:45", "2026-04-05T15:15"],
    ),
    (
        "America/Sao_Paulo",
        "30 23 * * *",
        "2018-02-16T12:00",
        ["2018-02-17T01:30", "2018-02-18T01:30", "2018-02-19T02:30"],
    ),
]


@pytest.mark.parametrize(("zone", "expression", "start", "expected"), FALL_BACK_FIXED)
def test_fall_back_fixed_time_fires_once(
    zone: str, expression: str, start: str, expected: list[str]
) -> None:
    fires = _fires(expression, zone, Z(start), 3)
    assert fires == [Z(e) for e in expected]
    # exactly one fire per local date, and the transition day's fire is the first occurrence
    tz = ZoneInfo(zone)
    local_dates = [f.astimezone(tz).date() for f in fires]
    assert len(set(local_dates)) == 3
    transition_fire = fires[1].astimezone(tz)
    assert transition_fire.fold == 0
    assert transition_fire.replace(fold=1).astimezone(UTC) > fires[1]  # it repeats later


@pytest.mark.parametrize(("zone", "expression", "start", "expected"), FALL_BACK_FIXED)
def test_fall_back_fixed_time_not_refired_from_inside_the_repeat(
    zone: str, expression: str, start: str, expected: list[str]
) -> None:
    # Asking from the first occurrence itself (what the scheduler does after the run) and
    # from between the two occurrences never yields the second occurrence.
    first = Z(expected[1])
    tz = ZoneInfo(zone)
    second = first.astimezone(tz).replace(fold=1).astimezone(UTC)
    for after in (first, first + (second - first) / 2, second - timedelta(seconds=1)):
        assert _fires(expression, zone, after, 1) == [Z(expected[2])]


# --------------------------------------------------------------------------------------------
# Spring forward: a fixed time inside the gap fires right after the jump

SPRING_FORWARD_FIXED = [
    (
        "America/New_York",
        "30 2 * * *",
        "2026-03-07T00:00",
        ["2026-03-07T07:30", "2026-03-08T07:00", "2026-03-09T06:30"],
    ),
    (
        "Europe/Berlin",
        "30 2 * * *",
        "2026-03-28T00:00",
        ["2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:30"],
    ),
    (
        "Europe/Dublin",
        "30 1 * * *",
        "2026-03-28T00:00",
        ["2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:30"],
    ),
    (
        "Australia/Lord_Howe",
        "15 2 * * *",
        "2026-10-02T12:00",
        ["2026-10-02T15:45", "2026-10-03T15:30", "2026-10-04T15:15"],
    ),
    (
        "America/Sao_Paulo",
        "30 0 * * *",
        "2018-11-02T12:00",
        ["2018-11-03T03:30", "2018-11-04T03:00", "2018-11-05T02:30"],
    ),
    # midnight itself is skipped in Sao Paulo: @daily fires at 01:00 local that day
    (
        "America/Sao_Paulo",
        "@daily",
        "2018-11-02T12:00",
        ["2018-11-03T03:00", "2018-11-04T03:00", "2018-11-05T02:00"],
    ),
    # two fixed times in the same gap fire once, together, right after the jump
    (
        "America/New_York",
        "0,30 2 * * *",
        "2026-03-07T12:00",
        ["2026-03-08T07:00", "2026-03-09T06:00", "2026-03-09T06:30"],
    ),
]


@pytest.mark.parametrize(("zone", "expression", "start", "expected"), SPRING_FORWARD_FIXED)
def test_spring_forward_fixed_time_fires_after_the_jump(
    zone: str, expression: str, start: str, expected: list[str]
) -> None:
    assert _fires(expression, zone, Z(start), 3) == [Z(e) for e in expected]


# --------------------------------------------------------------------------------------------
# Wildcard and step expressions follow real time

WILDCARD = [
    # zone, expression, start (UTC), expected fires (UTC), expected local wall times
    (
        "America/New_York",
        "30 * * * *",
        "2026-11-01T04:00",
        ["2026-11-01T04:30", "2026-11-01T05:30", "2026-11-01T06:30", "2026-11-01T07:30"],
        ["00:30", "01:30", "01:30", "02:30"],
    ),
    (
        "America/New_York",
        "30 * * * *",
        "2026-03-08T05:00",
        ["2026-03-08T05:30", "2026-03-08T06:30", "2026-03-08T07:30", "2026-03-08T08:30"],
        ["00:30", "01:30", "03:30", "04:30"],
    ),
    (
        "America/New_York",
        "*/15 * * * *",
        "2026-11-01T05:40",
        ["2026-11-01T05:45", "2026-11-01T06:00", "2026-11-01T06:15", "2026-11-01T06:30"],
        ["01:45", "01:00", "01:15", "01:30"],
    ),
    (
        "America/New_York",
        "*/15 * * * *",
        "2026-03-08T06:40",
        ["2026-03-08T06:45", "2026-03-08T07:00", "2026-03-08T07:15", "2026-03-08T07:30"],
        ["01:45", "03:00", "03:15", "03:30"],
    ),
    (
        "Europe/Berlin",
        "30 * * * *",
        "2026-10-24T23:00",
        ["2026-10-24T23:30", "2026-10-25T00:30", "2026-10-25T01:30", "2026-10-25T02:30"],
        ["01:30", "02:30", "02:30", "03:30"],
    ),
    (
        "Europe/Berlin",
        "30 * * * *",
        "2026-03-28T23:00",
        ["2026-03-28T23:30", "2026-03-29T00:30", "2026-03-29T01:30", "2026-03-29T02:30"],
        ["00:30", "01:30", "03:30", "04:30"],
    ),
    (
        "Europe/Dublin",
        "30 * * * *",
        "2026-10-24T23:00",
        ["2026-10-24T23:30", "2026-10-25T00:30", "2026-10-25T01:30", "2026-10-25T02:30"],
        ["00:30", "01:30", "01:30", "02:30"],
    ),
    (
        "Europe/Dublin",
        "*/20 * * * *",
        "2026-03-29T00:30",
        ["2026-03-29T00:40", "2026-03-29T01:00", "2026-03-29T01:20", "2026-03-29T01:40"],
        ["00:40", "02:00", "02:20", "02:40"],
    ),
    (
        "Australia/Lord_Howe",
        "*/15 * * * *",
        "2026-04-04T14:20",
        ["2026-04-04T14:30", "2026-04-04T14:45", "2026-04-04T15:00", "2026-04-04T15:15"],
        ["01:30", "01:45", "01:30", "01:45"],
    ),
    (
        "Australia/Lord_Howe",
        "*/15 * * * *",
        "2026-10-03T15:10",
        ["2026-10-03T15:15", "2026-10-03T15:30", "2026-10-03T15:45", "2026-10-03T16:00"],
        ["01:45", "02:30", "02:45", "03:00"],
    ),
    # an hourly job across a 30-minute gap: 1.5 real hours between 01:00 and 03:00
    (
        "Australia/Lord_Howe",
        "0 * * * *",
        "2026-10-03T14:00",
        ["2026-10-03T14:30", "2026-10-03T16:00", "2026-10-03T17:00", "2026-10-03T18:00"],
        ["01:00", "03:00", "04:00", "05:00"],
    ),
    (
        "America/Sao_Paulo",
        "30 * * * *",
        "2018-02-18T00:00",
        ["2018-02-18T00:30", "2018-02-18T01:30", "2018-02-18T02:30", "2018-02-18T03:30"],
        ["22:30", "23:30", "23:30", "00:30"],
    ),
    (
        "America/Sao_Paulo",
        "30 * * * *",
        "2018-11-04T01:00",
        ["2018-11-04T01:30", "2018-11-04T02:30", "2018-11-04T03:30", "2018-11-04T04:30"],
        ["22:30", "23:30", "01:30", "02:30"],
    ),
]


@pytest.mark.parametrize(("zone", "expression", "start", "expected", "walls"), WILDCARD)
def test_wildcard_follows_real_time(
    zone: str, expression: str, start: str, expected: list[str], walls: list[str]
) -> None:
    fires = _fires(expression, zone, Z(start), len(expected))
    assert fires == [Z(e) for e in expected]
    tz = ZoneInfo(zone)
    assert [f.astimezone(tz).strftime("%H:%M") for f in fires] == walls


@pytest.mark.parametrize(
    ("zone", "fall_back"),
    [
        ("America/New_York", "2026-11-01T06:00"),
        ("Europe/Berlin", "2026-10-25T01:00"),
        ("Europe/Dublin", "2026-10-25T01:00"),
        ("Australia/Lord_Howe", "2026-04-04T15:00"),
        ("America/Sao_Paulo", "2018-02-18T02:00"),
    ],
)
def test_every_minute_is_every_real_minute_across_fall_back(zone: str, fall_back: str) -> None:
    # Every minute of real time fires exactly once, including both passes of the repeat.
    start = Z(fall_back) - timedelta(hours=2)
    fires = _fires("* * * * *", zone, start, 4 * 60)
    assert fires == [start + timedelta(minutes=k) for k in range(1, 4 * 60 + 1)]


@pytest.mark.parametrize(
    ("zone", "spring_forward", "gap"),
    [
        ("America/New_York", "2026-03-08T07:00", 60),
        ("Europe/Berlin", "2026-03-29T01:00", 60),
        ("Europe/Dublin", "2026-03-29T01:00", 60),
        ("Australia/Lord_Howe", "2026-10-03T15:30", 30),
        ("America/Sao_Paulo", "2018-11-04T03:00", 60),
    ],
)
def test_every_minute_is_every_real_minute_across_spring_forward(
    zone: str, spring_forward: str, gap: int
) -> None:
    start = Z(spring_forward) - timedelta(hours=2)
    fires = _fires("* * * * *", zone, start, 4 * 60)
    assert fires == [start + timedelta(minutes=k) for k in range(1, 4 * 60 + 1)]
    # ... and no fire has a wall time inside the gap
    tz = ZoneInfo(zone)
    jump = Z(spring_forward)
    before = (jump - timedelta(seconds=1)).astimezone(tz).replace(tzinfo=None)
    after = jump.astimezone(tz).replace(tzinfo=None)
    assert after - before == timedelta(minutes=gap, seconds=1)
    walls = [f.astimezone(tz).replace(tzinfo=None) for f in fires]
    assert not [w for w in walls if before < w < after]


def test_six_field_seconds_follow_real_time_across_fall_back() -> None:
    fall_back = Z("2026-11-01T06:00")
    start = fall_back - timedelta(seconds=5)
    fires = _fires("* * * * * *", "America/New_York", start, 10)
    assert fires == [start + timedelta(seconds=k) for k in range(1, 11)]


# ------------------------------------------------------------------ never fires at all


def test_an_expression_whose_every_match_falls_in_a_gap_is_refused_as_such(tmp_path: Path) -> None:
    """``*/15 2 * 3 0#2`` matches only 02:00-02:45 on the second Sunday of March, the hour New
    York's clocks skip. It was accepted, then a scheduler's start searched 2 s to the year 9999
    and failed blaming the calendar's end; a fleet file with it passed ``validate``."""
    never = "*/15 2 * 3 0#2"
    said = f'cron expression "{never}" never fires in America/New_York: every time it matches'
    with pytest.raises(InvalidScheduleError, match=re.escape(said)):
        next(iter_cron_triggers(never, Z("2026-01-05T00:00"), "America/New_York"))
    sched = ThreadedScheduler(state_dir=None, timezone="America/New_York")
    with pytest.raises(InvalidScheduleError, match=re.escape(f"bot/s: {said}")) as info:
        sched.add_agent(Agent("bot", job=print, schedules={"s": Schedule.cron(never)}))
    assert info.value.field == "cron"
    sched.add_agent(Agent("bot", job=print, schedules={"s": Schedule.cron(never, timezone="UTC")}))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "scheduler: {timezone: America/New_York}\n"
        f'agents: [{{name: bot, command: "true", schedules: {{s: {{cron: "{never}"}}}}}}]\n'
    )
    with pytest.raises(ConfigError) as problems:
        load_fleet(fleet)
    assert f"agents[0].schedules.s.cron: {said}" in str(problems.value)
    assert "min_interval" not in str(problems.value)
    # a fixed-time expression fires at the end of the gap instead
    assert next(iter_cron_triggers("30 2 * 3 0#2", Z("2026-01-05T00:00"), "America/New_York")) == (
        Z("2026-03-08T07:00")
    )


def test_a_pytz_zone_is_read_by_its_name() -> None:
    """Attached to wall times a pytz zone answers its first offset in history (New York's LMT,
    -4:56): a scheduler given one fired a 09:30 cron at 09:34 EST, and DST never moved it."""
    import pytz

    from herdsched.testing import FakeClock

    clock = FakeClock(datetime(2026, 3, 2, 9, tzinfo=UTC))
    sched = ThreadedScheduler(
        state_dir=None, clock=clock, timezone=pytz.timezone("America/New_York")
    )
    sched.add_agent(
        Agent(
            "a",
            job=print,
            schedules={
                "inherits": Schedule.cron("30 9 * * *"),
                "names": Schedule.cron("30 9 * * *", timezone=pytz.timezone("Europe/Berlin")),
            },
        )
    )
    with sched:
        planned = {s.schedule: s.next_run_at for s in sched.get_status().schedules}
    assert planned == {
        "inherits": datetime(2026, 3, 2, 14, 30, tzinfo=UTC),  # 09:30 EST
        "names": datetime(2026, 3, 3, 8, 30, tzinfo=UTC),  # 09:30 CET
    }
    assert sched.get_schedule("a", "names").cadence.timezone == "Europe/Berlin"
    new_york = pytz.timezone("America/New_York")
    after = iter_cron_triggers("30 9 * * *", datetime(2026, 3, 8, 12, tzinfo=UTC), new_york)
    assert next(after) == datetime(2026, 3, 8, 13, 30, tzinfo=UTC)  # 09:30 EDT, the same day
