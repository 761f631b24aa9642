"""Interval rules: parse_interval, calculate_next_trigger, is_schedule_due and the Interval cadence.

The golden vectors come from the herdctl documents (PRD 6 test plan and the "Schedule System"
page); the message phrases are those fixed by ARCHITECTURE §2.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from herdsched import IntervalParseError, InvalidScheduleError, Schedule, SchedulerError
from herdsched.cadence import (
    Interval,
    calculate_next_trigger,
    coerce_interval,
    is_schedule_due,
    parse_interval,
)

UTC = timezone.utc
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


# --------------------------------------------------------------------------------------------
# parse_interval: valid inputs


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # herdctl PRD 6 test plan
        ("5s", timedelta(seconds=5)),
        ("10m", timedelta(minutes=10)),
        ("1h", timedelta(hours=1)),
        ("2d", timedelta(days=2)),
        ("30d", timedelta(days=30)),
        # herdctl "Schedule System" page
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1d", timedelta(days=1)),
        # case and surrounding whitespace
        ("5M", timedelta(minutes=5)),
        ("1H", timedelta(hours=1)),
        ("  5m  ", timedelta(minutes=5)),
        ("\t2D\n", timedelta(days=2)),
        # compounds, largest unit first
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1H30M", timedelta(hours=1, minutes=30)),
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("2m30s", timedelta(minutes=2, seconds=30)),
        ("1d0h", timedelta(days=1)),
        # leading zeros and large values
        ("05m", timedelta(minutes=5)),
        ("90m", timedelta(minutes=90)),
        ("999999999d", timedelta(days=999999999)),
    ],
)
def test_parse_interval_valid(text: str, expected: timedelta) -> None:
    assert parse_interval(text) == expected


def test_parse_interval_herdctl_milliseconds() -> None:
    # herdctl returns milliseconds: 5s → 5000, 10m → 600000, 1h → 3600000, 2d → 172800000.
    assert parse_interval("5s").total_seconds() * 1000 == 5000
    assert parse_interval("10m").total_seconds() * 1000 == 600000
    assert parse_interval("1h").total_seconds() * 1000 == 3600000
    assert parse_interval("2d").total_seconds() * 1000 == 172800000


# --------------------------------------------------------------------------------------------
# parse_interval: invalid inputs


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("", "cannot be empty"),
        ("   ", "cannot be empty"),
        ("5", "Missing time unit"),
        ("1h30", "Missing time unit"),
        ("m", "Missing numeric value"),
        ("h5", "Missing numeric value"),
        ("1hm", "Invalid time unit"),
        ("5.5m", "Decimal values are not supported"),
        (".5m", "Decimal values are not supported"),
        ("5.m", "Decimal values are not supported"),
        ("5,5m", "Decimal values are not supported"),
        ("-5m", "Negative intervals are not allowed"),
        ("  -1h", "Negative intervals are not allowed"),
        ("0m", "Zero interval is not allowed"),
        ("0s", "Zero interval is not allowed"),
        ("0h0m", "Zero interval is not allowed"),
        ("5x", "Invalid time unit"),
        ("5min", "Invalid time unit"),
        ("1e3s", "Invalid time unit"),
        ("1h30mx", "Invalid time unit"),
        # bad compounds
        ("1m1h", "largest first"),
        ("1h1h", "largest first"),
        ("30s1m", "largest first"),
        ("1h 30m", 'Invalid character " "'),
        ("5 m", 'Invalid character " "'),
        ("5m-", 'Invalid character "-"'),
        ("+5m", 'Invalid character "+"'),
        # digits other than ASCII 0-9 are not numbers here
        ("\uff15m", "Invalid character"),
        ("1h\u00e9", 'Invalid character "\u00e9"'),
        ("\u00e95m", 'Invalid character "\u00e9"'),
        ("1000000000d", "too large"),
        ("9" * 40 + "s", "too large"),
    ],
)
def test_parse_interval_invalid(text: str, phrase: str) -> None:
    with pytest.raises(IntervalParseError) as info:
        parse_interval(text)
    error = info.value
    assert phrase in str(error)
    assert error.input == text
    assert isinstance(error, SchedulerError)
    assert isinstance(error, ValueError)
    # the message names the input (empty inputs are shown quoted)
    assert repr(text) in str(error) or f'"{text}"' in str(error)


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        # Python reads no int of more than 4,300 digits: each was a bare ValueError (a 500)
        ("0" * 5000 + "1s", "at most 100)"),
        ("9" * 5000 + "s", "at most 100)"),
        ("5m" + " " * 5000, "at most 100)"),
        # a control character was put into the message as it came
        ("5m\x00", "Invalid character"),
        ("5\nm", "Invalid character"),
    ],
)
def test_a_long_or_unprintable_interval_is_refused_in_a_short_printable_message(
    text: str, phrase: str
) -> None:
    with pytest.raises(IntervalParseError) as info:
        parse_interval(text)
    message = str(info.value)
    assert phrase in message
    assert message.isprintable() and len(message) < 200, message
    assert info.value.input == text


def test_invalid_unit_lists_valid_units() -> None:
    with pytest.raises(IntervalParseError) as info:
        parse_interval("5x")
    assert str(info.value) == 'Invalid time unit "x" in interval "5x". Valid units are: s, m, h, d'


def test_missing_unit_shows_expected_format() -> None:
    with pytest.raises(IntervalParseError) as info:
        parse_interval("5")
    assert '"{number}{unit}"' in str(info.value)
    assert "s, m, h, d" in str(info.value)


@pytest.mark.parametrize("value", [5, 5.0, None, b"5m", ["5m"], timedelta(minutes=5)])
def test_parse_interval_rejects_non_strings(value: object) -> None:
    with pytest.raises(IntervalParseError) as info:
        parse_interval(value)  # type: ignore[arg-type]
    assert info.value.input is value
    assert type(value).__name__ in str(info.value)
    assert "not a duration string" in str(info.value)


# --------------------------------------------------------------------------------------------
# coerce_interval: the Python API also takes timedelta and seconds


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5m", timedelta(minutes=5)),
        (timedelta(minutes=2), timedelta(minutes=2)),
        (30, timedelta(seconds=30)),
        (1.5, timedelta(seconds=1.5)),
    ],
)
def test_coerce_interval_accepts_timedelta_and_numbers(
    value: timedelta | float | str, expected: timedelta
) -> None:
    assert coerce_interval(value) == expected


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        (0, "Zero interval is not allowed"),
        (timedelta(0), "Zero interval is not allowed"),
        (-1, "Negative intervals are not allowed"),
        (timedelta(seconds=-5), "Negative intervals are not allowed"),
        (True, "must be a duration string, timedelta or seconds"),
        (None, "must be a duration string, timedelta or seconds"),
        ([5], "must be a duration string, timedelta or seconds"),
        (float("nan"), "must be finite"),
        (float("inf"), "must be finite"),
        (1e20, "too large"),
        (10**20, "too large"),
        ("0m", "Zero interval is not allowed"),
    ],
)
def test_coerce_interval_rejects(value: object, phrase: str) -> None:
    with pytest.raises(IntervalParseError) as info:
        coerce_interval(value)  # type: ignore[arg-type]
    assert phrase in str(info.value)
    assert info.value.input is value


def test_coerce_interval_names_what_and_may_allow_zero() -> None:
    with pytest.raises(IntervalParseError, match="timeout"):
        coerce_interval(-3, what="timeout")
    with pytest.raises(IntervalParseError) as info:
        coerce_interval("0m", what="timeout")
    # it said 'timeout: Zero interval is not allowed in interval "0m"'
    assert str(info.value) == 'Zero duration is not allowed in timeout "0m"'
    assert info.value.input == "0m"
    assert info.value.field == "timeout"
    assert coerce_interval(0, allow_zero=True) == timedelta(0)
    assert coerce_interval(timedelta(0), allow_zero=True) == timedelta(0)
    # The written form too: ThreadedScheduler(min_interval="0s") as min_interval=0 (was refused).
    assert coerce_interval("0s", what="min_interval", allow_zero=True) == timedelta(0)
    with pytest.raises(
        IntervalParseError, match='Zero duration is not allowed in min_interval "0s"'
    ):
        coerce_interval("0s", what="min_interval")


# --------------------------------------------------------------------------------------------
# calculate_next_trigger


def test_no_history_is_due_now() -> None:
    assert calculate_next_trigger(None, "5m", now=NOW) == NOW


def test_no_history_without_now_uses_the_real_clock() -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    result = calculate_next_trigger(None, "5m")
    assert result.tzinfo is not None
    assert before <= result <= datetime.now(UTC) + timedelta(seconds=1)


def test_next_is_completion_plus_interval() -> None:
    # herdctl: calculateNextTrigger(2025-01-19T10:00:00Z, "5m") → 2025-01-19T10:05:00Z
    last = datetime(2025, 1, 19, 10, 0, tzinfo=UTC)
    result = calculate_next_trigger(last, "5m", now=last)
    assert result == datetime(2025, 1, 19, 10, 5, tzinfo=UTC)
    assert result.tzinfo == UTC


def test_ten_minute_job_on_a_five_minute_interval() -> None:
    started = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    finished = started + timedelta(minutes=10)
    assert calculate_next_trigger(finished, "5m", now=finished) - started == timedelta(minutes=15)


def test_accepts_timedelta_and_seconds() -> None:
    last = NOW
    assert calculate_next_trigger(last, timedelta(hours=1), now=last) == last + timedelta(hours=1)
    assert calculate_next_trigger(last, 90, now=last) == last + timedelta(seconds=90)


def test_result_in_the_past_becomes_now() -> None:
    # lastCompletedAt two hours ago, interval 5 minutes → trigger immediately.
    last = NOW - timedelta(hours=2)
    assert calculate_next_trigger(last, "5m", now=NOW) == NOW


def test_result_in_the_future_is_kept() -> None:
    last = NOW - timedelta(minutes=2)
    assert calculate_next_trigger(last, "5m", now=NOW) == NOW + timedelta(minutes=3)


def test_offset_inputs_are_returned_in_utc() -> None:
    last = datetime(2026, 6, 1, 12, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    result = calculate_next_trigger(last, "1h", now=last)
    assert result == datetime(2026, 6, 1, 11, 0, tzinfo=UTC)
    assert result.utcoffset() == timedelta(0)


def test_jitter_matches_a_seeded_draw() -> None:
    last = NOW
    every = timedelta(hours=1)
    expected_fraction = random.Random(42).uniform(0, 0.10)
    result = calculate_next_trigger(last, every, 10, now=last, rng=random.Random(42))
    expected = last + every + every * expected_fraction
    assert abs(result - expected) < timedelta(milliseconds=1)
    assert result > last + every  # the seeded draw is not zero


def test_jitter_stays_in_range() -> None:
    rng = random.Random(7)
    last = NOW
    every = timedelta(minutes=10)
    results = [calculate_next_trigger(last, every, 5, now=last, rng=rng) for _ in range(300)]
    low, high = last + every, last + every * 1.05
    assert all(low <= r <= high for r in results)
    # the spread covers most of the allowed range: jitter really is applied
    assert max(results) - min(results) > every * 0.04


def test_zero_jitter_is_exact() -> None:
    rng = random.Random(1)
    assert calculate_next_trigger(NOW, "1h", 0, now=NOW, rng=rng) == NOW + timedelta(hours=1)


def test_full_jitter_is_allowed() -> None:
    rng = random.Random(3)
    result = calculate_next_trigger(NOW, "1h", 100, now=NOW, rng=rng)
    assert NOW + timedelta(hours=1) <= result <= NOW + timedelta(hours=2)


@pytest.mark.parametrize("jitter", [-1, -0.01, 100.5, 101, float("nan"), "5", True, None])
def test_jitter_out_of_bounds_is_a_value_error(jitter: object) -> None:
    with pytest.raises(ValueError, match="jitter_percent") as info:
        calculate_next_trigger(NOW, "5m", jitter, now=NOW)  # type: ignore[arg-type]
    assert not isinstance(info.value, IntervalParseError)


def test_bad_interval_in_calculate_next_trigger() -> None:
    with pytest.raises(IntervalParseError, match="Invalid time unit"):
        calculate_next_trigger(NOW, "5x", now=NOW)


def test_interval_past_year_9999_is_reported() -> None:
    with pytest.raises(IntervalParseError, match="year 9999"):
        calculate_next_trigger(NOW, "999999999d", now=NOW)


# --------------------------------------------------------------------------------------------
# is_schedule_due


def test_due_when_next_run_is_past() -> None:
    assert is_schedule_due(NOW - timedelta(seconds=1), NOW) is True


def test_due_when_next_run_is_now() -> None:
    assert is_schedule_due(NOW, NOW) is True


def test_not_due_when_next_run_is_future() -> None:
    assert is_schedule_due(NOW + timedelta(milliseconds=1), NOW) is False


def test_never_computed_counts_as_due() -> None:
    assert is_schedule_due(None, NOW) is True


def test_due_compares_instants_across_offsets() -> None:
    berlin = datetime(2026, 11, 22, 13, 0, tzinfo=ZoneInfo("Europe/Berlin"))  # = NOW
    assert is_schedule_due(berlin, NOW) is True
    assert is_schedule_due(berlin + timedelta(seconds=1), NOW) is False


def test_due_defaults_to_the_real_clock() -> None:
    assert is_schedule_due(datetime.now(UTC) - timedelta(minutes=1)) is True
    assert is_schedule_due(datetime.now(UTC) + timedelta(days=1)) is False


# --------------------------------------------------------------------------------------------
# Interval cadence


def test_interval_cadence_validates_at_construction() -> None:
    assert Interval("5m").every == timedelta(minutes=5)
    assert Interval(timedelta(seconds=30)).every == timedelta(seconds=30)
    assert Interval(90).every == timedelta(seconds=90)
    assert Interval("5m").kind == "interval"
    with pytest.raises(IntervalParseError, match="Zero interval"):
        Interval("0m")
    with pytest.raises(ValueError, match="jitter_percent"):
        Interval("5m", jitter_percent=150)
    with pytest.raises(ValueError, match="anchor"):
        Interval("5m", anchor="not a time")


def test_interval_times_are_utc() -> None:
    cadence = Interval("1h", anchor="2026-01-01T00:00:00+01:00", start_at="2026-02-01")
    assert cadence.anchor == datetime(2025, 12, 31, 23, 0, tzinfo=UTC)
    assert cadence.start_at == datetime(2026, 2, 1, tzinfo=UTC)


def test_interval_first_due_now_or_start_at() -> None:
    assert Interval("5m").first_due(NOW, UTC) == NOW
    later = NOW + timedelta(hours=3)
    assert Interval("5m", start_at=later).first_due(NOW, UTC) == later
    earlier = NOW - timedelta(hours=3)
    assert Interval("5m", start_at=earlier).first_due(NOW, UTC) == NOW


def test_interval_next_due_measures_from_completion() -> None:
    cadence = Interval("5m")
    slot = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    finished = slot + timedelta(minutes=10)
    result = cadence.next_due(slot=slot, finished_at=finished, now=finished, zone=UTC)
    assert result == slot + timedelta(minutes=15)


def test_interval_next_due_applies_jitter() -> None:
    cadence = Interval("1h", jitter_percent=10)
    fraction = random.Random(5).uniform(0, 0.10)
    result = cadence.next_due(slot=NOW, finished_at=NOW, now=NOW, zone=UTC, rng=random.Random(5))
    assert result is not None
    assert abs(result - (NOW + timedelta(hours=1) * (1 + fraction))) < timedelta(milliseconds=1)


ANCHOR = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)


def _m(minutes: int) -> datetime:
    return ANCHOR + timedelta(minutes=minutes)


@pytest.mark.parametrize(
    ("finished", "now", "expected"),
    [
        # next grid point strictly after completion
        (_m(7), _m(7), _m(15)),
        (_m(15), _m(15), _m(30)),
        (_m(0), _m(0), _m(15)),
        # long after the run (downtime): never a past grid point
        (_m(1), _m(67), _m(75)),
        # a completion before the anchor waits for the anchor
        (_m(-60), _m(-60), _m(0)),
    ],
)
def test_anchor_grid_next_due(finished: datetime, now: datetime, expected: datetime) -> None:
    cadence = Interval("15m", anchor=ANCHOR)
    result = cadence.next_due(slot=finished, finished_at=finished, now=now, zone=UTC)
    assert result == expected
    assert result is not None and result > finished and result >= now
    assert (result - ANCHOR) % timedelta(minutes=15) == timedelta(0)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (ANCHOR - timedelta(days=1), ANCHOR),  # anchor in the future: wait for it
        (ANCHOR + timedelta(minutes=30), ANCHOR + timedelta(minutes=30)),  # on a grid point
        (ANCHOR + timedelta(minutes=31), ANCHOR + timedelta(minutes=45)),
    ],
)
def test_anchor_grid_first_due(now: datetime, expected: datetime) -> None:
    assert Interval("15m", anchor=ANCHOR).first_due(now, UTC) == expected


def test_anchor_with_start_at() -> None:
    start = ANCHOR + timedelta(hours=2, minutes=1)
    cadence = Interval("15m", anchor=ANCHOR, start_at=start)
    assert cadence.first_due(ANCHOR, UTC) == ANCHOR + timedelta(hours=2, minutes=15)


def test_anchor_grid_never_returns_past_over_many_completions() -> None:
    cadence = Interval("7m", anchor=ANCHOR)
    rng = random.Random(11)
    moment = ANCHOR - timedelta(minutes=30)
    for _ in range(500):
        moment += timedelta(seconds=rng.randint(0, 1200))
        now = moment + timedelta(seconds=rng.randint(0, 900))
        result = cadence.next_due(slot=moment, finished_at=moment, now=now, zone=UTC)
        assert result is not None
        assert result > moment and result >= now
        assert result - max(moment, now) <= timedelta(minutes=7)
        assert (result - ANCHOR) % timedelta(minutes=7) == timedelta(0)


# --------------------------------------------------------------------------------------------
# Elapsed-time math across DST

NEW_YORK = ZoneInfo("America/New_York")


def test_two_hours_across_fall_back_is_two_real_hours() -> None:
    # 2026-11-01 01:30 EDT; two real hours later the wall clock says 02:30 EST (one hour later).
    finished = datetime(2026, 11, 1, 1, 30, tzinfo=NEW_YORK)
    result = calculate_next_trigger(finished, "2h", now=finished)
    assert result - finished == timedelta(hours=2)
    assert result == datetime(2026, 11, 1, 7, 30, tzinfo=UTC)
    local = result.astimezone(NEW_YORK)
    assert (local.hour, local.minute, local.tzname()) == (2, 30, "EST")


def test_two_hours_across_spring_forward_is_two_real_hours() -> None:
    # 2026-03-08 01:30 EST; two real hours later the wall clock says 04:30 EDT.
    finished = datetime(2026, 3, 8, 1, 30, tzinfo=NEW_YORK)
    result = Interval("2h").next_due(
        slot=finished, finished_at=finished, now=finished, zone=NEW_YORK
    )
    assert result == datetime(2026, 3, 8, 8, 30, tzinfo=UTC)
    assert result is not None
    local = result.astimezone(NEW_YORK)
    assert (local.hour, local.minute, local.tzname()) == (4, 30, "EDT")


def test_anchor_grid_is_elapsed_time_across_dst() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    anchor = datetime(2026, 3, 29, 0, 0, tzinfo=berlin)  # 2026-03-28T23:00Z
    cadence = Interval("1h", anchor=anchor)
    finished = datetime(2026, 3, 29, 1, 30, tzinfo=berlin)  # 00:30Z
    result = cadence.next_due(slot=finished, finished_at=finished, now=finished, zone=berlin)
    # one real hour after 00:00 CET is 01:00Z = 03:00 CEST (02:00 does not exist that night)
    assert result == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def test_interval_next_due_with_jitter_keeps_millisecond_precision() -> None:
    # the state file keeps milliseconds; a due time kept in memory must equal the one reloaded
    cadence = Interval(timedelta(minutes=10), jitter_percent=50)
    finished = datetime(2026, 1, 5, 9, 0, 0, 123000, tzinfo=timezone.utc)
    rng = random.Random(7)
    for _ in range(50):
        due = cadence.next_due(
            slot=finished, finished_at=finished, now=finished, zone=timezone.utc, rng=rng
        )
        assert due is not None
        assert due.microsecond % 1000 == 0
        assert finished + timedelta(minutes=10) <= due <= finished + timedelta(minutes=15)


@pytest.mark.parametrize(
    "value",
    [0.0005, 1e-7, timedelta(microseconds=999), timedelta(microseconds=1)],
)
def test_interval_below_one_millisecond_is_refused(value: object) -> None:
    # times are kept to the millisecond: a shorter interval would be due again at once
    with pytest.raises(IntervalParseError) as info:
        coerce_interval(value)  # type: ignore[arg-type]
    assert "shorter than the minimum of 1 millisecond" in str(info.value)
    assert repr(value) in str(info.value)
    assert info.value.input == value
    with pytest.raises(InvalidScheduleError, match="minimum of 1 millisecond"):
        Schedule.interval(value)  # type: ignore[arg-type]
    assert coerce_interval(0.001) == timedelta(milliseconds=1)
