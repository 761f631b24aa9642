"""Conversions between datetimes, the on-disk timestamp format and time zones.

Every instant inside herdsched is an aware UTC datetime with millisecond precision, the
precision of the state file, so what is kept in memory equals what a reload returns.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import struct
from datetime import date, datetime, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil import parser as dateutil_parser
from dateutil import tz as dateutil_tz

__all__ = [
    "format_timestamp",
    "parse_timestamp",
    "pytz_zone_name",
    "resolve_timezone",
    "system_timezone",
    "to_utc",
    "truncate_ms",
]


def truncate_ms(moment: datetime) -> datetime:
    """Drop sub-millisecond precision (the state file keeps milliseconds)."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def to_utc(moment: datetime) -> datetime:
    """An aware UTC datetime, ms precision; a naive input means the process's local time.

    A naive time is read in :func:`system_timezone` by PEP 495's rules: in a repeated hour
    ``fold=0`` (the default) is the first pass and ``fold=1`` the second; a time inside a DST
    gap lands after the jump (``fold=0``: 02:30 in New York's spring-forward gap is 03:30 EDT).
    ``datetime.astimezone()`` on a naive value would put it before the jump instead.
    A time whose UTC instant falls outside years 1 to 9999 is a ``ValueError``.
    """
    if type(moment) is datetime and moment.tzinfo is timezone.utc:  # the usual case, cheaply
        return moment if moment.microsecond % 1000 == 0 else truncate_ms(moment)
    if not isinstance(moment, datetime):
        raise TypeError(f"expected a datetime, got {type(moment).__name__}: {moment!r}")
    if moment.tzinfo is None or moment.utcoffset() is None:
        moment = moment.replace(tzinfo=system_timezone())
    try:
        return truncate_ms(moment.astimezone(timezone.utc))
    except OverflowError:  # 0001-01-01T00:00+09:00 is in year 0 in UTC
        raise ValueError(
            f"{moment.isoformat()} is outside the calendar in UTC (years 1 to 9999)"
        ) from None


def format_timestamp(moment: datetime) -> str:
    """``2026-11-22T05:41:48.898Z``: ISO-8601 UTC with milliseconds, as stored on disk."""
    # isoformat() zero-pads every field (strftime("%Y") does not below year 1000 on glibc) and
    # cuts (never rounds) to milliseconds; on a UTC datetime it ends in "+00:00"
    return to_utc(moment).isoformat(timespec="milliseconds")[:-6] + "Z"


def parse_timestamp(value: object, *, what: str = "timestamp") -> datetime:
    """Read any ISO-8601 string, a YAML timestamp (datetime) or date into aware UTC.

    Strings without an offset are read as UTC (that is what the state file holds); datetimes
    without tzinfo follow :func:`to_utc` (local time).
    """
    if isinstance(value, datetime):
        try:
            return to_utc(value)
        except ValueError as exc:  # outside the calendar once in UTC
            raise ValueError(f"{what} {exc}") from None
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError(f"{what} cannot be empty")
        try:
            parsed = _isoparse(text)
        except (ValueError, OverflowError) as exc:
            raise ValueError(f"{what} {value!r} is not an ISO-8601 date-time") from exc
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        try:
            return to_utc(parsed)
        except ValueError as exc:
            raise ValueError(f"{what} {value!r}: {exc}") from None
    raise ValueError(f"{what} must be an ISO-8601 string or a datetime, got {value!r}")


#: the shape herdsched writes (and PostgreSQL's JSON holds), in the form Python 3.10's
#: ``datetime.fromisoformat`` reads too (3 or 6 digits of a second, an offset, no ``Z``)
_STORED_SHAPE = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{3}(?:\d{3})?)?(?:[+-]\d\d:\d\d)?"
)


#: ISO 8601 as dateutil is asked to read it: a year, a month or a week alone, or a whole date
#: (extended, basic, week or ordinal) with, optionally, "T", "t" or a space and a time
#: (extended or basic; a fraction only of a second) and an offset. Older dateutil releases
#: (2.x, which boto3 requires, and 3.0) read a stray digit, a short offset or a space inside a
#: time as another time instead of refusing it.
_ISO_SHAPE = re.compile(
    r"\d{4}(?:-\d\d|-?W\d\d)?"
    r"|\d{4}(?:-\d\d-\d\d|\d{4}|-?W\d\d-?\d|-?\d{3})"
    r"(?:[Tt ]\d\d(?::\d\d(?::\d\d(?:[.,]\d+)?)?|\d\d(?:\d\d(?:[.,]\d+)?)?)?"
    r"(?:[Zz]|[+-]\d\d(?::?\d\d)?)?)?"
)


def _isoparse(text: str) -> datetime:
    """``text`` as a datetime: the stored shape by the standard library (80 times faster than
    dateutil, which matters when thousands of states are read); anything else by dateutil,
    which reads more of ISO 8601 (``2026-11``, ``24:00``), once the text has one of its shapes
    (``datetime.fromisoformat`` would misread a fractional minute or cut off a stray digit, and
    older dateutil releases read some typos as other times)."""
    utc = text.endswith("Z")
    if _STORED_SHAPE.fullmatch(text[:-1] if utc else text):
        return datetime.fromisoformat(text[:-1] + "+00:00" if utc else text)
    if not _ISO_SHAPE.fullmatch(text):
        raise ValueError(f"{text!r} is not in an ISO 8601 shape")
    return dateutil_parser.isoparse(text)


def wall_time(moment: datetime, zone: tzinfo | None) -> datetime:
    """``moment`` on the wall clock of ``zone`` (the system's for ``None``), or in UTC when that
    wall clock is past the calendar's end (the last hours of 9999 seen east of UTC): a time a
    schedule may hold must never keep a page or a table from being shown."""
    try:
        return moment.astimezone(zone)
    except OverflowError:
        return moment.astimezone(timezone.utc)


#: Names ``ZoneInfo`` opens that name no zone of their own: the host's zone (which differs
#: from host to host, while a schedule's zone is stored and shared), a rules template, and the
#: tzdata placeholder for "zone unknown".
_NO_ZONES = frozenset({"localtime", "posixrules", "Factory"})


def resolve_timezone(name: str | tzinfo | None) -> tzinfo:
    """An IANA zone by name (``None`` → the system zone); an unknown name is an error.

    A pytz zone is read by its IANA name (see :func:`pytz_zone_name`)."""
    if name is None:
        return system_timezone()
    if isinstance(name, dateutil_tz.tzlocal):
        return system_timezone()  # the same zone, read so that DST days come out right
    if isinstance(name, dateutil_tz.tzrange):  # tzstr(...) too
        raise ValueError(
            f"time zone {name!r} places a wall time skipped by a spring-forward jump before "
            "the jump, so cron slots on DST days would be wrong: give the IANA name, or the "
            "rule as text (TZ) for the system zone"
        )
    if isinstance(name, ZoneInfo) and name.key:
        _check_zone_name(name.key)
    if isinstance(name, tzinfo):
        named = pytz_zone_name(name)
        return name if named is None else ZoneInfo(named)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"time zone must be an IANA name such as 'Europe/Berlin', got {name!r}")
    _check_zone_name(name)
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        # OSError: a directory of the zone database such as "America" is not a zone.
        raise ValueError(
            f"Unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'"
        ) from exc


def _check_zone_name(name: str) -> None:
    """Refuse a name ``ZoneInfo`` opens that names no zone of its own (see ``_NO_ZONES``)."""
    key = name.strip()
    instead = "one such as 'Europe/Berlin'"
    if key.startswith("right/"):
        why = "a copy of a zone that counts leap seconds, 27 s off the wall clock"
    elif key.startswith("posix/"):
        why, instead = "a copy of another zone", repr(key.removeprefix("posix/"))
    elif key == "localtime":
        why = "this host's own zone, which another host reads as its own"
    elif key in _NO_ZONES:
        why = "no zone, only a file of the zone database"
    else:
        return
    raise ValueError(f"time zone {name!r} is not an IANA zone name ({why}): give {instead}")


def pytz_zone_name(zone: tzinfo) -> str | None:
    """The IANA name of a pytz zone (``pytz.timezone("America/New_York")``), else ``None``.

    pytz zones do not follow PEP 495: attached to a wall time (``replace(tzinfo=...)``, as every
    computation here does) they answer the zone's first offset in history, so New York would
    be 4 h 56 min behind UTC and every schedule minutes off. Their name gives the real zone."""
    name = getattr(zone, "zone", None)
    return name if isinstance(name, str) and callable(getattr(zone, "localize", None)) else None


#: The start of a POSIX ``TZ`` rule: a zone abbreviation (``CET``, ``<+0330>``), then its offset.
_POSIX_RULE = re.compile(r"(?:[A-Za-z]{3,}|<[+-]?[A-Za-z0-9]+>)[+-]?[0-9]")


def zone_name(zone: tzinfo) -> str:
    """How a person names ``zone``: its IANA key, else its current abbreviation (``CET``)."""
    key = getattr(zone, "key", None)
    if isinstance(key, str) and key:
        return key
    return datetime.now(zone).tzname() or str(zone)


#: The system's zone file, read when ``TZ`` names no zone.
LOCALTIME = "/etc/localtime"


def system_timezone() -> tzinfo:
    """The process's local zone, as an IANA zone when it can be named, else the zone file
    ``/etc/localtime`` (a copy, as a container mounts it) read by ``zoneinfo``, else UTC.

    ``TZ`` wins as it does for every program: a zone name, a zone file's path, or a POSIX rule
    such as ``CET-1CEST,M3.5.0,M10.5.0/3`` (see :func:`_posix_rule_zone`). A ``TZ`` that is
    none of these is passed over for ``/etc/localtime``.
    """
    env = os.environ.get("TZ", "").lstrip(":")
    if env:
        try:
            return ZoneInfo(env)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
        if os.path.isabs(env) and os.path.isfile(env):
            with contextlib.suppress(OSError, ValueError):  # a file that is no zone file
                return _zone_file(env)
        if _POSIX_RULE.match(env):
            try:
                return _posix_rule_zone(env)
            except ValueError:
                pass
    try:
        return _zone_file(LOCALTIME)  # by its name when it links into a zone database
    except (OSError, ValueError):  # none, or not a zone file: dateutil's tzlocal would read
        return timezone.utc  # the C library's answer, which is UTC then too


def _posix_rule_zone(rule: str) -> ZoneInfo:
    """A zone that follows the POSIX ``TZ`` rule ``rule`` at every date, as ``zoneinfo`` does.

    ``zoneinfo`` reads such a rule as the footer of a zone file (RFC 8536, section 3.3), where
    it holds after the file's last transition: a file with no transitions and only the footer
    makes it hold always. dateutil's zones for a rule (``tzlocal``, ``tzstr``) place a wall time
    skipped by a spring-forward jump before the jump, not after it as every IANA zone does, and
    the cron arithmetic relies on the latter. A ``ValueError`` for a rule zoneinfo cannot read.
    """

    def header() -> bytes:  # version 2; counts: UT/local, std/wall, leap, time, type, char
        return b"TZif2" + bytes(15) + struct.pack(">6l", 0, 0, 0, 0, 1, 1)

    one_type = struct.pack(">lbB", 0, 0, 0) + b"\0"  # required, unused: no transition uses it
    data = header() + one_type + header() + one_type + b"\n" + rule.encode("ascii") + b"\n"
    try:
        return ZoneInfo.from_file(io.BytesIO(data), key=rule)
    except (ValueError, UnicodeEncodeError) as exc:
        raise ValueError(f"TZ {rule!r} is not a POSIX rule zoneinfo can read") from exc


def _zone_file(path: str) -> tzinfo:
    """The zone of a zone file (``TZ=/usr/share/zoneinfo/Europe/Berlin``), by its name when it
    lies in a zone database."""
    marker = "zoneinfo/"
    real = os.path.realpath(path)
    if marker in real:
        try:
            return ZoneInfo(real.split(marker, 1)[1])
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    with open(path, "rb") as file:
        return ZoneInfo.from_file(file, key=path)
