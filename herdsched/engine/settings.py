"""The scheduler's settings: every constructor option that shapes planning, checked once.

The engine modules read these instead of a dozen loose attributes, so what a setting means and
which values it accepts is written in one place.
"""

from __future__ import annotations

import math
from datetime import timedelta, tzinfo
from typing import Any, Literal

import attrs

from herdsched.cadence import coerce_interval
from herdsched.models import CatchUp
from herdsched.policy import coerce_backoff
from herdsched.store.base import check_wait
from herdsched.timestamps import resolve_timezone

__all__ = ["DEFAULT_POLL_INTERVAL", "EngineSettings", "resolve_poll_interval"]

#: How often an active scheduler with a state directory looks for other processes' changes.
DEFAULT_POLL_INTERVAL = 1.0


def _number(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """A finite number (``"abc"``, ``None`` and infinity are named, not a bare float error)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(
            f"{attribute.name} must be a finite number, got {type(value).__name__} {value!r}"
        )


def _positive_or_none(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer or None, got {value!r}")


def _positive_seconds(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


def _non_negative_seconds(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value >= 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value!r}")


def _percent(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 <= value <= 100:
        raise ValueError(f"{attribute.name} must be from 0 to 100, got {value!r}")


def _min_interval(value: timedelta | float | str) -> timedelta:
    return coerce_interval(value, what="min_interval", allow_zero=True)


def _catch_up_window(value: timedelta | float | str | None) -> timedelta | None:
    return None if value is None else coerce_interval(value, what="catch_up_window")


def _catch_up(value: CatchUp | str) -> CatchUp:
    try:
        return CatchUp(value)
    except ValueError:
        choices = ", ".join(mode.value for mode in CatchUp)
        raise ValueError(f"catch_up must be one of {choices}; got {value!r}") from None


@attrs.frozen(kw_only=True)
class EngineSettings:
    """What the scheduler's constructor was told, validated (``ValueError`` names the option)."""

    timezone: tzinfo = attrs.field(converter=resolve_timezone)
    # at most a day: a longer wait overflowed the timer's (and ended its thread)
    max_sleep: float = attrs.field(
        default=60.0,
        validator=[_number, _positive_seconds, lambda _, __, v: check_wait(v, "max_sleep")],
    )
    min_interval: timedelta = attrs.field(default=timedelta(seconds=1), converter=_min_interval)
    jitter_percent: float = attrs.field(default=0.0, validator=[_number, _percent])
    backoff: tuple[timedelta, ...] = attrs.field(default=None, converter=coerce_backoff)
    max_consecutive_failures: int | None = attrs.field(default=5, validator=_positive_or_none)
    catch_up: CatchUp = attrs.field(default=CatchUp.ONCE, converter=_catch_up)
    catch_up_window: timedelta | None = attrs.field(default=None, converter=_catch_up_window)
    max_total_concurrent: int | None = attrs.field(default=None, validator=_positive_or_none)
    max_schedules_per_owner: int | None = attrs.field(default=None, validator=_positive_or_none)
    poll_interval: float | None = attrs.field(default=None)
    commit_delay: float = attrs.field(default=0.5, validator=[_number, _non_negative_seconds])
    lock_timeout: float = attrs.field(
        default=10.0,
        validator=[_number, _positive_seconds, lambda _, __, v: check_wait(v, "lock_timeout")],
    )


def resolve_poll_interval(value: float | Literal["auto"] | None, *, shared: bool) -> float | None:
    """``"auto"``: poll only when other processes can write (``shared``: a state directory or a
    store was given); ``None``: never; a positive number of seconds otherwise."""
    if value == "auto":
        return DEFAULT_POLL_INTERVAL if shared else None
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise ValueError(f"poll_interval must be positive, None or 'auto', got {value!r}")
