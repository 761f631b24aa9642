"""The engine's shared state and the few operations every part of it needs.

:class:`EngineCore` holds what the timer, the workers and the public API share: the fleet, the
plan, capacity, the runs in flight, the store, the listeners, and the one lock that guards
them. The other engine modules are functions and small classes over it, each holding one rule
(planning, dispatch, outcomes, recovery, other processes, group commit); the
:class:`~herdsched.scheduler.ThreadedScheduler` façade wires them together.

Methods documented "caller holds the lock" are called with :attr:`EngineCore.lock` held; events
are only collected there and delivered once the lock is released (see
:mod:`herdsched.engine.listeners`).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

from attrs import evolve

import herdsched.events as ev
from herdsched.clock import Clock
from herdsched.engine.capacity import Capacity
from herdsched.engine.executors import AgentExecutors, ExecutorFactory
from herdsched.engine.listeners import Listeners
from herdsched.engine.planning import Entry, Plan
from herdsched.engine.settings import EngineSettings
from herdsched.engine.store_health import StoreHealth
from herdsched.errors import AgentNotFoundError, LeadershipLostError, ScheduleNotFoundError
from herdsched.models import (
    AD_HOC_SCHEDULE,
    Agent,
    JobFunc,
    RunRecord,
    RunStatus,
    SkipReason,
    Status,
    TriggerType,
    check_name_types,
)
from herdsched.notify import Notification
from herdsched.policy import pre_dispatch_skip_reason
from herdsched.runner import Run, new_run_id
from herdsched.store.base import RunClaim, StateStore
from herdsched.worksource import WorkSource

__all__ = ["AD_HOC_SCHEDULE", "DISABLED_MARK", "EngineCore"]

_PARKED = (Status.PAUSED, Status.DISABLED)


#: What the stored cadence of a schedule its definition disables ends in.
DISABLED_MARK = " (enabled: false)"


class EngineCore:
    """Shared state of one scheduler (see the module docstring)."""

    def __init__(
        self,
        settings: EngineSettings,
        store: StateStore,
        clock: Clock,
        log: logging.Logger,
        *,
        on_trigger: JobFunc | None,
        work_sources: Mapping[str, WorkSource],
        notifier: Callable[[Notification], None] | None,
        executor_factory: ExecutorFactory | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.log = log
        self.on_trigger = on_trigger
        self.work_sources = dict(work_sources)
        self.notifier = notifier
        self.lock = threading.RLock()
        #: serializes changes by people and the adoption of other processes' writes (taken
        #: before :attr:`lock`, never while holding it; see :mod:`herdsched.engine.changes`)
        self.changes = threading.RLock()
        self.idle = threading.Condition(self.lock)  # notified whenever a run ends
        self.wake = threading.Event()  # set when the timer should plan again
        self.agents: dict[str, Agent] = {}
        self.plan = Plan()
        self.capacity = Capacity(settings.max_total_concurrent)
        self.running: dict[str, Run] = {}  # runs whose job has not ended, by run id
        self.listeners = Listeners(log)
        self.executors = AgentExecutors(executor_factory) if executor_factory else AgentExecutors()
        self.rng = random.Random()
        self.status = "stopped"
        #: grows each time this scheduler loses the lead: a run dispatched in an earlier term
        #: finishes unrecorded (its claim belongs to a lease that is gone)
        self.term = 0
        self.trigger_count = 0
        #: the store was re-read (at start, at a takeover) without taking in what other
        #: processes changed: the next adoption does, even if the store reports nothing new
        self.unadopted = False
        #: a change was interrupted (Ctrl-C) after its write, maybe before memory took it: the
        #: next adoption takes the stored statuses in too, as another process's change
        self.change_interrupted = False
        # unfinished claims of schedules not registered when recovery ran: taken up at their
        # registration (see recovery.take_up_claims)
        self.left_claims: dict[tuple[str, str], list[RunClaim]] = {}
        # schedules this lead's start marked removed, their plan kept: registered during this
        # lead they catch up (see recovery._mark_removed); marked by an earlier one, afresh
        self.marked_at_start: set[tuple[str, str]] = set()
        # when the sleeping timer thread wakes next (wall, monotonic); None while a pass runs
        self.planned_wake: tuple[datetime, float] | None = None
        # what a store refusing a write for a lost lease calls (set by the leadership)
        self.leadership_lost: Callable[[BaseException], None] | None = None
        #: bounds a leader's store calls by the time its lease has left (set by Leadership)
        self.lease_bound: Callable[[], contextlib.AbstractContextManager[None]] = (
            contextlib.nullcontext
        )
        #: logs the store's failures (once, then a summary a minute) and its recovery
        self.store_health = StoreHealth(log, clock)

    @property
    def entries(self) -> dict[tuple[str, str], Entry]:
        return self.plan.entries

    @property
    def leading(self) -> bool:
        """Whether this scheduler is the active one (only it plans and writes run state)."""
        return self.status == "running"

    # ------------------------------------------------------------------------ lookups

    def require_agent(self, name: str) -> Agent:
        check_name_types(name)
        agent = self.agents.get(name)
        if agent is None:
            raise AgentNotFoundError(name)
        return agent

    def require_entry(self, agent: str, name: str) -> Entry:
        check_name_types(agent, name, needed=True)
        self.require_agent(agent)
        entry = self.entries.get((agent, name))
        if entry is None:
            raise ScheduleNotFoundError(agent, name)
        return entry

    def job_for(self, entry: Entry) -> JobFunc | None:
        """What runs for ``entry``: its own job, its agent's, or the scheduler's ``on_trigger``."""
        return entry.schedule.job or self.agents[entry.agent].job or self.on_trigger

    def is_full(self, agent: Agent) -> bool:
        return self.capacity.is_full(agent.name, agent.max_concurrent)

    def skip_reason(self, entry: Entry, now: datetime) -> SkipReason | None:
        """Why ``entry`` does not fire at ``now`` (caller holds the lock)."""
        agent = self.agents[entry.agent]
        return pre_dispatch_skip_reason(
            enabled=entry.schedule.enabled,
            status=entry.state.status,
            fires_on_timer=entry.schedule.fires_on_timer,
            running=entry.run is not None,
            agent_running=self.capacity.running(entry.agent),
            max_concurrent=agent.max_concurrent,
            total_running=self.capacity.total,
            max_total_concurrent=self.settings.max_total_concurrent,
            due=entry.due is not None and entry.due <= now,
        )

    # -------------------------------------------------------------------------- state

    def change_state(self, entry: Entry, **changes: Any) -> None:
        """Apply a run transition to ``entry``'s state and hand it to the store (group-committed).

        Caller holds the lock."""
        entry.state = evolve(entry.state, **changes)
        self.store_call(self.store.record_transition, entry.agent, entry.name, **changes)

    def clear_plan(self) -> None:
        """Nothing is planned and nothing waits for a slot any more (a stop): who waits for the
        fleet to be idle is told, as a run that ends tells them. Caller holds the lock."""
        self.plan.clear()
        self.idle.notify_all()

    def set_due(
        self,
        entry: Entry,
        due: datetime | None,
        scheduled_for: datetime | None,
    ) -> None:
        """Plan ``entry`` and, when this scheduler leads, record the new ``next_run_at``.

        A paused or disabled schedule keeps its persisted plan for when it resumes, and a
        standby never writes plans: its view must not overwrite the leader's. Caller holds the
        lock.
        """
        self.plan.set_due(entry, due, scheduled_for)
        parked = due is None and (not entry.schedule.enabled or entry.state.status in _PARKED)
        if self.leading and not parked and due != entry.state.next_run_at:
            self.change_state(entry, next_run_at=due)

    def persist_description(self, entry: Entry) -> None:
        """Record the cadence (marked when the definition disables it), type and owner so other
        processes can show them (and that the schedule is in the fleet again, if it was marked
        removed)."""
        if not self.leading:
            return
        schedule = entry.schedule
        state = entry.state
        cadence = schedule.describe(self.settings.timezone)
        if not schedule.enabled:  # a process without the definition (the CLI) says why it idles
            cadence += DISABLED_MARK
        wanted = (
            cadence,
            str(schedule.type),
            schedule.owner,
            None,
        )
        if (state.cadence, state.type, state.owner, state.removed_at) != wanted:
            self.change_state(
                entry, cadence=wanted[0], type=wanted[1], owner=wanted[2], removed_at=None
            )

    def reopen_completed(self, entry: Entry) -> None:
        """A completed once schedule given a new cadence at run time (a new time, or another
        type) is live again: without this, moving a finished one-shot to a new time changed
        nothing. Called before planning ``entry`` for its new cadence; a standby leaves the
        state to the leader, which reopens it when it takes the change in. ``completed`` is a
        user-intent status that no run transition leaves, so this is a direct write (a rare
        one)."""
        if self.leading and entry.state.status is Status.COMPLETED:
            changes: dict[str, Any] = {"status": Status.IDLE, "next_run_at": None}
            entry.state = evolve(entry.state, **changes)
            self.store_call(self.store.update_schedule_state, entry.agent, entry.name, **changes)

    def mark_removed(self, agent: str, name: str, at: datetime, *, keep_next: bool = False) -> None:
        """Record that the fleet no longer has ``agent/name``: its state stays, without a next
        run, and every process shows it removed until it is registered again. ``keep_next``:
        the next run stays stored (a run-time definition whose agent is not registered, yet
        perhaps: registered later, it catches up the slot it missed meanwhile)."""
        changes: dict[str, Any] = (
            {"removed_at": at} if keep_next else {"removed_at": at, "next_run_at": None}
        )
        self.store_call(self.store.record_transition, agent, name, **changes)

    def append_run(self, record: RunRecord) -> None:
        self.store_call(self.store.append_run, record)

    def record_missed(self, entry: Entry, slot: datetime, why: str) -> None:
        """Record a slot that passed while the schedule could not run, saying ``why`` it could
        not (caller holds the lock)."""
        self.append_run(
            RunRecord(
                run_id=new_run_id(),
                agent=entry.agent,
                schedule=entry.name,
                trigger_type=timer_trigger_type(entry),
                scheduled_for=slot,
                status=RunStatus.MISSED,
                error=f"the slot passed while {why}",
            )
        )
        self.emit(
            ev.JobMissed(
                at=self.clock.now(), agent=entry.agent, schedule=entry.name, scheduled_for=slot
            )
        )

    def store_call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call the store; an error is logged and announced, and ``None`` returned."""
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            self.state_error(exc)
            return None

    def state_error(self, exc: BaseException, entry: Entry | None = None) -> None:
        if isinstance(exc, LeadershipLostError) and self.leadership_lost is not None:
            self.leadership_lost(exc)  # logs and announces it as what it is
            return
        self.store_health.failed(exc)
        self.emit(
            ev.StateErrorOccurred(
                at=self.clock.now(),
                error=str(exc),
                agent=entry.agent if entry else None,
                schedule=entry.name if entry else None,
            )
        )

    # ------------------------------------------------------------------------- events

    def emit(self, event: ev.Event) -> None:
        """Collect ``event``; it is delivered once no lock is held (see :meth:`changed`)."""
        self.listeners.collect(event)

    @contextlib.contextmanager
    def change(self) -> Iterator[None]:
        """Hold ``changes`` for one change of the fleet; the plan is woken and the events
        collected are delivered on the way out, also when the change failed (a store error's
        event would otherwise wait for the next timer pass). A change interrupted (Ctrl-C, a
        notebook's "interrupt kernel") may have been written but not taken into memory: the
        next look takes the store's statuses and definitions in, as another process's."""
        try:
            with self.changes:
                yield
        except BaseException as exc:
            if not isinstance(exc, Exception):
                self.unadopted = self.change_interrupted = True
            raise
        finally:
            self.changed()

    def changed(self) -> None:
        """The plan changed: wake the timer and deliver what was collected (no lock held)."""
        self.wake.set()
        self.listeners.deliver()


def timer_trigger_type(entry: Entry) -> TriggerType:
    """The trigger type of ``entry``'s runs fired by the timer (``manual`` for the others)."""
    if entry.schedule.fires_on_timer:
        return TriggerType(str(entry.schedule.type))
    return TriggerType.MANUAL
