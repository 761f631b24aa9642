"""Recovery and leadership: becoming the active scheduler, and planning from persisted state.

One scheduler per state directory is active (the leader lock, :mod:`herdsched.leader`); the
others stand by and try again every few seconds. The one that takes over first recovers: a run
its predecessor left ``running`` (or claimed durably without finishing) becomes an
``interrupted`` record and is not run again (at most once per slot); a schedule that missed
slots while nothing ran fires once or waits, by its ``catch_up`` policy.
"""

from __future__ import annotations

from datetime import datetime

from attrs import evolve

from herdsched.engine.core import EngineCore, timer_trigger_type
from herdsched.engine.planning import Entry, due_after_downtime, fresh_due
from herdsched.leader import LeaderLock
from herdsched.models import RunRecord, RunStatus, Status, TriggerType
from herdsched.runner import new_run_id
from herdsched.store.base import RunClaim

__all__ = ["Leadership", "plan_catch_up", "plan_from_state", "replan_after_jump"]


class Leadership:
    """Takes the leader lock when it is free, and recovers before leading."""

    def __init__(self, core: EngineCore, lock: LeaderLock | None) -> None:
        self.core = core
        self.lock = lock

    def holder(self) -> dict[str, object] | None:
        """Who holds the leader lock (pid, host, since), as far as it can be read."""
        return self.lock.holder() if self.lock is not None else None

    def try_lead(self) -> bool:
        """Become the active scheduler if the lock is free, recovering first (caller holds the
        engine lock). A failed recovery gives the lock back and raises."""
        core = self.core
        if self.lock is not None and not self.lock.try_acquire():
            return False
        previous, core.status = core.status, "running"  # recovery plans as the leader
        try:
            recover_all(core)
        except Exception:
            core.status = previous
            self.release()
            raise
        return True

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


def recover_all(core: EngineCore) -> None:
    """Plan every schedule from the store, recording runs a dead process left unfinished."""
    core.store.refresh()
    now = core.clock.now()
    claimed = _unfinished_claims(core)
    for entry in list(core.entries.values()):
        if entry.run is not None:
            continue
        entry.state = core.store.get_schedule_state(entry.agent, entry.name)
        claim = claimed.get(entry.key)
        if claim is not None and entry.state.status is Status.IDLE:
            # its job may have started before the process died: treat it as running
            entry.state = evolve(
                entry.state,
                status=Status.RUNNING,
                last_run_at=claim.run_at,
                last_slot_at=claim.slot,
            )
        core.plan.unplan(entry)
        plan_from_state(core, entry, now, recovering=True)


def _unfinished_claims(core: EngineCore) -> dict[tuple[str, str], RunClaim]:
    """Durable claims whose run never reached the state as finished, by schedule."""
    try:
        claims = core.store.load_claims()
    except Exception as exc:
        core.state_error(exc)
        return {}
    latest: dict[tuple[str, str], RunClaim] = {}
    for claim in claims:
        state = core.store.get_schedule_state(claim.agent, claim.schedule)
        finished = state.last_finished_at is not None and state.last_finished_at >= claim.run_at
        if not finished:
            latest[(claim.agent, claim.schedule)] = claim
    return latest


def plan_from_state(core: EngineCore, entry: Entry, now: datetime, *, recovering: bool) -> None:
    """Compute ``entry``'s due time from its persisted state (restart recovery included).

    Caller holds the engine lock."""
    if recovering and entry.state.status is Status.RUNNING and entry.run is None:
        _record_interrupted(core, entry, now)
    state = entry.state
    description = entry.schedule.description
    cadence_changed = state.cadence is not None and state.cadence != description
    if not entry.schedulable:
        core.set_due(entry, None, None)
    elif cadence_changed or state.next_run_at is None:
        due = fresh_due(entry, now, core.settings.timezone, core.rng, recompute=True)
        core.set_due(entry, due, due)
    else:
        plan_catch_up(core, entry, state.next_run_at, now)
    core.persist_description(entry)


def plan_catch_up(core: EngineCore, entry: Entry, persisted: datetime, now: datetime) -> None:
    """Plan ``entry`` for a due time that may have passed: record the missed slot, and fire
    once or wait by the catch-up policy; a missed once schedule is completed."""
    plan = due_after_downtime(entry, persisted, now, core.settings, core.rng)
    if plan.missed is not None:
        core.record_missed(entry, plan.missed)
        cadence = entry.schedule.cadence
        if cadence is not None and cadence.runs_once:
            core.change_state(entry, status=Status.COMPLETED, next_run_at=None)
            core.set_due(entry, None, None)
            return
    core.set_due(entry, plan.due, plan.scheduled_for)


def _record_interrupted(core: EngineCore, entry: Entry, now: datetime) -> None:
    """Record the run a dead process left ``running`` as interrupted, and plan the next."""
    state = entry.state
    core.log.warning(
        "%s/%s was running when its scheduler stopped; the run is recorded as interrupted.",
        entry.agent,
        entry.name,
    )
    request_id = _started_request(core, entry, state.last_run_at)
    record = RunRecord(
        run_id=request_id or new_run_id(),
        agent=entry.agent,
        schedule=entry.name,
        trigger_type=TriggerType.MANUAL if request_id else timer_trigger_type(entry),
        scheduled_for=state.last_slot_at,
        started_at=state.last_run_at,
        finished_at=now,
        status=RunStatus.INTERRUPTED,
        error="the process running this job stopped before it finished",
    )
    core.append_run(record)
    cadence = entry.schedule.cadence
    due = None
    if cadence is not None and not cadence.runs_once:
        due = cadence.next_due(
            slot=state.last_slot_at or state.last_run_at or now,
            finished_at=now,
            now=now,
            zone=core.settings.timezone,
            rng=core.rng,
        )
    once = cadence is not None and cadence.runs_once
    core.change_state(
        entry,
        status=Status.COMPLETED if once else Status.IDLE,
        last_result=RunStatus.INTERRUPTED,
        last_finished_at=now,
        last_error=record.error,
        next_run_at=due,
    )


def _started_request(core: EngineCore, entry: Entry, started: datetime | None) -> str | None:
    """The run id of the run-now request whose run ``entry`` shows running, if it was one: the
    interrupted run is recorded under the id its requester was given."""
    if started is None:
        return None
    try:
        requests = core.store.trigger_requests()
    except Exception as exc:
        core.state_error(exc, entry)
        return None
    for request in requests:
        if (request.agent, request.schedule, request.started_at) == (
            entry.agent,
            entry.name,
            started,
        ):
            return request.run_id
    return None


def replan_after_jump(core: EngineCore, now: datetime) -> None:
    """Re-plan every waiting schedule after the wall clock jumped (caller holds the lock).

    A backwards step must not stretch an elapsed-time wait (an interval is due no later than
    ``now + every``); a forward step makes due times pass, which the catch-up policy handles.
    """
    if not core.leading:
        return
    for entry in list(core.entries.values()):
        if entry.run is not None or entry.due is None:
            continue
        cadence = entry.schedule.cadence
        latest = cadence.latest_due(now) if cadence is not None else None
        if latest is not None and entry.due > latest:
            core.set_due(entry, latest, latest)
        elif entry.due <= now:
            plan_catch_up(core, entry, entry.due, now)
