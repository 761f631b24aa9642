"""The engine: one timer thread, per-agent worker pools, state transitions, lifecycle.

The timer thread keeps every schedule's next due time in a heap and sleeps on an event for
``min(time until the next due time, max_sleep)``; anything that changes the plan (a new schedule,
a pause, ``stop()``, a finished job whose schedule is now due sooner or whose agent has schedules
waiting for the slot) sets the event. Jobs never run on the timer thread: each agent has a bounded
:class:`~herdsched.workers.WorkerPool`. The timer thread never dies: every exception is caught,
logged with its agent and schedule, and the pass is retried.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import heapq
import itertools
import logging
import random
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Literal, TypeVar

import attrs

from herdsched import events as ev
from herdsched.cadence import Cron, Interval, Once, coerce_interval
from herdsched.clock import Clock, SystemClock
from herdsched.errors import (
    AgentNotFoundError,
    InvalidScheduleError,
    LimitExceededError,
    ScheduleNotFoundError,
    SchedulerShutdownError,
    ScheduleTriggerError,
    StateError,
    UnauthorizedError,
)
from herdsched.leader import LeaderLock
from herdsched.models import (
    Agent,
    CatchUp,
    JobFunc,
    RunRecord,
    RunStatus,
    Schedule,
    SchedulerState,
    SchedulerStatus,
    ScheduleState,
    ScheduleStatus,
    ScheduleType,
    SearchPage,
    SkipReason,
    Status,
    TriggerResult,
    TriggerType,
    evolve,
)
from herdsched.notify import Notification, notification_message
from herdsched.policy import (
    CatchUpPlan,
    catch_up_plan,
    coerce_backoff,
    next_after_failure,
    pre_dispatch_skip_reason,
    should_auto_disable,
    slot_after_overlap,
)
from herdsched.runner import Run, RunOutcome, execute_run, new_run_id
from herdsched.stats import RunStats, compute_run_stats
from herdsched.store.base import AdoptsTransitions, RunClaim, StateStore, TracksClaimStarts
from herdsched.store.memory import MemoryStateStore
from herdsched.timestamps import resolve_timezone, to_utc
from herdsched.workers import WorkerPool
from herdsched.worksource import WorkSource

__all__ = ["ThreadedScheduler"]

_F = TypeVar("_F", bound=Callable[..., Any])
_E = TypeVar("_E", bound=ev.Event)
#: How often an active scheduler with a state directory looks for other processes' changes.
DEFAULT_POLL_INTERVAL = 1.0
_CLOCK_JUMP_TOLERANCE = 2.0  # seconds of disagreement between wall and monotonic progress
_STORE_RETRY = 1.0  # seconds before a failed store flush is retried
_MAX_SEARCH_LIMIT = 50
_AD_HOC_SCHEDULE = "manual"
_schedulers: weakref.WeakSet[ThreadedScheduler] = weakref.WeakSet()


def _flush_all_at_exit() -> None:
    for scheduler in list(_schedulers):
        scheduler._flush_quietly()


atexit.register(_flush_all_at_exit)


def describe_cadence(schedule: Schedule) -> str:
    """A short text for what a schedule's cadence is (stored for other processes to show)."""
    cadence = schedule.cadence
    if isinstance(cadence, Interval):
        text = f"every {_format_delta(cadence.every)}"
        if cadence.anchor is not None:
            text += f" from {cadence.anchor.isoformat()}"
        return text
    if isinstance(cadence, Cron):
        zone = f" ({cadence.timezone})" if cadence.timezone else ""
        return f"cron {cadence.expression.source}{zone}"
    if isinstance(cadence, Once):
        return f"once at {cadence.at.isoformat()}"
    return str(schedule.type)


def _format_delta(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or f"{delta.total_seconds()}s"


@attrs.define(eq=False)
class _Entry:
    """The scheduler's in-memory view of one schedule."""

    agent: str
    name: str
    schedule: Schedule
    state: ScheduleState
    due: datetime | None = None
    scheduled_for: datetime | None = None
    version: int = 0
    run: Run | None = None
    persisted_definition: bool = False
    last_skip: SkipReason | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.agent, self.name)


class ThreadedScheduler:
    """A synchronous, threaded scheduler for a fleet of agents (see the module docstring).

    ``state_dir=None`` keeps state in memory only; otherwise state lives in
    ``state_dir/state.yaml`` and one scheduler per directory is active at a time (leader lock).
    """

    def __init__(
        self,
        agents: Iterable[Agent] = (),
        *,
        state_dir: str | Path | None = ".herdsched",
        on_trigger: JobFunc | None = None,
        timezone: str | tzinfo | None = None,
        max_sleep: float = 60.0,
        min_interval: timedelta | float | str = 1,
        jitter_percent: float = 0,
        backoff: Sequence[timedelta | float | str] | None = None,
        max_consecutive_failures: int | None = 5,
        catch_up: CatchUp | str = CatchUp.ONCE,
        catch_up_window: timedelta | float | str | None = None,
        max_run_history: int = 20,
        max_total_concurrent: int | None = None,
        max_schedules_per_owner: int | None = None,
        work_sources: Mapping[str, WorkSource] | None = None,
        notifier: Callable[[Notification], None] | None = None,
        leader_lock: bool = True,
        clock: Clock | None = None,
        logger: logging.Logger | None = None,
        store: StateStore | None = None,
        poll_interval: float | Literal["auto"] | None = "auto",
        commit_delay: float = 0.5,
        lock_timeout: float = 10.0,
    ) -> None:
        self.store_lock_timeout = lock_timeout
        self.commit_delay = commit_delay
        if max_sleep <= 0:
            raise ValueError(f"max_sleep must be positive, got {max_sleep!r}")
        self.poll_interval = _resolve_poll_interval(poll_interval, state_dir, store)
        for name, value in (
            ("max_consecutive_failures", max_consecutive_failures),
            ("max_total_concurrent", max_total_concurrent),
            ("max_schedules_per_owner", max_schedules_per_owner),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
            if value is not None and value < 1:
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        if not 0 <= jitter_percent <= 100:
            raise ValueError(f"jitter_percent must be from 0 to 100, got {jitter_percent!r}")
        self.clock: Clock = clock or SystemClock()
        self.log = logger or logging.getLogger("herdsched")
        self.timezone: tzinfo = resolve_timezone(timezone)
        self.max_sleep = float(max_sleep)
        self.min_interval = coerce_interval(min_interval, what="min_interval", allow_zero=True)
        self.jitter_percent = float(jitter_percent)
        self.backoff = coerce_backoff(backoff)
        self.max_consecutive_failures = max_consecutive_failures
        self.catch_up = CatchUp(catch_up)
        self.catch_up_window = (
            None
            if catch_up_window is None
            else coerce_interval(catch_up_window, what="catch_up_window")
        )
        self.max_total_concurrent = max_total_concurrent
        self.max_schedules_per_owner = max_schedules_per_owner
        self.work_sources: dict[str, WorkSource] = dict(work_sources or {})
        self.notifier = notifier
        self.on_trigger = on_trigger
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.store: StateStore = store or self._make_store(
            max_run_history, commit_delay, lock_timeout
        )
        self._adopt = (
            self.store.adopt_transition if isinstance(self.store, AdoptsTransitions) else None
        )
        # Runs are claimed ahead of a free slot only with a store that can tell, after a crash,
        # a claim whose job started from one that only waited.
        self._starts = self.store if isinstance(self.store, TracksClaimStarts) else None
        self._leader = (
            LeaderLock(self.state_dir) if leader_lock and self.state_dir is not None else None
        )
        self._rng = random.Random()
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        # notified when runs join a ready queue or the timer ends a dispatching pass
        self._refilled = threading.Condition(self._lock)
        # agents the timer is handing out runs to, in chunks of a burst (see _fire_due)
        self._dispatching: frozenset[str] = frozenset()
        self._refill_waiters = 0
        self._wake = threading.Event()
        self._agents: dict[str, Agent] = {}
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._heap: list[tuple[datetime, int, str, str, int]] = []
        # Due schedules whose agent is full, per agent, in due order.
        self._waiting: dict[str, collections.deque[tuple[datetime, int, str, str, int]]] = {}
        self._agent_counts: collections.Counter[str] = collections.Counter()  # jobs in slots
        self._jobs_running = 0  # their total
        self._seq = itertools.count()
        self._pools: dict[str, WorkerPool] = {}
        self._running: dict[str, Run] = {}  # jobs running (not settled yet)
        # runs held back: their jobs returned, their outcomes wait (see _drain); by run id, and
        # per agent in the order their jobs returned (those not taken to settle yet)
        self._held: dict[str, Run] = {}
        self._unsettled: dict[str, collections.deque[tuple[Run, RunOutcome]]] = {}
        # agents whose runs held too long a thread of their own settles (see _settle_overdue)
        self._settlers: set[str] = set()
        self._holds_barred = 0  # schedules are being dropped: settle at once (see _no_holds)
        # Dispatched runs waiting for a worker, per agent, claimed ahead (see _fire_due).
        self._ready: dict[str, collections.deque[Run]] = {}
        self._admitted: collections.Counter[str] = collections.Counter()  # dispatched, not started
        self._admitted_total = 0
        self._loops: collections.Counter[str] = collections.Counter()  # threads draining _ready
        self._busy: collections.Counter[str] = collections.Counter()  # of those, inside a job
        self._last_take: dict[str, float] = {}  # when one of them last took a run (monotonic)
        self._watching: set[str] = set()  # agents whose ready queue a watcher looks after
        self._released_claims: list[str] = []  # claims made ahead whose runs never started
        self._no_lookahead_until = 0.0  # monotonic; set when a claim could not be made durable
        self._listeners: list[tuple[Callable[[Any], None], tuple[type[ev.Event], ...]]] = []
        self._pending_events: list[ev.Event] = []
        self._listened: dict[type[ev.Event], bool] = {}  # event kind → anyone listens
        self._idle_waiters = 0  # threads in wait_until_idle() or stop(): finishing runs notify
        self._status = "stopped"
        self._thread: threading.Thread | None = None
        self._started_at: datetime | None = None
        self._check_count = 0
        self._trigger_count = 0
        self._last_check_at: datetime | None = None
        self._last_wall: datetime | None = None
        self._last_mono: float | None = None
        self._next_poll = 0.0
        self._next_leader_try = 0.0
        self._store_retry_at: float | None = None
        # Group commits run on their own thread so a slow disk never delays dispatching.
        self._flush_wanted = threading.Event()
        # When the sleeping timer wakes up next (wall, monotonic); None while it is awake.
        self._planned_wake: tuple[datetime, float] | None = None
        self._flush_in_flight = False
        self._flusher: threading.Thread | None = None
        _schedulers.add(self)
        for agent in agents:
            self.add_agent(agent)

    def _make_store(
        self, max_run_history: int, commit_delay: float, lock_timeout: float
    ) -> StateStore:
        if self.state_dir is None:
            return MemoryStateStore(max_run_history=max_run_history)
        from herdsched.store.yaml_store import YamlStateStore

        return YamlStateStore(
            self.state_dir,
            lock_timeout=lock_timeout,
            commit_delay=commit_delay,
            max_run_history=max_run_history,
            clock=self.clock,
        )

    # ------------------------------------------------------------------------------ lifecycle

    @property
    def status(self) -> str:
        """``"stopped"``, ``"running"``, ``"stopping"`` or ``"standby"``."""
        return self._status

    def is_running(self) -> bool:
        """Whether the scheduler is started (active or standing by) and not stopping."""
        return self._status in ("running", "standby")

    @property
    def is_leader(self) -> bool:
        """Whether this scheduler is the active one for its state directory."""
        return self._status == "running"

    def start(self) -> None:
        """Start the timer thread and return at once (idempotent).

        Becomes the active scheduler when the leader lock is free (running restart recovery
        first), otherwise stands by and takes over when the holder stops or dies. Raises
        :class:`~herdsched.errors.StateCorruptedError` when the state file is unusable and could
        not be restored.
        """
        with self._lock:
            if self._status in ("running", "standby"):
                return
            if self._status == "stopping":
                raise SchedulerShutdownError("cannot start while stop() is in progress")
            self.store.refresh()
            self._started_at = self.clock.now()
            self._last_wall, self._last_mono = self._started_at, self.clock.monotonic()
            self._status = "standby"
            try:
                leading = self._try_lead()
            except BaseException:
                self._status = "stopped"
                raise
            if leading:
                self._status = "running"
            else:
                self._log_standby()
            self._wake.clear()
            self._thread = threading.Thread(
                target=self._timer_loop, name="herdsched-timer", daemon=True
            )
            self._thread.start()
            self._flush_in_flight = False
            self._flusher = threading.Thread(
                target=self._flush_loop, name="herdsched-flusher", daemon=True
            )
            self._flusher.start()
            status = self._status
        self._emit(ev.SchedulerStarted(at=self.clock.now(), status=status))

    def stop(self, wait_for_jobs: bool = True, timeout: float | None = 30.0) -> None:
        """Stop dispatching, wait for running jobs (up to ``timeout`` real seconds), flush state.

        Nothing is dispatched once ``stop()`` has begun; running jobs are not cancelled. Raises
        :class:`~herdsched.errors.SchedulerShutdownError` (``timed_out=True``) when jobs are
        still running at the timeout; the scheduler is ``stopped`` either way. Idempotent, and
        safe to call from a job or a listener.
        """
        with self._lock:
            if self._status in ("stopped", "stopping"):
                return
            self._status = "stopping"
            self._drop_ready()  # dispatched runs that have not started never will
            for name in list(self._ready):
                self._ensure_drain(name)  # those that started at dispatch still run
            self._changed()
        self._settle_all_held()  # jobs that returned: their outcomes reach the state now
        timed_out = False
        remaining = 0
        if wait_for_jobs:
            remaining = self._wait_for_runs(timeout, exclude_current=True)
            timed_out = remaining > 0
        else:
            remaining = self._count_other_runs()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        flusher, self._flusher = self._flusher, None
        self._flush_wanted.set()  # the flusher sees the status and exits
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join(timeout=max(5.0, self.store_lock_timeout))
        self._flush_quietly()
        with self._lock:
            pools, self._pools = self._pools, {}
            self._heap.clear()
            self._waiting.clear()
            self._status = "stopped"
            self._thread = None
        for pool in pools.values():
            pool.shutdown()
        if self._leader is not None:
            self._leader.release()
        self._emit(
            ev.SchedulerStopped(
                at=self.clock.now(), timed_out=timed_out, running_job_count=remaining
            )
        )
        self.log.info("scheduler stopped")
        if timed_out:
            raise SchedulerShutdownError(
                f"stop() timed out after {timeout} s with {remaining} job(s) still running",
                timed_out=True,
                running_job_count=remaining,
            )

    def run_forever(self) -> None:
        """Start (if needed) and block until SIGINT/SIGTERM or ``stop()``, then stop gracefully."""
        stop_requested = threading.Event()

        def handle(signum: int, frame: FrameType | None) -> None:
            self.log.info("signal %s received: stopping", signum)
            stop_requested.set()

        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, handle)
        try:
            self.start()
            while not stop_requested.wait(0.2) and self._status != "stopped":
                pass
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.stop()

    def __enter__(self) -> ThreadedScheduler:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ----------------------------------------------------------------------------- the fleet

    def add_agent(self, agent: Agent) -> None:
        """Register an agent and its schedules; persisted state of the same names is kept."""
        if not isinstance(agent, Agent):
            raise TypeError(f"add_agent() takes an Agent, got {type(agent).__name__}")
        with self._lock:
            if agent.name in self._agents:
                raise InvalidScheduleError(
                    f"agent {agent.name!r} is already registered; use set_agents() to replace it",
                    field="name",
                    value=agent.name,
                )
            self._install_agent(agent)
        self._changed()

    def remove_agent(self, name: str) -> None:
        """Forget an agent, its schedules and their persisted state (running jobs finish)."""
        with self._no_holds():
            self._settle_held(name, every=True)  # jobs that returned: recorded, notified first
            with self._lock:
                agent = self._require_agent(name)
                for schedule in list(agent.schedules):
                    self._drop_entry(name, schedule, forget_state=True)
                del self._agents[name]
        self._changed()

    def set_agents(self, agents: Iterable[Agent]) -> None:
        """Replace the fleet (hot reload), keeping persisted state of every name that stays."""
        new = {agent.name: agent for agent in agents}
        with self._no_holds():
            self._settle_all_held()  # a schedule dropped here must not lose a job's outcome
            self._replace_agents(new)
        self._changed()

    def _replace_agents(self, new: dict[str, Agent]) -> None:
        with self._lock:
            for name in list(self._agents):
                if name not in new:
                    for schedule in list(self._agents[name].schedules):
                        self._drop_entry(name, schedule, forget_state=False)
                    del self._agents[name]
            for agent in new.values():
                old = self._agents.get(agent.name)
                if old is not None:
                    for schedule in old.schedules:
                        if schedule not in agent.schedules:
                            self._drop_entry(agent.name, schedule, forget_state=False)
                self._install_agent(agent)

    def add_schedule(
        self,
        agent: str,
        name: str,
        schedule: Schedule,
        *,
        persist: bool = False,
        owner: str | None = None,
    ) -> None:
        """Add a schedule at run time (``persist=True`` keeps it across restarts).

        Validated against ``min_interval`` and ``max_schedules_per_owner``; a new once schedule
        whose time has passed is refused.
        """
        if owner is not None and schedule.owner is None:
            schedule = schedule.with_changes(owner=owner)
        with self._lock:
            current = self._require_agent(agent)
            if name in current.schedules:
                raise InvalidScheduleError(
                    f"schedule {name!r} already exists on agent {agent!r}", field="name", value=name
                )
            self._validate_new_schedule(agent, name, schedule)
            self._check_owner_limit(schedule.owner)
            if persist:
                self._save_definition(agent, name, schedule)
            updated = current.with_schedule(name, schedule)
            self._agents[agent] = updated
            self._install_entry(updated, name, schedule, persisted=persist)
        self._changed()

    def update_schedule(
        self, agent: str, name: str, *, owner: str | None = None, **changes: Any
    ) -> Schedule:
        """Change a schedule; a new cadence (``interval=``, ``cron=``, ``at=``, ``timezone=``,
        ``anchor=``...) recomputes its next run. Returns the new definition."""
        with self._lock:
            entry = self._require_entry(agent, name)
            self._check_owner(entry, owner)
            schedule = self._apply_changes(entry.schedule, changes)
            cadence_changed = schedule.cadence != entry.schedule.cadence
            self._validate_new_schedule(agent, name, schedule, runtime=cadence_changed)
            if schedule.owner != entry.schedule.owner:
                self._check_owner_limit(schedule.owner)
            if entry.persisted_definition:
                self._save_definition(agent, name, schedule)
            self._agents[agent] = self._agents[agent].with_schedule(name, schedule)
            entry.schedule = schedule
            self._take_back(entry)  # it runs with the new definition
            if cadence_changed or "enabled" in changes:
                now = self.clock.now()
                due = self._fresh_due(entry, now, recompute=cadence_changed)
                self._set_due(entry, due, due)
            self._persist_description(entry)
        self._changed()
        return schedule

    def remove_schedule(self, agent: str, name: str, *, owner: str | None = None) -> None:
        """Remove a schedule and its persisted state and definition."""
        with self._no_holds():
            self._settle_for_trigger(agent, name)  # a returned job: recorded, notified first
            with self._lock:
                entry = self._require_entry(agent, name)
                self._check_owner(entry, owner)
                self._drop_entry(agent, name, forget_state=True)
                self._agents[agent] = self._agents[agent].without_schedule(name)
        self._changed()

    def pause(self, agent: str, schedule: str | None = None, *, owner: str | None = None) -> None:
        """Pause one schedule (or every schedule of the agent); durable when it returns.

        A running job is not interrupted; a paused schedule can still be ``trigger()``-ed.
        """
        for entry in self._targets(agent, schedule, owner):
            with self._lock:
                entry.version += 1
                entry.due = None
                entry.state = evolve(entry.state, status=Status.PAUSED)
                self._take_back(entry)
            self._write_intent(entry, status=Status.PAUSED)
            self._emit(
                ev.SchedulePaused(at=self.clock.now(), agent=entry.agent, schedule=entry.name)
            )
        self._changed()

    def resume(self, agent: str, schedule: str | None = None, *, owner: str | None = None) -> None:
        """Resume paused or auto-disabled schedules: status idle, failure count reset.

        A schedule whose due time passed while paused runs once right away (catch-up).
        """
        for entry in self._targets(agent, schedule, owner):
            with self._lock:
                if entry.state.status is Status.COMPLETED:
                    continue
                entry.state = evolve(
                    entry.state,
                    status=Status.IDLE,
                    consecutive_failures=0,
                    disabled_reason=None,
                )
                if entry.run is None:
                    due = self._fresh_due(entry, self.clock.now(), recompute=False)
                    self._set_due(entry, due, entry.scheduled_for or due)
            changes: dict[str, Any] = {
                "status": Status.IDLE,
                "consecutive_failures": 0,
                "disabled_reason": None,
            }
            if self._status == "running":
                changes["next_run_at"] = entry.due
            self._write_intent(entry, **changes)
            self._emit(
                ev.ScheduleResumed(at=self.clock.now(), agent=entry.agent, schedule=entry.name)
            )
        self._changed()

    def every(
        self,
        interval: timedelta | float | str,
        *,
        agent: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> Callable[[_F], _F]:
        """Decorator: run the function every ``interval`` (measured from completion)."""
        return self._register_as_job(Schedule.interval(interval, **options), agent, name)

    def cron(
        self,
        expression: str,
        *,
        agent: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> Callable[[_F], _F]:
        """Decorator: run the function on a cron expression."""
        return self._register_as_job(Schedule.cron(expression, **options), agent, name)

    def once(
        self,
        at: datetime | str,
        *,
        agent: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> Callable[[_F], _F]:
        """Decorator: run the function once at ``at``."""
        return self._register_as_job(Schedule.once(at, **options), agent, name)

    def _register_as_job(
        self, schedule: Schedule, agent: str | None, name: str | None
    ) -> Callable[[_F], _F]:
        """The decorator body: the function becomes the schedule's job (agent made if new)."""

        def register(func: _F) -> _F:
            schedule_name = name or func.__name__
            agent_name = agent or schedule_name
            with_job = schedule.with_changes(job=func)
            with self._lock:
                if agent_name not in self._agents:
                    self._install_agent(Agent(agent_name))
            self.add_schedule(agent_name, schedule_name, with_job)
            return func

        return register

    # ---------------------------------------------------------------------------------- runs

    def trigger(
        self,
        agent: str,
        schedule: str | None = None,
        *,
        prompt: str | None = None,
        wait: bool = False,
        bypass_concurrency: bool = False,
    ) -> TriggerResult:
        """Run a schedule now, through the agent's pool (works on paused schedules too).

        ``schedule=None`` runs the agent's job ad hoc (recorded as schedule ``manual``). On a
        standby scheduler the request is queued for the active one. With ``wait=True`` the call
        returns when the run has finished and ``success`` says whether it succeeded.
        """
        if schedule is not None:
            self._settle_for_trigger(agent, schedule)
        with self._lock:
            agent_obj = self._require_agent(agent)
            if schedule is not None:
                self._require_entry(agent, schedule)
            if self._status == "standby":
                request_id = self.store.request_trigger(
                    agent, schedule or _AD_HOC_SCHEDULE, prompt=prompt
                )
                return TriggerResult(success=True, run_id=request_id)
            if self._status != "running":
                return TriggerResult(
                    success=False,
                    error=f"scheduler is {self._status}: nothing is dispatched",
                    skipped=True,
                    skip_reason=SkipReason.STOPPING,
                )
            entry = (
                self._entries[(agent, schedule)]
                if schedule is not None
                else self._ad_hoc_entry(agent_obj)
            )
            if entry.run is not None:
                doing = "is running" if entry.run.started else "is about to run"
                if entry.run.settle_by is not None:
                    doing = "is recording the outcome of its last run"
                return _skipped(SkipReason.ALREADY_RUNNING, f"{agent}/{entry.name} {doing}")
            if not bypass_concurrency and self._at_capacity(agent_obj):
                return _skipped(SkipReason.AT_CAPACITY, f"agent {agent!r} is at capacity")
            if self._job_for(entry) is None:
                raise ScheduleTriggerError(
                    f"{agent}/{entry.name} has no job: give the agent or schedule a job",
                    agent,
                    schedule,
                )
            now = self.clock.now()
            run = self._prepare_run(
                entry, TriggerType.MANUAL, None, now, self.clock.monotonic(), prompt=prompt
            )
            done = run.done_event() if wait else None
            self._launch([run], bypass=bypass_concurrency)
        self._drain_events()
        if not wait:
            return TriggerResult(success=True, run_id=run.run_id)
        assert done is not None
        done.wait()
        outcome = run.outcome
        ok = outcome is not None and outcome.status is RunStatus.SUCCESS and not run.timed_out
        error = None if ok else (outcome.error if outcome else "run did not finish")
        if run.timed_out:
            error = "timeout"
        return TriggerResult(success=ok, run_id=run.run_id, error=error)

    def get_running_job_count(self, agent: str) -> int:
        """Jobs of ``agent`` running now."""
        with self._lock:
            self._require_agent(agent)
            return self._agent_counts[agent]

    def get_total_running_job_count(self) -> int:
        """Jobs of every agent running now."""
        with self._lock:
            return self._jobs_running

    def get_agent(self, name: str) -> Agent:
        """The registered agent called ``name`` (:class:`AgentNotFoundError` when unknown)."""
        with self._lock:
            return self._require_agent(name)

    def get_schedule(self, agent: str, name: str) -> Schedule:
        """The current definition of one schedule (:class:`ScheduleNotFoundError` if none)."""
        with self._lock:
            return self._require_entry(agent, name).schedule

    def history(self, agent: str, schedule: str | None = None, limit: int = 20) -> list[RunRecord]:
        """Run records newest first (bounded per schedule by ``max_run_history``)."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit!r}")
        return self.store.get_history(agent, schedule, limit)

    def run_stats(
        self, agent: str, schedule: str | None = None, since: datetime | None = None
    ) -> RunStats:
        """Counts by status, success rate, mean and p95 duration, last success and failure."""
        records = self.store.get_history(agent, schedule, limit=1_000_000)
        return compute_run_stats(records, since=to_utc(since) if since else None)

    def wait_until_idle(self, timeout: float | None = None) -> bool:
        """Block until no job runs and none waits for capacity (``timeout`` in real seconds)."""
        with self._idle:
            return self._wait_idle(
                lambda: not (self._running or self._held or self._waiting or self._admitted_total),
                timeout,
            )

    def add_listener(self, callback: Callable[[_E], None], *event_types: type[_E]) -> None:
        """Call ``callback(event)`` for events of ``event_types`` (all events when none given)."""
        types: tuple[type[ev.Event], ...] = event_types or (ev.Event,)
        with self._lock:
            self._listeners = [*self._listeners, (callback, types)]
            self._listened = {}

    def remove_listener(self, callback: Callable[..., None]) -> None:
        with self._lock:
            self._listeners = [(cb, t) for cb, t in self._listeners if cb is not callback]
            self._listened = {}

    # ---------------------------------------------------------------------------- reporting

    def get_state(self) -> SchedulerState:
        return SchedulerState(
            status=self._status,
            started_at=self._started_at,
            check_count=self._check_count,
            trigger_count=self._trigger_count,
            last_check_at=self._last_check_at,
        )

    def get_status(self) -> SchedulerStatus:
        """Every schedule's status, next/last run and the reason it is not firing now."""
        if self._status != "running":  # another process may be the active one
            self._refresh_from_store()
        with self._lock:
            now = self.clock.now()
            items = [self._schedule_status(entry, now) for entry in self._entries.values()]
            leader = self._leader.holder() if self._leader is not None else None
            return SchedulerStatus(
                running=self.is_running(),
                active_jobs=self._jobs_running,
                schedules=items,
                status=self._status,
                leader=leader,
            )

    def search(
        self,
        owner: str | None = None,
        name_contains: str | None = None,
        status: Status | str | None = None,
        cadence_type: ScheduleType | str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> SearchPage:
        """Filter schedules and page through them (``limit`` is capped at 50)."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit!r}")
        if offset < 0:
            raise ValueError(f"offset must not be negative, got {offset!r}")
        wanted_status = Status(status) if status is not None else None
        wanted_type = ScheduleType(cadence_type) if cadence_type is not None else None
        limit = min(limit, _MAX_SEARCH_LIMIT)
        needle = name_contains.lower() if name_contains else None
        matches = [
            item
            for item in self.get_status().schedules
            if (owner is None or item.owner == owner)
            and (needle is None or needle in f"{item.agent}/{item.schedule}".lower())
            and (wanted_status is None or item.status is wanted_status)
            and (wanted_type is None or item.type is wanted_type)
        ]
        matches.sort(key=lambda item: (item.agent, item.schedule))
        page = matches[offset : offset + limit]
        remaining = max(0, len(matches) - offset - len(page))
        hint = (
            f"{remaining} more results available. Use offset={offset + len(page)} to see the "
            "next page."
            if remaining
            else ""
        )
        return SearchPage(page, len(matches), offset, limit, remaining, hint)

    def _repr_html_(self) -> str:
        from herdsched.html import status_table

        return status_table(self.get_status())

    def __repr__(self) -> str:
        return (
            f"<ThreadedScheduler {self._status} agents={len(self._agents)} "
            f"schedules={len(self._entries)} running={self._jobs_running}>"
        )

    # ----------------------------------------------------------------------------- the timer

    def run_pending(self) -> None:
        """One timer pass on the calling thread: fire what is due (for FakeClock tests).

        Jobs still run on the worker pools; use :meth:`wait_until_idle` to wait for them. A
        group commit that is due happens on the calling thread too, so tests see it at once.
        """
        self._pass(timer_thread=False)

    def _timer_loop(self) -> None:
        while True:
            with self._lock:
                if self._status not in ("running", "standby"):
                    return
                self._planned_wake = None  # awake: whatever changes now, the pass sees
            self._wake.clear()
            timeout = self.max_sleep
            try:
                timeout = self._pass(timer_thread=True)
            except Exception:  # the timer thread never dies
                self.log.exception("timer pass failed; retrying")
                timeout = min(self.max_sleep, _STORE_RETRY)
            with self._lock:
                if self._planned_wake is None:  # the pass ended before planning
                    self._planned_wake = (
                        self.clock.now() + timedelta(seconds=timeout),
                        self.clock.monotonic() + timeout,
                    )
            self.clock.wait(self._wake, timeout)

    def _pass(self, *, timer_thread: bool) -> float:
        """Fire what is due now; returns how long the timer may sleep (seconds).

        On the timer thread a due group commit goes to the flusher thread and the pass records
        the plan that finishing runs compare against; ``run_pending()`` does neither.
        """
        now = self.clock.now()
        mono = self.clock.monotonic()
        with self._lock:
            self._check_count += 1
            self._last_check_at = now
            self._detect_clock_jump(now, mono)
            status = self._status
        if status == "standby":
            return self._standby_pass(mono)
        if status != "running":
            return self.max_sleep
        if self.poll_interval is not None and mono >= self._next_poll:
            self._next_poll = mono + self.poll_interval
            self._poll_other_processes()
        self._expire_timeouts(now, mono)
        self._settle_overdue(mono)
        self._fire_due(now, mono)
        self._drain_events()
        if self._released_claims:
            self._release_claims()
        self._flush_if_due(now, mono, background=timer_thread)
        return self._sleep_for(self.clock.now(), self.clock.monotonic(), plan=timer_thread)

    def _standby_pass(self, mono: float) -> float:
        retry = min(self.max_sleep, 5.0)
        if mono >= self._next_leader_try:
            self._next_leader_try = mono + retry
            with self._lock:
                if self._status == "standby" and self._try_lead():
                    self._status = "running"
                    self.log.info("took over as the active scheduler")
                    self._changed()
                    return 0.0
        return retry

    def _sleep_for(self, now: datetime, mono: float, *, plan: bool = True) -> float:
        """How long the timer may sleep; also what it then waits for (:attr:`_planned_wake`).

        Everything is read under the lock that finishing runs take, so a run that finishes
        after this either was counted here or compares itself with the plan made here.
        """
        with self._lock:
            candidates = [self.max_sleep]
            self._drop_stale_heap_top()
            if self._heap:
                candidates.append((self._heap[0][0] - now).total_seconds())
            deadlines = [run.deadline for run in self._running.values() if run.deadline]
            if deadlines:
                candidates.append(min(deadlines) - mono)
            stalled = self._stalled_settle_by()
            if stalled is not None:
                candidates.append(stalled - mono)
            if any(self._wants_dispatch(agent) for agent in self._waiting):
                candidates.append(0.0)  # a slot freed while this pass was past dispatching
            flush_at = self._commit_deadline()
            if flush_at is not None and not self._flush_in_flight:
                candidates.append(flush_at - mono)
            if self.poll_interval is not None:
                candidates.append(self._next_poll - mono)
            timeout = max(0.0, min(candidates))
            if plan:
                self._planned_wake = (now + timedelta(seconds=timeout), mono + timeout)
        return timeout

    def _drop_stale_heap_top(self) -> None:
        while self._heap:
            _, _, agent, name, version = self._heap[0]
            entry = self._entries.get((agent, name))
            if entry is not None and entry.version == version and entry.due is not None:
                return
            heapq.heappop(self._heap)

    def _fire_due(self, now: datetime, mono: float) -> None:
        """Dispatch what is due, agent by agent, in due order, as far as capacity allows.

        Runs go out in chunks: each chunk is claimed durably and handed to its agent's ready
        queue before the next is prepared, so with a thousand schedules due at one instant the
        first jobs start at once rather than after the whole batch, and finishing runs can
        settle between chunks instead of waiting for the lock. Chunks double from
        :data:`_FIRST_CHUNK` up to :data:`_DISPATCH_CHUNK`: the claim of each next chunk syncs
        while the workers run the previous one, which takes longer the larger it is.

        An agent's runs are dispatched up to :data:`_LOOKAHEAD` beyond its free slots (with a
        store that tracks claim starts and no ``max_total_concurrent``): they are claimed in the
        same fsync and wait in the ready queue, where each worker that finishes a run takes the
        next one at once. A burst then costs one timer pass and one fsync per hundreds of runs
        instead of one per freed slot.
        """
        limit = _FIRST_CHUNK
        try:
            while True:
                with self._lock:
                    if self._status != "running":
                        return
                    runs = self._take_due_runs(now, mono, limit)
                    # workers of these agents wait for the runs, rather than settle
                    self._dispatching = frozenset(run.agent for run in runs)
                self._launch(runs, queued=True)
                if len(runs) < limit:
                    return
                limit = min(limit * 2, _DISPATCH_CHUNK)
        finally:
            if self._dispatching:
                with self._lock:
                    self._dispatching = frozenset()
                    self._refilled.notify_all()

    def _take_due_runs(self, now: datetime, mono: float, limit: int) -> list[Run]:
        """Up to ``limit`` runs of due schedules, claimed in memory (caller holds the lock).

        A schedule whose agent is full waits in that agent's queue; the first one that meets a
        full agent ends the agent's turn, so a pass costs what it dispatches, not what waits.
        """
        while self._heap and self._heap[0][0] <= now:
            item = heapq.heappop(self._heap)
            self._waiting.setdefault(item[2], collections.deque()).append(item)
        agents = list(self._waiting)
        if self.max_total_concurrent is not None:  # share the global slots in due order
            agents.sort(key=lambda name: self._waiting[name][0])
        started: list[Run] = []
        for agent in agents:
            queue = self._waiting[agent]
            while queue and len(started) < limit:
                _, _, _, name, version = queue[0]
                entry = self._entries.get((agent, name))
                if entry is None or entry.version != version or entry.due is None:
                    queue.popleft()
                    continue
                reason = self._skip_reason(entry, now, admitting=True)
                entry.last_skip = reason
                if reason is SkipReason.AT_CAPACITY:
                    break
                queue.popleft()
                if reason is SkipReason.NOT_DUE:
                    # queued by a pass that read the clock after this one did: back to the heap
                    self._push(entry)
                    continue
                if reason is not None:
                    continue
                try:
                    trigger_type = _TIMER_TRIGGERS[entry.schedule.type]
                    slot = entry.scheduled_for or entry.due
                    # a free slot goes to a run now, unless dispatched runs already wait for it
                    start = not self._admitted[agent] and not self._at_capacity(self._agents[agent])
                    started.append(
                        self._prepare_run(entry, trigger_type, slot, now, mono, start=start)
                    )
                except Exception:
                    self.log.exception("could not dispatch %s/%s; retrying in 1 s", agent, name)
                    self._set_due(entry, now + timedelta(seconds=1), entry.scheduled_for)
            if not queue:
                del self._waiting[agent]
            if len(started) >= limit:
                break
        return started

    def _skip_reason(
        self, entry: _Entry, now: datetime, *, admitting: bool = False
    ) -> SkipReason | None:
        """Why ``entry`` does not fire now; ``admitting``: counting the runs dispatched but not
        started yet against capacity plus the lookahead (the timer's question)."""
        agent = self._agents[entry.agent]
        running = self._agent_counts[entry.agent]
        total = self._jobs_running
        limit = agent.max_concurrent
        if admitting:
            running += self._admitted[entry.agent]
            total += self._admitted_total
            limit += self._lookahead()
        return pre_dispatch_skip_reason(
            enabled=entry.schedule.enabled,
            status=entry.state.status,
            fires_on_timer=entry.schedule.fires_on_timer,
            running=entry.run is not None and entry.run.settle_by is None,  # held: returned
            agent_running=running,
            max_concurrent=limit,
            total_running=total,
            max_total_concurrent=self.max_total_concurrent,
            due=entry.due is not None and entry.due <= now,
        )

    def _lookahead(self) -> int:
        """How many runs an agent may have dispatched beyond its free slots."""
        if self._starts is None or self.max_total_concurrent is not None:
            return 0  # global slots are shared in due order, so none is taken in advance
        if self._no_lookahead_until and self.clock.monotonic() < self._no_lookahead_until:
            return 0  # a claim failed lately: claim only what starts at once
        return _LOOKAHEAD

    # -------------------------------------------------------------------------- dispatching

    def _prepare_run(
        self,
        entry: _Entry,
        trigger_type: TriggerType,
        scheduled_for: datetime | None,
        now: datetime,
        mono: float,
        *,
        prompt: str | None = None,
        start: bool = True,
    ) -> Run:
        """Claim ``entry``'s slot for a run fired at ``now``/``mono``; caller holds the lock.

        ``start``: the run starts now (state ``running``); otherwise it is only dispatched, and
        starts when a worker takes it from the agent's ready queue (:meth:`_take_ready`).
        """
        agent = self._agents[entry.agent]
        job = self._job_for(entry)
        if job is None:
            raise ScheduleTriggerError(
                f"{entry.agent}/{entry.name} has no job to run", entry.agent, entry.name
            )
        run = Run(
            run_id=new_run_id(),
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
        )
        entry.run = run
        if trigger_type is not TriggerType.MANUAL:
            run.replan = (entry.due, entry.scheduled_for)
            entry.version += 1  # off the heap while it runs
            entry.due = None
        self._trigger_count += 1
        if start:
            self._start(run, entry, mono)
        else:
            run.started = False
            self._count_admitted(run.agent, 1)
        return run

    def _start(self, run: Run, entry: _Entry, mono: float) -> None:
        """The run takes a slot (caller holds the lock).

        Its schedule's ``running`` transition is recorded lazily: most runs of a busy fleet
        finish before the next group commit, and their finishing transition carries the same
        fields, so a separate one would only double the state work per run. A run still going
        at the next group commit, which comes within ``commit_delay``, is recorded then
        (:meth:`_record_starts`); :meth:`get_status` shows it running at once.
        """
        run.started = True
        timeout = run.schedule.timeout
        if timeout:
            run.deadline = mono + timeout.total_seconds()
        self._running[run.run_id] = run
        self._agent_counts[run.agent] += 1
        self._jobs_running += 1
        run.unrecorded_since = mono
        planned = self._planned_wake
        # the sleeping timer must commit this start in time; a commit in flight wakes it when
        # done, and it then plans for this start
        late = planned is not None and planned[1] > mono + self.commit_delay
        if late and not self._flush_in_flight:
            self._wake.set()

    def _start_changes(self, entry: _Entry, run: Run) -> dict[str, Any]:
        """The state fields a started run sets: when it ran, its slot, and ``running``."""
        changes: dict[str, Any] = {"last_run_at": run.fired_at, "last_slot_at": run.scheduled_for}
        if entry.state.status is Status.IDLE:
            changes["status"] = Status.RUNNING
        return changes

    def _record_starts(self) -> None:
        """Record the ``running`` transition of every run still going that lacks it."""
        with self._lock:
            for run in self._running.values():
                if run.unrecorded_since is None:
                    continue
                entry = self._entries.get((run.agent, run.schedule_name))
                if entry is not None and entry.run is run:
                    self._record_start(entry, run)

    def _record_start(self, entry: _Entry, run: Run) -> None:
        """Hand ``run``'s ``running`` transition to the store if it has not been (caller holds
        the lock)."""
        if run.unrecorded_since is not None:
            run.unrecorded_since = None
            self._change_state(entry, **self._start_changes(entry, run))

    def _record_deadline(self) -> float | None:
        """When the oldest unrecorded start must be committed (monotonic; caller holds the
        lock)."""
        oldest = min(
            (
                run.unrecorded_since
                for run in self._running.values()
                if run.unrecorded_since is not None
            ),
            default=None,
        )
        return None if oldest is None else oldest + self.commit_delay

    def _launch(self, runs: list[Run], *, bypass: bool = False, queued: bool = False) -> None:
        """Make the claims durable, then hand the runs to their pools or ready queues.

        One durable claim record covers every run of the chunk (an fsync'd append, see
        :meth:`StateStore.claim_runs`), and it comes before any job starts: a process killed right
        after cannot lose the claim, so no other scheduler runs the slot again (at most once per
        slot). The full transitions follow with the next group commit. The timer calls this
        without the lock, so finishing runs settle while the disk syncs; the runs are already
        dispatched in memory, so nothing else can dispatch them meanwhile.

        The timer's runs (``queued``) join their agent's ready queue; those dispatched ahead of
        a free slot are claimed as ``ready``, so that recovery can tell whether their job ever
        started. A manual trigger's run goes straight to a worker.
        """
        if not runs:
            return
        ahead = self._starts is not None
        claims = [
            RunClaim(
                run.agent,
                run.schedule_name,
                run.run_id,
                run.fired_at,
                run.scheduled_for,
                ready=ahead and not run.started,
            )
            for run in runs
        ]
        claimed = True
        try:
            self.store.claim_runs(claims)
        except Exception as exc:  # keep the in-memory truth; make it durable the slow way
            claimed = False
            self._state_error(exc)
            self._flush_quietly()  # covers the runs that started; the others are taken back
        with self._lock:
            if not claimed:
                self._no_lookahead_until = self.clock.monotonic() + _STORE_RETRY
            touched: set[str] = set()
            taken_back: set[str] = set()
            for run in runs:
                agent = self._agents.get(run.agent)  # None: removed while the claim synced
                if not run.started and (not claimed or agent is None or self._status != "running"):
                    self._count_admitted(run.agent, -1)
                    self._unready(run)
                    taken_back.add(run.run_id)
                    continue
                if not run.started or (queued and agent is not None and self._status != "stopped"):
                    self._ready.setdefault(run.agent, collections.deque()).append(run)
                    touched.add(run.agent)
                # stop(wait_for_jobs=False) may have retired the pools while the claim synced
                elif bypass or agent is None or self._status == "stopped":
                    threading.Thread(
                        target=self._execute,
                        args=(run,),
                        name=f"herdsched-{run.agent}",
                        daemon=True,
                    ).start()
                else:
                    self._pool(agent).submit(self._execute, run)
            for name in touched:
                self._ensure_drain(name)
            if touched and self._refill_waiters:
                self._refilled.notify_all()
        if not self._listens(ev.JobSubmitted):
            return
        for run in runs:
            if run.run_id in taken_back:
                continue
            self._emit(
                ev.JobSubmitted(
                    at=run.fired_at,
                    agent=run.agent,
                    schedule=run.schedule_name,
                    run_id=run.run_id,
                    scheduled_for=run.scheduled_for,
                )
            )

    # ------------------------------------------------------------------------- ready queues

    def _count_admitted(self, agent: str, delta: int) -> None:
        """Count runs dispatched but not started, per agent and in all (caller holds the lock)."""
        self._admitted[agent] += delta
        self._admitted_total += delta

    def _ensure_drain(self, name: str) -> None:
        """Make sure the agent's ready queue is being worked off (caller holds the lock).

        One worker drains the queue, taking run after run on its own thread, which is how a
        burst of short jobs runs fastest: more threads would only take turns at the GIL. A
        watcher adds workers, up to ``max_concurrent``, as soon as every worker draining the
        queue has been inside its job for :data:`_STALL_AFTER`: when the running jobs take their
        time, the waiting ones start beside them.
        """
        ready = self._ready.get(name)
        agent = self._agents.get(name)
        if not ready or agent is None:
            return
        if self._loops[name] == 0:
            self._loops[name] += 1
            self._pool(agent).submit(self._drain, name)
        if name not in self._watching and self._loops[name] < agent.max_concurrent:
            self._watching.add(name)
            self._pool(agent).submit(self._watch, name)

    def _drain(self, name: str) -> None:
        """Worker: run the agent's ready runs one after another until none may start.

        Starting a waiting run comes before settling a finished one. When more runs wait in
        the queue as a job returns, its run is held back (:meth:`_hold`): its slot frees at
        once and its outcome (state, history, events) settles once the queue is empty, or
        about :data:`_SETTLE_WITHIN` after the job returned (see :meth:`_hold`). In a burst of
        short jobs
        settling is most of a run's cost, so the last of a thousand jobs starts after the
        others' jobs rather than after their settling too.
        """
        try:
            while True:
                try:
                    self._settle_held(name)
                    with self._lock:
                        taken = self._take_ready(name)
                        if taken is not None:
                            self._busy[name] += 1
                            self._last_take[name] = time.monotonic()
                    if taken is None:
                        return
                    self._run_taken(name, *taken)
                # the queue must keep moving whatever a run, a notifier or a listener raised
                except BaseException:
                    self.log.exception("worker of agent %r failed after a run", name)
        finally:
            self._settle_held(name, every=True)

    def _run_taken(self, name: str, run: Run, claimed_ahead: bool) -> None:
        """Worker: run a run taken from the agent's ready queue, then hold or settle it."""
        outcome = None
        try:
            if claimed_ahead and self._starts is not None:
                self._store_call(self._starts.mark_started, run.run_id)
            outcome = self._run_job(run)
        finally:
            with self._lock:
                self._busy[name] -= 1
                # held also behind runs held already, so outcomes mostly settle in the order
                # their jobs returned
                more = name in self._dispatching or bool(
                    self._ready.get(name) or self._unsettled.get(name)
                )
                held = outcome is not None and more and self._hold(run, outcome)
                unsettled = self._unsettled.get(name)
                full = held and unsettled is not None and len(unsettled) > _HOLD_MOST
        if outcome is not None and not held:
            self._finish(run, outcome)
        elif full and unsettled is not None:  # a long burst: one settled for each one held
            self._settle_oldest(unsettled, None)

    def _settle_held(self, name: str, *, every: bool = False) -> None:
        """Settle agent ``name``'s held runs: those due (see :meth:`_hold`), then, while its
        ready queue is empty once the timer's burst is handed out, the others one by one (runs
        may join the queue meanwhile). ``every``: all it holds now, whatever the queue."""
        unsettled = self._unsettled.get(name)
        if not unsettled:
            return
        if every:
            for _ in range(len(unsettled)):  # not those its other workers hold meanwhile
                if not self._settle_oldest(unsettled, None):
                    return
            return
        mono = self.clock.monotonic()
        if _settle_by(unsettled, mono) <= mono:
            self._settle_busy(name, unsettled, mono)
        if self._ready.get(name):
            return
        self._await_refill(name, _settle_by(unsettled, mono))
        if unsettled and not self._ready.get(name):
            self._settle_busy(name, unsettled, None)

    def _settle_busy(
        self, name: str, unsettled: collections.deque[tuple[Run, RunOutcome]], due_by: float | None
    ) -> None:
        """Settle agent ``name``'s held runs one by one: those due by ``due_by``, or (None)
        until runs wait in its ready queue. The worker counts as busy for the stall watcher,
        as in a job, and takes a run at each one: a slow notifier brings in another worker,
        settling one run after another does not."""
        with self._lock:
            self._busy[name] += 1
        try:
            while unsettled and (due_by is not None or not self._ready.get(name)):
                self._last_take[name] = time.monotonic()
                if not self._settle_oldest(unsettled, due_by):
                    return
        finally:
            with self._lock:
                self._busy[name] -= 1

    @contextlib.contextmanager
    def _no_holds(self) -> Iterator[None]:
        """While schedules are dropped, workers settle finished runs at once rather than hold
        them: a run held after the caller settled the held ones, and before the drop, would
        find its schedule gone and its outcome would be lost."""
        with self._lock:
            self._holds_barred += 1
        try:
            yield
        finally:
            with self._lock:
                self._holds_barred -= 1

    def _settle_all_held(self) -> None:
        """Settle every agent's held runs (``stop()``)."""
        for name in list(self._unsettled):
            self._settle_held(name, every=True)

    def _settle_due(
        self, unsettled: collections.deque[tuple[Run, RunOutcome]], mono: float
    ) -> None:
        """Settle the runs of one agent's held queue due to settle by ``mono``, oldest first."""
        while unsettled and self._settle_oldest(unsettled, mono):
            pass

    def _settle_oldest(
        self, unsettled: collections.deque[tuple[Run, RunOutcome]], due_by: float | None
    ) -> bool:
        """Settle the oldest run of one agent's held queue, if any and (with ``due_by``) due by
        then."""
        with self._lock:
            if not unsettled:
                return False
            run, outcome = unsettled[0]
            if due_by is not None and run.settle_by is not None and run.settle_by > due_by:
                return False
            unsettled.popleft()
            run.thread_id = threading.get_ident()  # stop() from its listener must not wait
        try:
            self._finish(run, outcome)
        except Exception:  # the caller's own work goes on
            self.log.exception(
                "could not settle run %s of %s/%s", run.run_id, run.agent, run.schedule_name
            )
        except BaseException:  # on the main thread a real Ctrl-C or exit (see _safely)
            if threading.current_thread() is threading.main_thread():
                raise
            self.log.exception(
                "could not settle run %s of %s/%s", run.run_id, run.agent, run.schedule_name
            )
        return True

    def _stalled_settle_by(self) -> float | None:
        """When the timer must have held runs settled, if no worker does (caller holds the
        lock): once the newest run an agent holds is due to settle. Until then its worker
        keeps taking runs, and settles the due ones itself between jobs."""
        return min(
            (
                held[-1][0].settle_by or 0.0
                for name, held in self._unsettled.items()
                if held and name not in self._settlers
            ),
            default=None,
        )

    def _settle_overdue(self, mono: float) -> None:
        """Timer: have the runs held past their ``settle_by`` settled when the worker holding
        them is inside a long job (it has held nothing new since). On a thread per agent:
        settling calls the notifier and the listeners, which must never hold up dispatching
        nor another agent's outcomes."""
        with self._lock:
            stalled = [
                name
                for name, held in self._unsettled.items()
                if held and name not in self._settlers and (held[-1][0].settle_by or 0.0) <= mono
            ]
            self._settlers.update(stalled)
        for index, name in enumerate(stalled):
            try:
                threading.Thread(
                    target=self._settler, args=(name,), name=f"herdsched-settle-{name}", daemon=True
                ).start()
            except BaseException:  # no thread to be had: the timer tries again next pass
                with self._lock:
                    self._settlers.difference_update(stalled[index:])
                raise

    def _settler(self, name: str) -> None:
        try:
            unsettled = self._unsettled.get(name)
            if unsettled:
                self._settle_due(unsettled, self.clock.monotonic())
        finally:
            with self._lock:
                self._settlers.discard(name)
            self._wake.set()  # the timer plans for the next held run

    def _settle_for_trigger(self, agent: str, schedule: str) -> None:
        """Settle the schedule's run now if its job returned and its outcome is held: before a
        manual trigger (not refused for a run that is over) or a removal (which would lose
        the outcome)."""
        with self._lock:
            entry = self._entries.get((agent, schedule))
            run = entry.run if entry is not None else None
            if run is None or run.settle_by is None:
                return
            unsettled = self._unsettled.get(agent, ())
            held = next((item for item in unsettled if item[0] is run), None)
            if held is None:
                return  # another thread is settling it right now
            self._unsettled[agent].remove(held)
            run.thread_id = threading.get_ident()
        self._finish(*held)

    def _await_refill(self, name: str, settle_by: float) -> None:
        """Wait while the timer hands out a burst and the agent's ready queue is empty, until
        runs join it, or until ``settle_by`` (the oldest held run's, see :meth:`_hold`).

        The worker's settling would only take turns at the GIL with the timer's claiming of
        the next chunk, so the next jobs would start later; settling waits for a lull.
        """
        if name not in self._dispatching:
            return
        until = time.monotonic() + settle_by - self.clock.monotonic()  # real time paces threads
        with self._lock:
            while name in self._dispatching and not self._ready.get(name):
                remaining = until - time.monotonic()
                if remaining <= 0:
                    return
                self._refill_waiters += 1
                try:
                    self._refilled.wait(remaining)
                finally:
                    self._refill_waiters -= 1

    def _take_ready(self, name: str) -> tuple[Run, bool] | None:
        """The agent's next ready run, started, and whether it was dispatched ahead (caller
        holds the lock).

        A run dispatched into a free slot started then; one dispatched ahead starts now if a
        slot is free and its schedule still wants it. None when the queue is empty or the agent
        is at capacity: the worker then stops draining (a finishing run restarts it, see
        :meth:`_release`).
        """
        ready = self._ready.get(name)
        agent = self._agents.get(name)
        while ready:
            run = ready[0]
            if run.started:
                ready.popleft()
                return run, False
            if agent is None or self._status != "running":
                self._drop_ready(name)
                continue
            if self._at_capacity(agent):
                # a run started at dispatch holds its slot already; two passes can queue it
                # behind one dispatched ahead
                holder = next((queued for queued in ready if queued.started), None)
                if holder is None:
                    break
                ready.remove(holder)
                return holder, False
            ready.popleft()
            self._count_admitted(name, -1)
            entry = self._entries.get((run.agent, run.schedule_name))
            if entry is None or entry.run is not run or not self._may_start(entry, run):
                self._unready(run)
                continue
            self._start(run, entry, self.clock.monotonic())
            return run, True
        if not ready:
            self._ready.pop(name, None)
        self._loops[name] -= 1
        return None

    def _may_start(self, entry: _Entry, run: Run) -> bool:
        """Whether a dispatched run may still start: its schedule was neither paused,
        disabled nor changed while it waited."""
        return (
            (entry.schedule is run.schedule or entry.schedule == run.schedule)
            and entry.schedule.enabled
            and entry.state.status in (Status.IDLE, Status.RUNNING)
        )

    def _watch(self, name: str) -> None:
        """Worker: add workers to the agent's ready queue when it stops moving.

        The queue has stalled when every worker draining it is inside a job and the latest of
        those jobs began :data:`_STALL_AFTER` ago (real time: it paces threads, not schedules).
        Polls at that period while the queue holds runs; ends when it is empty, when every slot
        has a worker, or after starting the workers a stall called for.
        """
        stale_at: float | None = None  # _last_take at the previous poll, when it was stale
        while True:
            time.sleep(_STALL_AFTER)
            with self._lock:
                ready = self._ready.get(name)
                agent = self._agents.get(name)
                if (
                    not ready
                    or agent is None
                    or self._status != "running"
                    or self._loops[name] >= agent.max_concurrent
                ):
                    self._watching.discard(name)
                    return
                last_take = self._last_take.get(name, 0.0)
                if (
                    self._busy[name] < self._loops[name]
                    or time.monotonic() - last_take < _STALL_AFTER
                ):
                    stale_at = None
                    continue  # a worker is free, or its job has only just begun
                if stale_at != last_take:
                    # stale once: the GIL may just have been elsewhere (a garbage collection, the
                    # timer's dispatching); stalled only if nothing moved by the next poll
                    stale_at = last_take
                    continue
                # a worker that finds nothing it may start leaves again
                added = min(len(ready), agent.max_concurrent - self._loops[name])
                self._watching.discard(name)
                self._loops[name] += added
                pool = self._pool(agent)
                for _ in range(added - 1):
                    pool.submit(self._drain, name)
            self._drain(name)  # this thread becomes one of them
            return

    def _unready(self, run: Run) -> None:
        """A dispatched run that will not start: its schedule is planned again as if it had
        only waited, and its claim is void (caller holds the lock; counters are the caller's)."""
        if self._starts is not None:
            self._released_claims.append(run.run_id)
        if self._idle_waiters:
            self._idle.notify_all()  # it may have been the last thing to wait for
        entry = self._entries.get((run.agent, run.schedule_name))
        if entry is None or entry.run is not run:
            return
        entry.run = None
        if not self._schedulable(entry):
            entry.due = entry.scheduled_for = None  # paused or disabled: planned on resume
            entry.version += 1
            return
        if entry.due is None and run.replan is not None:  # nothing replanned it meanwhile
            entry.due, entry.scheduled_for = run.replan
            entry.version += 1
        if entry.due is not None and self._status == "running":
            self._push(entry)
            self._wake.set()  # due again, most likely at once

    def _take_back(self, entry: _Entry) -> None:
        """Take back ``entry``'s run if it waits in a ready queue (caller holds the lock): a
        paused, changed or removed schedule must not start from there."""
        run = entry.run
        if run is None or run.started:
            return
        ready = self._ready.get(run.agent)
        if ready is None or run not in ready:
            return  # its claim is still syncing: the launch or the worker decides
        ready.remove(run)
        self._count_admitted(run.agent, -1)
        self._unready(run)

    def _drop_ready(self, name: str | None = None) -> None:
        """Take back the runs dispatched ahead that have not started (caller holds the lock);
        runs that started at dispatch stay queued and run."""
        for agent in [name] if name is not None else list(self._ready):
            ready = self._ready.get(agent)
            if not ready:
                continue
            waiting = [run for run in ready if not run.started]
            kept = [run for run in ready if run.started]
            ready.clear()
            ready.extend(kept)  # in place: a worker may hold this very queue
            for run in waiting:
                self._count_admitted(agent, -1)
                self._unready(run)

    def _release_claims(self) -> None:
        """Tell the store which claims made ahead will never start, before it flushes."""
        with self._lock:
            released, self._released_claims = self._released_claims, []
        if released and self._starts is not None:
            self._store_call(self._starts.release_claims, released)

    def _pool(self, agent: Agent) -> WorkerPool:
        pool = self._pools.get(agent.name)
        if pool is None or pool.size != agent.max_concurrent:
            if pool is not None:
                pool.shutdown()
            pool = WorkerPool(agent.max_concurrent, f"herdsched-{agent.name}")
            self._pools[agent.name] = pool
        return pool

    def _execute(self, run: Run) -> None:
        """Worker thread: run the job, then settle the outcome."""
        self._finish(run, self._run_job(run))

    def _run_job(self, run: Run) -> RunOutcome:
        """Worker thread: announce the run and call its job; a crash becomes a failed outcome."""
        run.thread_id = threading.get_ident()
        if self._listens(ev.JobStarted):
            self._emit(
                ev.JobStarted(
                    at=self.clock.now(),
                    agent=run.agent,
                    schedule=run.schedule_name,
                    run_id=run.run_id,
                )
            )
        try:
            outcome = execute_run(run, clock=self.clock, work_sources=self.work_sources)
        # a bug in a work source or prompt, or a job raising KeyboardInterrupt: the run still
        # settles and frees its slot, and the worker goes on
        except BaseException as exc:
            self.log.exception("run %s of %s/%s crashed", run.run_id, run.agent, run.schedule_name)
            now = self.clock.now()
            outcome = RunOutcome(
                status=RunStatus.FAILED, started_at=now, finished_at=now, error=repr(exc)
            )
        run.outcome = outcome
        return outcome

    def _finish(self, run: Run, outcome: RunOutcome) -> None:
        """Settle a run whose job returned, then release it and tell whoever waits for it."""
        try:
            self._settle(run, outcome)
        except Exception:
            self.log.exception(
                "could not settle run %s of %s/%s", run.run_id, run.agent, run.schedule_name
            )
        finally:
            with self._lock:
                self._release(run)
                wake = self._timer_must_replan(run)
            if run.done is not None:
                run.done.set()
            if self._pending_events:
                self._drain_events()
            if wake:
                self._wake.set()

    def _hold(self, run: Run, outcome: RunOutcome) -> bool:
        """Hold back a run whose job returned, so the runs waiting behind it start first (caller
        holds the lock): its slot frees now; its worker settles it between jobs once it is
        :data:`_SETTLE_WITHIN` old, or a settling thread does when the worker is inside a long
        job (see :meth:`_settle_overdue`). False: settle it now (already settled as a timeout,
        the scheduler is stopping, or it is no longer running).
        """
        if (
            run.finalized
            or self._status != "running"
            or self._holds_barred
            or self._running.get(run.run_id) is not run
        ):
            return False
        mono = self.clock.monotonic()
        run.settle_by = mono + _SETTLE_WITHIN
        run.deadline = None  # its job returned: a timeout can no longer cut it short
        del self._running[run.run_id]  # out of the timer's scans of running jobs
        self._held[run.run_id] = run
        self._agent_counts[run.agent] -= 1
        self._jobs_running -= 1
        unsettled = self._unsettled.setdefault(run.agent, collections.deque())
        unsettled.append((run, outcome))
        planned = self._planned_wake
        if (len(unsettled) == 1 and planned is not None and planned[1] > run.settle_by) or (
            self._status == "running"
            and self._waiting
            and (self.max_total_concurrent is not None or self._wants_dispatch(run.agent))
        ):
            self._wake.set()  # to settle it in time, or to fill its slot
        return True

    def _timer_must_replan(self, run: Run) -> bool:
        """Whether a finished run changed what the sleeping timer waits for (caller holds the lock).

        Waking the timer after every run costs a pass each; it is needed only when a schedule
        waits for the freed capacity, when the run's schedule is now due before the planned
        wake-up, or when its state needs a group commit sooner than that.
        """
        if self._status != "running":
            return True
        if (
            run.settle_by is None  # a held run's slot was offered when it was held
            and self._waiting
            and (self.max_total_concurrent is not None or self._wants_dispatch(run.agent))
        ):
            return True  # a waiting schedule can take the slot (even mid-pass: it may be too late)
        planned = self._planned_wake
        if planned is None:  # the timer is mid-pass and plans from the heap after this
            return False
        wall, mono = planned
        entry = self._entries.get((run.agent, run.schedule_name))
        if entry is not None and entry.due is not None and entry.due < wall:
            return True
        flush_at = self.store.flush_deadline()
        if flush_at is None or self._flush_in_flight:
            return False
        # due before the planned wake-up, or the last run ended: a quiet gap may start now
        return flush_at < mono or not (
            self._running or self._held or self._waiting or self._admitted_total
        )

    def _wants_dispatch(self, agent: str) -> bool:
        """Whether the timer should dispatch ``agent``'s waiting schedules now (caller holds the
        lock): a slot is free and, with a lookahead, the ready queue is running low."""
        agent_obj = self._agents.get(agent)
        if agent_obj is None or agent not in self._waiting:
            return False
        ahead = self._lookahead()
        if self._agent_counts[agent] + self._admitted[agent] >= agent_obj.max_concurrent + ahead:
            return False
        if ahead:
            return self._admitted[agent] <= ahead // 2  # refill before the queue runs dry
        return not self._at_capacity(agent_obj)

    def _release(self, run: Run) -> None:
        """Free the run's slot (caller holds the lock) and put its schedule back on the heap."""
        if self._running.pop(run.run_id, None) is not None:
            self._agent_counts[run.agent] -= 1
            self._jobs_running -= 1
        elif run.settle_by is not None:
            self._held.pop(run.run_id, None)  # it freed its slot when it was held
        entry = self._entries.get((run.agent, run.schedule_name))
        if entry is not None and entry.run is run:
            entry.run = None
            if entry.due is not None:
                self._push(entry)
        if self._loops[run.agent] == 0 and self._ready.get(run.agent):
            self._ensure_drain(run.agent)  # its workers stopped while the agent was full
        if self._idle_waiters:
            self._idle.notify_all()

    # ----------------------------------------------------------------------------- outcomes

    def _settle(
        self, run: Run, outcome: RunOutcome, *, on_recorded: Callable[[], None] | None = None
    ) -> None:
        """Turn a finished run into state, history, events and a notification.

        ``on_recorded`` runs once the state transition is made, before the notifier.
        """
        with self._lock:
            if run.finalized:  # already settled as a timeout
                return
            run.finalized = True
            if run.timed_out and outcome.status is not RunStatus.TIMEOUT:
                # the job saw the cancel event and returned before the timer settled the run
                error = f"timed out after {run.schedule.timeout}"
                outcome = evolve(outcome, status=RunStatus.TIMEOUT, error=error)
            entry = self._entries.get((run.agent, run.schedule_name))
            if entry is None:
                return
            try:
                record, disabled = self._apply_outcome(entry, run, outcome)
            except BaseException:
                self._record_start(entry, run)  # at least the start: its claim then may go
                raise
            run.unrecorded_since = None  # the finishing transition recorded the start too
        if on_recorded is not None:
            on_recorded()
        message = None
        if self.notifier is not None and outcome.status in _NOTIFIED:
            message = notification_message(
                run.schedule.notify,
                outcome.status,
                outcome.output,
                outcome.result.notify,
                outcome.error,
            )
        if message is not None and self.notifier is not None:  # (for mypy)
            delivered = self._safely(
                self.notifier,
                Notification(
                    agent=run.agent,
                    schedule=run.schedule_name,
                    run_id=run.run_id,
                    status=outcome.status,
                    message=message,
                    at=outcome.finished_at,
                    error=outcome.error,
                ),
                what="notifier",
            )
            record = evolve(record, notified=delivered)
        if record is not None and not outcome.no_work:
            self._append_run(record)
        self._emit_outcome(run, outcome, record)
        if disabled is not None:
            self._emit(
                ev.ScheduleDisabled(
                    at=outcome.finished_at,
                    agent=run.agent,
                    schedule=run.schedule_name,
                    reason=disabled,
                )
            )
        if self._status == "stopped":
            self._flush_quietly()

    def _apply_outcome(
        self, entry: _Entry, run: Run, outcome: RunOutcome
    ) -> tuple[RunRecord, str | None]:
        """State transition for a finished run (caller holds the lock)."""
        now = outcome.finished_at
        state = entry.state
        schedule = entry.schedule
        failures = state.consecutive_failures
        status = state.status if state.status is not Status.RUNNING else Status.IDLE
        disabled_reason = None
        normal, slot = self._next_after_run(entry, run, now)
        if outcome.status is RunStatus.SUCCESS:
            failures = 0
            due = normal
        elif outcome.status is RunStatus.DEFERRED:
            assert outcome.defer_delay is not None
            due = now + outcome.defer_delay
        elif outcome.no_work:
            entry.last_skip = SkipReason.NO_WORK  # get_status() reports no_work until it runs
            due = self._no_work_due(entry, now, normal)
        else:
            failures += 1
            due = next_after_failure(normal, now, failures, self.backoff)
            if isinstance(schedule.cadence, Once) and run.trigger_type is TriggerType.ONCE:
                due = None
            if should_auto_disable(failures, self.max_consecutive_failures) and status in (
                Status.IDLE,
                Status.RUNNING,
            ):
                status = Status.DISABLED
                disabled_reason = (
                    f"auto-disabled after {failures} consecutive failures; last error: "
                    f"{outcome.error or outcome.status}"
                )
        deferred = outcome.status is RunStatus.DEFERRED  # a deferred once has not run yet
        if run.trigger_type is TriggerType.ONCE and status is Status.IDLE and not deferred:
            status = Status.COMPLETED
            due = None
        if status in (Status.DISABLED, Status.PAUSED, Status.COMPLETED):
            due = None
        session_id = state.session_id
        if schedule.persist_session:
            if outcome.session_cleared:
                session_id = None
            if outcome.result.session_id is not None:
                session_id = outcome.result.session_id
        changes: dict[str, Any] = {
            "status": status,
            "last_run_at": run.fired_at,
            "last_slot_at": run.scheduled_for,
            "last_finished_at": now,
            "last_result": outcome.status,
            "last_error": outcome.error if outcome.status is not RunStatus.SUCCESS else None,
            "consecutive_failures": failures,
            "session_id": session_id,
            "disabled_reason": disabled_reason or state.disabled_reason,
        }
        if due is not None or status not in (Status.PAUSED, Status.DISABLED):
            changes["next_run_at"] = due  # a paused or disabled schedule keeps its plan
        self._set_due(entry, due, slot if due == normal else due, push=False, persist=False)
        self._change_state(entry, **changes)
        record = RunRecord(
            run_id=run.run_id,
            agent=run.agent,
            schedule=run.schedule_name,
            trigger_type=run.trigger_type,
            scheduled_for=run.scheduled_for,
            started_at=outcome.started_at,
            finished_at=now,
            status=outcome.status,
            error=outcome.error,
            output_summary=outcome.output,
            session_id=session_id if schedule.persist_session else None,
            work_item_id=outcome.work_item_id,
            cost=outcome.result.cost,
            turns=outcome.result.turns,
        )
        return record, disabled_reason

    def _next_after_run(
        self, entry: _Entry, run: Run, now: datetime
    ) -> tuple[datetime | None, datetime | None]:
        """The normal next due time after a run and the slot it stands for (overlap rule)."""
        cadence = entry.schedule.cadence
        if cadence is None:
            return None, None
        if isinstance(cadence, Interval):
            due = cadence.next_due(
                slot=run.scheduled_for or now,
                finished_at=now,
                now=now,
                zone=self.timezone,
                rng=self._rng,
            )
            if due is not None and cadence.jitter_percent == 0 and self.jitter_percent:
                fraction = self._rng.uniform(0, self.jitter_percent / 100)
                due += cadence.every * fraction
            return due, due
        if run.trigger_type is TriggerType.MANUAL:
            planned = entry.scheduled_for if entry.due is not None else None
            if planned is None:
                planned = cadence.first_due(now, self.timezone)
        else:
            slot = run.scheduled_for or now
            planned = cadence.next_due(slot=slot, finished_at=now, now=now, zone=self.timezone)
        due, missed = slot_after_overlap(planned, now, entry.schedule.overlap)
        if missed and planned is not None:
            self._record_missed(entry, planned)
            due = cadence.first_due(now, self.timezone) if isinstance(cadence, Cron) else None
            return due, due
        return due, planned

    def _no_work_due(
        self, entry: _Entry, now: datetime, normal: datetime | None
    ) -> datetime | None:
        cadence = entry.schedule.cadence
        if isinstance(cadence, Interval):
            return now + cadence.every
        return normal

    def _record_missed(self, entry: _Entry, slot: datetime) -> None:
        record = RunRecord(
            run_id=new_run_id(),
            agent=entry.agent,
            schedule=entry.name,
            trigger_type=TriggerType(str(entry.schedule.type))
            if entry.schedule.fires_on_timer
            else TriggerType.MANUAL,
            scheduled_for=slot,
            status=RunStatus.MISSED,
            error="slot passed while the schedule could not run",
        )
        self._append_run(record)
        self._emit(
            ev.JobMissed(
                at=self.clock.now(), agent=entry.agent, schedule=entry.name, scheduled_for=slot
            )
        )

    def _emit_outcome(self, run: Run, outcome: RunOutcome, record: RunRecord) -> None:
        if not self._listeners:
            return
        at = outcome.finished_at
        if outcome.no_work:
            self._emit(
                ev.JobSkipped(
                    at=at, agent=run.agent, schedule=run.schedule_name, reason=SkipReason.NO_WORK
                )
            )
        elif outcome.status is RunStatus.SUCCESS:
            self._emit(
                ev.JobSucceeded(at=at, agent=run.agent, schedule=run.schedule_name, record=record)
            )
        elif outcome.status in (RunStatus.FAILED, RunStatus.TIMEOUT):
            self._emit(
                ev.JobFailed(at=at, agent=run.agent, schedule=run.schedule_name, record=record)
            )

    def _expire_timeouts(self, now: datetime, mono: float) -> None:
        """Record runs past their timeout as timed out, then set their cancel events.

        In that order, so a job that wakes up on the cancel event already finds the timeout in
        its schedule's state; the notifier, history and listeners follow, and a slow notifier
        does not delay the cancel. The slot frees when the job returns.
        """
        expired: list[Run] = []
        with self._lock:
            for run in self._running.values():
                if run.deadline is not None and mono >= run.deadline and not run.timed_out:
                    run.timed_out = True
                    expired.append(run)
        for run in expired:
            assert run.schedule.timeout is not None
            self.log.warning(
                "run %s of %s/%s timed out after %s; its slot frees when the job returns",
                run.run_id,
                run.agent,
                run.schedule_name,
                run.schedule.timeout,
            )
            outcome = RunOutcome(
                status=RunStatus.TIMEOUT,
                started_at=run.fired_at,
                finished_at=now,
                error=f"timed out after {run.schedule.timeout}",
            )
            run.outcome = outcome
            try:
                self._settle(run, outcome, on_recorded=run.cancel)
            finally:
                run.cancel()  # also when settling failed; setting it twice is harmless

    # ------------------------------------------------------------------- registration/recovery

    def _install_agent(self, agent: Agent) -> None:
        """Register ``agent`` (replacing one of the same name). Caller holds the lock."""
        old = self._agents.get(agent.name)
        self._agents[agent.name] = agent
        try:
            for name, schedule in agent.schedules.items():
                self._validate_new_schedule(agent.name, name, schedule, runtime=False)
        except Exception:
            if old is None:
                del self._agents[agent.name]
            else:
                self._agents[agent.name] = old
            raise
        if old is not None and old.max_concurrent != agent.max_concurrent:
            pool = self._pools.pop(agent.name, None)
            if pool is not None:
                pool.shutdown()
        definitions = self._definitions_for(agent.name)
        for name, schedule in agent.schedules.items():
            self._install_entry(agent, name, schedule, persisted=False)
        for name, schedule in definitions.items():
            if name not in agent.schedules:
                updated = self._agents[agent.name].with_schedule(name, schedule)
                self._agents[agent.name] = updated
                self._install_entry(updated, name, schedule, persisted=True)
        self._ensure_drain(agent.name)  # more slots: runs waiting in its queue may start now

    def _install_entry(
        self, agent: Agent, name: str, schedule: Schedule, *, persisted: bool
    ) -> None:
        key = (agent.name, name)
        existing = self._entries.get(key)
        now = self.clock.now()
        if existing is not None:
            cadence_changed = existing.schedule.cadence != schedule.cadence
            if existing.schedule != schedule:
                existing.schedule = schedule
                self._take_back(existing)
            existing.schedule = schedule
            existing.persisted_definition = existing.persisted_definition or persisted
            if existing.run is None and self._status == "running":
                due = self._fresh_due(existing, now, recompute=cadence_changed)
                self._set_due(existing, due, existing.scheduled_for if not cadence_changed else due)
            self._persist_description(existing)
            return
        state = self.store.get_schedule_state(agent.name, name)
        entry = _Entry(agent.name, name, schedule, state, persisted_definition=persisted)
        self._entries[key] = entry
        if self._status == "running":  # otherwise planned when this scheduler starts leading
            self._plan_from_state(entry, now, recovering=True)

    def _plan_from_state(self, entry: _Entry, now: datetime, *, recovering: bool) -> None:
        """Compute an entry's due time from its persisted state (restart recovery included)."""
        state = entry.state
        if recovering and state.status is Status.RUNNING and entry.run is None:
            self._recover_interrupted(entry, now)
            state = entry.state
        cadence_changed = state.cadence is not None and state.cadence != describe_cadence(
            entry.schedule
        )
        if not self._schedulable(entry):
            self._set_due(entry, None, None)
        elif cadence_changed or state.next_run_at is None:
            due = self._fresh_due(entry, now, recompute=True)
            self._set_due(entry, due, due)
        else:
            self._set_due_with_catch_up(entry, state.next_run_at, now)
        self._persist_description(entry)

    def _set_due_with_catch_up(self, entry: _Entry, persisted: datetime, now: datetime) -> None:
        cadence = entry.schedule.cadence
        assert cadence is not None
        following = None
        if persisted <= now:
            following = cadence.next_due(
                slot=now, finished_at=now, now=now, zone=self.timezone, rng=self._rng
            )
        policy = entry.schedule.catch_up or self.catch_up
        plan: CatchUpPlan = catch_up_plan(persisted, now, policy, self.catch_up_window, following)
        if plan.missed is not None:
            self._record_missed(entry, plan.missed)
            if isinstance(cadence, Once):
                entry.state = evolve(entry.state, status=Status.COMPLETED)
                self._transition(entry, status=Status.COMPLETED, next_run_at=None)
                self._set_due(entry, None, None)
                return
        self._set_due(entry, plan.due, plan.scheduled_for)

    def _recover_interrupted(self, entry: _Entry, now: datetime) -> None:
        state = entry.state
        self.log.warning(
            "%s/%s was running when its scheduler died; recording the run as interrupted",
            entry.agent,
            entry.name,
        )
        record = RunRecord(
            run_id=new_run_id(),
            agent=entry.agent,
            schedule=entry.name,
            trigger_type=TriggerType(str(entry.schedule.type))
            if entry.schedule.fires_on_timer
            else TriggerType.MANUAL,
            scheduled_for=state.last_slot_at,
            started_at=state.last_run_at,
            finished_at=now,
            status=RunStatus.INTERRUPTED,
            error="the process running this job stopped before it finished",
        )
        self._append_run(record)
        cadence = entry.schedule.cadence
        due: datetime | None = None
        if cadence is not None and not isinstance(cadence, Once):
            due = cadence.next_due(
                slot=state.last_slot_at or state.last_run_at or now,
                finished_at=now,
                now=now,
                zone=self.timezone,
                rng=self._rng,
            )
        status = Status.COMPLETED if isinstance(cadence, Once) else Status.IDLE
        self._change_state(
            entry,
            status=status,
            last_result=RunStatus.INTERRUPTED,
            last_finished_at=now,
            last_error=record.error,
            next_run_at=due,
        )

    def _schedulable(self, entry: _Entry) -> bool:
        return (
            entry.schedule.fires_on_timer
            and entry.schedule.enabled
            and entry.state.status in (Status.IDLE, Status.RUNNING)
        )

    def _fresh_due(self, entry: _Entry, now: datetime, *, recompute: bool) -> datetime | None:
        """Due time from the cadence (``recompute``) or the persisted plan with catch-up."""
        if not self._schedulable(entry):
            return None
        cadence = entry.schedule.cadence
        assert cadence is not None
        state = entry.state
        if not recompute and entry.due is not None:
            return entry.due
        if not recompute and state.next_run_at is not None:
            return max(state.next_run_at, now)
        if state.last_finished_at is not None and not isinstance(cadence, Once):
            due = cadence.next_due(
                slot=state.last_slot_at or state.last_finished_at,
                finished_at=state.last_finished_at,
                now=now,
                zone=self.timezone,
                rng=self._rng,
            )
            if due is not None:
                return max(due, now)
        return cadence.first_due(now, self.timezone)

    def _set_due(
        self,
        entry: _Entry,
        due: datetime | None,
        scheduled_for: datetime | None,
        *,
        push: bool = True,
        persist: bool = True,
    ) -> None:
        entry.version += 1
        entry.due = due
        entry.scheduled_for = scheduled_for if due is not None else None
        parked = due is None and (
            not entry.schedule.enabled or entry.state.status in (Status.PAUSED, Status.DISABLED)
        )  # a paused or disabled schedule keeps its planned time for when it resumes
        # Only the active scheduler plans: a standby's view must never overwrite the leader's.
        if persist and due != entry.state.next_run_at and not parked and self._status == "running":
            self._change_state(entry, next_run_at=due)
        if push and due is not None and entry.run is None:
            self._push(entry)

    def _push(self, entry: _Entry) -> None:
        assert entry.due is not None
        heapq.heappush(
            self._heap, (entry.due, next(self._seq), entry.agent, entry.name, entry.version)
        )

    def _persist_description(self, entry: _Entry) -> None:
        if self._status != "running":
            return  # the active scheduler writes descriptions; a standby only reads
        description = describe_cadence(entry.schedule)
        schedule_type = str(entry.schedule.type)
        owner = entry.schedule.owner
        state = entry.state
        if (state.cadence, state.type, state.owner) != (description, schedule_type, owner):
            self._change_state(entry, cadence=description, type=schedule_type, owner=owner)

    def _drop_entry(self, agent: str, name: str, *, forget_state: bool) -> None:
        entry = self._entries.get((agent, name))
        if entry is None:
            return
        self._take_back(entry)
        run = entry.run
        if run is not None and not forget_state:
            # its state stays but its settling will not find the entry: record the start now,
            # or the state would never show the run and its claim would stay in the journal
            self._record_start(entry, run)
        del self._entries[(agent, name)]
        entry.version += 1
        entry.due = None
        if forget_state:
            self._store_call(self.store.remove_schedule_state, agent, name)
            if entry.persisted_definition:
                self._store_call(self.store.delete_definition, agent, name)

    def _ad_hoc_entry(self, agent: Agent) -> _Entry:
        key = (agent.name, _AD_HOC_SCHEDULE)
        entry = self._entries.get(key)
        if entry is None:
            state = self.store.get_schedule_state(agent.name, _AD_HOC_SCHEDULE)
            entry = _Entry(agent.name, _AD_HOC_SCHEDULE, Schedule.manual(), state)
            self._entries[key] = entry
            self._persist_description(entry)
        return entry

    def _recover_all(self) -> None:
        """Restart recovery when this scheduler becomes the active one."""
        self.store.refresh()
        now = self.clock.now()
        claimed = self._unfinished_claims()
        for entry in list(self._entries.values()):
            if entry.run is not None:
                continue
            entry.state = self.store.get_schedule_state(entry.agent, entry.name)
            claim = claimed.get(entry.key)
            if claim is not None and entry.state.status is Status.IDLE:
                # its job may have started before the process died: treat it as running
                entry.state = evolve(
                    entry.state,
                    status=Status.RUNNING,
                    last_run_at=claim.run_at,
                    last_slot_at=claim.slot,
                )
            entry.due = None
            self._plan_from_state(entry, now, recovering=True)

    def _unfinished_claims(self) -> dict[tuple[str, str], RunClaim]:
        """Durable claims whose run never reached the state file as finished."""
        try:
            claims = self.store.load_claims()
        except Exception as exc:
            self._state_error(exc)
            return {}
        latest: dict[tuple[str, str], RunClaim] = {}
        for claim in claims:
            state = self.store.get_schedule_state(claim.agent, claim.schedule)
            finished = state.last_finished_at is not None and state.last_finished_at >= claim.run_at
            if not finished:
                latest[(claim.agent, claim.schedule)] = claim
        return latest

    def _try_lead(self) -> bool:
        """Take the leader lock if it is free (caller holds the lock)."""
        if self._leader is not None and not self._leader.try_acquire():
            return False
        previous, self._status = self._status, "running"  # recovery plans as the leader
        try:
            self._recover_all()
        except Exception:
            self._status = previous
            if self._leader is not None:
                self._leader.release()
            raise
        return True

    def _log_standby(self) -> None:
        holder = self._leader.holder() if self._leader is not None else None
        self.log.warning(
            "another scheduler is active for %s (%s); standing by",
            self.state_dir,
            holder or "holder unknown",
        )

    # ---------------------------------------------------------------- other processes, jumps

    def _poll_other_processes(self) -> None:
        try:
            changed = self.store.refresh()
            requests = self.store.take_trigger_requests()
        except Exception as exc:
            self._state_error(exc)
            return
        if changed:
            self._flush_quietly()  # merge our pending transitions first: disk is then the truth
            self._sync_external_changes()
            self._sync_external_definitions()
        for request in requests:
            try:
                result = self.trigger(
                    request.agent,
                    None if request.schedule == _AD_HOC_SCHEDULE else request.schedule,
                    prompt=request.prompt,
                )
                self.log.info(
                    "trigger request %s for %s/%s: %s",
                    request.request_id,
                    request.agent,
                    request.schedule,
                    result,
                )
            except Exception:
                self.log.exception(
                    "trigger request %s for %s/%s failed",
                    request.request_id,
                    request.agent,
                    request.schedule,
                )

    def _refresh_from_store(self) -> None:
        try:
            if self.store.refresh():
                self._sync_external_definitions()  # schedules created or removed elsewhere
                with self._lock:
                    for entry in self._entries.values():
                        entry.state = self.store.get_schedule_state(entry.agent, entry.name)
        except Exception as exc:
            self._state_error(exc)

    def _sync_external_changes(self) -> None:
        """Apply pauses, resumes and disables written by other processes."""
        now = self.clock.now()
        with self._lock:
            for entry in self._entries.values():
                stored = self.store.get_schedule_state(entry.agent, entry.name)
                if stored.status == entry.state.status or stored.status is Status.RUNNING:
                    continue
                if entry.state.status is Status.RUNNING and stored.status is Status.IDLE:
                    continue  # our own transition not yet flushed
                self.log.info(
                    "%s/%s changed by another process: %s -> %s",
                    entry.agent,
                    entry.name,
                    entry.state.status,
                    stored.status,
                )
                entry.state = evolve(
                    entry.state,
                    status=stored.status,
                    consecutive_failures=stored.consecutive_failures,
                    disabled_reason=stored.disabled_reason,
                )
                if entry.run is not None:
                    continue
                if self._schedulable(entry):
                    due = self._fresh_due(entry, now, recompute=False)
                    self._set_due(entry, due, entry.scheduled_for or due)
                else:
                    self._set_due(entry, None, None)

    def _sync_external_definitions(self) -> None:
        """Pick up schedules another process created, changed or removed in schedules.yaml."""
        try:
            stored = self.store.load_definitions()
        except Exception as exc:
            self._state_error(exc)
            return
        with self._lock:
            removed = [
                (entry.agent, entry.name)
                for entry in self._entries.values()
                if entry.persisted_definition
                and entry.name not in stored.get(entry.agent, {})
                and entry.run is not None
                and entry.run.settle_by is not None
            ]
        with self._no_holds():
            for agent_name, schedule_name in removed:  # their returned jobs recorded first
                self._settle_for_trigger(agent_name, schedule_name)
            self._drop_external_removals(stored)

    def _drop_external_removals(self, stored: dict[str, dict[str, dict[str, Any]]]) -> None:
        """Apply what another process did to ``schedules.yaml``: drop, add and change."""
        with self._lock:
            for agent_name in list(self._agents):
                kept = stored.get(agent_name, {})
                gone = [
                    entry.name
                    for entry in self._entries.values()
                    if entry.agent == agent_name
                    and entry.persisted_definition
                    and entry.name not in kept
                ]
                for schedule_name in gone:
                    self._drop_entry(agent_name, schedule_name, forget_state=False)
                    self._agents[agent_name] = self._agents[agent_name].without_schedule(
                        schedule_name
                    )
                for schedule_name, schedule in self._definitions_for(agent_name).items():
                    entry = self._entries.get((agent_name, schedule_name))
                    if entry is not None and not entry.persisted_definition:
                        continue  # a code or fleet-file schedule wins over a stored one
                    if entry is not None and entry.schedule == schedule:
                        continue
                    self.log.info(
                        "definition %s/%s changed in another process", agent_name, schedule_name
                    )
                    agent = self._agents[agent_name].with_schedule(schedule_name, schedule)
                    self._agents[agent_name] = agent
                    self._install_entry(agent, schedule_name, schedule, persisted=True)

    def _detect_clock_jump(self, now: datetime, mono: float) -> None:
        if self._last_wall is not None and self._last_mono is not None:
            wall = (now - self._last_wall).total_seconds()
            elapsed = mono - self._last_mono
            if abs(wall - elapsed) > _CLOCK_JUMP_TOLERANCE:
                self.log.warning(
                    "wall clock jumped by %.1f s (suspend/resume or a clock change); "
                    "re-evaluating every schedule",
                    wall - elapsed,
                )
                self._reevaluate_after_jump(now)
        self._last_wall, self._last_mono = now, mono

    def _reevaluate_after_jump(self, now: datetime) -> None:
        if self._status != "running":
            return
        for entry in self._entries.values():
            if entry.run is not None or entry.due is None:
                continue
            cadence = entry.schedule.cadence
            if isinstance(cadence, Interval) and cadence.anchor is None:
                # elapsed-time semantics: a backwards step must not stretch the wait
                limit = now + cadence.every
                if entry.due > limit:
                    self._set_due(entry, limit, limit)
                    continue
            if entry.due <= now:
                self._set_due_with_catch_up(entry, entry.due, now)

    # ------------------------------------------------------------------------------- store

    def _change_state(self, entry: _Entry, **changes: Any) -> None:
        """Apply a run-time transition to ``entry``'s state, and record it in the store.

        With a store that adopts transitions, the scheduler and the store share each state
        object: one copy per transition instead of two. A store that fell back to its own copy
        (its state was not the scheduler's object) gets shared again when the two agree.
        """
        before = entry.state
        after = evolve(before, **changes)
        entry.state = after
        if self._adopt is None:
            self._transition(entry, **changes)
            return
        stored = self._store_call(self._adopt, entry.agent, entry.name, before, after, changes)
        if stored is not None and stored is not after and stored == after:
            entry.state = stored

    def _transition(self, entry: _Entry, **changes: Any) -> None:
        self._store_call(self.store.record_transition, entry.agent, entry.name, **changes)

    def _append_run(self, record: RunRecord) -> None:
        self._store_call(self.store.append_run, record)

    def _write_intent(self, entry: _Entry, **changes: Any) -> None:
        """A durable user-intent write; on failure keep it pending and tell the caller."""
        try:
            self.store.update_schedule_state(entry.agent, entry.name, **changes)
        except StateError as exc:
            self._state_error(exc, entry)
            self._transition(entry, **changes)
            raise StateError(
                f"{entry.agent}/{entry.name}: the change applies in this process but is not "
                f"durable yet ({exc}); it will be retried",
                exc.path,
                exc,
            ) from exc

    def _store_call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            self._state_error(exc)
            return None

    def _flush_if_due(self, now: datetime, mono: float, *, background: bool) -> None:
        """Start a group commit when one is due, or early while the scheduler is quiet.

        ``commit_delay`` bounds how long a transition waits to be durable while runs keep
        coming. Once nothing runs or waits and the next run is at least ``commit_delay`` away,
        there is nothing to batch with: the commit happens now, in the gap, instead of landing
        on the next due instant and competing with its dispatching.
        """
        if self._flush_in_flight:
            return
        with self._lock:
            deadline = self._commit_deadline()
        if deadline is None:
            return
        if mono < deadline and not (self._store_retry_at is None and self._quiet_until(now)):
            return
        flusher = self._flusher
        if background and flusher is not None and flusher.is_alive():
            self._flush_in_flight = True
            self._flush_wanted.set()
            return
        self._group_commit()

    def _commit_deadline(self) -> float | None:
        """When the next group commit is due (monotonic; caller holds the lock): a retry after
        a failed one, else the store's deadline or an unrecorded start's, whichever is first."""
        if self._store_retry_at:
            return self._store_retry_at
        store_at = self.store.flush_deadline()
        record_at = self._record_deadline()
        if store_at is None or record_at is None:
            return store_at if record_at is None else record_at
        return min(store_at, record_at)

    def _quiet_until(self, now: datetime) -> bool:
        """Nothing runs or waits, and no run is due within ``commit_delay``."""
        with self._lock:
            if self._running or self._held or self._waiting or self._admitted_total:
                return False
            self._drop_stale_heap_top()
            if not self._heap:
                return True
            return (self._heap[0][0] - now).total_seconds() >= self.commit_delay

    def _group_commit(self) -> None:
        self._release_claims()
        self._record_starts()
        try:
            self.store.flush()
            self._store_retry_at = None
        except Exception as exc:
            self._store_retry_at = self.clock.monotonic() + _STORE_RETRY
            self._state_error(exc)

    def _flush_loop(self) -> None:
        """The flusher thread: one group commit each time the timer asks for one."""
        while True:
            self._flush_wanted.wait()
            self._flush_wanted.clear()
            if self._status not in ("running", "standby"):
                self._flush_in_flight = False
                return
            try:
                self._group_commit()
            finally:
                self._flush_in_flight = False
                self._wake.set()  # the timer plans the next commit

    def _flush_quietly(self) -> None:
        self._release_claims()
        self._record_starts()
        try:
            self.store.flush()
        except Exception as exc:
            self._state_error(exc)

    def _state_error(self, exc: BaseException, entry: _Entry | None = None) -> None:
        self.log.error("state store error: %s", exc)
        self._emit(
            ev.StateErrorOccurred(
                at=self.clock.now(),
                error=str(exc),
                agent=entry.agent if entry else None,
                schedule=entry.name if entry else None,
            )
        )

    def _save_definition(self, agent: str, name: str, schedule: Schedule) -> None:
        from herdsched.config import schedule_to_mapping

        self.store.save_definition(agent, name, schedule_to_mapping(schedule))

    def _definitions_for(self, agent: str) -> dict[str, Schedule]:
        try:
            raw = self.store.load_definitions().get(agent, {})
        except Exception as exc:
            self._state_error(exc)
            return {}
        if not raw:
            return {}
        from herdsched.config import schedule_from_mapping

        loaded: dict[str, Schedule] = {}
        for name, mapping in raw.items():
            try:
                loaded[name] = schedule_from_mapping(mapping)
            except Exception:
                self.log.exception("stored definition %s/%s is invalid; skipped", agent, name)
        return loaded

    # ------------------------------------------------------------------------------ helpers

    def _require_agent(self, name: str) -> Agent:
        agent = self._agents.get(name)
        if agent is None:
            raise AgentNotFoundError(name)
        return agent

    def _require_entry(self, agent: str, name: str) -> _Entry:
        self._require_agent(agent)
        entry = self._entries.get((agent, name))
        if entry is None:
            raise ScheduleNotFoundError(agent, name)
        return entry

    def _targets(self, agent: str, schedule: str | None, owner: str | None) -> list[_Entry]:
        with self._lock:
            if schedule is not None:
                entries = [self._require_entry(agent, schedule)]
            else:
                self._require_agent(agent)
                entries = [
                    e
                    for e in self._entries.values()
                    if e.agent == agent and e.name in self._agents[agent].schedules
                ]
            for entry in entries:
                self._check_owner(entry, owner)
            return entries

    def _check_owner(self, entry: _Entry, owner: str | None) -> None:
        if owner is not None and entry.schedule.owner != owner:
            raise UnauthorizedError(
                f"{entry.agent}/{entry.name} is not owned by {owner!r}", owner=owner
            )

    def _check_owner_limit(self, owner: str | None) -> None:
        limit = self.max_schedules_per_owner
        if owner is None or limit is None:
            return
        count = sum(1 for e in self._entries.values() if e.schedule.owner == owner)
        if count >= limit:
            raise LimitExceededError(
                f"owner {owner!r} already has {count} schedules (limit {limit})",
                limit=limit,
                owner=owner,
            )

    def _validate_new_schedule(
        self, agent: str, name: str, schedule: Schedule, *, runtime: bool = True
    ) -> None:
        cadence = schedule.cadence
        where = f"{agent}/{name}"
        if isinstance(cadence, Interval) and cadence.every < self.min_interval:
            raise InvalidScheduleError(
                f"{where}: interval {cadence.every} is shorter than min_interval "
                f"{self.min_interval}",
                field="interval",
                value=cadence.every,
            )
        if isinstance(cadence, Cron) and self.min_interval > timedelta(0):
            reference = to_utc(datetime(2026, 1, 5))
            first = cadence.first_due(reference, self.timezone)
            assert first is not None
            second = cadence.next_due(slot=first, finished_at=first, now=first, zone=self.timezone)
            if second is not None and second - first < self.min_interval:
                raise InvalidScheduleError(
                    f"{where}: cron {cadence.expression.source!r} fires every {second - first}, "
                    f"more often than min_interval {self.min_interval}",
                    field="cron",
                    value=cadence.expression.source,
                )
        if runtime and isinstance(cadence, Once) and cadence.at <= self.clock.now():
            state = self.store.get_schedule_state(agent, name)
            if state.last_run_at is None and state.status is not Status.COMPLETED:
                raise InvalidScheduleError(
                    f"{where}: once time {cadence.at.isoformat()} has already passed",
                    field="at",
                    value=cadence.at,
                )
        agent_obj = self._agents.get(agent)
        agent_job = agent_obj.job if agent_obj is not None else None
        if schedule.job is None and agent_job is None and self.on_trigger is None:
            raise InvalidScheduleError(
                f"{where}: nothing to run: give the schedule or agent a job, or the scheduler "
                "an on_trigger callback",
                field="job",
            )
        if schedule.work_source is not None and schedule.work_source not in self.work_sources:
            known = ", ".join(sorted(self.work_sources)) or "none registered"
            raise InvalidScheduleError(
                f"{where}: unknown work source {schedule.work_source!r} ({known})",
                field="work_source",
                value=schedule.work_source,
            )

    def _apply_changes(self, schedule: Schedule, changes: dict[str, Any]) -> Schedule:
        cadence_keys = {
            "interval",
            "cron",
            "at",
            "timezone",
            "anchor",
            "start_at",
            "jitter_percent",
        }
        cadence_changes = {k: changes.pop(k) for k in list(changes) if k in cadence_keys}
        if "type" in changes:
            raise InvalidScheduleError(
                "the type of a schedule cannot change; remove it and add a new one",
                field="type",
            )
        try:
            updated = schedule.with_changes(**changes)
        except TypeError as exc:
            raise InvalidScheduleError(f"unknown schedule field: {exc}", cause=exc) from exc
        if not cadence_changes:
            return updated
        cadence = schedule.cadence
        try:
            if isinstance(cadence, Interval):
                new_cadence: Any = Interval(
                    cadence_changes.get("interval", cadence.every),
                    anchor=cadence_changes.get("anchor", cadence.anchor),
                    start_at=cadence_changes.get("start_at", cadence.start_at),
                    jitter_percent=cadence_changes.get("jitter_percent", cadence.jitter_percent),
                )
            elif isinstance(cadence, Cron):
                new_cadence = Cron(
                    cadence_changes.get("cron", cadence.expression),
                    timezone=cadence_changes.get("timezone", cadence.timezone),
                )
            elif isinstance(cadence, Once):
                new_cadence = Once(cadence_changes.get("at", cadence.at))
            else:
                raise InvalidScheduleError(
                    f"a {schedule.type} schedule has no cadence to change",
                    field=next(iter(cadence_changes)),
                )
        except InvalidScheduleError:
            raise
        except ValueError as exc:
            raise InvalidScheduleError(
                str(exc), field=next(iter(cadence_changes)), cause=exc
            ) from exc
        unknown = set(cadence_changes) - _CADENCE_FIELDS[type(cadence)]
        if unknown:
            raise InvalidScheduleError(
                f"a {schedule.type} schedule has no field {sorted(unknown)[0]!r}",
                field=sorted(unknown)[0],
            )
        return updated.with_changes(cadence=new_cadence)

    def _job_for(self, entry: _Entry) -> JobFunc | None:
        return entry.schedule.job or self._agents[entry.agent].job or self.on_trigger

    def _agent_running(self, agent: str) -> int:
        return self._agent_counts[agent]

    def _at_capacity(self, agent: Agent) -> bool:
        if self._agent_running(agent.name) >= agent.max_concurrent:
            return True
        return (
            self.max_total_concurrent is not None
            and self._jobs_running >= self.max_total_concurrent
        )

    def _schedule_status(self, entry: _Entry, now: datetime) -> ScheduleStatus:
        state = entry.state
        run = entry.run
        if run is not None and run.unrecorded_since is not None:
            changes = self._start_changes(entry, run)  # see _start
            if run.settle_by is not None:
                changes.pop("status", None)  # its job returned: no longer running
            state = evolve(state, **changes)
        if run is not None and run.settle_by is not None and state.status is Status.RUNNING:
            state = evolve(state, status=Status.IDLE)  # held: its job returned
        reason = self._skip_reason(entry, now) if entry.agent in self._agents else None
        if entry.run is not None and not entry.run.started:
            reason = SkipReason.AT_CAPACITY  # dispatched, waiting for a free slot
        if reason is SkipReason.NOT_DUE and entry.last_skip is SkipReason.NO_WORK:
            reason = SkipReason.NO_WORK
        return ScheduleStatus(
            agent=entry.agent,
            schedule=entry.name,
            type=entry.schedule.type,
            status=state.status,
            enabled=entry.schedule.enabled,
            next_run_at=entry.due if self._status == "running" else state.next_run_at,
            last_run_at=state.last_run_at,
            last_result=state.last_result,
            last_error=state.last_error,
            consecutive_failures=state.consecutive_failures,
            running=1 if run is not None and run.started and run.settle_by is None else 0,
            skip_reason=reason,
            owner=entry.schedule.owner,
            disabled_reason=state.disabled_reason,
        )

    def _wait_for_runs(self, timeout: float | None, *, exclude_current: bool) -> int:
        me = threading.get_ident()

        def others() -> int:
            return sum(
                1
                for runs in (self._running, self._held)
                for run in runs.values()
                if not (exclude_current and run.thread_id == me)
            )

        with self._idle:
            self._wait_idle(lambda: others() == 0, timeout)
            return others()

    def _wait_idle(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """``self._idle.wait_for``, counted so finishing runs notify only while someone waits
        (caller holds the lock)."""
        self._idle_waiters += 1
        try:
            return self._idle.wait_for(predicate, timeout)
        finally:
            self._idle_waiters -= 1

    def _count_other_runs(self) -> int:
        me = threading.get_ident()
        with self._lock:
            return sum(
                1
                for runs in (self._running, self._held)
                for run in runs.values()
                if run.thread_id != me
            )

    def _changed(self) -> None:
        """The plan changed: deliver queued events and wake the timer thread."""
        self._drain_events()
        self._wake.set()

    def _listens(self, kind: type[ev.Event]) -> bool:
        """Whether any listener wants events of ``kind`` (so hot paths skip building them)."""
        listened = self._listened  # replaced, never mutated, like the listener list
        known = listened.get(kind)
        if known is None:
            known = listened[kind] = any(_may_match(kind, types) for _, types in self._listeners)
        return known

    def _emit(self, event: ev.Event) -> None:
        """Deliver ``event`` to listeners, never while this thread holds the scheduler lock.

        Events raised under the lock wait in a queue and go out when the lock is released, so
        a listener may call any method, ``stop()`` included, without deadlocking.
        """
        if not self._listens(type(event)):
            return  # nobody listens for this kind: skip the queue entirely
        if not self._pending_events and not self._lock._is_owned():  # type: ignore[attr-defined]
            # nothing queued before it and free to call out: no queue round trip (a worker's
            # outcome events); events of different threads were never ordered among themselves
            self._deliver(event)
            return
        with self._lock:
            self._pending_events.append(event)
        self._drain_events()

    def _drain_events(self) -> None:
        if self._lock._is_owned():  # type: ignore[attr-defined]
            return
        while True:
            with self._lock:
                if not self._pending_events:
                    return
                event = self._pending_events.pop(0)
            self._deliver(event)

    def _deliver(self, event: ev.Event) -> None:
        for callback, types in self._listeners:  # replaced, never mutated: no copy needed
            if isinstance(event, types):
                self._safely(callback, event, what="listener")

    def _safely(self, func: Callable[[Any], Any], arg: Any, *, what: str) -> bool:
        """Call a listener or the notifier; what it raises is logged, never passed on.

        Off the main thread that includes ``KeyboardInterrupt`` and ``SystemExit``: there only
        the callback itself can raise them, and a worker must go on recording its runs. On the
        main thread they may be a real Ctrl-C or exit, and propagate.
        """
        try:
            func(arg)
        except Exception:
            self.log.exception("%s %r raised; ignored", what, func)
            return False
        except BaseException:
            if threading.current_thread() is threading.main_thread():
                raise
            self.log.exception("%s %r raised; ignored", what, func)
            return False
        return True


#: The most runs the timer prepares, claims and hands out at a time (see ``_fire_due``). A
#: claim's fsync takes milliseconds on many disks: chunks this large keep it off the path of a
#: burst, as the workers run the previous chunk meanwhile.
_DISPATCH_CHUNK = 256
#: The first chunk of a pass is small, so the first jobs of a burst start without delay; each
#: next one doubles, up to _DISPATCH_CHUNK.
_FIRST_CHUNK = 16
#: Runs an agent may have dispatched beyond its free slots (claimed ahead, see _fire_due).
_LOOKAHEAD = 512
#: How long (real seconds) a ready queue may stand still before more workers join in.
_STALL_AFTER = 0.005
#: How long (seconds) a draining worker may hold finished runs back while it starts the runs
#: waiting behind them, before they are settled (see _drain and _hold).
_SETTLE_WITHIN = 0.1
#: The most runs an agent's workers hold: past it, a long burst settles one for each it holds
#: (a second's burst of a thousand short jobs is held whole).
_HOLD_MOST = 1024

#: the outcomes a notifier may hear of (deferred and skipped runs are never notified)
_NOTIFIED = frozenset({RunStatus.SUCCESS, RunStatus.FAILED, RunStatus.TIMEOUT})
#: the trigger type of a run the timer fires, by schedule type
_TIMER_TRIGGERS = {
    ScheduleType.INTERVAL: TriggerType.INTERVAL,
    ScheduleType.CRON: TriggerType.CRON,
    ScheduleType.ONCE: TriggerType.ONCE,
}

_CADENCE_FIELDS: dict[type, set[str]] = {
    Interval: {"interval", "anchor", "start_at", "jitter_percent"},
    Cron: {"cron", "timezone"},
    Once: {"at"},
}


def _settle_by(unsettled: collections.deque[tuple[Run, RunOutcome]], default: float) -> float:
    """When the oldest run of a held queue is due to settle; ``default`` when the queue is
    empty (read without the lock: other threads may empty it meanwhile)."""
    try:
        settle_by = unsettled[0][0].settle_by
    except IndexError:
        return default
    return default if settle_by is None else settle_by


def _may_match(kind: type[ev.Event], types: tuple[type[Any], ...]) -> bool:
    """Whether events of ``kind`` may be instances of ``types`` (a listener's filter).

    A filter that cannot answer ``issubclass`` (a runtime-checkable protocol with data members)
    may still match instances: delivery decides with ``isinstance``.
    """
    try:
        return issubclass(kind, types)
    except TypeError:
        return True


def _resolve_poll_interval(
    value: float | str | None, state_dir: str | Path | None, store: StateStore | None
) -> float | None:
    """``"auto"``: poll only when other processes can write (a state directory or a store)."""
    if value == "auto":
        return None if state_dir is None and store is None else DEFAULT_POLL_INTERVAL
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise ValueError(f"poll_interval must be positive, None or 'auto', got {value!r}")


def _skipped(reason: SkipReason, error: str) -> TriggerResult:
    return TriggerResult(success=False, error=error, skipped=True, skip_reason=reason)
