"""Cron rules: parsing, validation, next fire times, time zones (DST vectors: test_dst.py)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from herdsched import CronParseError, SchedulerError
from herdsched.cadence import (
    Cron,
    CronExpression,
    Once,
    calculate_next_cron_trigger,
    is_valid_cron_expression,
    iter_cron_triggers,
    parse_cron_expression,
)
from herdsched.timestamps import resolve_timezone

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def _take(expression: str, after: datetime, n: int, tz: str = "UTC") -> list[datetime]:
    it = iter_cron_triggers(expression, after, tz)
    return [next(it) for _ in range(n)]


# --------------------------------------------------------------------------------------------
# Valid expressions


@pytest.mark.parametrize(
    "expression",
    [
        "0 9 * * *",
        "0 9 * * 1-5",
        "*/15 * * * *",
        "0,30 9-17 * * 1-5",
        "0-59/15 * * * *",
        "0 0 1 1 *",
        "0 0 29 2 *",
        "59 23 31 12 *",
        "0 0 * * 7",
        "0 0 * * 0",
        "0 0 * jan mon",
        "0 0 * JAN-MAR MON-FRI",
        "0 9 * * sun",
        "  0   9 * *\t*  ",
        "30 0 9 * * *",
        "*/10 * * * * *",
    ],
)
def test_valid_expressions(expression: str) -> None:
    parsed = parse_cron_expression(expression)
    assert isinstance(parsed, CronExpression)
    assert parsed.source == expression
    assert parsed.canonical == " ".join(expression.split())
    assert is_valid_cron_expression(expression) is True


def test_five_fields_have_no_seconds() -> None:
    parsed = parse_cron_expression("0 9 * * 1-5")
    assert parsed.has_seconds is False
    assert parsed.fields() == {
        "minute": "0",
        "hour": "9",
        "day of month": "*",
        "month": "*",
        "day of week": "1-5",
    }


def test_six_fields_put_seconds_first() -> None:
    parsed = parse_cron_expression("30 0 9 * * *")
    assert parsed.has_seconds is True
    assert parsed.fields()["second"] == "30"
    assert parsed.fields()["minute"] == "0"
    assert parsed.fields()["hour"] == "9"
    after = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
    assert calculate_next_cron_trigger(parsed, after, "UTC") == datetime(
        2026, 5, 4, 9, 0, 30, tzinfo=UTC
    )


def test_six_field_every_ten_seconds() -> None:
    after = datetime(2026, 5, 4, 8, 0, 3, tzinfo=UTC)
    got = _take("*/10 * * * * *", after, 4)
    assert got == [after.replace(second=s) for s in (10, 20, 30, 40)]


@pytest.mark.parametrize(
    ("shorthand", "canonical"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
@pytest.mark.parametrize("case", [str.lower, str.upper, str.title])
def test_shorthands_any_case(shorthand: str, canonical: str, case: object) -> None:
    text = case(shorthand)  # type: ignore[operator]
    parsed = parse_cron_expression(text)
    assert parsed.canonical == canonical
    after = datetime(2026, 5, 4, 8, 17, tzinfo=UTC)
    assert _take(text, after, 3) == _take(canonical, after, 3)


def test_shorthand_fire_times() -> None:
    after = datetime(2026, 5, 4, 8, 17, tzinfo=UTC)  # a Monday
    assert calculate_next_cron_trigger("@hourly", after, "UTC") == datetime(
        2026, 5, 4, 9, 0, tzinfo=UTC
    )
    assert calculate_next_cron_trigger("@daily", after, "UTC") == datetime(2026, 5, 5, tzinfo=UTC)
    assert calculate_next_cron_trigger("@weekly", after, "UTC") == datetime(2026, 5, 10, tzinfo=UTC)
    assert calculate_next_cron_trigger("@monthly", after, "UTC") == datetime(2026, 6, 1, tzinfo=UTC)
    assert calculate_next_cron_trigger("@yearly", after, "UTC") == datetime(2027, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------------------------
# herdctl examples


def test_herdctl_next_nine_after_eight_is_same_day() -> None:
    after = datetime(2025, 1, 15, 8, 0, tzinfo=BERLIN)
    result = calculate_next_cron_trigger("0 9 * * *", after, "Europe/Berlin")
    assert result == datetime(2025, 1, 15, 9, 0, tzinfo=BERLIN)
    assert result.tzinfo == UTC
    assert result == datetime(2025, 1, 15, 8, 0, tzinfo=UTC)


def test_herdctl_next_nine_after_nine_is_next_day() -> None:
    after = datetime(2025, 1, 15, 9, 0, tzinfo=BERLIN)
    result = calculate_next_cron_trigger("0 9 * * *", after, "Europe/Berlin")
    assert result == datetime(2025, 1, 16, 9, 0, tzinfo=BERLIN)


def test_weekdays_only() -> None:
    after = datetime(2026, 5, 8, 10, 0, tzinfo=UTC)  # Friday after 09:00
    assert _take("0 9 * * 1-5", after, 2) == [
        datetime(2026, 5, 11, 9, 0, tzinfo=UTC),
        datetime(2026, 5, 12, 9, 0, tzinfo=UTC),
    ]


def test_names_for_months_and_days() -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    assert _take("0 12 * * mon-fri", after, 2) == _take("0 12 * * 1-5", after, 2)
    assert _take("0 0 1 JAN,jul *", after, 3) == [
        datetime(2026, 7, 1, tzinfo=UTC),
        datetime(2027, 1, 1, tzinfo=UTC),
        datetime(2027, 7, 1, tzinfo=UTC),
    ]
    assert _take("0 0 * * 7", after, 1) == _take("0 0 * * sun", after, 1)


def test_february_29_fires_in_the_next_leap_year() -> None:
    after = datetime(2026, 3, 1, tzinfo=UTC)
    assert _take("0 0 29 2 *", after, 2) == [
        datetime(2028, 2, 29, tzinfo=UTC),
        datetime(2032, 2, 29, tzinfo=UTC),
    ]


def test_day_of_month_or_day_of_week() -> None:
    # Both restricted: either matches (standard cron). "30 2" alone is impossible, but every
    # Monday in February matches through the day of week.
    after = datetime(2026, 1, 1, tzinfo=UTC)
    assert _take("0 0 30 2 1", after, 2) == [
        datetime(2026, 2, 2, tzinfo=UTC),
        datetime(2026, 2, 9, tzinfo=UTC),
    ]


def test_croniter_extensions_pass_through() -> None:
    after = datetime(2026, 2, 1, tzinfo=UTC)
    assert _take("0 0 L * *", after, 2) == [  # last day of the month
        datetime(2026, 2, 28, tzinfo=UTC),
        datetime(2026, 3, 31, tzinfo=UTC),
    ]
    assert _take("0 0 * * 1#2", after, 2) == [  # second Monday
        datetime(2026, 2, 9, tzinfo=UTC),
        datetime(2026, 3, 9, tzinfo=UTC),
    ]
    assert _take("0 0 * * L5", after, 1) == [datetime(2026, 2, 27, tzinfo=UTC)]  # last Friday
    assert _take("0 0 ? * MON", after, 1) == [datetime(2026, 2, 2, tzinfo=UTC)]
    # a reversed range wraps around midnight: 22, 23, 0, 1, 2
    hours = [d.hour for d in _take("0 22-2 * * *", after, 5)]
    assert hours == [1, 2, 22, 23, 0]


@pytest.mark.parametrize(
    ("expression", "values"),
    [
        # croniter's own expansion of these left values out or put others in
        ("0 19-1/2 * * *", "0 19,21,23,1 * * *"),
        ("40-4/3 * * * *", "40,43,46,49,52,55,58,1,4 * * * *"),
        ("0 0 29-3/2 * *", "0 0 29,31,2 * *"),
        ("0 0 1 11-2/2 *", "0 0 1 11,1 *"),
        ("0 0 * * 6-1/2", "0 0 * * 6,1"),
        ("0 0 * * 4-2/2", "0 0 * * 4,6,1"),
        ("0 0 * * fri-tue/2", "0 0 * * 5,0,2"),
        ("0 22-2 * * *", "0 22,23,0,1,2 * * *"),
    ],
)
def test_a_range_that_wraps_around_steps_on_past_the_fields_end(
    expression: str, values: str
) -> None:
    """From its start, every k-th value, on past the field's end to the range's own end."""
    assert parse_cron_expression(expression).canonical == values
    after = datetime(2026, 1, 1, tzinfo=UTC)
    assert _take(expression, after, 12) == _take(values, after, 12)


@pytest.mark.parametrize(
    ("expression", "canonical", "first"),
    [
        ("5-5 * * * *", "5 * * * *", [datetime(2026, 1, 1, 0, 5), datetime(2026, 1, 1, 1, 5)]),
        ("5-5/2 * * * *", "5 * * * *", [datetime(2026, 1, 1, 0, 5), datetime(2026, 1, 1, 1, 5)]),
        ("1,5-5 * * * *", "1,5 * * * *", [datetime(2026, 1, 1, 0, 1), datetime(2026, 1, 1, 0, 5)]),
        ("0 0-0 * * *", "0 0 * * *", [datetime(2026, 1, 2), datetime(2026, 1, 3)]),
        ("0 0 * feb-FEB *", "0 0 * 2 *", [datetime(2026, 2, 1), datetime(2026, 2, 2)]),
        ("0 0 * * mon-1", "0 0 * * 1", [datetime(2026, 1, 5), datetime(2026, 1, 12)]),
    ],
)
def test_equal_range_is_a_single_value(
    expression: str, canonical: str, first: list[datetime]
) -> None:
    # croniter 7 alone reads "5-5" as the whole cycle (every minute); standard cron means 5.
    assert parse_cron_expression(expression).canonical == canonical
    after = datetime(2026, 1, 1, tzinfo=UTC)
    assert _take(expression, after, 2) == [f.replace(tzinfo=UTC) for f in first]


# --------------------------------------------------------------------------------------------
# Invalid expressions


@pytest.mark.parametrize(
    ("expression", "field", "phrase"),
    [
        ("0 25 * * *", "hour", "hour must be 0-23"),
        ("60 * * * *", "minute", "minute must be 0-59"),
        ("1-70 * * * *", "minute", "minute must be 0-59"),
        ("* * 0 * *", "day of month", "day of month must be 1-31"),
        ("* * 32 * *", "day of month", "day of month must be 1-31"),
        ("* * * 13 *", "month", "month must be 1-12"),
        ("* * * 0 *", "month", "month must be 1-12"),
        ("* * * * 8", "day of week", "day of week must be 0-7"),
        ("60 * * * * *", "second", "second must be 0-59"),
        ("0 -1 * * *", "hour", "hour must be 0-23"),
        ("1-2-3 * * * *", "minute", "minute must be 0-59"),
        ("a b c d e", "minute", "minute must be 0-59"),
        ("0 9 * * foo", "day of week", "day of week must be 0-7"),
        ("0 9 * bar *", "month", "month must be 1-12"),
        ("1,,2 * * * *", "minute", "empty list item"),
        # bad steps
        ("*/0 * * * *", "minute", 'step "0" must be a positive integer'),
        ("*/x * * * *", "minute", 'step "x" must be a positive integer'),
        ("0 9/ * * *", "hour", 'step "" must be a positive integer'),
        ("0 */-2 * * *", "hour", "must be a positive integer"),
        # impossible dates are rejected at creation
        ("0 0 31 2 *", "day of month", "never matches a real date"),
        ("0 0 30 2 *", "day of month", "never matches a real date"),
        ("0 0 31 4 *", "day of month", "never matches a real date"),
        ("0 0 31 4,6,9,11 *", "day of month", "never matches a real date"),
    ],
)
def test_invalid_fields(expression: str, field: str, phrase: str) -> None:
    with pytest.raises(CronParseError) as info:
        parse_cron_expression(expression)
    error = info.value
    assert phrase in str(error)
    assert error.field == field
    assert error.expression == expression
    assert f'Invalid cron expression "{expression}"' in str(error)
    assert isinstance(error, SchedulerError)
    assert is_valid_cron_expression(expression) is False


@pytest.mark.parametrize(
    "expression",
    [
        "0" * 5000 + "1 * * * *",  # each number was read by int(): a bare ValueError (a 500)
        "*/" + "9" * 5000 + " * * * *",
        "0 9 * * 1#" + "9" * 5000,
        "0 9 * * " + "9" * 5000 + "L",
        "0 9 * * *" + " " * 5000,
        "0 9 *\n* *\x00" + " " * 1000,  # shown escaped, not put into the message as it came
    ],
)
def test_a_cron_expression_of_thousands_of_characters_is_refused_as_too_long(
    expression: str,
) -> None:
    with pytest.raises(CronParseError) as info:
        parse_cron_expression(expression)
    message = str(info.value)
    assert f"is too long ({len(expression)} characters; at most 1000)" in message
    assert len(message) < 200 and message.isprintable(), message
    assert info.value.expression == expression


def test_herdctl_error_messages_verbatim() -> None:
    with pytest.raises(CronParseError) as info:
        parse_cron_expression("0 25 * * *")
    assert str(info.value) == 'Invalid cron expression "0 25 * * *" - hour must be 0-23'
    with pytest.raises(CronParseError) as info:
        parse_cron_expression("* * *")
    assert str(info.value).startswith('Invalid cron expression "* * *" - expected 5 fields, got 3')
    assert info.value.field is None


@pytest.mark.parametrize(
    ("expression", "count"),
    [("*", 1), ("* *", 2), ("* * * *", 4), ("* * * * * * *", 7), ("0 0 1 1 * 2027 x", 7)],
)
def test_wrong_field_count(expression: str, count: int) -> None:
    with pytest.raises(CronParseError, match=f"expected 5 fields, got {count}"):
        parse_cron_expression(expression)


@pytest.mark.parametrize("expression", ["", "   ", "\t"])
def test_empty_expression(expression: str) -> None:
    with pytest.raises(CronParseError, match="cannot be empty") as info:
        parse_cron_expression(expression)
    assert info.value.expression == expression


@pytest.mark.parametrize("expression", ["@reboot", "@every", "@often"])
def test_unknown_shorthand(expression: str) -> None:
    with pytest.raises(CronParseError) as info:
        parse_cron_expression(expression)
    assert "unknown shorthand" in str(info.value)
    assert "@yearly" in str(info.value) and "@hourly" in str(info.value)
    assert expression in str(info.value)


@pytest.mark.parametrize("value", [5, 0, 9.5, None, ["0 9 * * *"], b"0 9 * * *"])
def test_non_string_input(value: object) -> None:
    # YAML turns an unquoted `cron: 5` into a number.
    with pytest.raises(CronParseError) as info:
        parse_cron_expression(value)  # type: ignore[arg-type]
    assert "must be a string" in str(info.value)
    assert "quote it in YAML" in str(info.value)
    assert type(value).__name__ in str(info.value)
    assert info.value.expression == str(value)
    assert is_valid_cron_expression(value) is False  # type: ignore[arg-type]


def test_hashed_values_are_rejected_by_name() -> None:
    with pytest.raises(CronParseError) as info:
        parse_cron_expression("0 H(0-5) * * *")
    assert info.value.field == "hour"
    assert 'hashed value "H(0-5)"' in str(info.value)


@pytest.mark.parametrize("expression", ["H * * * *", "0 0 LW * *", "0 0 15W * *", "0 0 * * L"])
def test_croniter_rejections_become_cron_parse_errors(expression: str) -> None:
    with pytest.raises(CronParseError) as info:
        parse_cron_expression(expression)
    assert expression in str(info.value)
    assert info.value.expression == expression


# --------------------------------------------------------------------------------------------
# Next fire time: strictly after its input


@pytest.mark.parametrize(
    "expression",
    ["* * * * *", "0 9 * * *", "*/15 * * * *", "@hourly", "*/10 * * * * *", "0 0 29 2 *"],
)
def test_never_at_or_before_its_input(expression: str) -> None:
    after = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)  # a match of most expressions above
    for tz in ("UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"):
        result = calculate_next_cron_trigger(expression, after, tz)
        assert result > after
        # the input with sub-second precision: still strictly after
        fuzzy = after + timedelta(milliseconds=500)
        assert calculate_next_cron_trigger(expression, fuzzy, tz) > fuzzy


def test_a_match_time_as_input_gives_the_next_match() -> None:
    at_nine = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
    assert calculate_next_cron_trigger("0 9 * * *", at_nine, "UTC") == at_nine + timedelta(days=1)
    just_before = at_nine - timedelta(milliseconds=1)
    assert calculate_next_cron_trigger("0 9 * * *", just_before, "UTC") == at_nine


def test_iter_cron_triggers_is_strictly_increasing() -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    got = _take("*/7 */3 * * *", after, 50, "America/New_York")
    assert all(a < b for a, b in itertools.pairwise(got))
    assert got[0] > after


def test_results_are_aware_utc() -> None:
    result = calculate_next_cron_trigger("0 9 * * *", datetime(2026, 5, 4, tzinfo=UTC), BERLIN)
    assert result.tzinfo == UTC
    assert result == datetime(2026, 5, 4, 7, 0, tzinfo=UTC)  # 09:00 CEST


def test_parsed_expression_is_accepted() -> None:
    parsed = parse_cron_expression("0 9 * * *")
    after = datetime(2026, 5, 4, tzinfo=UTC)
    assert calculate_next_cron_trigger(parsed, after, "UTC") == calculate_next_cron_trigger(
        "0 9 * * *", after, "UTC"
    )


def test_invalid_expression_in_calculate_next() -> None:
    with pytest.raises(CronParseError, match="hour must be 0-23"):
        calculate_next_cron_trigger("0 25 * * *", datetime(2026, 5, 4, tzinfo=UTC), "UTC")


# --------------------------------------------------------------------------------------------
# Time zones


def test_zone_moves_the_fire_time() -> None:
    after = datetime(2026, 1, 14, 12, 0, tzinfo=UTC)
    tokyo = calculate_next_cron_trigger("0 9 * * *", after, "Asia/Tokyo")
    kolkata = calculate_next_cron_trigger("0 9 * * *", after, "Asia/Kolkata")
    assert tokyo == datetime(2026, 1, 15, 0, 0, tzinfo=UTC)
    assert kolkata == datetime(2026, 1, 15, 3, 30, tzinfo=UTC)


def test_default_zone_is_the_system_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    after = datetime(2026, 1, 14, 12, 0, tzinfo=UTC)
    assert calculate_next_cron_trigger("0 9 * * *", after) == datetime(
        2026, 1, 15, 0, 0, tzinfo=UTC
    )


@pytest.mark.parametrize("zone", ["Mars/Base", "America", "europe/berlin", "", "  ", "UTC+2"])
def test_unknown_zone_in_calculate_next(zone: str) -> None:
    with pytest.raises(ValueError) as info:
        calculate_next_cron_trigger("0 9 * * *", datetime(2026, 1, 1, tzinfo=UTC), zone)
    assert repr(zone) in str(info.value)


def test_cron_cadence_validates_its_zone() -> None:
    with pytest.raises(ValueError, match="Mars/Base"):
        Cron("0 9 * * *", timezone="Mars/Base")
    with pytest.raises(ValueError, match="'America'"):
        Cron("0 9 * * *", timezone="America")
    with pytest.raises(ValueError, match="IANA name"):
        Cron("0 9 * * *", timezone=5)  # type: ignore[arg-type]
    with pytest.raises(CronParseError, match="hour must be 0-23"):
        Cron("0 25 * * *")


def test_cron_cadence_keeps_zone_names() -> None:
    assert Cron("0 9 * * *", timezone=" Europe/Berlin ").timezone == "Europe/Berlin"
    assert Cron("0 9 * * *", timezone=BERLIN).timezone == "Europe/Berlin"  # type: ignore[arg-type]
    assert Cron("0 9 * * *").timezone is None
    assert Cron(parse_cron_expression("@daily")).expression.canonical == "0 0 * * *"


def test_cron_cadence_next_times() -> None:
    cadence = Cron("0 9 * * *", timezone="Europe/Berlin")
    assert cadence.kind == "cron"
    now = datetime(2026, 5, 4, 6, 0, tzinfo=UTC)
    first = cadence.first_due(now, resolve_timezone("Asia/Tokyo"))  # own zone wins
    assert first == datetime(2026, 5, 4, 7, 0, tzinfo=UTC)
    # the next slot follows the slot, not the completion
    assert first is not None
    nxt = cadence.next_due(slot=first, finished_at=first + timedelta(hours=30), now=now, zone=UTC)
    assert nxt == datetime(2026, 5, 5, 7, 0, tzinfo=UTC)


def test_cron_cadence_without_zone_uses_the_default() -> None:
    cadence = Cron("0 9 * * *")
    now = datetime(2026, 5, 4, 0, 0, tzinfo=UTC)
    assert cadence.first_due(now, ZoneInfo("Asia/Tokyo")) == datetime(2026, 5, 5, 0, 0, tzinfo=UTC)
    assert cadence.zone(UTC) is UTC


def test_once_cadence() -> None:
    cadence = Once("2026-12-01T09:00:00Z")
    assert cadence.kind == "once"
    assert cadence.at == datetime(2026, 12, 1, 9, tzinfo=UTC)
    assert cadence.first_due(datetime(2026, 1, 1, tzinfo=UTC), UTC) == cadence.at
    assert (
        cadence.next_due(slot=cadence.at, finished_at=cadence.at, now=cadence.at, zone=UTC) is None
    )
    assert Once("2026-12-01T10:00:00+01:00").at == cadence.at
    with pytest.raises(ValueError, match="once time"):
        Once("tomorrow-ish")
