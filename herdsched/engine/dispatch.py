"""Dispatch: from a due schedule to a job on its agent's executor, and back to its outcome.

The path of one run:

1. the timer pass takes the due schedules whose agents have a free slot (:meth:`fire_due`);
2. each takes a slot and is marked running in memory (:meth:`prepare`);
3. the claims of the whole pass are made durable in one fsync'd append (:meth:`launch`), before
   any of their jobs starts, so a process killed right after cannot let another scheduler run
   the same slot again (at most once per slot); when that fails none of them starts
   (:mod:`herdsched.engine.not_started`);
4. each run goes to its agent's executor, where the runner calls the job (:meth:`_execute`); a
   run the executor refuses (shut down as the interpreter exits) is recorded as not started;
5. the outcome becomes a notification, then a history record and a state transition
   (:mod:`herdsched.engine.outcomes`), made durable together by the next group commit
   (:mod:`herdsched.engine.committer`), then events, and the slot is given back (:meth:`finish`).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta

from attrs import evolve

import herdsched.events as ev
from herdsched.engine.core import EngineCore, timer_trigger_type
from herdsched.engine.listeners import call_safely
from herdsched.engine.not_started import (
    STOPPED_FIRST,
    abandon_refused,
    abandon_unclaimed,
    abandon_unlaunched,
)
from herdsched.engine.outcomes import (
    Transition,
    after_overlap,
    next_after_run,
    record_for,
    transition_for,
)
from herdsched.engine.planning import Entry
from herdsched.errors import LeadershipLostError, ScheduleTriggerError
from herdsched.models import RunRecord, RunStatus, SkipReason, Status, TriggerType
from herdsched.notify import Notification, notification_message
from herdsched.runner import Run, RunOutcome, execute_run, new_run_id, timeout_message
from herdsched.store.base import RunClaim

__all__ = ["Dispatcher"]

#: The record of a once schedule that found no work at its time, and so ends without running.
_NO_WORK = "its work source had no work at its time: the once schedule ends without running"
#: The record of a run that found no work while its schedule was removed, whose state would
#: otherwise have been its only trace.
_NO_WORK_REMOVED = "its work source had no work (its schedule was removed while it ran)"
#: The record of a run-now that found no work: its run id was given out (by ``trigger()``, the
#: command line, the API) to be followed in the history.
_NO_WORK_RUN_NOW = "its work source had no work"

#: why a slot was missed while its schedule's run went on (cron overlap "skip")
STILL_RUNNING = "the run before it was still running"

#: the outcomes a notifier may hear of (deferred and skipped runs are never notified)
_NOTIFIED = frozenset({RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.TIMEOUT})
#: how soon a schedule whose run could not be made is tried again
_RETRY = timedelta(seconds=1)


def _shows_run(entry: Entry, run: Run) -> bool:
    """Whether ``entry`` is the schedule of ``run``: it dispatched the run, or it was
    registered again while the run went on and its state names the run as going on."""
    if entry.run is run:
        return True
    return entry.run is None and entry.state.running_run_id == run.run_id


class Dispatcher:
    """Starts runs and settles their outcomes (see the module docstring)."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core

    # ------------------------------------------------------------------------ the timer

    def fire_due(self, now: datetime) -> None:
        """Start every due schedule that has a free slot; the others wait in due order."""
        core = self.core
        with core.lock:
            if not core.leading:
                return
            runs = self._take_due_runs(now)
        self.launch(runs)

    def _take_due_runs(self, now: datetime) -> list[Run]:
        """Runs for the due schedules, agent by agent, as far as capacity allows (caller holds
        the lock). The first schedule that meets a full agent ends that agent's turn."""
        core = self.core
        runs: list[Run] = []
        for agent in core.plan.collect_due(now, core.settings):
            while (entry := core.plan.first_waiting(agent)) is not None:
                reason = core.skip_reason(entry, now)
                entry.last_skip = reason
                if reason is SkipReason.AT_CAPACITY:
                    break
                core.plan.take_waiting(agent)
                if reason is SkipReason.NOT_DUE:
                    core.plan.push(entry)  # queued by a pass that read the clock later
                elif reason is None:
                    runs.extend(self._prepare_due(entry, now))
        if not core.plan.anything_waiting:  # wait_until_idle() waits for the line to empty
            core.idle.notify_all()
        return runs

    def _prepare_due(self, entry: Entry, now: datetime) -> list[Run]:
        """A run for a due ``entry``, or none (retried in a second) when it cannot be made."""
        try:
            slot = entry.scheduled_for or entry.due
            run = self.prepare(entry, timer_trigger_type(entry), slot, now)
            entry.told_no_job = False
            return [run]
        except ScheduleTriggerError:  # no job here: told once, not with a traceback a second
            self._no_job(entry, now)
            return []
        except Exception:
            self.core.log.exception(
                "Could not dispatch %s/%s; retrying in 1 s.", entry.agent, entry.name
            )
            self.core.set_due(entry, now + _RETRY, entry.scheduled_for)
            return []

    def _no_job(self, entry: Entry, now: datetime) -> None:
        """A due schedule with nothing to run here: one defined at run time (by a process
        that had a job for it, or before a hot reload took its agent's job away), whose agent
        has none here, in a scheduler without ``on_trigger``. Said once, without a traceback
        (an error with its traceback every second, for ever, before), and looked at again in
        a second, as a schedule that could not be dispatched is: its slot is kept, and it runs
        as soon as its agent has a job."""
        self.core.log.log(
            logging.DEBUG if entry.told_no_job else logging.ERROR,
            "%s/%s is due but has nothing to run here: it has no job of its own, its agent has "
            "none, and the scheduler has no on_trigger. It runs once its agent has a job, or "
            "the scheduler an on_trigger callback.",
            entry.agent,
            entry.name,
        )
        entry.told_no_job = True
        self.core.set_due(entry, now + _RETRY, entry.scheduled_for)

    # ---------------------------------------------------------------------- dispatching

    def prepare(
        self,
        entry: Entry,
        trigger_type: TriggerType,
        scheduled_for: datetime | None,
        now: datetime,
        *,
        prompt: str | None = None,
        run_id: str | None = None,
    ) -> Run:
        """A run of ``entry`` fired at ``now``: it takes a slot and its schedule shows running
        (caller holds the lock). ``run_id``: the id a run-now request was given when accepted."""
        core = self.core
        agent = core.agents[entry.agent]
        job = core.job_for(entry)
        if job is None:
            raise ScheduleTriggerError(
                f"{entry.agent}/{entry.name} has no job to run", entry.agent, entry.name
            )
        run = Run(
            run_id=run_id or new_run_id(),
            agent=entry.agent,
            schedule_name=entry.name,
            schedule=entry.schedule,
            job=job,
            trigger_type=trigger_type,
            scheduled_for=scheduled_for,
            fired_at=now,
            prompt=prompt,
            default_prompt=agent.default_prompt,
            consecutive_failures=entry.state.consecutive_failures,
            session_id=entry.state.session_id,
            last_run_at=entry.state.last_run_at,
            term=core.term,
        )
        if entry.schedule.timeout:
            run.deadline = core.clock.monotonic() + entry.schedule.timeout.total_seconds()
        entry.run = run
        if trigger_type is not TriggerType.MANUAL:
            core.plan.unplan(entry)  # off the heap while it runs
        core.trigger_count += 1
        core.running[run.run_id] = run
        core.capacity.take(run.agent)
        changes: dict[str, object] = {
            "last_run_at": now,
            "last_slot_at": scheduled_for,
            "running_run_id": run.run_id,
        }
        if entry.state.status is Status.IDLE:
            changes["status"] = Status.RUNNING
        core.change_state(entry, **changes)
        return run

    def launch(self, runs: list[Run], *, bypass: bool = False) -> None:
        """Make the runs' claims durable in one append, then hand them to their executors.

        Called without the lock: finishing runs settle while the disk syncs, and the runs are
        already dispatched in memory, so nothing else can dispatch them meanwhile. Should the
        calling thread be interrupted first (Ctrl-C, a notebook's "interrupt kernel" during a
        ``trigger()``), the runs it had not handed over never start, and are recorded so:
        else each would hold its schedule ``running`` and its agent's slot for ever.
        """
        if not runs:
            return
        me = threading.get_ident()
        for run in runs:
            run.launched_by = me
        try:
            self._claim_then_submit(runs, bypass)
        except BaseException as exc:
            self._give_up_interrupted(exc)
            raise

    def _claim_then_submit(self, runs: list[Run], bypass: bool) -> None:
        """:meth:`launch` but for an interrupt: the claims, the runs' ``JobSubmitted``, then
        their executors."""
        core = self.core
        claims = [
            RunClaim(run.agent, run.schedule_name, run.run_id, run.fired_at, run.scheduled_for)
            for run in runs
        ]
        try:
            with core.lease_bound():  # a cut-off leader's claim must not outlast its lease
                core.store.claim_runs(claims)
        except LeadershipLostError as exc:  # another scheduler leads: run nothing, write nothing
            with core.lock:
                # or a stop(wait_for_jobs=False) gave the lease up meanwhile: those it gave up
                # are told as not started, as is every run it kept from starting
                stopped = [run for run in runs if run.given_up]
                for run in runs:
                    run.given_up, run.finalized = False, True
                    if run not in stopped:
                        self._release(run)
            if stopped:
                abandon_unlaunched(core, stopped, self._release)
                core.listeners.deliver()
            if len(stopped) < len(runs):
                core.state_error(exc)  # steps down
            return
        except Exception as exc:  # fail closed: no job starts without its durable claim
            abandon_unclaimed(core, runs, exc, self._release)
            return
        for run in runs:
            core.emit(
                ev.JobSubmitted(
                    at=run.fired_at,
                    agent=run.agent,
                    schedule=run.schedule_name,
                    run_id=run.run_id,
                    scheduled_for=run.scheduled_for,
                )
            )
        core.listeners.deliver()  # before any of them starts: events come in their order
        self._submit(runs, bypass)

    def _submit(self, runs: list[Run], bypass: bool) -> None:
        """Hand the claimed runs to their executors, but those a ``stop(wait_for_jobs=False)``
        gave up meanwhile, or whose scheduler stopped or lost the lead: those never start, and
        are recorded so (called without the lock). A stop that waits lets the others start."""
        core = self.core
        refused: list[Run] = []
        unlaunched: list[Run] = []
        error: Exception | None = None
        with core.lock:
            for run in runs:
                run.launched_by = None
                if run.run_id not in core.running:  # given up by a stop() its listener called
                    continue
                if run.finalized and not run.given_up:  # timed out meanwhile: recorded
                    self._drop_unstarted(run)
                    continue
                if run.given_up or core.status in ("stopped", "standby"):
                    # a stop() not waiting for it began, or ended, or the lead went, while it
                    # was claimed: it never starts, and is recorded so
                    run.given_up, run.finalized = False, True
                    unlaunched.append(run)
                    continue
                agent = core.agents.get(run.agent)
                try:
                    if bypass or agent is None:  # beyond its slots, or removed while claiming
                        core.executors.submit_extra(run.agent, self._execute, run)
                    else:
                        core.executors.submit(run.agent, agent.max_concurrent, self._execute, run)
                except Exception as exc:  # shut down as the interpreter exits, or refusing
                    run.finalized = True  # recorded as not started, below
                    refused.append(run)
                    error = exc
        if unlaunched:
            abandon_unlaunched(core, unlaunched, self._release)
        if error is not None:
            abandon_refused(core, refused, error, self._release)
        if unlaunched or error is not None:
            core.listeners.deliver()

    def _drop_unstarted(self, run: Run) -> None:
        """A run settled before its job began (timed out, or given up by a ``stop()``): its
        job never starts, and the run ends as at a return (caller holds the lock)."""
        self._free_slot(run)
        if run.settled_by is None:  # else the thread settling it ends it
            self._end_run(run)
        self.core.wake.set()  # the freed slot may start a waiting run

    def give_up_launching(self) -> None:
        """``stop()`` called by a ``JobSubmitted`` listener: the runs this thread was about
        to hand to their executors never start, and are recorded so (waiting for them would
        wait for the listener, which waits for ``stop()``)."""
        me = threading.get_ident()
        with self.core.lock:  # one settled meanwhile (timed out) is recorded: launch() frees it
            running = self.core.running.values()
            runs = [r for r in running if r.launched_by == me and not r.finalized]
        if runs:
            abandon_unlaunched(self.core, runs, self._release)

    def _give_up_interrupted(self, exc: BaseException) -> None:
        """The calling thread was interrupted while it launched runs: those it had not handed
        to their executors never start. Each ends as :meth:`_submit` would end it: one timed
        out meanwhile is recorded already, one a ``stop(wait_for_jobs=False)`` gave up is
        recorded as not started, the others with the interrupt as their reason."""
        core, me = self.core, threading.get_ident()
        stopped: list[Run] = []
        interrupted: list[Run] = []
        with core.lock:
            for run in [r for r in core.running.values() if r.launched_by == me]:
                run.launched_by = None
                if run.finalized and not run.given_up:
                    self._drop_unstarted(run)
                elif run.given_up:
                    run.given_up = False  # not a run that ended: told as one never begun
                    stopped.append(run)
                else:
                    interrupted.append(run)
        reason = f"the call that started it was interrupted ({type(exc).__name__})"
        for runs, why in ((stopped, STOPPED_FIRST), (interrupted, reason)):
            if runs:
                abandon_unlaunched(core, runs, self._release, why)
        core.listeners.deliver()

    # ------------------------------------------------------------------------- workers

    def _execute(self, run: Run) -> None:
        """Worker thread: announce the run, call its job, settle the outcome."""
        core = self.core
        with core.lock:
            # given up by a stop() while its executor queued it: told as not started, below
            unstarted = run.given_up and not run.timed_out
            if run.finalized and not unstarted:  # timed out while queued: recorded
                self._drop_unstarted(run)
                return
            if unstarted:
                run.given_up = False  # not a run that ended: told as one that never began
            else:
                run.thread_id = threading.get_ident()
        if unstarted:
            abandon_unlaunched(core, [run], self._release)
            core.listeners.deliver()
            return
        try:  # a timeout's JobFailed waits for this delivery: never before the run's start
            core.emit(
                ev.JobStarted(
                    at=core.clock.now(),
                    agent=run.agent,
                    schedule=run.schedule_name,
                    run_id=run.run_id,
                )
            )
            core.listeners.deliver()
        finally:
            run.start_heard.set()
        try:
            outcome = execute_run(run, clock=core.clock, work_sources=core.work_sources)
        # a bug in a work source or prompt, or a job raising KeyboardInterrupt: the run still
        # settles and frees its slot, and the worker goes on
        except BaseException as exc:
            core.log.exception("Run %s of %s/%s crashed.", run.run_id, run.agent, run.schedule_name)
            now = core.clock.now()
            outcome = RunOutcome(
                status=RunStatus.FAILED, started_at=now, finished_at=now, error=repr(exc)
            )
        run.outcome = outcome
        self.finish(run, outcome)

    def finish(self, run: Run, outcome: RunOutcome) -> None:
        """Settle a run whose job returned, then give its slot back and tell who waits."""
        core = self.core
        try:
            self.settle(run, outcome)
            core.listeners.deliver()  # listeners hear of the run before its slot frees
        except Exception:
            core.log.exception(
                "Could not record run %s of %s/%s.", run.run_id, run.agent, run.schedule_name
            )
        finally:
            with core.lock:
                self._free_slot(run)
                if run.settled_by is None:  # else the thread settling it (a timeout's) ends it
                    self._end_run(run)
                wake = self._timer_must_replan(run)
            if wake:
                core.wake.set()
            core.listeners.deliver()

    def _timer_must_replan(self, run: Run) -> bool:
        """Whether the finished ``run`` changed what the sleeping timer waits for (caller holds
        the lock): a schedule waits for the freed slot, the run's schedule is now due before
        the planned wake-up, or its transition needs a group commit before then. A timer in
        the middle of a pass (no plan yet) reads all of that when it plans."""
        core = self.core
        if not core.leading or core.plan.anything_waiting:
            return True
        planned = core.planned_wake
        if planned is None:
            return False
        entry = core.entries.get((run.agent, run.schedule_name))
        if entry is not None and entry.due is not None and entry.due < planned[0]:
            return True
        commit_at = core.store.flush_deadline()
        return commit_at is not None and commit_at < planned[1]

    def _release(self, run: Run) -> None:
        """Give the run's slot back and put its schedule back on the plan (caller holds the
        lock)."""
        self._free_slot(run)
        self._end_run(run)

    def _free_slot(self, run: Run) -> None:
        """Give back the agent's slot of a run whose job returned (caller holds the lock)."""
        core = self.core
        if not run.returned and run.run_id in core.running:
            run.returned = True
            core.capacity.give_back(run.agent)
        core.idle.notify_all()

    def _end_run(self, run: Run) -> None:
        """End a settled run whose job returned: it leaves the running runs, which is what
        ``stop()``, ``wait_until_idle()``, ``trigger(wait=True)`` and a run-now request wait
        for, and its schedule goes back on the plan (caller holds the lock)."""
        core = self.core
        core.running.pop(run.run_id, None)
        entry = core.entries.get((run.agent, run.schedule_name))
        if entry is not None and entry.run is run:
            entry.run = None
            if run.timed_out:
                self._replan_after_overrun(entry, run)
            if entry.due is not None:
                core.plan.push(entry)
        core.idle.notify_all()

    def _replan_after_overrun(self, entry: Entry, run: Run) -> None:
        """Plan the next run of a timed-out job whose thread has returned, from now: its run was
        settled (and its next run planned) at the timeout, while the job went on.

        An interval counts from when the thread returned (the run's end, for a job that
        ignores its cancel event), and never sooner than the timeout's failure backoff; an
        anchored interval keeps its grid point. The slot planned since (at the timeout, or by
        a resume) stands unless it came due while the job still ran: then the overlap rule
        applies to it as to a run ending now (``skip`` records it missed and waits for the
        next slot) instead of the stale slot firing the moment the job returns; a manual run's
        slot stands. Caller holds the lock.
        """
        core = self.core
        # when the job returned (the run may have been settled since: its notifier was slow)
        now = run.outcome.finished_at if run.outcome is not None else core.clock.now()
        cadence = entry.schedule.cadence
        if entry.due is None or cadence is None:
            return  # parked, completed or disabled meanwhile: nothing to move
        if cadence.measured_from_completion:
            normal = next_after_run(entry.schedule, run, now, None, core.settings, core.rng)
            # the plan made at the timeout holds the failure's backoff: never sooner than it
            due = None if normal.due is None else max(normal.due, entry.due)
            core.set_due(entry, due, due)
            return
        if entry.due > now or run.trigger_type is TriggerType.MANUAL:
            return
        normal = after_overlap(entry.schedule, entry.scheduled_for, now, core.settings)
        if normal.missed is not None:
            core.record_missed(entry, normal.missed, STILL_RUNNING)
        core.set_due(entry, normal.due, normal.slot)

    # ------------------------------------------------------------------------ outcomes

    def settle(self, run: Run, outcome: RunOutcome) -> None:
        """Turn a finished run into a notification, then its record and state together, then
        events (once per run: a run settled as timed out is not settled again when its job
        returns).

        The notifier is heard first, outside the lock, so that the run's record (which says
        whether the notification was delivered) and its new state reach the store in the same
        group commit: a state showing the run ended lets the run's claim go, and a process
        dying between the two would leave a run that had no record and that no one records.
        A timed-out run's cancel event is set before the notifier is called, so a slow
        notifier never keeps a timed-out job going; should the job return meanwhile, its slot
        frees then (:meth:`finish`) and the run ends once it is recorded (:meth:`_settled`).
        """
        core = self.core
        with core.lock:
            if run.finalized:
                return
            run.finalized = True
            if self._lost_lead(run):
                return
            run.settled_by = threading.get_ident()
            late = run.deadline is not None and core.clock.monotonic() >= run.deadline
            if (run.timed_out or late) and outcome.status is not RunStatus.TIMEOUT:
                # the job saw the cancel event and returned before the timer settled the run,
                # or it returned past its deadline before the timer looked (a process stopped
                # and continued, a timer pass held up)
                error = timeout_message(run.schedule.timeout)
                outcome = evolve(outcome, status=RunStatus.TIMEOUT, error=error)
                if not run.timed_out:
                    core.log.warning(
                        "Run %s of %s/%s %s.", run.run_id, run.agent, run.schedule_name, error
                    )
        try:
            if run.timed_out:
                run.cancel()
            notified = outcome.status in _NOTIFIED and self._notify(run, outcome)
            with core.lock:
                if self._lost_lead(run):
                    return
                record, disabled = self._write(run, outcome, notified)
        finally:
            self._settled(run)
        self._announce(run, outcome, record, disabled)

    def _settled(self, run: Run) -> None:
        """The settling of ``run`` is over: a timed-out run whose job returned meanwhile (its
        slot given back already) ends here."""
        core = self.core
        with core.lock:
            run.settled_by = None
            if run.returned:
                self._end_run(run)
            wake = run.returned and self._timer_must_replan(run)
            core.idle.notify_all()
        if wake:
            core.wake.set()

    def _lost_lead(self, run: Run) -> bool:
        """Whether ``run`` was dispatched under a lead this scheduler has lost since (caller
        holds the lock): the next leader records it, as interrupted."""
        core = self.core
        if run.term == core.term:
            return False
        core.log.info(
            "Run %s of %s/%s ended after this scheduler lost the lead it ran under: "
            "not recorded here (the leader records it as interrupted).",
            run.run_id,
            run.agent,
            run.schedule_name,
        )
        return True

    def _write(self, run: Run, outcome: RunOutcome, notified: bool) -> tuple[RunRecord, str | None]:
        """Append the run's record, then apply its transition to its schedule's state (caller
        holds the lock); the record and the reason for an auto-disable, if any.

        A schedule removed while its job ran has no state to change (nor has a namesake added
        since), but what ran is recorded (its history stays, as for any removed schedule). One
        taken out of the fleet and put back meanwhile kept its state, which shows this run."""
        core = self.core
        entry = core.entries.get((run.agent, run.schedule_name))
        mine = entry if entry is not None and _shows_run(entry, run) else None
        transition = None if mine is None else self._transition(mine, run, outcome)
        record = record_for(run, outcome, None) if transition is None else transition.record
        record = evolve(record, notified=True) if notified else record
        ended = transition is not None and transition.changes.get("status") is Status.COMPLETED
        if not outcome.no_work:
            core.append_run(record)
        # a once schedule ends; a removed one's run is in no state; a run-now is followed
        elif ended or mine is None or run.trigger_type is TriggerType.MANUAL:
            note = _NO_WORK if ended else _NO_WORK_REMOVED if mine is None else _NO_WORK_RUN_NOW
            core.append_run(evolve(record, error=note))
        if mine is None or transition is None:
            return record, None
        core.plan.set_due(mine, transition.due, transition.scheduled_for)
        core.change_state(mine, **transition.changes)
        return record, transition.disabled_reason

    def _transition(self, entry: Entry, run: Run, outcome: RunOutcome) -> Transition:
        """The transition of a finished run (caller holds the lock); a slot it passed over is
        recorded missed."""
        core = self.core
        planned = entry.scheduled_for if entry.due is not None else None
        normal = next_after_run(
            entry.schedule, run, outcome.finished_at, planned, core.settings, core.rng
        )
        if normal.missed is not None:
            core.record_missed(entry, normal.missed, STILL_RUNNING)
        if outcome.no_work:
            entry.last_skip = SkipReason.NO_WORK  # get_status() reports it until the next run
        return transition_for(entry.state, entry.schedule, run, outcome, normal, core.settings)

    def _notify(self, run: Run, outcome: RunOutcome) -> bool:
        """Tell the notifier about the run when its policy says so; whether it was delivered."""
        core = self.core
        message = notification_message(
            run.schedule.notify,
            outcome.status,
            outcome.output,
            outcome.result.notify,
            outcome.error,
        )
        if message is None or core.notifier is None:
            return False
        notification = Notification(
            agent=run.agent,
            schedule=run.schedule_name,
            run_id=run.run_id,
            status=outcome.status,
            message=message,
            at=outcome.finished_at,
            error=outcome.error,
        )
        return call_safely(core.notifier, notification, what="notifier", log=core.log)

    def _announce(
        self, run: Run, outcome: RunOutcome, record: RunRecord, disabled: str | None
    ) -> None:
        """Collect the events of a settled run: its outcome, then an auto-disable."""
        core = self.core
        at = outcome.finished_at
        where = {"agent": run.agent, "schedule": run.schedule_name}
        if outcome.no_work:
            core.emit(ev.JobSkipped(at=at, reason=SkipReason.NO_WORK, run_id=run.run_id, **where))
        elif outcome.status is RunStatus.SUCCESS:
            core.emit(ev.JobSucceeded(at=at, record=record, **where))
        elif outcome.status in (RunStatus.FAILED, RunStatus.TIMEOUT):
            core.emit(ev.JobFailed(at=at, record=record, **where))
        elif outcome.status is RunStatus.DEFERRED:
            core.emit(ev.JobDeferred(at=at, record=record, **where))
        if disabled is not None:
            core.log.error("%s/%s is disabled: %s.", run.agent, run.schedule_name, disabled)
            core.emit(ev.ScheduleDisabled(at=at, reason=disabled, **where))

    # ------------------------------------------------------------------------ timeouts

    def expire_timeouts(self, now: datetime) -> None:
        """Settle runs past their timeout as timed out, each on a thread of its own that sets
        its cancel event first (:meth:`settle`). The slot frees when the job returns."""
        core = self.core
        mono = core.clock.monotonic()
        with core.lock:
            expired = [
                run
                for run in core.running.values()
                if run.deadline is not None
                and mono >= run.deadline
                and not (run.timed_out or run.finalized)  # a returned job is being settled
            ]
            for run in expired:
                run.timed_out = True
        for run in expired:
            core.log.warning(
                "Run %s of %s/%s %s; its slot frees when the job returns.",
                run.run_id,
                run.agent,
                run.schedule_name,
                timeout_message(run.schedule.timeout),
            )
            outcome = RunOutcome(
                status=RunStatus.TIMEOUT,
                started_at=run.fired_at,
                finished_at=now,
                error=timeout_message(run.schedule.timeout),
            )
            run.outcome = outcome
            # settled on a thread of its own: its notifier and listeners may be slow (an HTTP
            # call), and neither the timer nor the job's own worker, still in the job, may wait
            threading.Thread(
                target=self._settle_expired,
                args=(run, outcome),
                name=f"herdsched-timeout-{run.agent}",
                daemon=True,
            ).start()

    def _settle_expired(self, run: Run, outcome: RunOutcome) -> None:
        """Set a timed-out run's cancel event, record it and tell who listens."""
        try:
            self.settle(run, outcome)
            with self.core.lock:
                started = run.thread_id is not None  # else it never starts (see _execute)
            if started:
                run.start_heard.wait()
            self.core.listeners.deliver()
        except Exception:
            self.core.log.exception(
                "Could not record run %s of %s/%s.", run.run_id, run.agent, run.schedule_name
            )
        finally:
            run.cancel()  # also when settling failed; setting it twice is harmless

    def next_deadline(self) -> float | None:
        """The earliest timeout among running jobs (monotonic; caller holds the lock)."""
        deadlines = [
            run.deadline
            for run in self.core.running.values()
            if run.deadline is not None and not (run.timed_out or run.finalized)
        ]
        return min(deadlines, default=None)
