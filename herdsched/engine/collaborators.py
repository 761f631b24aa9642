"""The objects a scheduler is given, checked by kind when it is built.

Settings (numbers, durations, modes) are checked by :mod:`herdsched.engine.settings`; the
objects the constructor takes besides (callbacks, the clock, the logger, work sources, the
executor factory, the state directory, the agents) are checked here. A wrong one would
otherwise surface later, in a timer or worker thread, as an ``AttributeError`` or a call of a
non-callable logged far from the line that caused it; here it is a ``TypeError`` (or, for an
empty ``state_dir``, a ``ValueError``) naming the argument.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from herdsched.clock import Clock, SystemClock
from herdsched.engine.settings import EngineSettings
from herdsched.errors import InvalidScheduleError
from herdsched.models import Agent, check_flag, check_job_arguments
from herdsched.store.memory import MemoryStateStore
from herdsched.worksource import WorkSource

__all__ = [
    "DEFAULT_MAX_RUN_HISTORY",
    "DEFAULT_STATE_DIR",
    "STORE_SETTINGS",
    "check_agents",
    "check_collaborators",
    "checked_state_dir",
    "clock_of",
    "state_dir_of",
]

#: ``ThreadedScheduler``'s defaults of the settings a given store makes its own; the state
#: directory is also the command line's when neither ``--state-dir`` nor ``--store`` is given
#: (relative to the current directory)
DEFAULT_STATE_DIR = ".herdsched"
DEFAULT_MAX_RUN_HISTORY = 20
#: the settings a given store keeps, with ``ThreadedScheduler``'s defaults of them
STORE_SETTINGS: dict[str, object] = {
    "max_run_history": DEFAULT_MAX_RUN_HISTORY,
    "commit_delay": 0.5,
    "lock_timeout": 10.0,
}

#: What the engine calls on its clock (:class:`herdsched.clock.Clock`).
_CLOCK_METHODS = ("now", "monotonic", "wait")


def _kind(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def checked_state_dir(state_dir: object) -> Path | None:
    """``state_dir`` as a path (``None``: memory only). An empty string is refused: ``""``
    meant the current directory here and the default directory in the command line and the
    web integrations, so it is more likely an unset variable than a choice."""
    if state_dir is None:
        return None
    if not isinstance(state_dir, (str, os.PathLike)):
        raise TypeError(f"state_dir must be a path (str or Path) or None, got {_kind(state_dir)}")
    if isinstance(state_dir, str) and not state_dir.strip():
        raise ValueError(
            f"state_dir is empty ({state_dir!r}): give a directory ('.' for the current one), "
            "or None to keep the state in memory"
        )
    if "\0" in os.fspath(state_dir):
        raise ValueError(f"state_dir contains a NUL character: {state_dir!r}")
    return Path(state_dir)


def state_dir_of(
    state_dir: object, store: object, max_run_history: object, settings: EngineSettings
) -> Path | None:
    """The state directory of a scheduler: ``state_dir`` checked, or with a ``store`` the
    store's own (a YAML store's directory, ``None`` for others). Beside a store, a
    ``state_dir``, or a setting the store keeps (``max_run_history``, ``commit_delay``,
    ``lock_timeout``) other than the store's own, is refused: the store keeps its own (they
    were ignored, and ``state_dir`` reported beside a database); so is a ``store`` that is not
    a store (a DSN string, say)."""
    if store is None:
        return checked_state_dir(state_dir)
    if not callable(getattr(store, "get_schedule_state", None)):
        hint = ": for a database, pass PostgresStateStore(dsn)" if isinstance(store, str) else ""
        raise TypeError(f"store must be a StateStore or None, got {_kind(store)}{hint}")
    own = getattr(store, "state_dir", None)
    own_dir = Path(own) if isinstance(own, (str, os.PathLike)) else None
    given = None if state_dir in (None, DEFAULT_STATE_DIR) else checked_state_dir(state_dir)
    if given is not None and (own_dir is None or given.resolve() != own_dir.resolve()):
        raise ValueError(
            f"give state_dir or store, not both: the store keeps its own state (state_dir "
            f"{state_dir!r}, store {store!r})"
        )
    kept = {
        "max_run_history": max_run_history,
        "commit_delay": settings.commit_delay,
        "lock_timeout": settings.lock_timeout,
    }
    for name, value in kept.items():
        if value not in (STORE_SETTINGS[name], getattr(store, name, value)):
            raise ValueError(
                f"{name} belongs to the store when one is given: pass it to the store "
                f"(got {value!r} beside store {store!r})"
            )
    return own_dir


def clock_of(clock: Clock | None, store: object) -> Clock:
    """The scheduler's clock: ``clock``, else a given store's own, else the system's. A store
    plans its group commits and stamps its lease on its own clock: one other than the
    scheduler's (a ``FakeClock`` given to one of them only) would compare two times (commits
    at every pass or never, a live lease shown expired), so it is refused; a memory store on
    the system's clock that has handed out no lease yet takes the scheduler's."""
    own = getattr(store, "clock", None)
    if clock is None:
        return own if own is not None else SystemClock()
    if own is None or own is clock or type(own) is type(clock) is SystemClock:
        return clock
    if isinstance(store, MemoryStateStore) and type(own) is SystemClock and store.take_clock(clock):
        return clock
    raise ValueError(
        f"the store keeps its own clock ({type(own).__name__}), the scheduler was given "
        f"{type(clock).__name__}: give the same clock to both (or to the store only)"
    )


def check_collaborators(
    *,
    on_trigger: object,
    notifier: object,
    executor_factory: object,
    clock: object,
    logger: object,
    work_sources: object,
    leader_lock: object,
) -> None:
    """A ``TypeError`` naming the first argument of the wrong kind."""
    for value, name in (
        (on_trigger, "on_trigger"),
        (notifier, "notifier"),
        (executor_factory, "executor_factory"),
    ):
        if value is not None and not callable(value):
            raise TypeError(f"{name} must be callable or None, got {_kind(value)}")
    for value, name in ((on_trigger, "on_trigger"), (notifier, "notifier")):
        if value is not None:  # called with one argument, on a thread
            check_job_arguments(value, name)  # type: ignore[arg-type]
    missing = [name for name in _CLOCK_METHODS if not callable(getattr(clock, name, None))]
    if clock is not None and missing:
        raise TypeError(
            f"clock must have now(), monotonic() and wait() (a herdsched.clock.Clock, such as "
            f"SystemClock or herdsched.testing.FakeClock); {_kind(clock)} lacks "
            f"{', '.join(sorted(missing))}"
        )
    if logger is not None and not isinstance(logger, (logging.Logger, logging.LoggerAdapter)):
        raise TypeError(f"logger must be a logging.Logger or None, got {_kind(logger)}")
    check_flag(leader_lock, "leader_lock")
    _check_work_sources(work_sources)


def _check_work_sources(work_sources: object) -> None:
    if work_sources is None:
        return
    if not isinstance(work_sources, Mapping):
        raise TypeError(
            f"work_sources must be a mapping of names to work sources, got {_kind(work_sources)}"
        )
    for name, source in work_sources.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"work_sources: a name must be non-empty text, got {_kind(name)}")
        if not isinstance(source, WorkSource):
            raise TypeError(
                f"work_sources[{name!r}] must have get_next_work_item() and report_outcome() "
                f"(a herdsched.WorkSource), got {_kind(source)}"
            )


def check_agents(agents: object) -> list[Agent]:
    """``agents`` (of the constructor or ``set_agents``) as a list, each an :class:`Agent` with
    a name of its own: a repeated name is an ``InvalidScheduleError`` (``set_agents`` kept the
    last one silently)."""
    if isinstance(agents, (str, bytes, Mapping)) or not isinstance(agents, Iterable):
        raise TypeError(f"agents must be an iterable of Agent, got {_kind(agents)}")
    listed: list[Any] = list(agents)
    seen: dict[str, int] = {}
    for index, agent in enumerate(listed):
        if not isinstance(agent, Agent):
            raise TypeError(f"agents[{index}] must be an Agent, got {_kind(agent)}")
        if agent.name in seen:
            raise InvalidScheduleError(
                f"agents[{index}]: the agent name {agent.name!r} is given twice (also "
                f"agents[{seen[agent.name]}])",
                field="name",
                value=agent.name,
            )
        seen[agent.name] = index
    return listed
