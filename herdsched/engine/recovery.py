"""Recovery and leadership: holding the store's lease, and planning from persisted state.

One scheduler per store is active: the one holding the store's leadership lease
(:meth:`~herdsched.store.base.StateStore.acquire_lease`); the others stand by and try again every
few seconds. The leader renews the lease on the timer's heartbeat, every third of ``lease_ttl``;
when a renewal is refused (another scheduler took over) or has not succeeded by its own
monotonic deadline (``lease_ttl`` after the last good one), it steps down by itself: it
dispatches nothing more, records nothing its running jobs return (they are told to stop when
another scheduler took the lease), and it stands by. The store fences
every claim and group commit by the lease's epoch, so a leader that wakes after losing its lease
cannot run or write anything whatever its clocks say.

The one that takes over recovers first: a run its predecessor left ``running`` (or claimed
durably without finishing) becomes an ``interrupted`` record and is not run again (at most once
per slot); a schedule that missed slots while nothing ran fires once or waits, by its
``catch_up`` policy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import datetime, timedelta, tzinfo
from typing import Any

import herdsched.events as ev
from herdsched.engine.core import (
    AD_HOC_SCHEDULE,
    DISABLED_MARK,
    EngineCore,
    timer_trigger_type,
)
from herdsched.engine.planning import Entry, due_after_downtime, fresh_due
from herdsched.errors import LeadershipLostError, StateError
from herdsched.models import RunRecord, RunStatus, ScheduleState, ScheduleType, Status, TriggerType
from herdsched.runner import LEAD_LOST, Run, new_run_id, take_back, write_off
from herdsched.store.base import (
    DEFAULT_LEASE_TTL,
    READ_ALL_HISTORY,
    Lease,
    RunClaim,
    StateStore,
    check_ttl,
)
from herdsched.store.deadline import answer_within
from herdsched.store.lease_rules import new_holder_id
from herdsched.store.spec import store_location

__all__ = [
    "DEFAULT_LEASE_TTL",
    "FAILED_RESULTS",
    "Leadership",
    "foreign_agents",
    "name_some",
    "plan_catch_up",
    "plan_from_state",
    "plan_resumed",
    "replan_after_jump",
    "resets_backoff",
    "show_running",
    "take_up_claims",
]

#: How soon a failed renewal is tried again (before the deadline makes the leader step down).
_RENEW_RETRY = 1.0
#: How often failed renewals are logged while they go on (each is retried every second).
_RENEW_WARN_EVERY = 10.0
#: How many schedules taken out of the fleet the recovery's log line names.
_REMOVED_NAMED = 10
_LEASE_METHODS = ("acquire_lease", "renew_lease", "release_lease", "current_lease")


def check_lease_support(store: StateStore) -> None:
    """A clear error for a store that predates the lease contract (``leader_lock=False``
    runs one without leadership)."""
    missing = [name for name in _LEASE_METHODS if not callable(getattr(store, name, None))]
    if missing:
        raise TypeError(
            f"the store {store!r} does not implement the leadership lease of the StateStore "
            f"contract (missing {', '.join(missing)}); implement it, or pass "
            "leader_lock=False to run a single scheduler on it without leadership"
        )


class Leadership:
    """Takes the store's lease (recovering before leading), renews it, and steps down."""

    def __init__(self, core: EngineCore, *, enabled: bool, ttl: float) -> None:
        self.core = core
        self.enabled = enabled
        self.ttl = check_ttl(ttl)
        if enabled:
            check_lease_support(core.store)
        self.lease: Lease | None = None
        self._deadline = 0.0  # monotonic: leading is known safe until then
        self._renew_at = 0.0  # monotonic: the next heartbeat
        self._warned_at: float | None = None  # monotonic: the last failed renewal logged
        self._lost_epoch = 0  # of the lease this scheduler last lost
        core.leadership_lost = self.step_down
        core.lease_bound = self.bounded

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lease: holder, epoch, pid, host, since (``started_at``), expiry."""
        if not self.enabled:
            return None
        core = self.core
        try:
            lease = core.store.current_lease()
        except Exception as exc:  # a status display never fails on the store
            core.store_health.failed(exc)  # logged once an outage, not once a status request
            lease = self.lease if core.leading else None  # a leader knows it leads
        return lease.describe(core.clock.now()) if lease is not None else None

    def log_standby(self, location: object) -> None:
        """Say who leads ``location``; a WARNING when the leader's fleet shares no agent with
        this one (two apps on one state directory: this one's jobs would not run)."""
        core = self.core
        info = self.holder()
        if not info:  # nobody leads: the try failed, or was not made
            why = (
                "its jobs from before it stopped still run: it leads once they end"
                if core.running and not all(_may_take_back(run) for run in core.running.values())
                else "the store error logged before says why"
            )
            core.log.warning(
                "This scheduler could not take the lease of %s, which no scheduler holds (%s); "
                "it stands by and tries again.",
                location or store_location(core.store),
                why,
            )
            return
        holder = _holder_text(info)
        stored = core.store_call(core.store.get_all_schedule_states) or {}
        foreign = foreign_agents(core, stored)
        if not foreign:
            core.log.info(
                "Another scheduler is active for %s (%s); this one is standing by.",
                location,
                holder,
            )
            return
        core.log.warning(
            "Another scheduler is active for %s (%s) with another fleet: the store has "
            "schedules of agents %s and none of this one's (%s). This one stands by and runs "
            "nothing while that one leads; if it takes over, it marks that fleet's schedules "
            "removed. If two apps use this store, give each its own state directory or "
            "namespace.",
            location,
            holder,
            name_some(foreign),
            name_some(sorted(core.agents)),
        )

    def try_lead(self) -> bool:
        """Become the active scheduler if the lease can be had, recovering first (caller holds
        the engine lock). A failed recovery gives the lease back and raises.

        Not while runs dispatched under an earlier, lost lease still run: their outcomes must
        not be written under a new one.
        """
        core = self.core
        left = list(core.running.values()) if self.enabled else []  # of a lost lead
        if self.enabled and not self._acquire(left):
            return False
        if left and not take_back(left, core.term):  # a job ended meanwhile: not its lead's
            self._give_up_own()
            return False
        previous, core.status = core.status, "running"  # recovery plans as the leader
        try:
            recover_all(core)
        except Exception:
            core.status = previous
            if left:  # what they return belongs to no lead: a later one records them
                core.term += 1
                write_off(left, LEAD_LOST)
            self._give_up_own()
            raise
        for run in left:
            _show_running(core, run)
        if left:
            core.log.warning(
                "No other scheduler led since this one lost the lead: it takes back the %d "
                "job(s) still running (%s), whose outcomes are recorded as usual.",
                len(left),
                name_some([f"{run.agent}/{run.schedule_name}" for run in left]),
            )
        return True

    def _give_up_own(self) -> None:
        """Give back a lease just taken, under which nothing ran: the next try still takes
        the jobs of the lost lead back (nobody else led in it)."""
        if self.lease is not None and self.core.running:
            self._lost_epoch = self.lease.epoch
        self.release()

    def _acquire(self, left: list[Run]) -> bool:
        """Take the lease (caller holds the engine lock). Jobs still running (``left``) from a
        lead this scheduler gave up because its store did not answer are taken back with it
        when no other scheduler led meanwhile (the lease's epoch follows the lost one's): the
        fleet need not wait for a long job after a short outage. Any other jobs still running
        (told to stop, given up by ``stop()``, ending now) are waited for first: their
        outcomes must not be written under a new lead."""
        core = self.core
        if not all(_may_take_back(run) for run in left):
            return False
        started = core.clock.monotonic()
        try:
            lease = core.store.acquire_lease(new_holder_id(), self.ttl)
        except StateError as exc:  # a holder stopped in a fenced write, a store down: retry
            core.store_health.failed(exc)  # logged once an outage, not once a try
            return False
        core.store_health.worked()  # a standby's outage ends here: it commits nothing
        if lease is None:
            return False
        if left and lease.epoch != self._lost_epoch + 1:  # another led, and ran their schedules
            self._give_back(lease)
            for run in left:
                run.cancel()
            core.log.warning(
                "Another scheduler led while this one could not reach its store (the lease's "
                "epoch went from %d to %d): the %d job(s) still running from this scheduler's "
                "lost lead (%s) are told to stop; it leads once they end.",
                self._lost_epoch,
                lease.epoch,
                len(left),
                name_some([f"{run.agent}/{run.schedule_name}" for run in left]),
            )
            return False
        self._hold(lease, started)
        core.log.info(
            "This scheduler holds the lease (epoch %d, renewed every %.3g s, lapses after %.3g s).",
            lease.epoch,
            self.ttl / 3,
            self.ttl,
        )
        return True

    def stop_runs_of_a_lost_lead(self) -> None:
        """Tell the jobs still running from a lead given up at its deadline (the store did not
        answer: no successor was known) to stop once another scheduler leads, which runs
        their schedules again (a standby's try; the store is read outside the engine lock,
        which a store cut off again must not hold up)."""
        core = self.core
        with core.lock:  # a standby runs nothing else: what runs is of the lead it lost
            running = core.running.values() if core.status == "standby" else ()
            left = [run for run in running if not run.cancel_event.is_set()]
        if not left:
            return
        try:
            current = core.store.current_lease()
        except Exception as exc:  # still out of reach: looked at again at the next try
            core.store_health.failed(exc)
            if not isinstance(exc, StateError):  # a store's own bug, not an outage
                core.log.debug("Reading the lease failed.", exc_info=True)
            return
        if current is None or current.epoch <= self._lost_epoch:
            return  # its try to lead, which writes, tells whether the store works again: on
            # a full disk reads work while writes fail
        core.store_health.worked()  # another leads: reading is all this standby does
        with core.lock:
            if core.status != "standby":
                return
            for run in left:
                run.cancel()
        core.log.warning(
            "Another scheduler leads now (pid %s on %s, epoch %d): the %d job(s) still running "
            "from this scheduler's lost lead (%s) are told to stop.",
            current.pid,
            current.host,
            current.epoch,
            len(left),
            name_some([f"{run.agent}/{run.schedule_name}" for run in left]),
        )

    def _hold(self, lease: Lease, asked_at: float) -> None:
        """Keep ``lease``, granted by a request made at monotonic ``asked_at``."""
        self.lease = lease
        self._deadline = asked_at + self.ttl
        self._renew_at = asked_at + self.ttl / 3

    def next_heartbeat(self) -> float | None:
        """Monotonic time of the next renewal, ``None`` when there is nothing to renew."""
        return self._renew_at if self.lease is not None and self.core.leading else None

    def heartbeat(self) -> bool:
        """Renew the lease when due (timer thread); ``False`` once this scheduler stepped down.

        A refused renewal (another holder) steps down at once; a failed one (the store is
        unreachable) is retried until the monotonic deadline, then steps down too: also when
        the failed renewal itself waited past it, so that no warning names time that is gone.
        A renewal waits for its store no longer than the lease has left (:meth:`bounded`).
        """
        lease = self.lease
        if lease is None:
            return True
        core = self.core
        asked_at = core.clock.monotonic()
        if asked_at < self._renew_at:
            return True
        try:
            with self.bounded():
                fresh = core.store.renew_lease(lease, self.ttl)
        except LeadershipLostError as exc:
            self.step_down(exc)
            return False
        except Exception as exc:
            failed_at = core.clock.monotonic()  # a renewal that waited may end past the deadline
            if failed_at >= self._deadline:
                reason = f"the lease could not be renewed within lease_ttl={self.ttl:g} s ({exc})"
                self.step_down(StateError(reason, cause=exc))
                return False
            if self._warned_at is None or failed_at - self._warned_at >= _RENEW_WARN_EVERY:
                self._warned_at = failed_at
                core.log.warning(
                    "Could not renew the scheduler lease (%s); retrying every %.3g s. Unless a "
                    "renewal succeeds within %.3g s this scheduler stops dispatching.",
                    exc,
                    _RENEW_RETRY,
                    self._deadline - failed_at,
                )
            self._renew_at = asked_at + _RENEW_RETRY
            return True
        self._warned_at = None
        with core.lock:
            if self.lease is None:  # stepped down meanwhile (a refused commit): stay down
                return False
            self._hold(fresh, asked_at)
        return True

    def bounded(self) -> contextlib.AbstractContextManager[None]:
        """Store calls of this leader inside the block (its renewal, its claims) wait no longer
        than its lease has left, at least a second (also for a timer that was late), and are
        cut then: a leader cut off from its store stops leading when its lease runs out, not
        a store call's own time limit later. No bound without a lease."""
        if self.lease is None:
            return contextlib.nullcontext()
        left = max(self._deadline - self.core.clock.monotonic(), _RENEW_RETRY)
        budget = f"the {left:.3g} s left of this scheduler's lease"
        return answer_within(left, budget=budget, strict=True)

    def step_down(self, exc: BaseException) -> None:
        """Stop leading after losing the lease (or failing to renew it in time): dispatch
        nothing more, record nothing the running jobs return, stand by and try again later.
        When another scheduler took the lease (``LeadershipLostError``), which runs their
        schedules again, the jobs are told to stop; a store only out of reach names no one
        who would, and they may finish, until a standby's look finds another leader
        (:meth:`stop_runs_of_a_lost_lead`). A scheduler that is stopping tells them to stop
        at once: it will not lead again to record them, and it looks for no other leader
        (a look at a store out of reach could hold its stop past its timeout)."""
        core = self.core
        with core.lock:
            lease, self.lease = self.lease, None
            stopping = core.status == "stopping"  # lost while stop() waits for its jobs
            if lease is None or core.status not in ("running", "stopping"):
                return
            if not stopping:
                core.status = "standby"
            core.term += 1  # the runs going on now end unrecorded
            successor = isinstance(exc, LeadershipLostError)
            self._lost_epoch = lease.epoch
            for run in core.running.values():
                run.written_off = LEAD_LOST  # their work sources hear their items failed
                if successor or stopping:  # another runs, or may run, their schedules
                    run.cancel()  # again: tell them to stop (a command's group is ended too)
            core.plan.drop_waiting()  # a standby runs nothing: wait_until_idle() is told
            core.idle.notify_all()
            core.log.error(
                "This scheduler lost the lead of %s (epoch %d): %s. It dispatches nothing more; "
                "%d running job(s) %s; %s.",
                store_location(core.store),  # in words, a password masked: not the repr
                lease.epoch,
                str(exc).rstrip("."),
                len(core.running),
                "are told to stop and their outcomes are not recorded"
                if successor or stopping
                else "may finish (no other leader is known): their outcomes are recorded only "
                "if this one leads again before another does",
                "it goes on stopping" if stopping else "it stands by and tries to lead again",
            )
            core.emit(ev.StateErrorOccurred(at=core.clock.now(), error=str(exc)))
            # under the lock: never after a new lease was taken; a lease lost is released no
            # later than a third of it (a store out of reach must not hold the engine's lock,
            # nor a stop past its timeout)
            with answer_within(self.ttl / 3, budget=f"a third of the {self.ttl:g} s lease"):
                self._give_back(lease)
        core.wake.set()

    def release(self) -> None:
        """Give the lease up (at ``stop()``) so a standby takes over at once."""
        lease, self.lease = self.lease, None
        if lease is not None:
            self._give_back(lease)

    def _give_back(self, lease: Lease) -> None:
        try:
            self.core.store.release_lease(lease)
        except Exception as exc:  # the liveness lock is gone anyway: standbys see a free lease
            self.core.log.warning("Could not record the release of the scheduler lease: %s", exc)


def _may_take_back(run: Run) -> bool:
    """Whether a run still going on when this scheduler leads again may be taken back: one a
    lead lost to a store that did not answer left running, not told to stop, its job not
    returned (a returned one is being settled as a lost lead's: not recorded)."""
    return run.written_off == LEAD_LOST and not run.cancel_event.is_set() and not run.job_ended


def _show_running(core: EngineCore, run: Run) -> None:
    """Write the start of a taken-back ``run`` again: the store dropped the lost lead's
    pending transitions, its start perhaps among them, and recovery leaves the schedules of
    running runs alone (caller holds the lock)."""
    entry = core.entries.get((run.agent, run.schedule_name))
    if entry is None or entry.run is not run:
        return
    changes: dict[str, Any] = {
        "last_run_at": run.fired_at,
        "last_slot_at": run.scheduled_for,
        "running_run_id": run.run_id,
    }
    if entry.state.status in (Status.IDLE, Status.RUNNING):  # a pause made meanwhile stays
        changes["status"] = Status.RUNNING
    core.change_state(entry, **changes)


#: what the record of a run left ``running`` says: nothing tells a process that died from one
#: that lost the lead (a database restart, a long stop) before the run's end was written
_INTERRUPTED = (
    "its scheduler stopped, or lost the lead, before the run's end was recorded (the job may "
    "have finished)"
)
#: why a slot a scheduler finds passed was not run, when nothing says more (a restart, a
#: schedule registered late)
_NOT_RUN = "no scheduler was running it"
#: the results that count as failures in a row (a backoff's, an auto-disable's)
FAILED_RESULTS = (RunStatus.FAILED, RunStatus.TIMEOUT)


def recover_all(core: EngineCore) -> None:
    """Plan every schedule from the store, recording runs a dead process left unfinished."""
    core.store.refresh()
    core.unadopted = True  # definitions other processes changed are taken in at the next look
    core.marked_at_start = set()
    now = core.clock.now()
    stored = core.store_call(core.store.get_all_schedule_states)  # before this fleet writes
    claimed = _unfinished_claims(core)
    # the claims of schedules registered later are taken up then (see registry.install_entry)
    core.left_claims = {key: claims for key, claims in claimed.items() if key not in core.entries}
    for entry in list(core.entries.values()):
        if entry.run is not None:
            continue
        entry.state = core.store.get_schedule_state(entry.agent, entry.name)
        take_up_claims(core, entry, claimed.get(entry.key, []))
        core.plan.unplan(entry)
        plan_from_state(core, entry, now)
    if stored is not None:
        _record_orphan_claims(core, stored)
        _mark_removed(core, now, stored)
        _record_removed_claims(core, now)


def take_up_claims(core: EngineCore, entry: Entry, claims: list[RunClaim]) -> None:
    """Take up the unfinished claims (oldest first) a dead process left for ``entry``'s runs,
    before its state is planned: each but the last is recorded interrupted unless recorded;
    the last, newer than the state shows, may have started before the process died: the
    state takes it as running (a pause or disable made meanwhile stays), over a stored
    "running" of an earlier run whose end was not committed, which is recorded interrupted
    first."""
    if len(claims) > 1:
        _record_earlier_claims(core, entry, claims[:-1])
    claim = claims[-1] if claims else None
    if claim is None or not _claim_is_newer(entry.state, claim):
        return
    _record_stored_run(core, entry, claim)
    status = entry.state.status
    # written, not only held: the state then shows the run, whose claim its end covers
    core.change_state(
        entry,
        status=Status.RUNNING if status is Status.IDLE else status,
        last_run_at=claim.run_at,
        last_slot_at=claim.slot,
        running_run_id=claim.run_id,
    )


def _record_stored_run(core: EngineCore, entry: Entry, claim: RunClaim) -> None:
    """Record as interrupted the run the stored state shows going on, when a later claimed run
    takes its place in the state and the history has no record of it."""
    state = entry.state
    if state.running_run_id is None or state.running_run_id == claim.run_id:
        return
    left, record = _run_left(core, entry)
    if left and record is None:
        kind = _kind(entry, state.last_slot_at)
        _record_unended(
            core, entry.key, kind, state.running_run_id, state.last_run_at, state.last_slot_at
        )


def _claim_is_newer(state: ScheduleState, claim: RunClaim) -> bool:
    """Whether an unfinished ``claim`` is a later run than ``state`` shows (a schedule whose
    state is not completed: a claim never reopens one)."""
    if state.status not in (Status.IDLE, Status.RUNNING, Status.PAUSED, Status.DISABLED):
        return False
    return state.last_run_at is None or claim.run_at >= state.last_run_at


def _mark_removed(
    core: EngineCore, now: datetime, stored: Mapping[str, Mapping[str, ScheduleState]]
) -> None:
    """Mark the stored states of schedules this scheduler does not run (taken out of its fleet),
    so that every process shows them as removed rather than as waiting for a run that never
    comes. Their next run is kept for a program that registers its agents after ``start()``:
    registered during this lead, a schedule catches up what it missed by the catch-up policy,
    as after downtime (a cron's missed slots were lost otherwise); one put back in a later
    lead (taken out of the fleet file, then back) plans afresh (:func:`plan_from_state`).
    Stored run-time definitions are taken in when their agent registers: they are marked only
    while their agent is not registered. Registering a marked schedule again clears the mark
    (:meth:`EngineCore.persist_description`). ``stored`` holds the states as they were
    before this scheduler wrote its own."""
    defined = _stored_definitions(core)
    if defined is None:
        return
    lost = [
        (agent, name)
        for agent, states in stored.items()
        for name, state in states.items()
        if state.removed_at is None
        and (agent, name) not in core.entries
        and (agent not in core.agents or name not in defined.get(agent, {}))
        and not (name == AD_HOC_SCHEDULE and agent in core.agents)
    ]
    lost += [  # defined with no state yet (written by hand, or its agent left before a run)
        (agent, name)
        for agent, names in defined.items()
        if agent not in core.agents
        for name in names
        if name not in stored.get(agent, {})
    ]
    foreign = foreign_agents(core, stored)
    if foreign:
        core.log.warning(
            "This scheduler's fleet shares no agent with the fleet that ran on its store "
            "before it (agents %s): their schedules are marked removed and do not run while "
            "this one leads. If two apps use this store, give each its own state directory "
            "or namespace.",
            name_some(foreign),
        )
    for agent, name in lost:
        core.mark_removed(agent, name, now, keep_next=True)
    core.marked_at_start = set(lost)
    if lost:
        core.log.info(
            "%d schedule(s) with state in the store are not in this scheduler's fleet (%s): "
            "they do not run and are shown as removed; their state and history stay, and "
            "registering one again runs it again.",
            len(lost),
            name_some([f"{agent}/{name}" for agent, name in lost]),
        )


def foreign_agents(
    core: EngineCore, stored: Mapping[str, Mapping[str, ScheduleState]]
) -> list[str]:
    """The agents with live schedules in the store when none of them is in this scheduler's
    fleet: another app's scheduler uses the same state (``[]`` otherwise, and when either
    side has none)."""
    live = {
        agent
        for agent, states in stored.items()
        if any(state.removed_at is None for state in states.values())
    }
    if not core.agents or not live or not live.isdisjoint(core.agents):
        return []
    return sorted(live)


def name_some(names: list[str]) -> str:
    """The first names of a list and how many more, for a log line."""
    more = len(names) - _REMOVED_NAMED
    return ", ".join(names[:_REMOVED_NAMED]) + (f" and {more} more" if more > 0 else "")


def _unfinished_claims(core: EngineCore) -> dict[tuple[str, str], list[RunClaim]]:
    """Durable claims whose run never reached the state as finished, by schedule, oldest
    first: more than one when a run started right after another ended (a run-now waiting for
    its schedule) and neither end was committed."""
    try:
        claims = core.store.load_claims()
    except Exception as exc:
        core.state_error(exc)
        return {}
    unfinished: dict[tuple[str, str], list[RunClaim]] = {}
    for claim in sorted(claims, key=lambda c: c.run_at):
        state = core.store.get_schedule_state(claim.agent, claim.schedule)
        finished = state.last_finished_at is not None and state.last_finished_at >= claim.run_at
        if not finished:
            unfinished.setdefault((claim.agent, claim.schedule), []).append(claim)
    return unfinished


def _record_earlier_claims(core: EngineCore, entry: Entry, claims: list[RunClaim]) -> None:
    """Record as interrupted each claimed run before the last one of ``entry`` that has no
    record: it started, and whether it finished is not known (the last one is taken up from
    the state, by :func:`plan_from_state`)."""
    try:
        records = core.store.get_history(entry.agent, entry.name, READ_ALL_HISTORY)
    except Exception as exc:
        core.state_error(exc, entry)
        return
    recorded = {record.run_id for record in records}
    for claim in claims:
        if claim.run_id not in recorded:
            kind = _kind(entry, claim.slot)
            _record_unended(core, entry.key, kind, claim.run_id, claim.run_at, claim.slot)


def _kind(entry: Entry, slot: datetime | None) -> TriggerType:
    """The trigger type of a run of ``entry`` with ``slot`` (none: a run-now)."""
    return TriggerType.MANUAL if slot is None else timer_trigger_type(entry)


def _record_orphan_claims(
    core: EngineCore, stored: Mapping[str, Mapping[str, ScheduleState]]
) -> None:
    """Record as interrupted the claimed runs of schedules that are gone: removed while their
    runs went on, and the scheduler running them stopped before their records were written
    (the claim journal keeps a claim until then). A schedule with a stored state or a stored
    definition is not gone: its claims wait in ``core.left_claims`` for its registration."""
    gone = {
        (agent, name): claims
        for (agent, name), claims in core.left_claims.items()
        if name not in stored.get(agent, {})
    }
    defined = _stored_definitions(core) if gone else None
    if defined is None:
        return
    for (agent, name), claims in gone.items():
        if name in defined.get(agent, {}):
            continue
        del core.left_claims[(agent, name)]
        try:
            records = core.store.get_history(agent, name, READ_ALL_HISTORY)
        except Exception as exc:
            core.state_error(exc)
            continue
        _record_unrecorded(core, (agent, name), claims, records)


def _stored_definitions(core: EngineCore) -> Mapping[str, Mapping[str, Any]] | None:
    """The stored run-time definitions; ``None`` when the store cannot give them (told)."""
    try:
        return core.store.load_definitions()
    except Exception as exc:
        core.state_error(exc)
        return None


def _record_unrecorded(
    core: EngineCore, key: tuple[str, str], claims: list[RunClaim], records: list[RunRecord]
) -> None:
    """Record as interrupted each of ``claims`` (runs of a schedule this scheduler does not
    run) that ``records``, its history, does not hold."""
    # the type of the schedule's timer runs, from its history (the schedule is not known here)
    timed = [r.trigger_type for r in records if r.scheduled_for is not None]
    recorded = {record.run_id for record in records}
    for claim in claims:
        if claim.run_id not in recorded:
            kind = (
                TriggerType.MANUAL
                if claim.slot is None
                else next(iter(timed), TriggerType.INTERVAL)
            )
            _record_unended(core, key, kind, claim.run_id, claim.run_at, claim.slot)


def _record_removed_claims(core: EngineCore, now: datetime) -> None:
    """Record the claimed runs of schedules marked removed (not in this scheduler's fleet) and
    end the run their state shows: they would wait for a registration that may never come (a
    rolling update took the schedule out while the old leader ran it), shown running, their
    claims kept. Registered again, such a schedule starts from the state written here; a once
    schedule whose time it was is completed. A stored definition's claims wait for its agent:
    its plan is kept for it (see :func:`_mark_removed`), and the run is taken up from it."""
    defined = _stored_definitions(core) if core.left_claims else None
    if defined is None:
        return
    for key, claims in list(core.left_claims.items()):
        if key[1] in defined.get(key[0], {}):
            continue
        try:
            state = core.store.get_schedule_state(*key)
            if state.removed_at is None:
                continue  # not marked: its agent may register it yet
            records = core.store.get_history(*key, READ_ALL_HISTORY)
        except Exception as exc:
            core.state_error(exc)
            continue
        del core.left_claims[key]
        _record_unrecorded(core, key, claims, records)
        ended = next((r for r in records if r.run_id == claims[-1].run_id), None)
        if ended is None or ended.finished_at is None:
            ended = None  # recorded interrupted above, or by a takeover before
        last = claims[-1]  # the state shows the latest run, as when its end is written
        newer = state.last_run_at is None or last.run_at > state.last_run_at
        changes: dict[str, Any] = (
            {"last_run_at": last.run_at, "last_slot_at": last.slot} if newer else {}
        )
        status = Status.IDLE
        timed = any(c.slot is not None for c in claims)  # not a stale last_slot_at: a once
        if state.type == ScheduleType.ONCE.value and timed:  # given a new time has an old one
            status = Status.COMPLETED  # its time came: a registration must not run it again
        elif state.status in (Status.PAUSED, Status.DISABLED, Status.COMPLETED):
            status = state.status
        core.store_call(
            core.store.record_transition,
            *key,
            **changes,
            status=status,
            last_result=ended.status if ended else RunStatus.INTERRUPTED,
            last_finished_at=ended.finished_at if ended else now,
            last_error=ended.error if ended else _INTERRUPTED,
            running_run_id=None,
        )


def _record_unended(
    core: EngineCore,
    key: tuple[str, str],
    kind: TriggerType,
    run_id: str,
    started: datetime | None,
    slot: datetime | None,
) -> None:
    """Record as interrupted a run of the schedule ``key`` that started and whose end was
    never recorded (before a later run of the same schedule that is taken up from the state,
    or of a schedule that is gone)."""
    agent, name = key
    core.log.warning(
        "Run %s of %s/%s started before its scheduler stopped or lost the lead, and its end "
        "was not recorded; it is recorded as interrupted.",
        run_id,
        agent,
        name,
    )
    core.append_run(
        RunRecord(
            run_id=run_id,
            agent=agent,
            schedule=name,
            trigger_type=kind,
            scheduled_for=slot,
            started_at=started,
            finished_at=None,
            status=RunStatus.INTERRUPTED,
            error=_INTERRUPTED,
        )
    )


def plan_from_state(core: EngineCore, entry: Entry, now: datetime) -> None:
    """Compute ``entry``'s due time from its persisted state (restart recovery included).

    Caller holds the engine lock."""
    # a run this process still executes or settles (its schedule taken out and put back
    # meanwhile) is not left: it is recorded when it ends
    if entry.run is None and entry.state.running_run_id not in core.running:
        left, record = _run_left(core, entry)
        if record is not None:
            _record_end_taken_up(core, entry, record, now)
        elif left:
            _record_interrupted(core, entry, now)
    state = entry.state
    # as stored now (a cron naming the zone it inherits), or as before (without it)
    described = {entry.schedule.describe(core.settings.timezone), entry.schedule.description}
    stored = None if state.cadence is None else state.cadence.removesuffix(DISABLED_MARK)
    cadence_changed = stored is not None and stored not in described
    planned = _moved_start(entry, core.settings.timezone) or state.next_run_at
    if state.removed_at is not None and not _marked_for_now(core, entry):
        planned = None  # taken out of the fleet before: put back, planned afresh
    elif _ran_already(entry, planned):  # a kept plan whose slot a recorded run stood for
        planned = cadence_plan(core, entry)
        core.change_state(entry, next_run_at=planned)  # what a resume plans from, too
    if state.consecutive_failures == 0 and state.last_result in FAILED_RESULTS:
        # a resume while no scheduler led reset the failures whose backoff set the plan (the
        # command line left no plan)
        planned = cadence_plan(core, entry) or planned
    if not entry.schedulable:
        core.set_due(entry, None, None)
    elif cadence_changed or planned is None:
        due = fresh_due(entry, now, core.settings.timezone, core.rng, recompute=True)
        cadence = entry.schedule.cadence
        if due is not None and due < now and cadence is not None and cadence.runs_once:
            plan_catch_up(core, entry, due, now)  # passed before any scheduler planned it
        else:
            core.set_due(entry, due, due)
    else:
        plan_catch_up(core, entry, _stepped_back(entry, planned, now), now)
    core.persist_description(entry)


def _marked_for_now(core: EngineCore, entry: Entry) -> bool:
    """Whether ``entry``'s removal mark keeps its plan for this registration: a run-time
    definition's always (it waits for its agent), another's when this lead's start marked it
    (a program that registers its agents after ``start()``)."""
    return entry.persisted_definition or entry.key in core.marked_at_start


def _ran_already(entry: Entry, planned: datetime | None) -> bool:
    """Whether ``planned`` is a slot the last run stood for, or one before it: the plan kept
    for a schedule marked removed while its run went on, that run since recorded (see
    :func:`_record_removed_claims`). The cadence's next slot after it is the plan then."""
    cadence, last = entry.schedule.cadence, entry.state.last_slot_at
    if planned is None or last is None or cadence is None or cadence.runs_once:
        return False
    return entry.state.removed_at is not None and planned <= last


def _moved_start(entry: Entry, zone: tzinfo) -> datetime | None:
    """The first run of ``entry`` its ``start_at`` gives, when the schedule never ran and its
    stored first run comes before that start: the start was moved later (in the fleet file
    while no scheduler ran, or at run time while the schedule was paused), and "no run
    before this time" holds. The stored cadence text leaves the start out, so only this
    tells; a start moved earlier cannot be told from a plan moved on by a pause or a skipped
    slot. ``None`` otherwise."""
    state, cadence = entry.state, entry.schedule.cadence
    start: datetime | None = getattr(cadence, "start_at", None)
    planned = state.next_run_at
    if cadence is None or start is None or planned is None or state.last_run_at is not None:
        return None
    return cadence.first_due(start, zone) if planned < start else None


def _stepped_back(entry: Entry, planned: datetime, now: datetime) -> datetime:
    """``planned`` moved back by as much as the wall clock stepped back while no scheduler
    ran, for a cadence that waits elapsed time: a last run that ended after ``now`` shows the
    step, and the wait counts as if it ended now (it waited a day for a clock a day fast)."""
    finished = entry.state.last_finished_at
    cadence = entry.schedule.cadence
    if cadence is None or not cadence.waits_elapsed_time or finished is None or finished <= now:
        return planned
    return planned - (finished - now)


def plan_catch_up(
    core: EngineCore, entry: Entry, persisted: datetime, now: datetime, why: str = _NOT_RUN
) -> None:
    """Plan ``entry`` for a due time that may have passed: record the missed slot (saying
    ``why`` it was not run), and fire once or wait by the catch-up policy; a missed once
    schedule is completed."""
    plan = due_after_downtime(entry, persisted, now, core.settings, core.rng)
    if plan.missed is not None:
        core.record_missed(entry, plan.missed, why)
        cadence = entry.schedule.cadence
        if cadence is not None and cadence.runs_once:
            core.change_state(entry, status=Status.COMPLETED, next_run_at=None)
            core.set_due(entry, None, None)
            return
    core.set_due(entry, plan.due, plan.scheduled_for)


def plan_resumed(
    core: EngineCore, entry: Entry, now: datetime, *, backed_off: bool = False
) -> None:
    """Plan ``entry`` after its status changed (a resume here or in another process): a due
    time that passed while it could not run follows the catch-up policy, as after downtime
    (``skip`` or an old miss records it missed and waits for the next slot). Caller holds the
    lock.

    ``backed_off``: the resume reset a failure count whose backoff set the stored plan (see
    :func:`resets_backoff`); the plan is then the cadence's own after the last run, so an
    auto-disabled schedule resumed once its job is fixed does not wait out the last rung of
    the ladder (up to an hour)."""
    moved = _moved_start(entry, core.settings.timezone)
    planned = moved or (cadence_plan(core, entry) if backed_off else entry.state.next_run_at)
    if not entry.schedulable:
        core.set_due(entry, None, None)
    elif (entry.due is None or backed_off or moved) and planned is not None and planned <= now:
        plan_catch_up(core, entry, planned, now, "the schedule was paused or disabled")
    elif (backed_off or moved) and planned is not None:
        core.set_due(entry, planned, planned)
    else:
        due = fresh_due(entry, now, core.settings.timezone, core.rng, recompute=False)
        core.set_due(entry, due, entry.scheduled_for or due)


def show_running(core: EngineCore, entry: Entry) -> None:
    """A schedule resumed while its run goes on shows ``running`` again (the resume's durable
    intent is ``idle``): a transition of this leader, fenced by its lease and decided under
    the lock, so a run ending meanwhile or a lead lost leaves no ``running`` behind. Caller
    holds the lock."""
    run = entry.run
    if (
        core.leading
        and run is not None
        and entry.planned_by_its_run
        and entry.state.status is Status.IDLE
        and entry.state.running_run_id == run.run_id  # its end is not written yet
    ):
        core.change_state(entry, status=Status.RUNNING)


def resets_backoff(before: ScheduleState, failures_after: int) -> bool:
    """Whether a status change from ``before`` to a count of ``failures_after`` drops a
    failure backoff: the count goes to zero and the stored plan was set by a failure (not by a
    deferral, which keeps its time)."""
    return (
        failures_after == 0
        and before.consecutive_failures > 0
        and before.last_result is not RunStatus.DEFERRED
    )


def cadence_plan(core: EngineCore, entry: Entry) -> datetime | None:
    """The next due time the cadence alone gives after the last run (no backoff), which may
    have passed; the stored plan when there is no last run to count from."""
    state, cadence = entry.state, entry.schedule.cadence
    finished = state.last_finished_at
    if cadence is None or cadence.runs_once or finished is None:
        return state.next_run_at
    zone = core.settings.timezone
    slot = _stood_for(state) or finished
    # "now" at the run's end: the cadence's own time, not moved up to the present
    return cadence.next_due(slot=slot, finished_at=finished, now=finished, zone=zone, rng=core.rng)


def _stood_for(state: ScheduleState) -> datetime | None:
    """The last slot the last run stood for: its slot, or its start when that was later (a
    catch-up run stands for every slot before it, so none of them comes due again)."""
    times = [t for t in (state.last_slot_at, state.last_run_at) if t is not None]
    return max(times) if times else None


def _run_left(core: EngineCore, entry: Entry) -> tuple[bool, RunRecord | None]:
    """Whether ``entry``'s state shows a run going on (``running``, or, paused or resumed
    meanwhile, a run id), and that run's record when the history holds it: the run ended and
    a crash came between the two writes of its group commit (the record, then the state).

    An older version that ran the schedule on keeps a stale run id in its state, whose run is
    recorded before the state's last end: that run is over, and nothing is taken up from it.
    A record without an end (``interrupted``: a takeover recorded it, then could not write the
    state) is judged by its start: later than the state's last end, it is taken up too, or
    the slot it stood for would run again.
    """
    state = entry.state
    if state.running_run_id is None:
        return state.status is Status.RUNNING, None
    try:
        records = core.store.get_history(entry.agent, entry.name, READ_ALL_HISTORY)
    except Exception as exc:
        core.state_error(exc, entry)
        return True, None  # the safe side: recorded interrupted rather than run again
    for record in records:
        if record.run_id == state.running_run_id:
            ended = record.finished_at or record.started_at
            newer = (
                state.last_finished_at is None or ended is None or ended > state.last_finished_at
            )
            return (True, record) if newer else (False, None)
    return True, None


def _record_end_taken_up(core: EngineCore, entry: Entry, record: RunRecord, now: datetime) -> None:
    """Take up the end of a run whose record is in the history but not in the state: the
    state as the run's end leaves it (its result, its failure count; the backoff of a failure
    is not applied), planned past the slot it stood for, which never runs again."""
    core.log.info(
        "%s/%s: run %s ended (%s) before its scheduler stopped; its end is taken up from its "
        "record.",
        entry.agent,
        entry.name,
        record.run_id,
        record.status,
    )
    failed = record.status in FAILED_RESULTS
    failures = entry.state.consecutive_failures + 1 if failed else 0
    if record.status not in (RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.TIMEOUT):
        failures = entry.state.consecutive_failures
    _settle_ended(
        core,
        entry,
        now,
        finished=record.finished_at or now,
        result=record.status,
        error=record.error,
        consecutive_failures=failures,
    )


def _record_interrupted(core: EngineCore, entry: Entry, now: datetime) -> None:
    """Record the run a dead process left ``running`` as interrupted, and plan the next.

    Its scheduler stopped, or lost the lead (it hung past its lease, or was cut off from the
    store): nothing here tells which, so the log names both.
    """
    state = entry.state
    request_id = _started_request(core, entry, state.last_run_at)
    record = RunRecord(
        run_id=request_id or state.running_run_id or new_run_id(),
        agent=entry.agent,
        schedule=entry.name,
        # a run with no slot was a run-now, whether queued (a request) or made directly
        trigger_type=TriggerType.MANUAL
        if request_id or state.last_slot_at is None
        else timer_trigger_type(entry),
        scheduled_for=state.last_slot_at,
        started_at=state.last_run_at,
        finished_at=None,  # when the process stopped is not known: not the restart's time
        status=RunStatus.INTERRUPTED,
        error=_INTERRUPTED,
    )
    core.log.warning(
        "%s/%s was running when its scheduler stopped or lost the lead; its run %s is recorded "
        "as interrupted.",
        entry.agent,
        entry.name,
        record.run_id,
    )
    core.append_run(record)
    _settle_ended(core, entry, now, finished=now, result=RunStatus.INTERRUPTED, error=record.error)


def _settle_ended(
    core: EngineCore,
    entry: Entry,
    now: datetime,
    *,
    finished: datetime,
    result: RunStatus,
    error: str | None,
    **more: Any,
) -> None:
    """The state of ``entry`` once the run it shows has ended with ``result``: no longer
    running, planned past the slot that run stood for, or past its start when that was later
    (a catch-up run stands for every slot before it, as in a run's own end); a pause or
    disable stays, except on a once schedule whose own run it was, which is completed (a
    resume must not run it again). A run-now of a once schedule (no slot) leaves its time
    planned (a crash during a test run before that time lost the real one); a time that
    passed meanwhile is caught up by the plan, as after downtime."""
    state = entry.state
    cadence = entry.schedule.cadence
    due = None
    if cadence is not None and not cadence.runs_once:
        due = cadence.next_due(
            slot=_stood_for(state) or finished,
            finished_at=finished,
            now=now,
            zone=core.settings.timezone,
            rng=core.rng,
        )
    once = cadence is not None and cadence.runs_once
    over = once and (state.last_slot_at is not None or state.status is Status.COMPLETED)
    if once and not over:
        due = state.next_run_at  # its time, caught up by the plan when it has passed
    kept = state.status in (Status.PAUSED, Status.DISABLED) and not over
    core.change_state(
        entry,
        status=state.status if kept else (Status.COMPLETED if over else Status.IDLE),
        last_result=result,
        last_finished_at=finished,
        last_error=error,
        running_run_id=None,
        next_run_at=due,
        **more,
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


def replan_after_jump(core: EngineCore, now: datetime, jump: timedelta) -> None:
    """Re-plan every waiting schedule after the wall clock jumped by ``jump`` (caller holds
    the lock).

    A backwards step must not stretch an elapsed-time wait: an interval's due time moves back
    with the clock, so the wait lasts as long as it would have (a backoff or a deferral
    included: capping it at one interval cut a 60-minute backoff to the interval); a forward
    step makes due times pass, which the catch-up policy handles.
    """
    if not core.leading:
        return
    for entry in list(core.entries.values()):
        if entry.run is not None or entry.due is None:
            continue
        cadence = entry.schedule.cadence
        if cadence is not None and cadence.waits_elapsed_time and jump < timedelta(0):
            slot = entry.scheduled_for + jump if entry.scheduled_for is not None else None
            core.set_due(entry, entry.due + jump, slot)
        elif entry.due <= now:
            plan_catch_up(core, entry, entry.due, now, "the wall clock jumped ahead")


def _holder_text(info: Mapping[str, Any] | None) -> str:
    """Who holds the lease, as the log says it: "pid 4242 on web-1, lease epoch 3, since T"."""
    if not info:
        return "holder unknown"
    where = f"pid {info.get('pid')} on {info.get('host')}" if info.get("pid") else info["holder"]
    return f"{where}, lease epoch {info.get('epoch')}, since {info.get('started_at')}"
