"""Schedule definitions as fleet-file mappings, both ways, with every error located.

:func:`schedule_from_mapping` reads the schedule fields of a fleet file (``type``, ``interval``,
``cron``, ``at``, ``prompt``, ``job``/``command``...) and :func:`schedule_to_mapping` writes them;
the fleet files (:mod:`herdsched.config`), the REST API and the run-time definitions the store
keeps (``schedules.yaml``) all go through them. The checker here reports every problem of a
mapping at once, each with its path (``agents[1].schedules.check.interval``).
"""

from __future__ import annotations

import difflib
import importlib
import re
import reprlib
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import date, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any

import attrs
import yaml
from dateutil import parser as dateutil_parser

from herdsched.cadence import (
    Cron,
    Interval,
    Once,
    format_interval,
    kind_with_article,
    parse_cron_expression,
    parse_interval,
)
from herdsched.command import CommandJob
from herdsched.errors import (
    ConfigError,
    CronParseError,
    IntervalParseError,
    InvalidScheduleError,
    SchedulerError,
)
from herdsched.models import (
    CadenceT,
    CatchUp,
    JobFunc,
    NotifyPolicy,
    Overlap,
    Schedule,
    ScheduleType,
    check_job_arguments,
)
from herdsched.timestamps import resolve_timezone, to_utc

__all__ = [
    "SCHEDULE_FIELDS",
    "job_reference",
    "resolve_job",
    "schedule_from_mapping",
    "schedule_to_mapping",
]

#: Every key a schedule mapping may hold (``expression`` and ``resume_session`` are aliases).
SCHEDULE_FIELDS = (
    "type",
    "interval",
    "cron",
    "expression",
    "at",
    "timezone",
    "anchor",
    "start_at",
    "jitter_percent",
    "prompt",
    "enabled",
    "work_source",
    "persist_session",
    "resume_session",
    "notify",
    "timeout",
    "catch_up",
    "overlap",
    "owner",
    "job",
    "command",
    "metadata",
)

_JOB_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_TYPES = ", ".join(t.value for t in ScheduleType)
_CADENCE_KEYS = {
    ScheduleType.INTERVAL: ("interval", "anchor", "start_at", "jitter_percent", "timezone"),
    ScheduleType.CRON: ("cron", "expression", "timezone"),
    ScheduleType.ONCE: ("at", "timezone"),
}
# Optional schedule fields for which null means "not set" (the default).
_NULLABLE = frozenset(
    {
        "timezone",
        "anchor",
        "start_at",
        "jitter_percent",
        "prompt",
        "work_source",
        "owner",
        "timeout",
        "catch_up",
        "metadata",
        "job",
        "command",
    }
)
_ALL_CADENCE_KEYS = ("interval", "anchor", "start_at", "jitter_percent", "cron", "expression", "at")

# --------------------------------------------------------------------------------------------
# YAML loading: duplicate keys are reported, numbers remember how they were written

try:
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]


class _SourcedInt(int):
    """An int that remembers its YAML text (``1:30`` loads as 90: the message shows both)."""

    source: str


class _SourcedFloat(float):
    source: str


class _FleetLoader(_BaseLoader):
    """Safe loading, plus a note of every duplicate key (YAML would silently keep the last)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[int, str]] = []

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """PyYAML's constructors raise plain Python errors for a value its tag cannot hold (an
        unquoted ``2026-02-30`` is a timestamp with day 30 of February, ``!!int abc``): each
        becomes a YAML error at the value's place, which loading reports as any other."""
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError) as exc:
            kind = str(node.tag).rsplit(":", 1)[-1]
            # a date's own words say what is wrong ("day is out of range for month"); the
            # other constructors' are about their code
            why = f" ({exc})" if kind == "timestamp" and type(exc) is ValueError else ""
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"{_describe(node.value, _EXCERPT)} is not a valid {kind}{why}; to keep it as "
                "text, quote it (without a !! tag)",
                node.start_mark,
            ) from exc


def _construct_mapping(loader: _FleetLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    explicit = sum(1 for key, _ in node.value if key.tag != "tag:yaml.org,2002:merge")
    loader.flatten_mapping(node)
    merged = len(node.value) - explicit  # entries pulled in by "<<" come first
    result: dict[Any, Any] = {}
    seen: dict[Any, yaml.Node] = {}
    for index, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                "found an unhashable key",
                key_node.start_mark,
            ) from None
        if index >= merged:
            if key in seen:
                loader.duplicates.append((key_node.start_mark.line + 1, _told(key_node, seen[key])))
            seen[key] = key_node
        result[key] = loader.construct_object(value_node, deep=True)
    return result


def _told(key_node: yaml.Node, first: yaml.Node) -> str:
    """A duplicate key as written; when written otherwise the first time (``1`` and ``true``,
    which Python holds as one key), that too."""
    written, before = str(key_node.value), str(first.value)
    if written == before or not isinstance(key_node, yaml.ScalarNode):
        return f'"{written}" (YAML would silently keep only the last one)'
    line = first.start_mark.line + 1
    return f'"{written}" (read as the same key as "{before}" on line {line}: only the last is kept)'


def _construct_int(loader: _FleetLoader, node: yaml.ScalarNode) -> int:
    value = _SourcedInt(loader.construct_yaml_int(node))
    value.source = str(node.value)
    return value


def _construct_float(loader: _FleetLoader, node: yaml.ScalarNode) -> float:
    value = _SourcedFloat(loader.construct_yaml_float(node))
    value.source = str(node.value)
    return value


_FleetLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_FleetLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_FleetLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)


def _plain(value: Any) -> Any:
    """Strip the YAML bookkeeping types so user-visible data holds plain ints and floats."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


#: The most values (mappings, lists, keys and scalars) a YAML document may hold once every
#: alias (``*name``) is counted again at each use. Far beyond a real fleet file (written out,
#: tens of megabytes), yet a dozen lines of nested aliases ("billion laughs") pass it, and
#: copying, checking or saving such a document took minutes and gigabytes.
_MAX_VALUES = 1_000_000


def _too_many_values(data: Any, limit: int = _MAX_VALUES) -> tuple[str | int, ...] | None:
    """Where ``data``, each alias counted again at every use, passes ``limit`` values (the path
    up to its last mapping key); ``None`` if it holds no more than ``limit``.

    Loading shares one object among an anchor's uses, so the document is small until something
    copies or walks it; this walk stops at ``limit``, so it costs no more however far the
    aliases would expand.
    """
    count = 0
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            count += 2 * len(node)  # keys and values
            inner = [(v, (*where, str(k))) for k, v in node.items() if isinstance(v, (dict, list))]
        elif isinstance(node, list):
            count += len(node)
            inner = [(v, (*where, i)) for i, v in enumerate(node) if isinstance(v, (dict, list))]
        else:
            continue
        if count > limit:
            while where and not isinstance(where[-1], str):
                where = where[:-1]
            return where
        stack.extend(inner)
    return None


def _load_yaml(path: Path, label: str) -> tuple[Any, list[str]]:
    """The document in ``path`` and the problems met while reading it (``label`` names it).

    A document that its aliases expand past :data:`_MAX_VALUES` values is refused.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, [f"{label}: file not found"]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [f"{label}: cannot read the file: {exc}"]
    loader = _FleetLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark else label
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        return None, [f"{where}: invalid YAML: {problem}"]
    except yaml.YAMLError as exc:
        return None, [f"{label}: invalid YAML: {exc}"]
    finally:
        loader.dispose()
    too_many = _too_many_values(data)
    if too_many is not None:
        shown = f"{label}: {_format_path(too_many)}" if too_many else label
        return None, [
            f"{shown}: the document holds more than {_MAX_VALUES} values once its aliases "
            "(*name) are expanded, too many to check or keep: use fewer nested aliases"
        ]
    problems = [f"{label}:{line}: duplicate key {key}" for line, key in loader.duplicates]
    return data, problems


# --------------------------------------------------------------------------------------------
# Paths and problem collection

_PathT = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _format_path(parts: Sequence[object]) -> str:
    """``agents[0].schedules.check``; a key that is not a name is quoted, cut short (see
    :data:`_EXCERPT`)."""
    text = ""
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        elif isinstance(part, str) and _PLAIN_KEY.fullmatch(part):
            text += f".{part}" if text else part
        elif isinstance(part, str) and len(part) > _EXCERPT:
            text += f"[{part[:_EXCERPT] + '...'!r}]"
        else:
            text += f"[{part!r}]"
    return text


#: The longest text quoted whole in a message about a value.
_QUOTED = 80
#: The longest start of a text quoted where it may come from a file that is not the YAML
#: expected (the keys "root:$6$...:" of /etc/shadow, a whole file read as one string), which
#: may hold secrets.
_EXCERPT = 20


def _describe(value: Any, limit: int = _QUOTED) -> str:
    """How a value is named in a message: YAML words for YAML values; text longer than
    ``limit`` is cut short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {_plain(value)!r}"
    if isinstance(value, str):
        if len(value) > limit:  # a whole file read as one string would fill the screen
            return f'"{value[:limit]}..." ({len(value)} characters)'
        return f'"{value}"'
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


class _Checker:
    """Collects problems; ``emit(path, message)`` decides how a path is shown."""

    def __init__(self, emit: Callable[[_PathT, str], None]) -> None:
        self.emit = emit
        self.count = 0

    def problem(self, path: _PathT, message: str) -> None:
        self.count += 1
        self.emit(path, message)

    def mapping(
        self, value: Any, path: _PathT, what: str, *, limit: int = _QUOTED
    ) -> Mapping[Any, Any] | None:
        """``value`` if it is a mapping; else a problem showing up to ``limit`` characters
        of it (:data:`_EXCERPT` for a whole file, which may not be the one meant)."""
        if isinstance(value, Mapping):
            return value
        self.problem(path, f"{what} must be a mapping, got {_describe(value, limit)}")
        return None

    def known_keys(
        self, data: Mapping[Any, Any], path: _PathT, allowed: Collection[str], what: str
    ) -> None:
        """A problem for each key of ``data`` not in ``allowed``, with a "did you mean" hint.

        Of the keys that are not names (``"root:$6$...:"``: the lines of a file such as
        /etc/shadow, read as YAML) only the first is told, cut short, with their count: such a
        file is not the one meant, and it may hold secrets.
        """
        odd = [
            k
            for k in data
            if isinstance(k, str) and k not in allowed and not _PLAIN_KEY.fullmatch(k)
        ]
        untold = set(odd[1:])
        for key in data:
            if isinstance(key, str) and (key in allowed or key in untold):
                continue
            hint = ""
            if isinstance(key, str):
                close = difflib.get_close_matches(key, list(allowed), n=1)
                if close:
                    hint = f' (did you mean "{close[0]}"?)'
            if isinstance(key, str):  # a name whole, as a typo is told; other text cut short
                shown = _describe(key, _QUOTED if _PLAIN_KEY.fullmatch(key) else _EXCERPT)
            else:
                shown = f'"{_describe(key)}"'
            if len(odd) > 1 and key == odd[0]:
                hint += f" (and {len(odd) - 1} more keys that are not names: is it the file meant?)"
            self.problem(
                (*path, str(key)),
                f"unknown key {shown} in {what}{hint}; valid keys: " + ", ".join(allowed),
            )

    def string(self, value: Any, path: _PathT, what: str, *, empty_ok: bool = False) -> str | None:
        if isinstance(value, str) and (empty_ok or value.strip()):
            return value
        if isinstance(value, str):
            self.problem(path, f"{what} cannot be empty")
        else:
            self.problem(path, f"{what} must be a string, got {_describe(value)}")
        return None

    def boolean(self, value: Any, path: _PathT, what: str) -> bool | None:
        if isinstance(value, bool):
            return value
        self.problem(path, f"{what} must be true or false, got {_describe(value)}")
        return None

    def positive_int(self, value: Any, path: _PathT, what: str) -> int | None:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return int(value)
        self.problem(path, f"{what} must be a positive integer, got {_describe(value)}")
        return None

    def percent(self, value: Any, path: _PathT, what: str) -> float | None:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 100:
            return float(value)
        self.problem(path, f"{what} must be a number from 0 to 100, got {_describe(value)}")
        return None

    def duration(
        self, value: Any, path: _PathT, what: str, *, allow_zero: bool = False
    ) -> timedelta | None:
        """A duration string (``"5m"``, ``"1h30m"``; ``"0s"`` only with ``allow_zero``);
        numbers are the YAML traps, not seconds. Text without a digit is no near miss, so the
        problem says what a duration looks like rather than what is wrong with it."""
        if isinstance(value, timedelta):
            if value > timedelta(0):
                return value
            self.problem(path, f"{what} must be positive, got {value}")
            return None
        if isinstance(value, str):
            if not any(char.isdigit() for char in value):  # "abc", "never": not a near miss
                self.problem(
                    path,
                    f'{what} must be a duration such as "30s", "5m" or "1h30m", got '
                    f"{_describe(value)}",
                )
                return None
            try:
                return parse_interval(value, allow_zero=allow_zero, what=what)
            except IntervalParseError as exc:
                self.problem(path, str(exc))
                return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            source = getattr(value, "source", str(value))
            number = _plain(value)
            if source.strip() != str(number):
                why = f"YAML read {source} as the number {number}"
            else:
                why = f"{number} is a number"
            self.problem(
                path,
                f"{what} is not a duration string: {why}; write a quoted duration such as "
                '"90s", "5m" or "1h30m"',
            )
            return None
        self.problem(path, f'{what} must be a duration string such as "5m", got {_describe(value)}')
        return None

    def choice(self, value: Any, path: _PathT, what: str, choices: Sequence[str]) -> str | None:
        if isinstance(value, str) and value in choices:
            return value
        hint = ""
        if isinstance(value, bool):
            hint = " (YAML 1.1 reads yes/no/on/off as true/false: write one of the words)"
        self.problem(
            path, f"{what} must be one of {', '.join(choices)}; got {_describe(value)}{hint}"
        )
        return None

    def zone(self, value: Any, path: _PathT, what: str) -> str | None:
        text = self.string(value, path, what)
        if text is None:
            return None
        try:
            resolve_timezone(text)
        except ValueError as exc:
            self.problem(path, str(exc))
            return None
        return text.strip()


# --------------------------------------------------------------------------------------------
# Jobs


def resolve_job(reference: str, *, search_path: str | Path | None = None) -> JobFunc:
    """Import the callable named by ``"package.module:function"`` (``function`` may be dotted).

    ``search_path`` (the fleet file's directory) is put on ``sys.path`` first, so a fleet can
    ship its jobs next to it. Raises :class:`~herdsched.errors.InvalidScheduleError` naming
    what could not be found; a module that exits while being imported (``sys.exit()``) or
    raises a ``BaseException`` of its own is such an error too, so it cannot end a
    ``validate`` or ``run`` silently or with a traceback. A ``KeyboardInterrupt`` still
    interrupts.
    """

    if not isinstance(reference, str) or not _JOB_REF.fullmatch(reference.strip()):
        raise InvalidScheduleError(
            f'job must be "package.module:function", got {_describe(reference)}',
            field="job",
            value=reference,
        )
    module_name, _, attr_path = reference.strip().partition(":")
    if search_path is not None:
        folder = str(Path(search_path).resolve())
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            message = f'cannot import module "{module_name}" of job "{reference}": {exc}'
        else:
            message = f'importing module "{module_name}" of job "{reference}" failed: {exc}'
        raise InvalidScheduleError(message, field="job", value=reference, cause=exc) from exc
    except SystemExit as exc:  # the module's own sys.exit(): not a reason for us to exit
        raise InvalidScheduleError(
            f'importing module "{module_name}" of job "{reference}" failed: the module exited '
            f"while being imported (SystemExit({reprlib.repr(exc.code)}))",
            field="job",
            value=reference,
            cause=exc,
        ) from exc
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a module's own BaseException subclass is its failure too
        raise InvalidScheduleError(
            f'importing module "{module_name}" of job "{reference}" failed: '
            f"{type(exc).__name__}: {exc}",
            field="job",
            value=reference,
            cause=exc,
        ) from exc
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InvalidScheduleError(
                f'job "{reference}": module "{module_name}" has no attribute "{attr_path}"',
                field="job",
                value=reference,
            ) from None
        except Exception as exc:  # a module's or class's own __getattr__
            raise InvalidScheduleError(
                f'job "{reference}": looking up "{part}" failed: {type(exc).__name__}: {exc}',
                field="job",
                value=reference,
                cause=exc,
            ) from exc
    if not callable(target):
        raise InvalidScheduleError(
            f'job "{reference}" is not callable ({type(target).__name__})',
            field="job",
            value=reference,
        )
    check_job_arguments(target)
    return target  # type: ignore[no-any-return]


def job_reference(job: object) -> str | None:
    """The ``"module:function"`` text :func:`resolve_job` turns back into ``job``, if any.

    ``None`` for lambdas, nested functions, bound methods of instances and other callables
    that cannot be named by import (a :class:`CommandJob` is written as ``command:`` instead).
    """
    module = getattr(job, "__module__", None)
    qualname = getattr(job, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if "<" in qualname or getattr(job, "__self__", None) is not None:
        return None
    reference = f"{module}:{qualname}"
    try:
        found = resolve_job(reference)
    except SchedulerError:
        return None
    return reference if found is job else None


def _command(chk: _Checker, value: Any, path: _PathT, base_dir: Path | None) -> CommandJob | None:
    if isinstance(value, str):
        try:
            return CommandJob(value, cwd=base_dir)
        except ValueError as exc:
            chk.problem(path, str(exc))
            return None
    if isinstance(value, list):
        bad = [i for i, item in enumerate(value) if not isinstance(item, str)]
        for i in bad:
            chk.problem(
                (*path, i),
                f"command arguments must be strings, got {_describe(value[i])} (quote it)",
            )
        if bad:
            return None
        try:
            return CommandJob(value, cwd=base_dir)
        except ValueError as exc:
            chk.problem(path, str(exc))
            return None
    chk.problem(path, f"command must be a list of arguments or a string, got {_describe(value)}")
    return None


def _job_or_command(
    chk: _Checker, data: Mapping[Any, Any], path: _PathT, base_dir: Path | None
) -> tuple[bool, JobFunc | None]:
    """``(given, job)``: whether ``job``/``command`` is set, and the callable it names."""
    has_job, has_command = "job" in data, "command" in data
    if has_job and has_command:
        chk.problem(path, 'give either "job" or "command", not both')
        return True, None
    if has_job:
        ref = chk.string(data["job"], (*path, "job"), "job")
        if ref is None:
            return True, None
        try:
            return True, resolve_job(ref, search_path=base_dir)
        except SchedulerError as exc:
            chk.problem((*path, "job"), str(exc))
            return True, None
    if has_command:
        return True, _command(chk, data["command"], (*path, "command"), base_dir)
    return False, None


# --------------------------------------------------------------------------------------------
# Schedules


@attrs.frozen
class _ScheduleContext:
    base_dir: Path | None
    cron_zone: str | None  # zone of a cron without its own (None: the scheduler's zone)
    naive_zone: str | tzinfo | None  # zone of times written without an offset (None: the system's)
    now: datetime
    relative_at: bool = True  # whether a once time may be relative to now ("+10m")


def _instant(
    chk: _Checker,
    value: Any,
    *,
    path: _PathT,
    what: str,
    zone: tzinfo,
    now: datetime,
    relative: bool,
) -> datetime | None:
    """An aware UTC instant; times without an offset are read in ``zone``. An instant outside
    the calendar in UTC (``+99999999d``, year 1 east of Greenwich) is a problem at ``path``."""
    try:
        if isinstance(value, datetime):
            moment = value if value.utcoffset() is not None else value.replace(tzinfo=zone)
            return to_utc(moment)
        if isinstance(value, date):
            return to_utc(datetime(value.year, value.month, value.day, tzinfo=zone))
        if not isinstance(value, str) or not value.strip():
            chk.problem(
                path,
                f'{what} must be an ISO-8601 date-time such as "2026-12-01T09:00:00Z", got '
                f"{_describe(value)}",
            )
            return None
        text = value.strip()
        if text.startswith("+"):
            if not relative:
                chk.problem(path, f"{what} cannot be relative ({value!r})")
                return None
            try:
                return to_utc(now + parse_interval(text[1:], what="time from now"))
            except IntervalParseError as exc:
                chk.problem(path, f'{what} {value!r} is not a time from now such as "+10m" ({exc})')
                return None
        try:
            parsed = dateutil_parser.isoparse(text)
        except (ValueError, OverflowError):
            chk.problem(
                path,
                f'{what} "{value}" is not an ISO-8601 date-time (such as "2026-12-01T09:00:00Z")'
                + (' or a time from now such as "+10m"' if relative else ""),
            )
            return None
        if parsed.utcoffset() is None:
            parsed = parsed.replace(tzinfo=zone)
        return to_utc(parsed)
    except (OverflowError, ValueError):  # from to_utc or now + delta: the parsing is guarded
        chk.problem(path, f"{what} {value!r} is outside the calendar in UTC (years 1 to 9999)")
        return None


def _infer_type(chk: _Checker, data: Mapping[Any, Any], path: _PathT) -> ScheduleType | None:
    if "type" in data:
        value = chk.choice(data["type"], (*path, "type"), "type", [t.value for t in ScheduleType])
        return None if value is None else ScheduleType(value)
    kinds = [
        kind
        for kind, keys in (
            (ScheduleType.INTERVAL, ("interval",)),
            (ScheduleType.CRON, ("cron", "expression")),
            (ScheduleType.ONCE, ("at",)),
        )
        if any(k in data for k in keys)
    ]
    if len(kinds) == 1:
        return kinds[0]
    if kinds:  # named where it is missing, so the REST API can name the field
        given = " and ".join(str(kind) for kind in kinds)
        chk.problem((*path, "type"), f'"type" is required: the fields of {given} are both given')
    else:
        chk.problem(
            (*path, "type"),
            f'"type" is required (one of {_TYPES}), or a cadence: "interval", "cron" or "at"',
        )
    return None


def _alias(
    chk: _Checker, data: Mapping[Any, Any], path: _PathT, name: str, alias: str
) -> tuple[bool, Any]:
    if name in data and alias in data:
        chk.problem((*path, alias), f'give "{name}" or its alias "{alias}", not both')
        return False, None
    if name in data:
        return True, data[name]
    if alias in data:
        return True, data[alias]
    return False, None


def _schedule_zones(
    chk: _Checker, data: Mapping[Any, Any], path: _PathT, ctx: _ScheduleContext
) -> tuple[str | None, tzinfo]:
    """``(zone_name, naive_zone)``: the schedule's own ``timezone`` (checked), and the zone its
    times without an offset are read in (its own, else the context's, else the system's)."""
    zone_name: str | None = None
    if "timezone" in data:
        zone_name = chk.zone(data["timezone"], (*path, "timezone"), "timezone")
    return zone_name, resolve_timezone(zone_name or ctx.naive_zone)


def _check_cadence_keys(
    chk: _Checker, data: Mapping[Any, Any], path: _PathT, kind: ScheduleType
) -> None:
    """Report cadence keys that belong to another type (``cron`` on an interval schedule):
    silently ignoring them would hide a mistaken ``type``."""
    allowed = _CADENCE_KEYS.get(kind, ())
    for key in (*_ALL_CADENCE_KEYS, "timezone"):
        if key in data and key not in allowed:
            chk.problem(
                (*path, key), f'"{key}" does not apply to {kind_with_article(kind.value)} schedule'
            )


def _interval_args(
    chk: _Checker, data: Mapping[Any, Any], path: _PathT, zone: tzinfo, now: datetime
) -> dict[str, Any]:
    """The checked arguments of an interval cadence (``every``, ``anchor``, ``start_at``,
    ``jitter_percent``); ``anchor`` and ``start_at`` must be absolute times."""
    args: dict[str, Any] = {}
    if "interval" not in data:
        chk.problem((*path, "interval"), 'an interval schedule needs "interval" (such as "5m")')
    else:
        args["every"] = chk.duration(data["interval"], (*path, "interval"), "interval")
    for key in ("anchor", "start_at"):
        if key in data:
            args[key] = _instant(
                chk, data[key], path=(*path, key), what=key, zone=zone, now=now, relative=False
            )
    if "jitter_percent" in data:
        args["jitter_percent"] = chk.percent(
            data["jitter_percent"], (*path, "jitter_percent"), "jitter_percent"
        )
    return args


def _cron_args(
    chk: _Checker, data: Mapping[Any, Any], path: _PathT, zone: str | None
) -> dict[str, Any]:
    """The checked arguments of a cron cadence: the parsed ``cron`` (alias ``expression``) and
    ``zone``. A non-string expression is YAML having read it as a value, so say to quote it."""
    args: dict[str, Any] = {}
    given, expression = _alias(chk, data, path, "cron", "expression")
    key = "cron" if "cron" in data else "expression"
    if not given and "cron" not in data and "expression" not in data:
        chk.problem((*path, "cron"), 'a cron schedule needs "cron" (such as "0 9 * * 1-5")')
    elif given:
        if isinstance(expression, str):
            try:
                args["expression"] = parse_cron_expression(expression)
            except CronParseError as exc:
                chk.problem((*path, key), str(exc))
        else:
            chk.problem(
                (*path, key),
                f'cron expression must be a string such as "0 9 * * 1-5", got '
                f"{_describe(expression)} (YAML turned it into a value: quote it)",
            )
    args["timezone"] = zone
    return args


def _once_args(
    chk: _Checker, data: Mapping[Any, Any], path: _PathT, zone: tzinfo, ctx: _ScheduleContext
) -> dict[str, Any]:
    """The checked argument of a once cadence: ``at``, absolute or (where ``ctx`` allows it)
    relative to ``ctx.now``."""
    if "at" not in data:
        chk.problem((*path, "at"), 'a once schedule needs "at" (such as "2026-12-01T09:00:00Z")')
        return {}
    at = data["at"]
    if not ctx.relative_at and isinstance(at, str) and at.strip().startswith("+"):
        chk.problem(
            (*path, "at"),
            f"at {at!r} is relative, which a stored definition cannot be: every process would "
            'read it from its own "now"; write the time itself (such as "2026-12-01T09:00:00Z")',
        )
        return {}
    moment = _instant(
        chk, at, path=(*path, "at"), what="at", zone=zone, now=ctx.now, relative=ctx.relative_at
    )
    return {"at": moment}


def _cadence_args(
    chk: _Checker,
    data: Mapping[Any, Any],
    path: _PathT,
    kind: ScheduleType | None,
    ctx: _ScheduleContext,
) -> dict[str, Any]:
    """Check the cadence fields of a schedule of type ``kind``; the cadence's arguments.

    A cron without a zone follows the context's cron zone (the agent's, else the
    scheduler's); times without an offset are read in the schedule's zone, else the
    context's naive zone.
    """
    zone_name, naive_zone = _schedule_zones(chk, data, path, ctx)
    if kind is not None:
        _check_cadence_keys(chk, data, path, kind)
    if kind is ScheduleType.INTERVAL:
        return _interval_args(chk, data, path, naive_zone, ctx.now)
    if kind is ScheduleType.CRON:
        return _cron_args(chk, data, path, zone_name or ctx.cron_zone)
    if kind is ScheduleType.ONCE:
        return _once_args(chk, data, path, naive_zone, ctx)
    return {}


_CHOICE_OPTIONS: tuple[tuple[str, type[NotifyPolicy | CatchUp | Overlap]], ...] = (
    ("notify", NotifyPolicy),
    ("catch_up", CatchUp),
    ("overlap", Overlap),
)


def _schedule_options(
    chk: _Checker, data: Mapping[Any, Any], path: _PathT, base_dir: Path | None
) -> dict[str, Any]:
    """Check the fields every schedule type shares (prompt, enabled, timeout, policies,
    metadata, job or command); the keyword arguments of :class:`Schedule` they set."""

    def at(key: str) -> _PathT:
        return (*path, key)

    options: dict[str, Any] = {}
    for key in ("prompt", "work_source", "owner"):
        if key in data:
            options[key] = chk.string(data[key], at(key), key, empty_ok=key == "prompt")
    if "enabled" in data:
        options["enabled"] = chk.boolean(data["enabled"], at("enabled"), "enabled")
    given, value = _alias(chk, data, path, "persist_session", "resume_session")
    if given:
        key = "persist_session" if "persist_session" in data else "resume_session"
        options["persist_session"] = chk.boolean(value, at(key), key)
    if "timeout" in data:
        options["timeout"] = chk.duration(data["timeout"], at("timeout"), "timeout")
    for key, enum_cls in _CHOICE_OPTIONS:
        if key in data:
            options[key] = chk.choice(data[key], at(key), key, [m.value for m in enum_cls])
    if "metadata" in data:
        meta = chk.mapping(data["metadata"], at("metadata"), "metadata")
        if meta is not None:
            for meta_key in meta:
                if not isinstance(meta_key, str):
                    chk.problem(at("metadata"), f"metadata keys must be strings: {meta_key!r}")
            options["metadata"] = _plain(meta)
    _, job = _job_or_command(chk, data, path, base_dir)
    if job is not None:
        options["job"] = job
    return options


def _make_schedule(
    chk: _Checker,
    path: _PathT,
    kind: ScheduleType,
    cadence_args: dict[str, Any],
    options: dict[str, Any],
) -> Schedule | None:
    """The :class:`Schedule` of checked fields; a refusal by the model (the checks above
    cannot see every combination, such as a start so late that the run after it would fall
    after the year 9999) is reported as a problem at the field it names rather than raised."""
    try:
        if kind is ScheduleType.INTERVAL:
            every = cadence_args.pop("every")
            return Schedule.interval(every, **cadence_args, **options)
        if kind is ScheduleType.CRON:
            return Schedule(type=kind, cadence=Cron(**cadence_args), **options)
        if kind is ScheduleType.ONCE:
            return Schedule(type=kind, cadence=Once(cadence_args["at"]), **options)
        return Schedule(type=kind, **options)
    except (SchedulerError, ValueError, TypeError) as exc:
        field = getattr(exc, "field", None)
        chk.problem((*path, field) if isinstance(field, str) else path, str(exc))
        return None


def _build_schedule(
    chk: _Checker, data: Mapping[Any, Any], path: _PathT, ctx: _ScheduleContext
) -> Schedule | None:
    """Validate one schedule mapping, reporting every problem; ``None`` if there was any.

    Problems are reported in a fixed order: unknown keys, the type, the zone, the cadence,
    then the options every type shares.
    """
    before = chk.count
    chk.known_keys(data, path, SCHEDULE_FIELDS, "a schedule")
    data = {k: v for k, v in data.items() if not (v is None and k in _NULLABLE)}
    kind = _infer_type(chk, data, path)
    cadence_args = _cadence_args(chk, data, path, kind, ctx)
    options = _schedule_options(chk, data, path, ctx.base_dir)
    if kind is None or chk.count != before:
        return None
    return _make_schedule(chk, path, kind, cadence_args, options)


def schedule_from_mapping(
    data: Mapping[str, Any],
    *,
    base_dir: str | Path | None = None,
    timezone: str | None = None,
    now: datetime | None = None,
    path: str = "",
    naive_timezone: str | tzinfo | None = None,
    relative_at: bool = True,
) -> Schedule:
    """Build a :class:`~herdsched.models.Schedule` from fleet-file schedule fields.

    ``base_dir`` is where ``job`` modules are imported from and ``command`` runs; ``timezone``
    is the default zone for cron and for times without an offset; ``naive_timezone``, when
    given, is the default zone of times without an offset alone (a cron without a zone then
    stays without one, following the scheduler's: what the REST API needs); ``now`` anchors
    relative ``at`` values (``"+10m"``), which ``relative_at=False`` refuses (a stored
    definition, read anew by every process, must say its time). Either way a schedule's own
    ``timezone`` comes first, as in a fleet file. Raises :class:`~herdsched.errors.ConfigError`
    listing every problem as ``"path: why"`` (``path`` is prefixed to each, such as
    ``"schedules.check"``).
    """
    problems: list[str] = []
    prefix: _PathT = tuple(p for p in path.split(".") if p) if path else ()

    def emit(where: _PathT, message: str) -> None:
        shown = _format_path(where)
        problems.append(f"{shown}: {message}" if shown else message)

    chk = _Checker(emit)
    schedule: Schedule | None = None
    mapping = chk.mapping(data, prefix, "a schedule")
    if mapping is not None:
        if timezone is not None:
            resolve_timezone(timezone)
        ctx = _ScheduleContext(
            Path(base_dir) if base_dir is not None else None,
            timezone,
            naive_timezone if naive_timezone is not None else timezone,
            to_utc(now) if now is not None else datetime.now(tz=_UTC),
            relative_at,
        )
        schedule = _build_schedule(chk, mapping, prefix, ctx)
    if schedule is None or problems:
        raise ConfigError(_summary("Invalid schedule definition", problems), problems)
    return schedule


def _cadence_to_mapping(cadence: CadenceT, *, include_defaults: bool) -> dict[str, Any]:
    """The fleet-file fields of a schedule's cadence (none for the types without one)."""
    if cadence is None:
        return {}
    out = cadence.to_fields()
    if include_defaults and isinstance(cadence, Interval):
        out.setdefault("jitter_percent", None)
    elif include_defaults and isinstance(cadence, Cron):
        out.setdefault("timezone", None)
    return out


def schedule_to_mapping(
    schedule: Schedule, *, include_defaults: bool = False, require_job_name: bool = False
) -> dict[str, Any]:
    """The fleet-file fields of ``schedule``; :func:`schedule_from_mapping` reads them back.

    Options equal to their defaults are left out unless ``include_defaults``. A job is written
    as ``command:`` (a :class:`CommandJob`) or ``job: "module:function"``; a job that cannot be
    named by import (a lambda, a closure) is left out, or raises
    :class:`~herdsched.errors.InvalidScheduleError` when ``require_job_name``.
    """
    out: dict[str, Any] = {"type": schedule.type.value}
    cadence = schedule.cadence
    out.update(_cadence_to_mapping(cadence, include_defaults=include_defaults))
    defaults = Schedule(type=schedule.type, cadence=cadence)
    for field in (
        "prompt",
        "enabled",
        "work_source",
        "persist_session",
        "notify",
        "timeout",
        "catch_up",
        "overlap",
        "owner",
    ):
        value = getattr(schedule, field)
        if value == getattr(defaults, field) and not include_defaults:
            continue
        if isinstance(value, timedelta):
            value = format_interval(value, what=field)
        elif hasattr(value, "value"):
            value = value.value
        out[field] = value
    if schedule.metadata or include_defaults:
        out["metadata"] = dict(schedule.metadata)
    if isinstance(schedule.job, CommandJob):
        out["command"] = list(schedule.job.argv)
    elif schedule.job is not None:
        reference = job_reference(schedule.job)
        if reference is not None:
            out["job"] = reference
        elif require_job_name:
            raise InvalidScheduleError(
                f'job {schedule.job!r} cannot be named as "module:function" (a lambda or a '
                "nested function?): define it at module level",
                field="job",
                value=schedule.job,
            )
    return out


_UTC = timezone.utc


def _summary(title: str, problems: Sequence[str]) -> str:
    count = len(problems)
    head = f"{title} ({count} problem{'s' if count != 1 else ''}):"
    return "\n".join([head, *(f"  - {p}" for p in problems)])
