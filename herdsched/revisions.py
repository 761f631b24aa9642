"""Revisions of schedule definitions, for changes made only if nobody changed it meanwhile.

A client that reads a schedule, decides, and writes it back loses another client's change made
in between, unless the write says which definition it was decided on. The revision is that
name: a digest of the definition's fields, the ones a REST ``PUT`` writes (the job is decided by
code and left out). Equal definitions have equal revisions in every process, whether a process
holds the definition in memory or reads it from the store, so a revision needs no counter kept
beside each definition and no change of the store's formats. A change given ``if_revision`` is
checked in memory first and then again inside the store's locked write (compare-and-set), so of
two changes made from one revision exactly one holds; the other raises
:class:`~herdsched.errors.RevisionMismatchError` (412 over REST) and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from herdsched.definitions import schedule_from_mapping, schedule_to_mapping
from herdsched.errors import InvalidScheduleError, RevisionMismatchError
from herdsched.models import Schedule

__all__ = ["check_revision", "schedule_revision", "stored_revision_check"]

#: the fields a revision leaves out: what runs is decided by code, not by a definition's writer
_NOT_REVISED = ("job", "command")


def schedule_revision(schedule: Schedule) -> str:
    """The revision of ``schedule``'s definition: 16 hex digits, equal for equal definitions.

    ``schedule_revision(sched.get_schedule(agent, name))`` is what
    ``update_schedule(..., if_revision=...)`` and REST's ``ETag`` / ``If-Match`` speak of.
    """
    try:
        mapping = schedule_to_mapping(schedule)
    except InvalidScheduleError:
        # a sub-second interval or timeout has no fleet-file form: such a schedule is defined
        # in code and never stored, so its fields as Python writes them name it
        text = repr(attrs.evolve(schedule, job=None))
    else:
        for field in _NOT_REVISED:
            mapping.pop(field, None)
        text = json.dumps(mapping, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_revision(agent: str, name: str, schedule: Schedule | None, expected: str) -> None:
    """Raise :class:`RevisionMismatchError` unless ``schedule`` (``None``: gone) has revision
    ``expected``."""
    if not isinstance(expected, str) or not expected:
        raise TypeError(f"if_revision must be a non-empty string, got {expected!r}")
    current = None if schedule is None else schedule_revision(schedule)
    if current != expected:
        raise RevisionMismatchError(agent, name, expected, current)


def stored_revision_check(
    agent: str, name: str, expected: str
) -> Callable[[Mapping[str, Any] | None], None]:
    """The store's precondition for a change made from revision ``expected``: called with the
    stored definition inside the locked write, it refuses the write when that definition has
    another revision (one that cannot be read as a schedule has none)."""

    def check(stored: Mapping[str, Any] | None) -> None:
        try:
            schedule = None if stored is None else schedule_from_mapping(stored)
        except Exception:
            raise RevisionMismatchError(agent, name, expected, "unreadable") from None
        check_revision(agent, name, schedule, expected)

    return check
