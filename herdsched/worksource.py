"""Work sources: where an agent's schedule gets the next piece of work (an issue, a ticket...).

A schedule with ``work_source="name"`` asks the source registered under that name for an item
before each run; no item means nothing to do, and the run is skipped with ``no_work``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

__all__ = ["WorkItem", "WorkOutcome", "WorkSource"]


def _labels(value: Sequence[str] | None) -> tuple[str, ...]:
    """A sequence of label strings as a tuple; one string is refused, not split into letters."""
    if value is None:
        return ()
    labels = None if isinstance(value, str) or not isinstance(value, Iterable) else tuple(value)
    if labels is None or not all(isinstance(label, str) for label in labels):
        raise TypeError(f"WorkItem.labels must be a sequence of strings, got {value!r}")
    return labels


def _text(*, optional: bool) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """Validator: a string (or ``None``, when ``optional``). A work item's id and text reach
    the run's record and state: a ``UUID`` or a ``Path`` there failed every commit after it."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, str) and not (optional and value is None):
            kind = "a string or None" if optional else "a string"
            raise TypeError(
                f"WorkItem.{attribute.name} must be {kind}, got {type(value).__name__} {value!r}"
            )

    return check


@attrs.frozen(kw_only=True)
class WorkItem:
    """One claimable unit of work, as a work source describes it."""

    id: str = attrs.field(validator=_text(optional=False))
    title: str = attrs.field(validator=_text(optional=False))
    description: str = attrs.field(default="", validator=_text(optional=False))
    source: str = attrs.field(default="", validator=_text(optional=False))
    external_id: str | None = attrs.field(default=None, validator=_text(optional=True))
    priority: str | None = attrs.field(default=None, validator=_text(optional=True))
    labels: tuple[str, ...] = attrs.field(default=(), converter=_labels)
    url: str | None = attrs.field(default=None, validator=_text(optional=True))


@attrs.frozen(kw_only=True)
class WorkOutcome:
    """What became of a claimed item: always reported back to its source."""

    success: bool
    summary: str | None = None
    error: str | None = None
    run_id: str | None = None


@runtime_checkable
class WorkSource(Protocol):
    """Gives out work items and hears how they went."""

    def get_next_work_item(self, agent: str, schedule: str) -> WorkItem | None:
        """Claim the next item for this agent/schedule, or None when there is nothing to do."""

    def report_outcome(self, item: WorkItem, outcome: WorkOutcome) -> None:
        """Record the result of working on ``item``."""
