"""The data model: agents, schedules, persisted state, run records and results (attrs classes).

Everything is validated at construction, so a bad value fails where it was written, with an
error that names the field, rather than later inside the timer thread.
"""

from __future__ import annotations

import enum
import functools
import inspect
import itertools
import math
import re
import reprlib
import threading
import types
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from datetime import date, datetime, timedelta, timezone, tzinfo
from typing import Any, TypeVar, Union

import attrs

from herdsched.cadence import Cron, Interval, Once, coerce_interval
from herdsched.errors import InvalidScheduleError
from herdsched.timestamps import to_utc

__all__ = [
    "Agent",
    "CatchUp",
    "JobFunc",
    "JobResult",
    "NotifyPolicy",
    "Overlap",
    "RejectedDefinition",
    "RunRecord",
    "RunStatus",
    "Schedule",
    "ScheduleState",
    "ScheduleStatus",
    "ScheduleType",
    "SchedulerState",
    "SchedulerStatus",
    "SearchPage",
    "SkipReason",
    "Status",
    "TriggerInfo",
    "TriggerResult",
    "TriggerType",
    "check_schedule_arguments",
]


_E = TypeVar("_E", bound=enum.Enum)


class _StrEnum(str, enum.Enum):
    def __str__(self) -> str:
        return str(self.value)


class Status(_StrEnum):
    """A schedule's persisted status."""

    IDLE = "idle"
    RUNNING = "running"
    DISABLED = "disabled"
    PAUSED = "paused"
    COMPLETED = "completed"


class RunStatus(_StrEnum):
    """How a run ended (``last_result`` in the state file, ``RunRecord.status``)."""

    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    SKIPPED = "skipped"
    DEFERRED = "deferred"
    MISSED = "missed"
    #: a run-now request accepted and waiting for the active scheduler (``history()`` only)
    QUEUED = "queued"
    #: a run-now request whose run has started and not ended yet (``history()`` only)
    RUNNING = "running"


class SkipReason(_StrEnum):
    """Why a schedule did not fire on a pass, in the order the checks are made."""

    DISABLED = "disabled"
    UNSUPPORTED_TYPE = "unsupported_type"
    ALREADY_RUNNING = "already_running"
    AT_CAPACITY = "at_capacity"
    NOT_DUE = "not_due"
    NO_WORK = "no_work"
    STOPPING = "stopping"


class ScheduleType(_StrEnum):
    INTERVAL = "interval"
    CRON = "cron"
    ONCE = "once"
    WEBHOOK = "webhook"
    CHAT = "chat"
    MANUAL = "manual"


class TriggerType(_StrEnum):
    INTERVAL = "interval"
    CRON = "cron"
    ONCE = "once"
    MANUAL = "manual"


class CatchUp(_StrEnum):
    """After downtime: fire a missed schedule once, or wait for its next slot."""

    ONCE = "once"
    SKIP = "skip"


class Overlap(_StrEnum):
    """A cron/once slot that comes due while the schedule's own job still runs."""

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"


class NotifyPolicy(_StrEnum):
    ALWAYS = "always"
    CONDITIONAL = "conditional"
    NEVER = "never"


def _coerce_enum(cls: type[_E], field: str, value: Any, *, optional: bool = True) -> Any:
    if (value is None and optional) or type(value) is cls:
        return value
    try:
        return cls(value)
    except ValueError:
        valid = ", ".join(str(m.value) for m in cls)
        raise InvalidScheduleError(
            f"{field} must be one of {valid}; got {value!r}", field=field, value=value
        ) from None


def _to_schedule_type(value: Any) -> ScheduleType:
    return _coerce_enum(ScheduleType, "type", value, optional=False)  # type: ignore[no-any-return]


def _to_catch_up(value: Any) -> CatchUp | None:
    return _coerce_enum(CatchUp, "catch_up", value)  # type: ignore[no-any-return]


def _to_overlap(value: Any) -> Overlap:
    return _coerce_enum(Overlap, "overlap", value, optional=False)  # type: ignore[no-any-return]


def _to_notify(value: Any) -> NotifyPolicy:
    return _coerce_enum(NotifyPolicy, "notify", value, optional=False)  # type: ignore[no-any-return]


def _to_status(value: Any) -> Status:
    return _coerce_enum(Status, "status", value, optional=False)  # type: ignore[no-any-return]


def _to_run_status(value: Any) -> RunStatus:
    return _coerce_enum(RunStatus, "status", value, optional=False)  # type: ignore[no-any-return]


def _to_opt_run_status(value: Any) -> RunStatus | None:
    return _coerce_enum(RunStatus, "last_result", value)  # type: ignore[no-any-return]


def _to_trigger_type(value: Any) -> TriggerType:
    return _coerce_enum(TriggerType, "trigger_type", value, optional=False)  # type: ignore[no-any-return]


def _ms_time(value: Any) -> Any:
    """Aware datetimes are cut to whole milliseconds (UTC), the precision of the state file,
    so a record read back equals the record written."""
    if value is None or (
        type(value) is datetime and value.tzinfo is timezone.utc and value.microsecond % 1000 == 0
    ):
        return value  # the common case, already normal: keep state transitions cheap
    if isinstance(value, datetime) and value.utcoffset() is not None:
        return to_utc(value)
    return value


def _aware_time(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Validator: ``None`` or an aware datetime (structure strings through the converter)."""
    if value is None or (type(value) is datetime and value.tzinfo is timezone.utc):
        return
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidScheduleError(
            f"{attribute.name} must be an aware datetime, got {value!r}",
            field=attribute.name,
            value=value,
        )


#: How much of a failed job's traceback a run record keeps (its end, where the error is).
MAX_TRACEBACK = 8192


def _bounded_traceback(value: str | None) -> str | None:
    """The end of a traceback, escaped first (see :func:`storable_text`), then bounded."""
    if value is None:
        return None
    value = _storable(value)
    return value if len(value) <= MAX_TRACEBACK else "...\n" + value[-(MAX_TRACEBACK - 4) :]


def _summary(value: Any) -> str | None:
    return None if value is None else _storable(str(value))[:500]


def _opt_timeout(value: Any) -> timedelta | None:
    if value is None:
        return None
    return coerce_interval(value, what="timeout")


def _optional(kind: type, what: str) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """Validator: ``None`` or an instance of ``kind`` (``what`` in the message)."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None and not isinstance(value, kind):
            raise TypeError(
                f"{type(instance).__name__}.{attribute.name} must be {what} or None, got "
                f"{type(value).__name__} {value!r}"
            )

    return check


def _optional_number(*, integral: bool) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """Validator: ``None``, a whole number of at least 0 (``integral``), or a finite number."""
    what = "a whole number of at least 0" if integral else "a finite number"

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None:
            return
        kinds = (int,) if integral else (int, float)
        fits = isinstance(value, kinds) and not isinstance(value, bool)
        if not fits or (integral and value < 0) or not _fits_a_float(value):
            raise TypeError(
                f"{type(instance).__name__}.{attribute.name} must be {what} or None, got "
                f"{type(value).__name__} {value!r}"
            )

    return check


def _fits_a_float(value: float) -> bool:
    """Whether ``value`` is a finite number a float holds (``10**400`` is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


JobFunc = Callable[["TriggerInfo"], Any]
CadenceT = Union[Interval, Cron, Once, None]  # noqa: UP007 - runtime alias

_CADENCE_FOR_TYPE = {
    ScheduleType.INTERVAL: Interval,
    ScheduleType.CRON: Cron,
    ScheduleType.ONCE: Once,
}


def _check_cadence(instance: Schedule, attribute: attrs.Attribute[Any], value: CadenceT) -> None:
    expected = _CADENCE_FOR_TYPE.get(instance.type)
    if expected is None:
        if value is not None:
            raise InvalidScheduleError(
                f"a {instance.type} schedule fires only when triggered and takes no cadence",
                field="type",
                value=instance.type,
            )
    elif not isinstance(value, expected):
        raise InvalidScheduleError(
            f"{instance.type} schedules need an {expected.__name__} cadence, got {value!r}"
            if expected is Interval or expected is Once
            else f"{instance.type} schedules need a {expected.__name__} cadence, got {value!r}",
            field="cadence",
            value=value,
        )


def _is_bool(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidScheduleError(
            f"{attribute.name} must be true or false, got {value!r}",
            field=attribute.name,
            value=value,
        )


def _check_callable(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if not callable(value):
        raise InvalidScheduleError(
            f"{attribute.name} must be callable, got {value!r}", field=attribute.name, value=value
        )
    check_job_arguments(value, attribute.name)


def check_job_arguments(value: Callable[..., Any], field: str = "job") -> None:
    """Refuse a job that cannot be called with one argument (the run's :class:`TriggerInfo`):
    one that takes none, or two (an unbound method), would fail every run instead; and an
    ``async def`` or generator function, whose call runs nothing (see :func:`sync_job_problem`).
    """
    problem = sync_job_problem(value)
    if problem is not None:
        name = getattr(value, "__qualname__", None) or type(value).__name__
        raise InvalidScheduleError(f"{field} {name} {problem}", field=field, value=value)
    try:
        # what the job itself takes, not what a function it wraps does (functools.wraps)
        signature = inspect.signature(value, follow_wrapped=False)
    except (TypeError, ValueError):  # a callable without one (some built-ins): not checked
        return
    try:
        signature.bind(None)
    except TypeError:
        name = getattr(value, "__qualname__", None) or type(value).__name__
        raise InvalidScheduleError(
            f"{field} {name} cannot be called with one argument (the run's TriggerInfo): its "
            f"parameters are {signature}",
            field=field,
            value=value,
        ) from None


def sync_job_problem(value: object) -> str | None:
    """Why calling ``value`` (a job) would run nothing, or ``None``: an ``async def``
    function's call only makes a coroutine, a generator function's a generator, and jobs are
    called on threads, which never await or iterate them (a callable object's ``__call__``
    counts as its function). Told by the function's code, so a mock is never taken for one."""
    flags = _code_flags(value) | _code_flags(inspect.getattr_static(type(value), "__call__", None))
    kinds = (
        (inspect.CO_COROUTINE, "a coroutine"),
        (inspect.CO_ASYNC_GENERATOR, "an async generator"),
        (inspect.CO_GENERATOR, "a generator"),
    )
    for flag, made in kinds:
        if flags & flag:
            return (
                f"is an async def or generator function: calling it makes {made} and runs "
                "nothing (jobs are called on threads); write a plain def, and call "
                "asyncio.run(...) in it for async code"
            )
    return None


def _code_flags(func: object) -> int:
    """The flags of the code ``func`` runs (through partials and bound methods), 0 if none.
    Exact types, not ``isinstance``: a mock made with ``spec=`` passes for what it mimics."""
    while type(func) is functools.partial:
        func = func.func
    if type(func) is types.MethodType:
        func = func.__func__
    return func.__code__.co_flags if type(func) is types.FunctionType else 0


def _opt_str(
    field: str, *, empty_ok: bool = True
) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None and not isinstance(value, str):
            raise InvalidScheduleError(
                f"{field} must be a string, got {value!r}", field=field, value=value
            )
        if not empty_ok and value is not None and not value.strip():
            raise InvalidScheduleError(
                f"{field} cannot be empty (got {value!r}): give a name, or None for none",
                field=field,
                value=value,
            )

    return check


#: Levels of nesting metadata may have (it is a label bag, not a document store).
MAX_METADATA_DEPTH = 20


def _prompt_text(field: str) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """A prompt a schedule or agent keeps: text (or ``None``) that every store keeps and a
    command's arguments can carry (no NUL: it failed every run of a command job)."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, str):
            raise InvalidScheduleError(
                f"{field} must be a string, got {value!r}", field=field, value=value
            )
        problem = text_problem(value, field)
        if problem is not None:
            raise InvalidScheduleError(problem, field=field, value=value)

    return check


def _metadata(value: Any) -> dict[str, Any]:
    """A schedule's ``metadata``: JSON data (a mapping of text keys to text, numbers, booleans,
    ``None``, lists and mappings), so every store keeps it and every face can show it. A set,
    bytes, a date, NaN or text no store keeps used to be accepted and then broke the REST
    listing of every schedule."""
    if not isinstance(value, Mapping):
        raise InvalidScheduleError(
            f"metadata must be a mapping, got {type(value).__name__} {value!r}",
            field="metadata",
            value=value,
        )
    problem = json_problem(value, "metadata", 0)
    if problem is not None:
        raise InvalidScheduleError(problem, field="metadata", value=value)
    return dict(value)


def json_problem(value: Any, where: str, depth: int) -> str | None:
    """Why ``value`` (found at ``where``) is not JSON data every store keeps, or ``None``:
    every culprit in it, not the first alone (the first ten, and how many more)."""
    problems = list(itertools.islice(_json_problems(value, where, depth), _NAMED + 1))
    if len(problems) > _NAMED:
        more = sum(1 for _ in _json_problems(value, where, depth)) - _NAMED
        problems[_NAMED:] = [f"and {more} more"]
    return "; ".join(problems) if problems else None


#: How many culprits a refusal names (a body of twenty thousand NaNs is one refusal).
_NAMED = 10

#: A culprit's repr, cut short past a line's length (a datetime stays whole).
_SHORT = reprlib.Repr()
_SHORT.maxother = _SHORT.maxstring = 80


#: what to write instead of a value JSON cannot hold, by its type
_INSTEAD = {
    "set": "write a list",
    "frozenset": "write a list",
    "bytes": "write text",
    "bytearray": "write text",
    "date": "write a date or time as text",
    "datetime": "write a date or time as text",
    "time": "write a date or time as text",
}


def _json_problems(value: Any, where: str, depth: int) -> Iterator[str]:
    if depth > MAX_METADATA_DEPTH:
        yield f"{where} is nested more than {MAX_METADATA_DEPTH} levels deep"
    elif value is None or isinstance(value, (bool, int)):
        return
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield f"{where} is {value!r}, which JSON cannot hold"
    elif isinstance(value, str):
        if (problem := text_problem(value, where)) is not None:
            yield problem
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                yield f"{where}: keys must be strings, got {type(key).__name__} {key!r}"
            elif (problem := text_problem(key, f"{where} key")) is not None:
                yield problem
            else:
                yield from _json_problems(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _json_problems(item, f"{where}[{index}]", depth + 1)
    else:
        kind = type(value).__name__
        instead = _INSTEAD.get(kind, "write it as one of them")
        yield (  # the value's repr cut short: a megabyte of bytes is not echoed back
            f"{where} is a {kind} ({_SHORT.repr(value)}): metadata holds text, numbers, "
            f"booleans, null, lists and mappings ({instead})"
        )


def text_problem(value: str, where: str) -> str | None:
    """Why ``value`` is not text every store keeps (a lone surrogate, a NUL), or ``None``."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"{where} is not valid text: {value[exc.start : exc.end]!r} at position "
            f"{exc.start} is not a character (a lone surrogate)"
        )
    if "\x00" in value:
        return f"{where} contains a NUL character at position {value.index(chr(0))}"
    return None


def storable_text(value: Any) -> Any:
    """Text a job handed over (its output, an exception's message, a session id) as text
    every store keeps: a lone surrogate (undecodable bytes a file name or a command's output
    carried: ``os.fsdecode(b"caf\\xe9")``) and NUL (which PostgreSQL cannot store) are
    written as escapes (``\\udce9``, ``\\x00``). One such output otherwise failed every group
    commit after it. What is not a string is left for the field's validator."""
    return _storable(value) if isinstance(value, str) else value


def _storable(value: str) -> str:
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def owner_problem(value: object) -> str | None:
    """Why ``value`` is no owner name, or ``None``: an owner is a name people filter and read
    in tables, so it is text every store keeps, with no control character, and not blank."""
    if not isinstance(value, str):
        return f"owner must be a string, got {type(value).__name__} {value!r}"
    problem = text_problem(value, "owner")
    if problem is not None:
        return problem
    control = next((c for c in value if unicodedata.category(c) == "Cc"), None)
    if control is not None:
        return (
            f"owner contains a control character ({control!r}) at position {value.index(control)}"
        )
    if not value.strip():
        return f"owner cannot be empty (got {value!r}): give a name, or None for none"
    return None


def check_owner(value: object) -> None:
    """Raise :class:`InvalidScheduleError` for an ``owner`` that is neither ``None`` nor a name
    (see :func:`owner_problem`)."""
    problem = None if value is None else owner_problem(value)
    if problem is not None:
        raise InvalidScheduleError(problem, field="owner", value=value)


def _owner(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    check_owner(value)


@attrs.frozen(kw_only=True)
class Schedule:
    """When and how one named schedule of an agent fires. Build one with the class methods.

    ``Schedule.interval("5m")``, ``Schedule.cron("0 9 * * 1-5", timezone="Europe/Berlin")``,
    ``Schedule.once("2027-12-01T09:00:00Z")``; ``Schedule.manual()`` (and ``webhook``/``chat``)
    only fire through ``trigger()``.
    """

    type: ScheduleType = attrs.field(converter=_to_schedule_type)
    cadence: CadenceT = attrs.field(default=None, validator=_check_cadence)
    prompt: str | None = attrs.field(default=None, validator=_prompt_text("prompt"))
    enabled: bool = attrs.field(default=True, validator=_is_bool)
    timeout: timedelta | None = attrs.field(default=None, converter=_opt_timeout)
    catch_up: CatchUp | None = attrs.field(default=None, converter=_to_catch_up)
    overlap: Overlap = attrs.field(default=Overlap.SKIP, converter=_to_overlap)
    notify: NotifyPolicy = attrs.field(default=NotifyPolicy.NEVER, converter=_to_notify)
    work_source: str | None = attrs.field(
        default=None, validator=_opt_str("work_source", empty_ok=False)
    )
    persist_session: bool = attrs.field(default=False, validator=_is_bool)
    owner: str | None = attrs.field(default=None, validator=_owner)
    job: JobFunc | None = attrs.field(default=None, validator=_check_callable, eq=False)
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=_metadata)

    @classmethod
    def interval(
        cls,
        every: timedelta | float | str,
        *,
        anchor: datetime | str | None = None,
        start_at: datetime | str | None = None,
        jitter_percent: float | None = None,
        **options: Any,
    ) -> Schedule:
        """Run every ``every`` after the previous run completed (``"5m"``, seconds, timedelta);
        ``jitter_percent=None`` takes the scheduler's, ``0`` turns jitter off."""
        try:
            cadence = Interval(
                every, anchor=anchor, start_at=start_at, jitter_percent=jitter_percent
            )
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InvalidScheduleError):  # IntervalParseError among them
                raise
            text = str(exc)
            given = {"anchor": anchor, "start_at": start_at, "jitter_percent": jitter_percent}
            field = next(  # each names itself first: "interval anchor ...", "jitter_percent ..."
                (name for name in given if text.startswith((f"interval {name}", name))),
                "interval",
            )
            value = given.get(field, every)
            raise InvalidScheduleError(text, field=field, value=value, cause=exc) from exc
        return cls(type=ScheduleType.INTERVAL, cadence=cadence, **options)

    @classmethod
    def cron(cls, expression: str, *, timezone: str | None = None, **options: Any) -> Schedule:
        """Run on a cron expression (5 fields, or 6 with seconds first) in an IANA zone."""
        cadence = Cron(expression, timezone=timezone)  # raises InvalidScheduleError only
        return cls(type=ScheduleType.CRON, cadence=cadence, **options)

    @classmethod
    def once(cls, at: datetime | str, **options: Any) -> Schedule:
        """Run once at ``at`` (an aware datetime, a naive local one, or an ISO-8601 string)."""
        try:
            cadence = Once(at)
        except ValueError as exc:
            raise InvalidScheduleError(str(exc), field="at", value=at, cause=exc) from exc
        return cls(type=ScheduleType.ONCE, cadence=cadence, **options)

    @classmethod
    def manual(cls, **options: Any) -> Schedule:
        """Fires only when triggered (``trigger()``, the CLI, the REST API)."""
        return cls(type=ScheduleType.MANUAL, **options)

    @classmethod
    def webhook(cls, **options: Any) -> Schedule:
        """Fired by an external HTTP request through ``trigger()``; never by the timer."""
        return cls(type=ScheduleType.WEBHOOK, **options)

    @classmethod
    def chat(cls, **options: Any) -> Schedule:
        """Fired by a chat connector through ``trigger()``; never by the timer."""
        return cls(type=ScheduleType.CHAT, **options)

    @property
    def fires_on_timer(self) -> bool:
        """Whether the timer thread fires it (interval, cron, once) or only ``trigger()``."""
        return self.cadence is not None

    @property
    def description(self) -> str:
        """The cadence in one line (``every 5m``); the type for schedules only triggers fire."""
        return self.describe()

    def describe(self, zone: tzinfo | None = None) -> str:
        """:attr:`description`, naming ``zone`` (the scheduler's) for a cron without its own."""
        return self.cadence.describe(zone) if self.cadence is not None else str(self.type)

    def with_changes(self, **changes: Any) -> Schedule:
        """A copy with ``changes`` applied and validated."""
        return attrs.evolve(self, **changes)


#: an agent's or schedule's name, matched whole (``fullmatch``: a ``$`` would let a final
#: newline through)
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def check_flag(value: Any, name: str) -> bool:
    """``value`` if it is a bool; a ``TypeError`` naming ``name`` otherwise (``"no"`` is true
    in Python, so a string flag would do the opposite of what it says)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def check_timeout(value: Any, name: str) -> float | None:
    """``value`` as seconds to wait (``None``: for as long as it takes, as is ``inf`` or any
    wait longer than the platform's threads can wait); a ``TypeError`` for anything but a
    number (``"5"``, ``True``) and a ``ValueError`` for NaN or below zero, naming ``name``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be a number of seconds or None, got {type(value).__name__} {value!r}"
        )
    if math.isnan(value):
        raise ValueError(f"{name} must be a number of seconds or None, got nan")
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value!r}")
    return None if value >= threading.TIMEOUT_MAX else float(value)


def check_count(value: Any, name: str, *, minimum: int) -> int:
    """``value`` as a whole number of at least ``minimum`` (a ``limit``, an ``offset``); a
    ``TypeError`` for anything but an int (``"10"``, ``2.5``, ``True``) and a ``ValueError``
    below ``minimum``, both naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")
    return value


def check_choice(enum_cls: type[_E], value: Any, name: str) -> _E:
    """``value`` as a member of ``enum_cls``; a ``ValueError`` naming ``name`` and the choices."""
    try:
        return enum_cls(value)
    except ValueError:
        choices = ", ".join(str(member.value) for member in enum_cls)
        raise ValueError(f"{name} must be one of {choices}; got {value!r}") from None


#: The schedule name under which ``trigger(agent)`` records a run of the agent's own job; no
#: schedule may have it (``herdsched trigger AGENT`` would run that schedule instead).
AD_HOC_SCHEDULE = "manual"


def check_name(kind: str, value: Any) -> None:
    """Refuse an agent or schedule name that is not ASCII letters, digits, '-' and '_', and a
    schedule named as the agent's ad-hoc runs are recorded."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        hint, shown = "", repr(value) if len(repr(value)) <= 80 else repr(value)[:76] + "...'"
        if isinstance(value, bool) or value is None:
            hint = " (YAML reads on, off, yes, no and null unquoted as this: quote the name)"
        elif isinstance(value, (int, float, date)):  # an unquoted 1, 1e3 or 2026-01-01
            shown = str(getattr(value, "source", value))[:80]  # as written, not as a repr
            what = "date" if isinstance(value, date) else "number"
            hint = f" (a {what}, not a string: in a YAML file, quote the name)"
        raise InvalidScheduleError(
            f"{kind} name {shown} is invalid: use ASCII letters (a-z, A-Z), digits, '-' and "
            f"'_', starting with a letter or digit{hint}",
            field="name",
            value=value,
        )
    if kind == "schedule" and value == AD_HOC_SCHEDULE:
        raise InvalidScheduleError(
            f"schedule name {AD_HOC_SCHEDULE!r} is reserved for the runs of the agent's own job "
            "(trigger(agent), herdsched trigger AGENT): choose another name",
            field="name",
            value=value,
        )


def check_prompt(value: Any) -> None:
    """Refuse a run-now prompt that is not text every store keeps: a string or ``None``, and
    no lone surrogates (a malformed ``\\ud800`` escape, undecodable bytes from a command line)
    or NUL characters (which PostgreSQL cannot store)."""
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"prompt must be a string or None, got {type(value).__name__} {value!r}")
    problem = text_problem(value, "prompt")
    if problem is not None:
        raise ValueError(problem)


def check_prompt_override(value: Any) -> None:
    """:func:`check_prompt` for a prompt given to one run (``trigger(prompt=...)``, a run-now
    over REST or the CLI), which must say something: an empty one would run with the default
    prompt, neither the schedule's nor none."""
    check_prompt(value)
    if value is not None and not value.strip():
        raise ValueError(
            f"prompt {value!r} is empty: leave it out to run with the schedule's own prompt"
        )


def _check_name(kind: str) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_name(kind, value)

    return check


def _check_schedules(instance: Agent, attribute: attrs.Attribute[Any], value: Any) -> None:
    for name, schedule in value.items():
        _check_name("schedule")(instance, attribute, name)
        if not isinstance(schedule, Schedule):
            raise InvalidScheduleError(
                f"schedule {name!r} of agent {instance.name!r} must be a Schedule, got "
                f"{type(schedule).__name__}",
                field=f"schedules.{name}",
            )


def _to_schedule_map(value: Mapping[str, Schedule]) -> dict[str, Schedule]:
    if not isinstance(value, Mapping):  # a list of schedules was a bare dict() TypeError
        raise InvalidScheduleError(
            "schedules must be a mapping of names to schedules, such as "
            f'{{"check": Schedule.interval("5m")}}, got {type(value).__name__}',
            field="schedules",
        )
    return dict(value)


def _positive_int(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidScheduleError(
            f"{attribute.name} must be a positive integer, got {value!r}",
            field=attribute.name,
            value=value,
        )


@attrs.frozen
class Agent:
    """A named worker with its own concurrency limit, default job and schedules."""

    name: str = attrs.field(validator=_check_name("agent"))
    max_concurrent: int = attrs.field(default=1, kw_only=True, validator=_positive_int)
    job: JobFunc | None = attrs.field(
        default=None, kw_only=True, validator=_check_callable, eq=False
    )
    schedules: Mapping[str, Schedule] = attrs.field(
        factory=dict, kw_only=True, converter=_to_schedule_map, validator=_check_schedules
    )
    description: str | None = attrs.field(
        default=None, kw_only=True, validator=_optional(str, "a string")
    )
    default_prompt: str | None = attrs.field(
        default=None, kw_only=True, validator=_prompt_text("default_prompt")
    )

    def with_schedule(self, name: str, schedule: Schedule) -> Agent:
        schedules = {**self.schedules, name: schedule}
        return attrs.evolve(self, schedules=schedules)

    def without_schedule(self, name: str) -> Agent:
        schedules = {k: v for k, v in self.schedules.items() if k != name}
        return attrs.evolve(self, schedules=schedules)


def _nonneg_int(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidScheduleError(
            f"{attribute.name} must be a non-negative integer, got {value!r}",
            field=attribute.name,
            value=value,
        )


@attrs.frozen(kw_only=True)
class ScheduleState:
    """The persisted state of one schedule (one entry of ``state.yaml``)."""

    status: Status = attrs.field(default=Status.IDLE, converter=_to_status)
    last_run_at: datetime | None = attrs.field(
        default=None, converter=_ms_time, validator=_aware_time
    )
    last_finished_at: datetime | None = attrs.field(
        default=None, converter=_ms_time, validator=_aware_time
    )
    next_run_at: datetime | None = attrs.field(
        default=None, converter=_ms_time, validator=_aware_time
    )
    last_result: RunStatus | None = attrs.field(default=None, converter=_to_opt_run_status)
    last_error: str | None = attrs.field(default=None, validator=_opt_str("last_error"))
    consecutive_failures: int = attrs.field(default=0, validator=_nonneg_int)
    session_id: str | None = attrs.field(default=None, validator=_opt_str("session_id"))
    disabled_reason: str | None = attrs.field(default=None, validator=_opt_str("disabled_reason"))
    last_slot_at: datetime | None = attrs.field(
        default=None, converter=_ms_time, validator=_aware_time
    )
    # The id of the run in progress, while one is: a run its process left unfinished is
    # recorded as interrupted under the id its job was given.
    running_run_id: str | None = attrs.field(default=None, validator=_opt_str("running_run_id"))
    # Descriptive copies of the definition, so other processes (CLI, web workers) can show what a
    # schedule is without loading the fleet file.
    type: str | None = attrs.field(default=None, validator=_opt_str("type"))
    cadence: str | None = attrs.field(default=None, validator=_opt_str("cadence"))
    owner: str | None = attrs.field(default=None, validator=_opt_str("owner"))
    # When the scheduler that leads found this schedule missing from its fleet (it does not run
    # it); ``None`` while some fleet has it. Registering the schedule again clears it.
    removed_at: datetime | None = attrs.field(
        default=None, converter=_ms_time, validator=_aware_time
    )


@attrs.frozen(kw_only=True)
class RunRecord:
    """One run (or a skipped/missed/interrupted slot) in a schedule's history."""

    run_id: str
    agent: str
    schedule: str
    trigger_type: TriggerType = attrs.field(converter=_to_trigger_type)
    scheduled_for: datetime | None = attrs.field(
        default=None, converter=_ms_time, validator=_aware_time
    )
    started_at: datetime | None = attrs.field(
        default=None, converter=_ms_time, validator=_aware_time
    )
    finished_at: datetime | None = attrs.field(
        default=None, converter=_ms_time, validator=_aware_time
    )
    status: RunStatus = attrs.field(converter=_to_run_status)
    error: str | None = attrs.field(
        default=None, converter=storable_text, validator=_optional(str, "a string")
    )
    output_summary: str | None = attrs.field(default=None, converter=_summary)
    notified: bool = False
    session_id: str | None = attrs.field(
        default=None, converter=storable_text, validator=_optional(str, "a string")
    )
    work_item_id: str | None = attrs.field(
        default=None, converter=storable_text, validator=_optional(str, "a string")
    )
    cost: float | None = None
    turns: int | None = None
    #: the end of a failed job's traceback (at most :data:`MAX_TRACEBACK` characters)
    traceback: str | None = attrs.field(default=None, converter=_bounded_traceback)

    @property
    def duration(self) -> timedelta | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at


@attrs.frozen(kw_only=True)
class TriggerInfo:
    """What a job is told about the run it executes."""

    agent: str
    schedule: str
    prompt: str
    trigger_type: TriggerType
    scheduled_for: datetime | None
    fired_at: datetime
    run_id: str
    consecutive_failures: int = 0
    session_id: str | None = None
    work_item: Any = None
    cancel_event: threading.Event = attrs.field(factory=threading.Event, eq=False)
    metadata: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def cancelled(self) -> bool:
        """Whether the run should stop (timeout or shutdown): check it in long jobs."""
        return self.cancel_event.is_set()


@attrs.frozen
class JobResult:
    """What a job may return; a plain string means ``JobResult(output=...)``.

    Each field is checked when the result is made, inside the job, so a wrong type fails that
    run with an error naming the field instead of losing its record when it is stored."""

    # as every store keeps them (see storable_text): a session id goes into the state as is
    output: str | None = attrs.field(
        default=None, converter=storable_text, validator=_optional(str, "a string")
    )
    session_id: str | None = attrs.field(
        default=None, converter=storable_text, validator=_optional(str, "a string")
    )
    notify: bool | None = attrs.field(default=None, validator=_optional(bool, "True or False"))
    cost: float | None = attrs.field(default=None, validator=_optional_number(integral=False))
    turns: int | None = attrs.field(default=None, validator=_optional_number(integral=True))


@attrs.frozen
class TriggerResult:
    """The answer of ``trigger()``: whether a run was started (or, with ``wait``, succeeded)."""

    success: bool
    run_id: str | None = None
    error: str | None = None
    skipped: bool = False
    skip_reason: SkipReason | None = None


@attrs.frozen
class SchedulerState:
    status: str
    started_at: datetime | None
    check_count: int
    trigger_count: int
    last_check_at: datetime | None


@attrs.frozen(kw_only=True)
class ScheduleStatus:
    """One schedule as ``get_status()`` reports it, with the reason it is not firing."""

    agent: str
    schedule: str
    type: ScheduleType
    status: Status
    enabled: bool
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_result: RunStatus | None
    last_error: str | None
    consecutive_failures: int
    running: int
    skip_reason: SkipReason | None
    owner: str | None = None
    disabled_reason: str | None = None
    #: ``"code"`` (the application's code or fleet file: change it there) or ``"store"``
    #: (created at run time with ``persist=True`` or over REST: changed from any process)
    defined_in: str = "code"


@attrs.frozen
class RejectedDefinition:
    """A stored definition that failed validation when loaded, kept aside with the reason.

    It is no longer loaded; the rest of the fleet runs. Create the schedule again (for example
    with a ``PUT``) to replace it.
    """

    agent: str
    schedule: str
    reason: str
    rejected_at: datetime
    definition: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class SchedulerStatus:
    running: bool
    active_jobs: int
    schedules: list[ScheduleStatus] = attrs.field(factory=list)
    status: str = "stopped"
    leader: Mapping[str, Any] | None = None
    #: stored definitions set aside because they failed validation (see ``RejectedDefinition``)
    rejected: list[RejectedDefinition] = attrs.field(factory=list)


@attrs.frozen
class SearchPage:
    """One page of ``search()`` results with the arithmetic to fetch the next one."""

    items: list[ScheduleStatus]
    total: int
    offset: int
    limit: int
    remaining: int
    hint: str


_T = TypeVar("_T")


def check_name_types(agent: object, schedule: object = None, *, needed: bool = False) -> None:
    """Raise :class:`~herdsched.errors.InvalidScheduleError` naming ``agent`` or ``schedule``
    (``None``, unless ``needed``: any of the agent's) when it is not a string: a list or a dict
    would be a bare "unhashable type" ``TypeError`` from deep inside a lookup."""
    for value, what in ((agent, "agent"), (schedule, "schedule")):
        if (value is not None or needed or what == "agent") and not isinstance(value, str):
            raise InvalidScheduleError(
                f"{what} must be a string, got {type(value).__name__} {value!r}",
                field=what,
                value=value,
            )


def check_schedule_arguments(
    agent: object,
    name: object,
    schedule: object = None,
    *,
    owner: object = None,
    persist: object = False,
    need_schedule: bool = False,
) -> None:
    """Raise :class:`~herdsched.errors.InvalidScheduleError` naming the first argument of a
    schedule call (``add_schedule``, ``update_schedule``) whose type is wrong.

    Checked before anything else, so a wrong type gets an error that says what was expected
    instead of an ``AttributeError`` from deep inside.
    """
    for value, what in ((agent, "agent"), (name, "name")):
        if not isinstance(value, str):
            raise InvalidScheduleError(
                f"{what} must be a string, got {type(value).__name__} {value!r}",
                field=what,
                value=value,
            )
    if need_schedule and not isinstance(schedule, Schedule):
        raise InvalidScheduleError(
            f"schedule must be a Schedule (Schedule.interval(...), Schedule.cron(...), "
            f"Schedule.once(...), ...), got {type(schedule).__name__} {schedule!r}",
            field="schedule",
            value=schedule,
        )
    check_owner(owner)
    if not isinstance(persist, bool):
        raise InvalidScheduleError(
            f"persist must be True or False, got {type(persist).__name__} {persist!r}",
            field="persist",
            value=persist,
        )
