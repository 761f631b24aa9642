"""The exception hierarchy of herdsched.

Every error is a :class:`SchedulerError` and carries the context a caller needs to act on it
(the offending input, the agent and schedule, the file involved) as attributes, not only in the
message, so programs can react without parsing text.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "AgentNotFoundError",
    "ConfigError",
    "ConflictError",
    "CronParseError",
    "IntervalParseError",
    "InvalidScheduleError",
    "LeadershipLostError",
    "LimitExceededError",
    "RevisionMismatchError",
    "ScheduleNotFoundError",
    "ScheduleTriggerError",
    "SchedulerError",
    "SchedulerShutdownError",
    "StateCorruptedError",
    "StateError",
    "StateLockTimeoutError",
    "StoreSpecError",
    "UnauthorizedError",
]


def quoted(raw: object) -> str:
    """``raw`` in double quotes as written, for a message naming an input; as Python writes it
    when it holds a control character (which would break the message's line or hide in it)."""
    return f'"{raw}"' if isinstance(raw, str) and raw.isprintable() else repr(raw)


class SchedulerError(Exception):
    """Base class of every herdsched error; ``cause`` is the underlying exception, if any."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.cause = cause
        if cause is not None:
            self.__cause__ = cause

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take extra required arguments, which Exception's default pickling (it
        # replays ``self.args``) would drop; rebuild from the attributes instead, so errors
        # survive multiprocessing queues and process pools.
        return (_rebuild_error, (type(self), self.message, self.__dict__.copy()))


def _rebuild_error(
    cls: type[SchedulerError], message: str, state: dict[str, Any]
) -> SchedulerError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    if isinstance(error.cause, BaseException):
        error.__cause__ = error.cause
    return error


class InvalidScheduleError(SchedulerError, ValueError):
    """A schedule definition is invalid; ``field`` names the offending field when known.

    The base of every "bad schedule" error: an unparsable interval (:class:`IntervalParseError`)
    or cron expression (:class:`CronParseError`), an unknown time zone, a bad option. One
    ``except InvalidScheduleError`` catches them all; the most specific class is raised.
    """

    def __init__(
        self,
        message: str,
        field: str | None = None,
        value: object = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message, cause)
        self.field = field
        self.value = value


class IntervalParseError(InvalidScheduleError):
    """An interval such as ``"5m"`` could not be read; ``input`` (and ``value``) is the raw value.

    ``field`` names the setting the duration was given for: ``"interval"`` for a cadence's
    interval, ``"timeout"``, ``"backoff"``, ``"catch_up_window"``... for the others.
    """

    def __init__(
        self,
        message: str,
        input: object,
        cause: BaseException | None = None,
        *,
        field: str = "interval",
    ) -> None:
        super().__init__(message, field, input, cause)
        self.input = input


class CronParseError(InvalidScheduleError):
    """A cron expression is invalid; ``field`` names the offending cron field when it is known.

    ``expression`` (and ``value``) is the expression as given.
    """

    def __init__(
        self,
        message: str,
        expression: str,
        field: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message, field, expression, cause)
        self.expression = expression


class AgentNotFoundError(SchedulerError, KeyError):
    """No agent of that name is registered."""

    def __init__(self, agent: str) -> None:
        hint = ""
        if isinstance(agent, str) and agent.count("/") == 1:  # the command line's AGENT/SCHEDULE
            name, schedule = agent.split("/")
            hint = f" (to name a schedule of agent {name!r}, give it apart: {name!r}, {schedule!r})"
        super().__init__(f"Agent {agent!r} not found{hint}")
        self.agent = agent


class ScheduleNotFoundError(SchedulerError, KeyError):
    """The agent has no schedule of that name."""

    def __init__(self, agent: str, schedule: str) -> None:
        super().__init__(f"Schedule {schedule!r} not found on agent {agent!r}")
        self.agent = agent
        self.schedule = schedule


class ScheduleTriggerError(SchedulerError):
    """A schedule could not be triggered (for example the scheduler is stopping)."""

    def __init__(
        self, message: str, agent: str, schedule: str | None, cause: BaseException | None = None
    ) -> None:
        super().__init__(message, cause)
        self.agent = agent
        self.schedule = schedule


class SchedulerShutdownError(SchedulerError):
    """``stop()`` could not finish cleanly, typically because jobs outlived the timeout.

    ``running_jobs`` names the jobs still running as ``agent/schedule``, sorted (repeated for
    concurrent runs), a job that timed out but has not returned included.
    """

    def __init__(
        self,
        message: str,
        timed_out: bool = False,
        running_job_count: int = 0,
        cause: BaseException | None = None,
        running_jobs: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, cause)
        self.timed_out = timed_out
        self.running_job_count = running_job_count
        self.running_jobs = running_jobs


class StateError(SchedulerError):
    """The state directory could not be read or written; ``path`` is the file involved."""

    def __init__(
        self, message: str, path: Path | str | None = None, cause: BaseException | None = None
    ) -> None:
        super().__init__(message, cause)
        self.path = Path(path) if path is not None else None


class StoreSpecError(StateError, ValueError):
    """A store spec that names no store herdsched can open (empty, another database's URL, a
    DSN libpq cannot read).

    Also a :class:`ValueError`: the spec is bad input, not a failing store.
    """


class StateCorruptedError(StateError):
    """A state file did not parse or validate; it was moved aside, never overwritten.

    ``quarantined_path`` is the copy of the bad bytes, ``restored_from`` the backup that replaced
    it (``None`` when there was none).
    """

    def __init__(
        self,
        message: str,
        path: Path | str,
        quarantined_path: Path | str | None = None,
        restored_from: Path | str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message, path, cause)
        self.quarantined_path = Path(quarantined_path) if quarantined_path else None
        self.restored_from = Path(restored_from) if restored_from else None


class StateLockTimeoutError(StateError):
    """The lock on a state file could not be acquired within ``timeout`` seconds."""

    def __init__(self, message: str, path: Path | str, timeout: float) -> None:
        super().__init__(message, path)
        self.timeout = timeout


class LimitExceededError(SchedulerError):
    """A configured limit (for example schedules per owner) would be exceeded."""

    def __init__(self, message: str, limit: int, owner: str | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.owner = owner


class UnauthorizedError(SchedulerError):
    """The caller does not own the schedule it tried to change."""

    def __init__(self, message: str, owner: str | None = None) -> None:
        super().__init__(message)
        self.owner = owner


class ConfigError(SchedulerError):
    """A fleet file is invalid; ``problems`` lists every problem found, each naming its path."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = list(problems)


class ConflictError(SchedulerError):
    """A change lost a race or contradicts where a schedule is defined (409 over REST).

    Raised when a schedule of that name already exists (of two concurrent creations exactly one
    wins), and when a face other than Python tries to change the definition of a schedule that
    belongs to the application's code or fleet file.
    """

    def __init__(self, message: str, agent: str | None = None, schedule: str | None = None) -> None:
        super().__init__(message)
        self.agent = agent
        self.schedule = schedule


class RevisionMismatchError(ConflictError):
    """A conditional change found the schedule's definition changed since it was read (412 over
    REST, ``If-Match``).

    ``expected`` is the revision the change was made from (see
    :func:`herdsched.revisions.schedule_revision`), ``current`` the one the definition has
    now (``None`` when the schedule is gone). Nothing was written: read the schedule again,
    decide again, and repeat the change with its new revision.
    """

    def __init__(
        self,
        agent: str,
        schedule: str,
        expected: str,
        current: str | None,
        *,
        reason: str | None = None,
    ) -> None:
        if reason is not None:  # the condition could match no revision
            message = f"{agent}/{schedule} was not changed: {reason}"
        elif expected == "*" and current is None:  # any revision: it must exist
            message = (
                f"{agent}/{schedule} does not exist now (removed, or never made), and the "
                "change was for an existing one: nothing was written"
            )
        else:
            now = "it was removed" if current is None else f"its revision is now {current!r}"
            message = (
                f"{agent}/{schedule} changed since revision {expected!r} was read ({now}): "
                "read it again and repeat the change"
            )
        super().__init__(message, agent, schedule)
        self.expected = expected
        self.current = current


class LeadershipLostError(StateError):
    """This scheduler no longer holds the leadership lease: another one took over.

    Raised by a store's fenced writes (claims, group commits, lease renewal) when the store's
    current lease epoch is not ``held_epoch``, the one this scheduler was given; nothing was
    written. ``current_epoch`` is the store's epoch (``None`` when nobody holds the lease).
    """

    def __init__(
        self,
        message: str,
        held_epoch: int | None = None,
        current_epoch: int | None = None,
        path: Path | str | None = None,
    ) -> None:
        super().__init__(message, path)
        self.held_epoch = held_epoch
        self.current_epoch = current_epoch
