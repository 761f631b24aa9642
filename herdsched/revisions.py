"""Revisions of schedule definitions, for changes made only if nobody changed it meanwhile.

A client that reads a schedule, decides, and writes it back loses another client's change made
in between, unless the write says which definition it was decided on. The revision is that
name: a digest of the definition's fleet-file fields (the job's ``module:function`` and the
command included: a replacement writes them too). Equal definitions have equal revisions in
every process, whether a process holds the definition in memory or reads it from the store,
so a revision needs no counter kept beside each definition and no change of the store's
formats. A change given ``if_revision`` is checked in memory first and then again inside the
store's locked write (compare-and-set), so of two changes made from one revision exactly one
holds; the other raises :class:`~herdsched.errors.RevisionMismatchError` (412 over REST) and
writes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import attrs

from herdsched.definitions import schedule_from_mapping, schedule_to_mapping
from herdsched.errors import ConfigError, InvalidScheduleError, RevisionMismatchError
from herdsched.models import Schedule
from herdsched.store.base import Precondition

__all__ = ["ANY_REVISION", "check_revision", "schedule_revision", "stored_revision_check"]

#: ``if_revision=ANY_REVISION``: any revision, as long as the schedule still exists
ANY_REVISION = "*"


def schedule_revision(schedule: Schedule) -> str:
    """The revision of ``schedule``'s definition: 16 hex digits, equal for equal definitions.

    ``schedule_revision(sched.get_schedule(agent, name))`` is what
    ``update_schedule(..., if_revision=...)`` and the ``revision`` of a REST answer speak of.
    """
    try:
        return _digest(schedule_to_mapping(schedule))
    except InvalidScheduleError:
        # a sub-second interval or timeout has no fleet-file form: such a schedule is defined
        # in code and never stored, so its fields as Python holds them name it
        return _digest(attrs.asdict(attrs.evolve(schedule, job=None)))


def _digest(fields: Mapping[str, Any]) -> str:
    text = json.dumps(_plain(fields), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    """``value`` as every store gives it back: a database keeps ``1e16`` as ``10000000000000000``
    and ``-0.0`` as ``0``, so a float that is a whole number is that number."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _stored_revision(stored: Mapping[str, Any]) -> str | None:
    """The revision of a stored definition (``None``: it cannot be read as a schedule), without
    importing its job: the check runs inside the store's locked write."""
    without_job = {key: value for key, value in stored.items() if key != "job"}
    try:
        mapping = schedule_to_mapping(schedule_from_mapping(without_job, relative_at=False))
    except (ConfigError, InvalidScheduleError):
        return None
    if "job" in stored:
        mapping["job"] = stored["job"]
    return _digest(mapping)


def check_revision(agent: str, name: str, current: str | None, expected: str) -> None:
    """Raise :class:`RevisionMismatchError` unless a definition of revision ``current``
    (``None``: there is none) meets ``expected`` (a revision, or :data:`ANY_REVISION`)."""
    if not isinstance(expected, str) or not expected:
        raise TypeError(f"if_revision must be a non-empty string, got {expected!r}")
    if current is None or expected not in (ANY_REVISION, current):
        raise RevisionMismatchError(agent, name, expected, current)


def stored_revision_check(agent: str, name: str, expected: str) -> Precondition:
    """The store's precondition for a change made from revision ``expected``: called with the
    stored definition inside the locked write, it refuses the write when that definition has
    another revision, is gone, or cannot be read."""

    def check(stored: Mapping[str, Any] | None) -> None:
        current = None if stored is None else _stored_revision(stored)
        check_revision(agent, name, current, expected)

    return check
