"""Runs as every process sees them: the run history plus the run-now requests not settled yet.

A run-now request is traceable from the moment it is accepted: while it waits it shows as
``queued``, once the active scheduler started it as ``running``, and then as the record its run
left in history (``success``, ``failed``, ``skipped`` with the reason, ...). Any process can
read this (a standby web worker, the CLI), because requests and history are both in the store.

A run the active scheduler started itself (a run-now it answered, a timer's run) has no
request: while it runs, its schedule's state names it (``running_run_id``, written with the
run's start and, for other processes, durable with the next group commit), and it shows as
``running`` from that; before that commit, from its claim, durable before its job started
(when the store shows its claims: ``read_claims``).

The active scheduler removes a request, clears the state's run id and drops a claim only once
the run's record is written: a run the history did not show and none of these names any more
was recorded meanwhile, and a second read of the history finds it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from herdsched.models import RunRecord, RunStatus, ScheduleState, TriggerType
from herdsched.store.base import READ_ALL_HISTORY, RunClaim, StateStore, TriggerRequest

__all__ = ["find_run", "history_with_requests", "request_record"]


def request_record(request: TriggerRequest) -> RunRecord:
    """The record a request not settled yet shows as: ``queued`` or ``running``."""
    return RunRecord(
        run_id=request.run_id,
        agent=request.agent,
        schedule=request.schedule,
        trigger_type=TriggerType.MANUAL,
        started_at=request.started_at,
        status=RunStatus.QUEUED if request.started_at is None else RunStatus.RUNNING,
    )


def _requests_of(store: StateStore, agent: str, schedule: str | None) -> list[TriggerRequest]:
    return [
        request
        for request in store.trigger_requests()
        if request.agent == agent and (schedule is None or request.schedule == schedule)
    ]


def history_with_requests(
    store: StateStore, agent: str, schedule: str | None, limit: int
) -> list[RunRecord]:
    """``store.get_history(agent, schedule, limit)`` with the queued and running requests of
    the same schedules first (newest first)."""
    requests = _requests_of(store, agent, schedule)
    if not requests:
        return store.get_history(agent, schedule, limit)
    records = store.get_history(agent, schedule, READ_ALL_HISTORY)
    recorded = {record.run_id for record in records}
    live = [request_record(r) for r in reversed(requests) if r.run_id not in recorded]
    return (live + records)[:limit]


def _running_record(agent: str, schedule: str, state: ScheduleState) -> RunRecord | None:
    """The ``running`` record of the run ``state`` names as in progress, if any."""
    run_id = state.running_run_id
    if run_id is None:
        return None
    return _running(agent, schedule, run_id, state.last_slot_at, state.last_run_at, state)


def _running(
    agent: str,
    schedule: str,
    run_id: str,
    slot: datetime | None,
    started: datetime | None,
    state: ScheduleState,
) -> RunRecord:
    """A ``running`` record: a run without a slot is a run-now, else a run of the schedule's
    own type."""
    kinds = {kind.value for kind in TriggerType}
    timer = state.type if state.type in kinds else None
    return RunRecord(
        run_id=run_id,
        agent=agent,
        schedule=schedule,
        trigger_type=timer if slot is not None and timer else TriggerType.MANUAL,
        scheduled_for=slot,
        started_at=started,
        status=RunStatus.RUNNING,
    )


def find_run(store: StateStore, agent: str, schedule: str, run_id: str) -> RunRecord | None:
    """The run ``run_id`` of ``agent/schedule``: its history record, its request's
    ``queued``/``running`` record, or ``running`` while its schedule's state names it as the
    run in progress or its claim is held; ``None`` when none of these knows it."""
    recorded = _recorded(store, agent, schedule, run_id)
    if recorded is not None:
        return recorded  # a finished run costs one read
    pending = [r for r in _requests_of(store, agent, schedule) if r.run_id == run_id]
    if pending:
        return request_record(pending[0])
    state = store.get_schedule_state(agent, schedule)
    running = _running_record(agent, schedule, state)
    if running is not None and running.run_id == run_id:
        return running
    for claim in _claims_of(store):  # started, its start not committed yet
        if (claim.agent, claim.schedule, claim.run_id) == (agent, schedule, run_id):
            return _running(agent, schedule, run_id, claim.slot, claim.run_at, state)
    # recorded since the first look, or unknown
    return _recorded(store, agent, schedule, run_id)


def _recorded(store: StateStore, agent: str, schedule: str, run_id: str) -> RunRecord | None:
    for record in store.get_history(agent, schedule, READ_ALL_HISTORY):
        if record.run_id == run_id:
            return record
    return None


def _claims_of(store: StateStore) -> list[RunClaim]:
    """The store's claims when it shows them to other processes (optional ``read_claims``)."""
    read_claims: Callable[[], list[RunClaim]] | None = getattr(store, "read_claims", None)
    return [] if read_claims is None else read_claims()
