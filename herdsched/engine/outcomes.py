"""Outcomes: what a finished run means for its schedule, as a pure function.

Given the schedule's state and definition, the run and how it ended, :func:`transition_for`
returns the state changes, the next due time and slot, the run record, and whether the schedule
was auto-disabled. No locks, no I/O, no clock: everything comes in as arguments, so each rule of
the failure ladder, auto-disable, once-completion, overlap and session reuse can be checked
with a table of inputs.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

import attrs

from herdsched.engine.settings import EngineSettings
from herdsched.models import RunRecord, RunStatus, Schedule, ScheduleState, Status, TriggerType
from herdsched.policy import next_after_failure, should_auto_disable, slot_after_overlap
from herdsched.runner import Run, RunOutcome

__all__ = [
    "NextRun",
    "Transition",
    "after_overlap",
    "next_after_run",
    "record_for",
    "transition_for",
]

_PARKED = (Status.DISABLED, Status.PAUSED, Status.COMPLETED)


@attrs.frozen
class NextRun:
    """The normal next due time after a run, the slot it stands for, and a slot the overlap
    rule gave up (``missed``), to be recorded as a missed run."""

    due: datetime | None
    slot: datetime | None
    missed: datetime | None = None


@attrs.frozen
class Transition:
    """Everything a finished run changes: state fields, plan, record, auto-disable reason."""

    changes: dict[str, Any]
    due: datetime | None
    scheduled_for: datetime | None
    record: RunRecord
    disabled_reason: str | None


def next_after_run(
    schedule: Schedule,
    run: Run,
    now: datetime,
    planned_slot: datetime | None,
    settings: EngineSettings,
    rng: random.Random,
) -> NextRun:
    """The normal next due time after ``run`` finished at ``now``.

    Intervals count from completion (plus the scheduler's jitter when the schedule has none);
    cron and once count from the slot, or from when the run fired if that was later (a
    catch-up or buffered run stands for every slot that passed before it fired, so none of
    them runs or is missed again), and a slot that has passed by the time the run ended goes
    to the overlap rule. A manual run leaves the planned slot (``planned_slot``) as it is, and
    meets the overlap rule only when there was one: a schedule with nothing planned (paused,
    completed) had no slot to miss while it ran, so a once time that passed before is neither
    recorded missed nor taken from a later resume.
    """
    cadence = schedule.cadence
    zone = settings.timezone
    if cadence is None:
        return NextRun(None, None)
    if cadence.measured_from_completion:
        due = cadence.next_due(
            slot=run.scheduled_for or now,
            finished_at=now,
            now=now,
            zone=zone,
            rng=rng,
            default_jitter=settings.jitter_percent,
        )
        return NextRun(due, due)
    planned: datetime | None
    if run.trigger_type is TriggerType.MANUAL:
        if planned_slot is None:
            first = cadence.first_due(now, zone)
            return NextRun(first, first)
        planned = planned_slot
    else:
        slot = max(run.scheduled_for, run.fired_at) if run.scheduled_for else now
        planned = cadence.next_due(slot=slot, finished_at=now, now=now, zone=zone)
    return after_overlap(schedule, planned, now, settings)


def after_overlap(
    schedule: Schedule, planned: datetime | None, now: datetime, settings: EngineSettings
) -> NextRun:
    """The plan of a slot (``planned``) that may have come due while a run went on, for that
    run's end at ``now``: the overlap rule runs a passed slot now or gives it up for the next
    one (``skip``: recorded missed)."""
    cadence = schedule.cadence
    due, missed = slot_after_overlap(planned, now, schedule.overlap)
    if missed and planned is not None and cadence is not None:
        following = None if cadence.runs_once else cadence.first_due(now, settings.timezone)
        return NextRun(following, following, missed=planned)
    return NextRun(due, planned)


def _new_session(state: ScheduleState, schedule: Schedule, outcome: RunOutcome) -> str | None:
    session_id = state.session_id
    if schedule.persist_session:
        if outcome.session_cleared:
            session_id = None
        if outcome.result.session_id is not None:
            session_id = outcome.result.session_id
    return session_id


def _plan_and_status(
    state: ScheduleState,
    schedule: Schedule,
    run: Run,
    outcome: RunOutcome,
    normal: NextRun,
    settings: EngineSettings,
) -> tuple[Status, datetime | None, int, str | None]:
    """Status, next due time, failure count and auto-disable reason after ``outcome``."""
    now = outcome.finished_at
    failures = state.consecutive_failures
    status = state.status if state.status is not Status.RUNNING else Status.IDLE
    disabled_reason = None
    cadence = schedule.cadence
    if outcome.status is RunStatus.SUCCESS:
        failures, due = 0, normal.due
    elif outcome.status is RunStatus.DEFERRED:
        assert outcome.defer_delay is not None
        due = now + outcome.defer_delay
    elif outcome.no_work:
        later = cadence.after_no_work(now) if cadence is not None else None
        due = later if later is not None else normal.due
    else:
        failures += 1
        due = next_after_failure(normal.due, now, failures, settings.backoff)
        # a once schedule's own run is completed below, never auto-disabled (a resume of a
        # disabled schedule would run it again); failed run-nows of it do not disable it either:
        # its one run would silently never come
        if run.trigger_type is TriggerType.ONCE:
            due = None
        once = cadence is not None and cadence.runs_once
        auto = not once and should_auto_disable(failures, settings.max_consecutive_failures)
        if auto and status in (Status.IDLE, Status.RUNNING):
            status = Status.DISABLED
            disabled_reason = (
                f"auto-disabled after {failures} consecutive failures; last error: "
                f"{outcome.error or outcome.status}"
            )
    deferred = outcome.status is RunStatus.DEFERRED  # a deferred once has not run yet
    # a once schedule is over when its run ended, or when its time passed while another run of
    # it (a trigger) went on and the overlap rule skipped it
    slot_missed = cadence is not None and cadence.runs_once and normal.missed is not None
    over = run.trigger_type is TriggerType.ONCE or slot_missed
    # paused while its run went on, it is over all the same: a resume must not run it again
    if over and status in (Status.IDLE, Status.PAUSED) and not deferred:
        status = Status.COMPLETED
    if cadence is None:  # only triggers fire it: a backoff or a deferral plans no run of it
        due = None
    return status, due, failures, disabled_reason


def transition_for(
    state: ScheduleState,
    schedule: Schedule,
    run: Run,
    outcome: RunOutcome,
    normal: NextRun,
    settings: EngineSettings,
) -> Transition:
    """The state transition for ``run`` ending with ``outcome``; ``normal`` is
    :func:`next_after_run`'s answer for it."""
    now = outcome.finished_at
    status, planned, failures, disabled_reason = _plan_and_status(
        state, schedule, run, outcome, normal, settings
    )
    # the timer does not fire a parked schedule: no next run to show or plan
    due = None if status in _PARKED or not schedule.enabled else planned
    session_id = _new_session(state, schedule, outcome)
    changes: dict[str, Any] = {
        "status": status,
        "last_run_at": run.fired_at,
        "last_slot_at": run.scheduled_for,
        "running_run_id": None,
        "last_finished_at": now,
        "last_result": outcome.status,
        "last_error": outcome.error if outcome.status is not RunStatus.SUCCESS else None,
        "consecutive_failures": failures,
        "session_id": session_id,
        "disabled_reason": disabled_reason or state.disabled_reason,
    }
    if status is state.status and status in (Status.PAUSED, Status.DISABLED):
        # carried over, not decided by this run: only people write a pause (and its end); a
        # resume another process made while the run went on must not be written over
        del changes["status"]
    if status not in (Status.PAUSED, Status.DISABLED):
        changes["next_run_at"] = due
    elif planned is not None:  # where a resume takes it up: never the slot this run stood for
        changes["next_run_at"] = planned
    record = record_for(run, outcome, session_id if schedule.persist_session else None)
    slot = normal.slot if due == normal.due else due
    return Transition(changes, due, slot, record, disabled_reason)


def record_for(run: Run, outcome: RunOutcome, session_id: str | None) -> RunRecord:
    """The history record of ``run`` ending with ``outcome``."""
    return RunRecord(
        run_id=run.run_id,
        agent=run.agent,
        schedule=run.schedule_name,
        trigger_type=run.trigger_type,
        scheduled_for=run.scheduled_for,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        status=outcome.status,
        error=outcome.error,
        output_summary=outcome.output,
        session_id=session_id,
        work_item_id=outcome.work_item_id,
        cost=outcome.result.cost,
        turns=outcome.result.turns,
        traceback=outcome.traceback,
    )
