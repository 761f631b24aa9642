"""Timestamps on disk and in memory: ISO-8601 UTC with milliseconds; time zone names."""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pytest
import yaml
from dateutil import parser as dateutil_parser
from dateutil import tz as dateutil_tz
from hypothesis import given
from hypothesis import strategies as st

from herdsched import (
    InvalidScheduleError,
    Schedule,
    ThreadedScheduler,
    calculate_next_cron_trigger,
    calculate_next_trigger,
    timestamps,
)
from herdsched.cadence import Interval
from herdsched.cron import iter_cron_triggers
from herdsched.timestamps import (
    format_timestamp,
    parse_timestamp,
    resolve_timezone,
    system_timezone,
    to_utc,
    truncate_ms,
)

UTC = timezone.utc
STAMP = datetime(2026, 11, 22, 5, 41, 48, 898000, tzinfo=UTC)


@pytest.fixture
def local_kolkata(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make the process's local time Asia/Kolkata (+05:30), so "local" differs from UTC."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# --------------------------------------------------------------------------------------------
# format


def test_format_is_iso_utc_with_milliseconds_and_z() -> None:
    assert format_timestamp(STAMP) == "2026-11-22T05:41:48.898Z"


def test_format_pads_milliseconds() -> None:
    assert format_timestamp(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000Z"
    assert format_timestamp(datetime(2026, 1, 2, 3, 4, 5, 7000, tzinfo=UTC)).endswith(".007Z")


def test_format_truncates_microseconds() -> None:
    assert format_timestamp(STAMP.replace(microsecond=898999)) == "2026-11-22T05:41:48.898Z"


def test_format_rezones_offsets_to_utc() -> None:
    berlin = datetime(2026, 11, 22, 6, 41, 48, 898000, tzinfo=ZoneInfo("Europe/Berlin"))
    assert format_timestamp(berlin) == "2026-11-22T05:41:48.898Z"
    minus = datetime(2026, 11, 22, 0, 41, 48, 898000, tzinfo=timezone(timedelta(hours=-5)))
    assert format_timestamp(minus) == "2026-11-22T05:41:48.898Z"


def test_format_reads_naive_as_local(local_kolkata: None) -> None:
    assert format_timestamp(datetime(2026, 11, 22, 11, 11, 48, 898000)) == (
        "2026-11-22T05:41:48.898Z"
    )


def test_format_rejects_non_datetimes() -> None:
    with pytest.raises(TypeError, match="expected a datetime"):
        format_timestamp("2026-11-22")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="date"):
        format_timestamp(date(2026, 11, 22))  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# parse


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-22T05:41:48.898Z",
        "2026-11-22T05:41:48.898+00:00",
        "2026-11-22T06:41:48.898+01:00",
        "2026-11-22T00:41:48.898-05:00",
        "2026-11-22T11:11:48.898+05:30",
        "2026-11-22T05:41:48.898",  # naive strings are UTC (what the state file holds)
        "  2026-11-22T05:41:48.898Z  ",
        "2026-11-22T05:41:48.898123Z",  # sub-millisecond digits are dropped
    ],
)
def test_parse_iso_strings(text: str) -> None:
    parsed = parse_timestamp(text)
    assert parsed == STAMP
    assert parsed.tzinfo == UTC


def test_parse_other_iso_shapes() -> None:
    assert parse_timestamp("2026-11-22") == datetime(2026, 11, 22, tzinfo=UTC)
    assert parse_timestamp("2026-11-22T05:41Z") == datetime(2026, 11, 22, 5, 41, tzinfo=UTC)
    assert parse_timestamp("20261122T054148Z") == datetime(2026, 11, 22, 5, 41, 48, tzinfo=UTC)


def test_parse_reads_what_only_dateutil_reads() -> None:
    """The standard library reads the stored form; dateutil still reads the rest."""
    assert parse_timestamp("2026-11") == datetime(2026, 11, 1, tzinfo=UTC)
    assert parse_timestamp("2026-11-22T24:00Z") == datetime(2026, 11, 23, tzinfo=UTC)


@given(
    moment=st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
    offset_minutes=st.integers(min_value=-14 * 60, max_value=14 * 60),
    shape=st.sampled_from(
        [
            "%Y-%m-%dT%H:%M:%S.%f{tz}",
            "%Y-%m-%dT%H:%M:%S{tz}",
            "%Y-%m-%d %H:%M{tz}",
            "%Y%m%dT%H%M%S{tz}",
            "%Y-%m-%dT%H{tz}",
            "%Y-%m-%d",
        ]
    ),
    zone=st.sampled_from(["Z", "{sign}{hh}:{mm}", "{sign}{hh}{mm}", ""]),
)
def test_parse_agrees_with_dateutil_on_every_iso_shape(
    moment: datetime, offset_minutes: int, shape: str, zone: str
) -> None:
    hours, minutes = divmod(abs(offset_minutes), 60)
    sign = "-" if offset_minutes < 0 else "+"
    tz = zone.format(sign=sign, hh=f"{hours:02d}", mm=f"{minutes:02d}")
    text = moment.strftime(shape.format(tz=tz))
    expected = dateutil_parser.isoparse(text)
    if expected.tzinfo is None:
        expected = expected.replace(tzinfo=UTC)
    assert parse_timestamp(text) == timestamps.to_utc(expected)


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-22T05:30.5Z",  # a fractional minute (the standard library read 05:30:00.5)
        "2026-11-22T05.5Z",  # a fractional hour
        "20261122T0541485Z",  # a digit too many
        "20261122T05414Z",  # a digit too few
        "2026-11-22 05:413+01:00",
        "2026-11-22T05:41:48.Z",  # a dangling decimal point
        # typos older dateutil releases (2.x, which boto3 requires; 3.0) read as other times
        "2026-11-22 05:411",  # 05:41:01
        "2026-11-22T05:41:48+01:0",  # +01:00
        "2026-11-22 05 41",  # 05:04:01
        "2026 11-22",  # 2026-01-11 22:00
        "2026-11-22.123",  # 12:03
        # and typos every dateutil release reads as other times
        "2026-11-22x05:41",  # any character between the date and the time
        "2026-112205:41Z",  # day 112 of the year (April 22), then a time
        "2026-11-22+01:00",  # an offset after a date alone
    ],
)
def test_parse_refuses_fractions_and_stray_digits_instead_of_misreading_them(text: str) -> None:
    with pytest.raises(ValueError, match="is not an ISO-8601 date-time"):
        parse_timestamp(text, what="once time 'at'")


def test_parse_naive_string_is_utc_even_with_a_local_zone(local_kolkata: None) -> None:
    assert parse_timestamp("2026-11-22T05:41:48.898") == STAMP


def test_parse_yaml_timestamps() -> None:
    data = yaml.safe_load(
        "quoted: '2026-11-22T05:41:48.898Z'\n"
        "zulu: 2026-11-22T05:41:48.898Z\n"
        "offset: 2026-11-22 06:41:48.898 +01:00\n"
        "day: 2026-11-22\n"
    )
    assert isinstance(data["zulu"], datetime)
    assert isinstance(data["day"], date)
    assert parse_timestamp(data["quoted"]) == STAMP
    assert parse_timestamp(data["zulu"]) == STAMP
    assert parse_timestamp(data["offset"]) == STAMP
    assert parse_timestamp(data["day"]) == datetime(2026, 11, 22, tzinfo=UTC)


def test_parse_aware_datetime() -> None:
    berlin = datetime(2026, 11, 22, 6, 41, 48, 898000, tzinfo=ZoneInfo("Europe/Berlin"))
    result = parse_timestamp(berlin)
    assert result == STAMP
    assert result.tzinfo == UTC


def test_parse_naive_datetime_is_local(local_kolkata: None) -> None:
    assert parse_timestamp(datetime(2026, 11, 22, 11, 11, 48, 898000)) == STAMP


def test_parse_date_is_utc_midnight() -> None:
    assert parse_timestamp(date(2026, 11, 22)) == datetime(2026, 11, 22, tzinfo=UTC)


def test_round_trip() -> None:
    for moment in (STAMP, datetime(1999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)):
        assert parse_timestamp(format_timestamp(moment)) == moment


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        ("", "cannot be empty"),
        ("   ", "cannot be empty"),
        ("yesterday", "'yesterday' is not an ISO-8601 date-time"),
        ("2026-13-01", "is not an ISO-8601 date-time"),
        ("2026-11-22T25:00Z", "is not an ISO-8601 date-time"),
        (5, "must be an ISO-8601 string or a datetime, got 5"),
        (None, "must be an ISO-8601 string or a datetime, got None"),
        (1.5, "got 1.5"),
    ],
)
def test_parse_errors_name_the_input(value: object, phrase: str) -> None:
    with pytest.raises(ValueError, match="next_run_at") as info:
        parse_timestamp(value, what="next_run_at")
    assert phrase in str(info.value)


# --------------------------------------------------------------------------------------------
# to_utc and truncate_ms


def test_truncate_ms() -> None:
    assert truncate_ms(STAMP.replace(microsecond=898765)) == STAMP
    assert truncate_ms(STAMP) == STAMP


def test_to_utc() -> None:
    assert to_utc(STAMP.astimezone(ZoneInfo("Asia/Tokyo"))) == STAMP
    assert to_utc(STAMP.astimezone(ZoneInfo("Asia/Tokyo"))).tzinfo == UTC
    with pytest.raises(TypeError, match="got str"):
        to_utc("2026-11-22")  # type: ignore[arg-type]


def test_to_utc_reads_naive_as_local(local_kolkata: None) -> None:
    assert to_utc(datetime(2026, 11, 22, 11, 11, 48, 898000)) == STAMP


# --------------------------------------------------------------------------------------------
# resolve_timezone


def test_resolve_names() -> None:
    assert resolve_timezone("Europe/Berlin") == ZoneInfo("Europe/Berlin")
    assert resolve_timezone(" UTC ") == ZoneInfo("UTC")
    assert resolve_timezone("Australia/Lord_Howe") == ZoneInfo("Australia/Lord_Howe")


def test_resolve_passes_tzinfo_through() -> None:
    zone = ZoneInfo("Asia/Tokyo")
    assert resolve_timezone(zone) is zone
    assert resolve_timezone(UTC) is UTC


def test_resolve_none_is_the_system_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/Sao_Paulo")
    assert resolve_timezone(None) == ZoneInfo("America/Sao_Paulo")


@pytest.mark.parametrize(
    "name", ["Mars/Base", "America", "europe/berlin", "../../etc/passwd", "Europe/Berlin\x00"]
)
def test_resolve_unknown_names(name: str) -> None:
    with pytest.raises(ValueError, match="Unknown time zone") as info:
        resolve_timezone(name)
    assert repr(name.strip()) in str(info.value) or repr(name) in str(info.value)
    assert "IANA" in str(info.value)


@pytest.mark.parametrize(
    "name", ["localtime", " localtime", "posixrules", "Factory", "right/UTC", "posix/Europe/Berlin"]
)
def test_resolve_refuses_zone_files_that_name_no_zone(name: str) -> None:
    """``ZoneInfo`` opens these, so they were taken and stored with a schedule: ``localtime``
    then meant each host's own zone, ``right/...`` counts leap seconds (27 s off)."""
    with pytest.raises(ValueError, match="not an IANA zone name") as info:
        resolve_timezone(name)
    assert repr(name) in str(info.value)
    with pytest.raises(InvalidScheduleError, match="not an IANA zone name"):
        Schedule.cron("0 9 * * *", timezone=name)
    with pytest.raises(ValueError, match="not an IANA zone name"):
        ThreadedScheduler(state_dir=None, timezone=name)
    with contextlib.suppress(ZoneInfoNotFoundError):  # a zone database without that file
        zone = ZoneInfo(name.strip())  # the same refused as a zone object
        with pytest.raises(InvalidScheduleError, match="not an IANA zone name"):
            Schedule.cron("0 9 * * *", timezone=zone)
        with pytest.raises(ValueError, match="not an IANA zone name"):
            ThreadedScheduler(state_dir=None, timezone=zone)


@pytest.mark.parametrize("value", ["", "   ", 5, ["UTC"]])
def test_resolve_rejects_non_names(value: object) -> None:
    with pytest.raises(ValueError, match="IANA name") as info:
        resolve_timezone(value)  # type: ignore[arg-type]
    assert repr(value) in str(info.value)


# --------------------------------------------------------------------------------------------
# system_timezone


def test_system_zone_from_tz_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", ":Europe/Dublin")
    assert system_timezone() == ZoneInfo("Europe/Dublin")


@pytest.mark.parametrize(
    ("tz", "summer_offset", "winter_offset"),
    [
        ("EST5EDT,M3.2.0,M11.1.0", -4, -5),
        ("CET-1CEST,M3.5.0,M10.5.0/3", 2, 1),
        ("/usr/share/zoneinfo/America/New_York", -4, -5),
    ],
)
def test_system_zone_from_a_tz_rule_or_zone_file(
    monkeypatch: pytest.MonkeyPatch, tz: str, summer_offset: int, winter_offset: int
) -> None:
    """Such a ``TZ`` was passed over for ``/etc/localtime``: every cron job an hour or more
    off, without a word (``date`` and Python's ``time`` honour it)."""

    if tz.startswith("/") and not os.path.isfile(tz):
        pytest.skip(f"{tz} is not installed here")
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        zone = system_timezone()
        for month, hours in ((7, summer_offset), (1, winter_offset)):
            assert datetime(2026, month, 1, 12, tzinfo=zone).utcoffset() == timedelta(hours=hours)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_tz_naming_a_file_that_is_no_zone_file_is_passed_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``TZ=/etc/hostname`` ended every command in a traceback ("Invalid TZif file"), though
    ``system_timezone`` passes such a ``TZ`` over for ``/etc/localtime``."""
    not_a_zone = tmp_path / "hostname"
    not_a_zone.write_text("build-1\n", encoding="utf-8")
    monkeypatch.setenv("TZ", str(not_a_zone))
    expected = (
        timestamps._zone_file(timestamps.LOCALTIME) if os.path.exists("/etc/localtime") else UTC
    )
    zone = system_timezone()
    assert (
        datetime(2026, 7, 1, tzinfo=zone).utcoffset()
        == datetime(2026, 7, 1, tzinfo=expected).utcoffset()
    )


@pytest.mark.parametrize(
    ("rule", "iana", "gap_day", "fall_back_day"),
    [
        ("EST5EDT,M3.2.0,M11.1.0", "America/New_York", date(2026, 3, 8), date(2026, 11, 1)),
        ("CET-1CEST,M3.5.0,M10.5.0/3", "Europe/Berlin", date(2026, 3, 29), date(2026, 10, 25)),
    ],
)
def test_a_tz_rule_keeps_the_dst_rules_of_its_iana_zone(
    monkeypatch: pytest.MonkeyPatch, rule: str, iana: str, gap_day: date, fall_back_day: date
) -> None:
    """With such a ``TZ`` the zone was dateutil's ``tzlocal``: a wall time skipped by the
    spring-forward jump landed before it (a ``30 2 * * *`` cron fired an hour early), and a
    cron matching every hour never found its next fire on that night (the timer hung)."""
    monkeypatch.setenv("TZ", rule)
    zone, named = system_timezone(), ZoneInfo(iana)
    for day in (gap_day, fall_back_day):
        for hour, minute, fold in ((1, 30, 0), (2, 30, 0), (2, 30, 1), (3, 30, 0)):
            wall = datetime(day.year, day.month, day.day, hour, minute, fold=fold)
            assert wall.replace(tzinfo=zone).astimezone(timezone.utc) == wall.replace(
                tzinfo=named
            ).astimezone(timezone.utc), wall
    before_gap = datetime(gap_day.year, gap_day.month, gap_day.day, 0, 59, tzinfo=named)
    for expression in ("30 2 * * *", "30 * * * *"):
        expected = list(itertools.islice(iter_cron_triggers(expression, before_gap, named), 5))
        got = list(itertools.islice(iter_cron_triggers(expression, before_gap, None), 5))
        assert got == expected, expression


def test_system_zone_from_etc_localtime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Not/AZone")
    monkeypatch.setattr(
        timestamps.os.path, "realpath", lambda path: "/usr/share/zoneinfo/Asia/Tokyo"
    )
    assert system_timezone() == ZoneInfo("Asia/Tokyo")


def test_a_copied_etc_localtime_is_read_as_its_zone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A ``/etc/localtime`` that is a copy, not a link into the zone database (``docker run -v
    /etc/localtime:/etc/localtime:ro``, a copied zone file), gave dateutil's ``tzlocal``: a
    ``30 2 * * *`` cron fired at 01:30 on the spring-forward night, an hour early, and a
    ``*/30`` cron never found its fire after 01:30 (the timer hung, holding its lock)."""
    source = Path("/usr/share/zoneinfo/America/New_York")
    if not source.is_file():
        pytest.skip(f"{source} is not installed here")
    copy = tmp_path / "localtime"
    copy.write_bytes(source.read_bytes())
    monkeypatch.delenv("TZ", raising=False)
    monkeypatch.setattr(timestamps, "LOCALTIME", str(copy))
    named = ZoneInfo("America/New_York")
    before_gap = datetime(2026, 3, 8, 0, 59, tzinfo=named)
    for expression in ("30 2 * * *", "*/30 * * * *"):
        expected = list(itertools.islice(iter_cron_triggers(expression, before_gap, named), 5))
        got = list(itertools.islice(iter_cron_triggers(expression, before_gap, None), 5))
        assert got == expected, expression
    assert next(iter_cron_triggers("30 2 * * *", before_gap, None)) == datetime(
        2026, 3, 8, 7, 0, tzinfo=timezone.utc
    )


def test_no_etc_localtime_is_utc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TZ", raising=False)
    monkeypatch.setattr(timestamps, "LOCALTIME", str(tmp_path / "missing"))
    assert system_timezone() == timezone.utc


def test_dateutils_rule_zones_are_refused_and_tzlocal_is_read_as_the_system_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Given as the scheduler's zone they were taken as they are, with the same wrong slot and
    hang on DST days. A cron over such a zone given directly was refused by name; it now reads
    the gap from the zone's offsets a day either side, as it does for any zone that ignores
    ``fold``: the slots after the jump are those of the zone database."""
    rule = dateutil_tz.tzstr("EST5EDT,M3.2.0,M11.1.0")
    with pytest.raises(ValueError, match="places a wall time skipped by a spring-forward jump"):
        resolve_timezone(rule)
    with pytest.raises(ValueError, match="tzstr"):
        ThreadedScheduler(state_dir=None, timezone=rule)
    monkeypatch.setenv("TZ", "America/New_York")
    assert resolve_timezone(dateutil_tz.tzlocal()) == ZoneInfo("America/New_York")
    after = datetime(2026, 3, 8, 6, 30, tzinfo=timezone.utc)  # 01:30 EST, before the jump
    new_york = ZoneInfo("America/New_York")
    for expression in ("*/30 * * * *", "30 2 * * *"):
        assert list(itertools.islice(iter_cron_triggers(expression, after, _Like(rule)), 3)) == (
            list(itertools.islice(iter_cron_triggers(expression, after, new_york), 3))
        )


class _FoldBlindNewYork(tzinfo):
    """New York as zones were written before PEP 495: the offset follows the wall time alone,
    a skipped wall time reads as standard time, and ``fold`` is ignored."""

    def _summer(self, dt: datetime | None) -> bool:
        if dt is None:
            return False
        march, november = datetime(dt.year, 3, 8), datetime(dt.year, 11, 1)
        begins = march + timedelta(days=(6 - march.weekday()) % 7, hours=3)
        ends = november + timedelta(days=(6 - november.weekday()) % 7, hours=1)
        return begins <= dt.replace(tzinfo=None) < ends

    def utcoffset(self, dt: datetime | None) -> timedelta:
        return timedelta(hours=-4 if self._summer(dt) else -5)

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(hours=1 if self._summer(dt) else 0)

    def fromutc(self, dt: datetime) -> datetime:
        summer = (dt - timedelta(hours=4)).replace(tzinfo=self)
        return summer if self._summer(summer) else (dt - timedelta(hours=5)).replace(tzinfo=self)


@pytest.mark.parametrize("expression", ["30 2 * * *", "0 2 * * *", "*/30 * * * *", "15 * * * *"])
def test_a_zone_that_ignores_fold_fires_as_the_zone_database_on_the_spring_forward_day(
    expression: str,
) -> None:
    """A fixed-time cron at 02:30 fired at 03:30 EDT, half an hour after the end of the gap
    (the zone reads 02:30 as standard time), and was not refused as the docs said."""
    after = datetime(2026, 3, 7, 12, tzinfo=timezone.utc)
    blind, real = _FoldBlindNewYork(), ZoneInfo("America/New_York")
    assert list(itertools.islice(iter_cron_triggers(expression, after, blind), 40)) == (
        list(itertools.islice(iter_cron_triggers(expression, after, real), 40))
    )


class _Like(tzinfo):
    """A zone of another class that maps wall times as ``zone`` does."""

    def __init__(self, zone: tzinfo) -> None:
        self.zone = zone

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return self.zone.utcoffset(dt)

    def dst(self, dt: datetime | None) -> timedelta | None:
        return self.zone.dst(dt)

    def tzname(self, dt: datetime | None) -> str | None:
        return self.zone.tzname(dt)

    def fromutc(self, dt: datetime) -> datetime:
        return self.zone.fromutc(dt.replace(tzinfo=self.zone)).replace(tzinfo=self)


def test_years_below_1000_are_zero_padded_and_round_trip() -> None:
    from datetime import datetime, timezone

    from herdsched.timestamps import format_timestamp, parse_timestamp

    early = datetime(999, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    assert format_timestamp(early) == "0999-01-02T03:04:05.678Z"
    assert parse_timestamp(format_timestamp(early)) == early


@pytest.fixture
def local_new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run with the process's local zone set to America/New_York."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("local_new_york")
def test_naive_time_in_a_dst_gap_lands_after_the_jump() -> None:
    # 02:30 does not exist on 2026-03-08 in New York (02:00 EST -> 03:00 EDT). PEP 495: fold=0
    # reads it with the offset before the jump, 07:30 UTC = 03:30 EDT; fold=1 with the offset
    # after it, 06:30 UTC = 01:30 EST. datetime.astimezone() gave 06:30 for fold=0.
    assert to_utc(datetime(2026, 3, 8, 2, 30)) == datetime(2026, 3, 8, 7, 30, tzinfo=UTC)
    assert to_utc(datetime(2026, 3, 8, 2, 30, fold=1)) == datetime(2026, 3, 8, 6, 30, tzinfo=UTC)


@pytest.mark.usefixtures("local_new_york")
def test_naive_time_in_a_repeated_hour_follows_fold() -> None:
    # 01:30 happens twice on 2026-11-01: fold=0 is the first pass (EDT), fold=1 the second.
    assert to_utc(datetime(2026, 11, 1, 1, 30)) == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
    assert to_utc(datetime(2026, 11, 1, 1, 30, fold=1)) == datetime(2026, 11, 1, 6, 30, tzinfo=UTC)


@pytest.mark.usefixtures("local_new_york")
def test_naive_values_mean_local_time_everywhere() -> None:
    gap = datetime(2026, 3, 8, 2, 30)
    after_jump = datetime(2026, 3, 8, 7, 30, tzinfo=UTC)
    assert Schedule.once(gap).cadence.at == after_jump  # type: ignore[union-attr]
    assert calculate_next_trigger(gap, "1m", now=gap) == after_jump + timedelta(minutes=1)
    assert calculate_next_cron_trigger("0 * * * *", gap, "UTC") == after_jump + timedelta(
        minutes=30
    )
    # an anchored interval raised TypeError on a naive datetime
    grid = Interval("15m", anchor="2026-03-08T00:00:00Z")
    assert grid.first_due(gap, UTC) == after_jump
    assert grid.next_due(slot=gap, finished_at=gap, now=gap, zone=UTC) == after_jump + timedelta(
        minutes=15
    )
    assert Interval("1m", start_at="2026-03-08T00:00:00Z").first_due(gap, UTC) == after_jump


def test_an_instant_outside_the_calendar_in_utc_is_a_value_error() -> None:
    """It was a bare OverflowError from ``astimezone``, which every face let through."""
    tokyo = datetime(1, 1, 1, tzinfo=ZoneInfo("Asia/Tokyo"))
    with pytest.raises(ValueError, match="outside the calendar in UTC"):
        to_utc(tokyo)
    with pytest.raises(ValueError, match=r"^at '9999-12-31T23:00-05:00': 9999-12-31T23:00:00-05"):
        parse_timestamp("9999-12-31T23:00-05:00", what="at")
