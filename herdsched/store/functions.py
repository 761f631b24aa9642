"""herdctl's module functions, taking the state directory first.

Each call opens the state directory, does one thing and closes it again, so these suit scripts
and other processes (a CLI, a web worker) that touch the state now and then. A long-lived
program should keep one :class:`~herdsched.store.yaml_store.YamlStateStore` instead, which
reads the file only when it changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from herdsched.models import ScheduleState
from herdsched.store.yaml_store import YamlStateStore

__all__ = ["get_agent_schedule_states", "get_schedule_state", "update_schedule_state"]


def get_schedule_state(state_dir: str | Path, agent: str, schedule: str) -> ScheduleState:
    """The state of one schedule; defaults (idle, no times, 0 failures) when anything is missing."""
    with YamlStateStore(state_dir) as store:
        return store.get_schedule_state(agent, schedule)


def update_schedule_state(
    state_dir: str | Path, agent: str, schedule: str, **changes: Any
) -> ScheduleState:
    """Shallow-merge ``changes`` into one schedule's state, durably; returns the new state.

    Creates the directory, file, agent and schedule as needed and keeps every sibling, other
    agents, ``fleet`` and keys written by other tools.
    """
    with YamlStateStore(state_dir) as store:
        return store.update_schedule_state(agent, schedule, **changes)


def get_agent_schedule_states(state_dir: str | Path, agent: str) -> dict[str, ScheduleState]:
    """Every schedule state of ``agent`` (empty when the agent or the file is missing)."""
    with YamlStateStore(state_dir) as store:
        return store.get_agent_schedule_states(agent)
