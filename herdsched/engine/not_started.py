"""Runs that never started: their claim could not be made durable, or their executor refused them.

A run may start only once its claim on the slot is durable (see
:mod:`herdsched.engine.dispatch`): otherwise a process killed while the disk is full would let
the next scheduler run the same slot again. Claims fail closed: when the store cannot take the
claims of a pass (disk full, directory gone, a lost lease), none of their jobs starts. An
executor may also refuse a claimed run (one shut down as the interpreter exits, or a given
executor's own refusal): its job does not start either. Each such run is undone:

* its slot is given back and its schedule is not left ``running`` (``last_run_at`` goes back
  to the previous run, since this one never started);
* a timer run becomes a ``missed`` record of its slot, a manual run a ``skipped`` record, both
  under the run's id and with the reason; the record goes out with the next group commit, that
  is as soon as the store works again;
* the schedule goes on normally: a timer run's schedule is planned for its next slot (a once
  schedule is completed, as when its slot passed while no scheduler ran); a manual run leaves
  the plan as it was;
* an ERROR log line and, for a timer run, a :class:`~herdsched.events.JobMissed` say so; a
  failed claim is also a :class:`~herdsched.events.StateErrorOccurred` naming the schedule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

import herdsched.events as ev
from herdsched.engine.core import EngineCore
from herdsched.engine.outcomes import next_after_run
from herdsched.engine.planning import Entry
from herdsched.models import RunRecord, RunStatus, Status, TriggerType
from herdsched.runner import Run, RunOutcome

__all__ = ["STOPPED_FIRST", "abandon_refused", "abandon_unclaimed", "abandon_unlaunched"]

#: Runs named in the one log line for a pass's runs that did not start.
_NAMED = 5

_PARKED = (Status.PAUSED, Status.DISABLED, Status.COMPLETED)


def abandon_unclaimed(
    core: EngineCore, runs: Sequence[Run], exc: BaseException, release: Callable[[Run], None]
) -> None:
    """Undo ``runs``, whose claims failed with ``exc``, so that none of their jobs starts.

    ``release`` gives a run's slot back and puts its schedule back on the plan (the
    dispatcher's own release; called with the lock held). Called without the lock.
    """
    _abandon(core, runs, f"the claim could not be made durable: {exc}", release, store_error=exc)


def abandon_refused(
    core: EngineCore, runs: Sequence[Run], exc: BaseException, release: Callable[[Run], None]
) -> None:
    """Undo ``runs``, claimed but refused by their executor with ``exc`` (called without the
    lock): their slots are recorded as not run, and nothing waits for them to finish."""
    _abandon(core, runs, f"its executor refused it ({exc})", release, store_error=None)


#: Why a run claimed (or being claimed) when the scheduler began to stop never started.
STOPPED_FIRST = "the scheduler began to stop before it started"


def abandon_unlaunched(
    core: EngineCore,
    runs: Sequence[Run],
    release: Callable[[Run], None],
    reason: str = STOPPED_FIRST,
) -> None:
    """Undo ``runs``, claimed (or being claimed) but not begun when the scheduler began to
    stop (a listener of their ``JobSubmitted`` may have stopped it) or the thread launching
    them was interrupted: they never start (called without the lock)."""
    _abandon(core, runs, reason, release, store_error=None)


def _abandon(
    core: EngineCore,
    runs: Sequence[Run],
    reason: str,
    release: Callable[[Run], None],
    *,
    store_error: BaseException | None,
) -> None:
    with core.lock:
        for run in runs:
            entry = core.entries.get((run.agent, run.schedule_name))
            if entry is not None and entry.run is run:
                _undo(core, entry, run, reason)
            core.append_run(_record(run, reason, core.clock.now()))
            if store_error is not None:
                core.state_error(store_error, entry)
            if run.trigger_type is not TriggerType.MANUAL and run.scheduled_for is not None:
                core.emit(
                    ev.JobMissed(
                        at=core.clock.now(),
                        agent=run.agent,
                        schedule=run.schedule_name,
                        scheduled_for=run.scheduled_for,
                    )
                )
            now = core.clock.now()
            run.finalized = True  # nothing may settle it later
            run.outcome = RunOutcome(
                status=RunStatus.SKIPPED, started_at=now, finished_at=now, error=reason
            )
            release(run)  # a trigger(wait=True) returns with the reason
    # while the store fails: once a minute, as the failure itself is (the rest at DEBUG)
    tell = store_error is None or core.store_health.tell_consequence(store_error)
    _log_not_started(core, runs, reason, logging.ERROR if tell else logging.DEBUG)
    core.changed()  # the freed slots and the new plan


def _record(run: Run, reason: str, now: datetime) -> RunRecord:
    """The history record of a run that never started, given up at ``now``."""
    manual = run.trigger_type is TriggerType.MANUAL
    return RunRecord(
        run_id=run.run_id,
        agent=run.agent,
        schedule=run.schedule_name,
        trigger_type=run.trigger_type,
        scheduled_for=run.scheduled_for,
        finished_at=now,
        status=RunStatus.SKIPPED if manual else RunStatus.MISSED,
        error=f"the run did not start: {reason}",
    )


def _log_not_started(core: EngineCore, runs: Sequence[Run], reason: str, level: int) -> None:
    """One line (at ``level``) for the runs of one pass that did not start (a pass of a large
    fleet during a store outage would otherwise log one per run); their records name each."""
    if len(runs) == 1:
        [run] = runs
        core.log.log(
            level,
            "Run %s of %s/%s did not start: %s. The slot is recorded as %s (should the lead "
            "be lost first, the next leader decides on it by its catch-up rule, or records it "
            "interrupted should its claim have reached the store after all).",
            run.run_id,
            run.agent,
            run.schedule_name,
            reason,
            "skipped" if run.trigger_type is TriggerType.MANUAL else "missed",
        )
        return
    named = ", ".join(f"{r.agent}/{r.schedule_name} ({r.run_id})" for r in runs[:_NAMED])
    more = f" and {len(runs) - _NAMED} more" if len(runs) > _NAMED else ""
    core.log.log(
        level,
        "%d runs did not start: %s. Their slots are recorded as missed (a run-now as skipped; "
        "should the lead be lost first, the next leader decides on them by its catch-up rule, "
        "or records one interrupted whose claim reached the store after all): %s%s.",
        len(runs),
        reason,
        named,
        more,
    )


def _undo(core: EngineCore, entry: Entry, run: Run, reason: str) -> None:
    """Take back what preparing ``run`` changed in ``entry``'s state and plan its next slot
    (caller holds the lock)."""
    changes: dict[str, object] = {"last_run_at": run.last_run_at, "running_run_id": None}
    status = entry.state.status
    if status is Status.RUNNING:
        status = Status.IDLE
        changes["status"] = status
    if run.trigger_type is TriggerType.MANUAL:
        core.change_state(entry, **changes)
        return  # a manual run left the plan as it was
    now = core.clock.now()
    normal = next_after_run(entry.schedule, run, now, None, core.settings, core.rng)
    if normal.missed is not None:  # the next slot passed too while the pass claimed
        core.record_missed(entry, normal.missed, "the run before it was being started")
    cadence = entry.schedule.cadence
    if status is Status.IDLE and cadence is not None and cadence.runs_once:
        status = changes["status"] = Status.COMPLETED
        changes["next_run_at"] = None
        changes["last_error"] = f"the run did not start: {reason}"
    due = None if status in _PARKED else normal.due
    core.change_state(entry, **changes)
    core.set_due(entry, due, normal.slot if due is not None else None)
