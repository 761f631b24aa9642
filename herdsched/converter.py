"""The cattrs converter that turns models into plain YAML/JSON data and back.

Timestamps become quoted ISO-8601 UTC strings with milliseconds (``"2026-11-22T05:41:48.898Z"``),
durations become seconds, enums their values.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import attrs
import cattrs

from herdsched.models import RunRecord, ScheduleState, _StrEnum
from herdsched.timestamps import format_timestamp, parse_timestamp

__all__ = [
    "converter",
    "record_from_dict",
    "record_to_dict",
    "state_from_dict",
    "state_to_dict",
]


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    conv.register_unstructure_hook(datetime, format_timestamp)
    conv.register_structure_hook(datetime, lambda value, _: parse_timestamp(value))
    conv.register_unstructure_hook(timedelta, lambda value: value.total_seconds())
    conv.register_structure_hook(timedelta, lambda value, _: timedelta(seconds=float(value)))
    # Our enums are str subclasses; without this hook cattrs would pass them through as-is.
    conv.register_unstructure_hook(_StrEnum, lambda value: value.value)
    return conv


converter = _make_converter()


def _make_state_converter() -> cattrs.Converter:
    """``converter``, but numbers and texts are taken as they are, for the validators to judge:
    cattrs would make ``consecutive_failures: 2.7`` (or ``true``, or ``"4"``) an int and a
    list in ``last_error`` its text, so a hand-edited value that is wrong would be read
    silently as another one."""
    conv = converter.copy()
    conv.register_structure_hook(int, lambda value, _: value)
    conv.register_structure_hook(str, lambda value, _: value)
    return conv


_state_converter = _make_state_converter()

STATE_FIELDS = (
    "status",
    "last_run_at",
    "last_finished_at",
    "next_run_at",
    "last_result",
    "last_error",
    "consecutive_failures",
    "session_id",
)


def state_to_dict(state: ScheduleState) -> dict[str, Any]:
    """The state-file mapping of ``state``: the documented keys always, optional ones when set."""
    data: dict[str, Any] = converter.unstructure(state)
    return {k: v for k, v in data.items() if k in STATE_FIELDS or v is not None}


def state_from_dict(data: dict[str, Any]) -> ScheduleState:
    """A :class:`ScheduleState` from a state-file mapping; unknown keys are ignored here."""
    known = {f.name for f in attrs.fields(ScheduleState)}
    return _state_converter.structure({k: v for k, v in data.items() if k in known}, ScheduleState)


def record_to_dict(record: RunRecord) -> dict[str, Any]:
    data: dict[str, Any] = converter.unstructure(record)
    return data


def record_from_dict(data: dict[str, Any]) -> RunRecord:
    known = {f.name for f in attrs.fields(RunRecord)}
    return converter.structure({k: v for k, v in data.items() if k in known}, RunRecord)
