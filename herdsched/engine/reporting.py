"""Reporting: each schedule's status as ``get_status()`` shows it, ``search()`` over them, and
the run history of a name the engine or the store knows.

Read-only views of the engine's state (caller holds the lock for :func:`schedule_status`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from herdsched.engine.core import EngineCore
from herdsched.engine.planning import Entry
from herdsched.errors import AgentNotFoundError, ScheduleNotFoundError
from herdsched.models import (
    AD_HOC_SCHEDULE,
    RunRecord,
    ScheduleStatus,
    ScheduleType,
    SearchPage,
    SkipReason,
    Status,
    check_choice,
    check_count,
    check_name_types,
)
from herdsched.store.runs import history_with_requests

__all__ = [
    "MAX_SEARCH_LIMIT",
    "all_statuses",
    "named_history",
    "require_known",
    "schedule_status",
    "search_statuses",
]

#: the most results one page of ``search()`` returns
MAX_SEARCH_LIMIT = 50
#: reasons that hold only while the timer runs (so say ``stopping`` when it does not): a job
#: still running after a ``stop()`` that timed out, or holding its agent's slots, is not why
#: nothing fires then
_FIRES_WHEN_RUNNING = (
    None,
    SkipReason.NOT_DUE,
    SkipReason.NO_WORK,
    SkipReason.ALREADY_RUNNING,
    SkipReason.AT_CAPACITY,
)
#: why a schedule defined with ``enabled=False`` does not fire (its status stays idle)
DISABLED_BY_DEFINITION = "its definition says enabled: false (the timer never fires it)"


def _stored_plan(entry: Entry) -> datetime | None:
    """The next run a scheduler not leading (stopped, standing by) shows: the stored plan,
    unless the timer would not fire it; none while a run goes on, as the leader shows (the
    state keeps the slot being run until the run's end plans the next), nor while the leader
    shows it removed (not registered there: its plan is kept for a late registration)."""
    state = entry.state
    if not entry.schedulable or state.status is Status.RUNNING or state.removed_at is not None:
        return None
    return state.next_run_at


def schedule_status(
    core: EngineCore, entry: Entry, now: datetime, *, nobody_leads: bool
) -> ScheduleStatus:
    """``entry`` as ``get_status()`` reports it, with the reason it does not fire now
    (``nobody_leads``: no process holds the store's lease, so no timer fires anything)."""
    state = entry.state
    reason = core.skip_reason(entry, now) if entry.agent in core.agents else None
    if reason is SkipReason.NOT_DUE and entry.last_skip is SkipReason.NO_WORK:
        reason = SkipReason.NO_WORK
    if reason is SkipReason.NOT_DUE and not core.leading and state.status is Status.RUNNING:
        reason = SkipReason.ALREADY_RUNNING  # in the process that leads, as its state says
    if reason in _FIRES_WHEN_RUNNING and nobody_leads and core.status in ("stopped", "stopping"):
        reason = SkipReason.STOPPING  # no timer runs: the next run is not the reason
    return ScheduleStatus(
        agent=entry.agent,
        schedule=entry.name,
        type=entry.schedule.type,
        status=state.status,
        enabled=entry.schedule.enabled,
        next_run_at=entry.due if core.leading else _stored_plan(entry),
        last_run_at=state.last_run_at,
        last_result=state.last_result,
        last_error=state.last_error,
        consecutive_failures=state.consecutive_failures,
        running=1 if entry.run is not None else 0,
        skip_reason=reason,
        owner=entry.schedule.owner,
        disabled_reason=state.disabled_reason
        or (None if entry.schedule.enabled else DISABLED_BY_DEFINITION),
        defined_in="store" if entry.persisted_definition else "code",
    )


def all_statuses(
    core: EngineCore, now: datetime, leader: Mapping[str, object] | None
) -> list[ScheduleStatus]:
    """Every schedule's status (caller holds the lock); ``leader`` is the lease as read: with
    none, or an expired one, no process runs the schedules."""
    nobody_leads = leader is None or bool(leader["expired"])
    return [
        schedule_status(core, entry, now, nobody_leads=nobody_leads)
        for entry in core.entries.values()
    ]


def search_statuses(
    statuses: Sequence[ScheduleStatus],
    *,
    owner: str | None,
    name_contains: str | None,
    status: Status | str | None,
    cadence_type: ScheduleType | str | None,
    limit: int,
    offset: int,
) -> SearchPage:
    """Filter ``statuses`` and return one page sorted by agent and name (``limit`` capped at
    :data:`MAX_SEARCH_LIMIT`), with the hint to fetch the next page."""
    check_count(limit, "limit", minimum=1)
    check_count(offset, "offset", minimum=0)
    for value, name in ((owner, "owner"), (name_contains, "name_contains")):
        if value is not None and not isinstance(value, str):
            raise TypeError(
                f"{name} must be a string or None, got {type(value).__name__} {value!r}"
            )
    wanted_status = check_choice(Status, status, "status") if status is not None else None
    wanted_type = (
        check_choice(ScheduleType, cadence_type, "cadence_type")
        if cadence_type is not None
        else None
    )
    limit = min(limit, MAX_SEARCH_LIMIT)
    needle = name_contains.lower() if name_contains else None
    matches = [
        item
        for item in statuses
        if (owner is None or item.owner == owner)
        and (needle is None or needle in f"{item.agent}/{item.schedule}".lower())
        and (wanted_status is None or item.status is wanted_status)
        and (wanted_type is None or item.type is wanted_type)
    ]
    matches.sort(key=lambda item: (item.agent, item.schedule))
    page = matches[offset : offset + limit]
    remaining = max(0, len(matches) - offset - len(page))
    hint = (
        f"{remaining} more results available. Use offset={offset + len(page)} to see the next page."
        if remaining
        else ""
    )
    return SearchPage(page, len(matches), offset, limit, remaining, hint)


def named_history(
    core: EngineCore, agent: str, schedule: str | None, limit: int
) -> list[RunRecord]:
    """The newest ``limit`` runs of ``agent`` (or of one of its schedules), run-now requests
    first; when there are none, :class:`AgentNotFoundError` or :class:`ScheduleNotFoundError`
    for a name that neither this engine nor the store knows, so a mistyped name is told
    rather than answered "no runs yet". A removed schedule's history stays readable."""
    check_name_types(agent, schedule)
    records = history_with_requests(core.store, agent, schedule, limit)
    if not records:
        require_known(core, agent, schedule)
    return records


def require_known(core: EngineCore, agent: str, schedule: str | None) -> None:
    """Raise unless ``agent`` (and ``schedule``) is registered here, has state in the store
    (a schedule removed from the fleet) or a stored definition (one another process defined,
    before a scheduler wrote its state)."""
    any_of_agent = schedule is None or schedule == AD_HOC_SCHEDULE
    with core.lock:
        if agent in core.agents and (any_of_agent or (agent, schedule) in core.entries):
            return
    stored = {
        **core.store.get_agent_schedule_states(agent),
        **core.store.load_definitions().get(agent, {}),
    }
    if not stored and agent not in core.agents:
        raise AgentNotFoundError(agent)
    if not any_of_agent and schedule not in stored:
        raise ScheduleNotFoundError(agent, str(schedule))
