"""The scheduler façade: the public API and the lifecycle, over the engine modules.

:class:`ThreadedScheduler` owns one timer thread (``herdsched-timer``) that sleeps on an event
for ``min(time until the next due time, max_sleep)`` and wakes on a due time, any change, a
finished job or ``stop()``. Each pass fires what is due (:mod:`herdsched.engine.dispatch`),
expires timeouts, polls other processes (:mod:`herdsched.engine.syncing`) and plans the next
group commit (:mod:`herdsched.engine.committer`). Jobs never run on the timer thread: each agent
has a bounded executor (:mod:`herdsched.engine.executors`). The timer thread never dies: every
exception is logged and the pass is retried. How a run flows through the modules is described
in ``docs/architecture.md``.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar

import herdsched.events as ev
from herdsched import handover
from herdsched.clock import Clock
from herdsched.engine import registry
from herdsched.engine.changes import Changes
from herdsched.engine.collaborators import (
    DEFAULT_MAX_RUN_HISTORY,
    DEFAULT_STATE_DIR,
    check_agents,
    check_collaborators,
    clock_of,
    state_dir_of,
)
from herdsched.engine.committer import GroupCommitter
from herdsched.engine.core import AD_HOC_SCHEDULE, EngineCore
from herdsched.engine.dispatch import Dispatcher
from herdsched.engine.executors import ExecutorFactory
from herdsched.engine.planning import Entry
from herdsched.engine.recovery import DEFAULT_LEASE_TTL, Leadership
from herdsched.engine.reporting import (
    all_statuses,
    named_history,
    require_known,
    search_statuses,
)
from herdsched.engine.requests import stored_refusal
from herdsched.engine.settings import EngineSettings, resolve_poll_interval
from herdsched.engine.stopping import LINGER, run_of_this_thread, wait_for_runs
from herdsched.engine.syncing import OtherProcesses
from herdsched.engine.timer import Timer
from herdsched.errors import (
    InvalidScheduleError,
    SchedulerShutdownError,
    ScheduleTriggerError,
)
from herdsched.html import status_table
from herdsched.models import (
    Agent,
    CatchUp,
    JobFunc,
    RunRecord,
    RunStatus,
    Schedule,
    SchedulerState,
    SchedulerStatus,
    ScheduleType,
    SearchPage,
    SkipReason,
    Status,
    TriggerResult,
    TriggerType,
    check_count,
    check_flag,
    check_job_arguments,
    check_name_types,
    check_prompt_override,
    check_schedule_arguments,
    check_timeout,
)
from herdsched.notify import Notification
from herdsched.runner import GIVEN_UP, Run, timeout_message
from herdsched.stats import RunStats, compute_run_stats
from herdsched.stop_signals import run_until_stopped
from herdsched.store.base import READ_ALL_HISTORY, StateStore, call_if_offered
from herdsched.store.deadline import held
from herdsched.store.spec import default_store
from herdsched.store.usable import check_state_dir
from herdsched.worksource import WorkSource

__all__ = ["ThreadedScheduler"]

_F = TypeVar("_F", bound=Callable[..., Any])
_E = TypeVar("_E", bound=ev.Event)
_schedulers: weakref.WeakSet[ThreadedScheduler] = weakref.WeakSet()
#: Started schedulers, held while they run (as ``threading`` holds its threads): a script may
#: drop its last reference to one, and it must still be stopped at exit.
_started: set[ThreadedScheduler] = set()


def _commit_all_at_exit() -> None:
    for scheduler in list(_schedulers):
        scheduler._commits.commit()  # logs instead of raising


atexit.register(_commit_all_at_exit)


def before_pools_join(func: Callable[[], object]) -> None:
    """Call ``func`` as the interpreter exits, before ``concurrent.futures`` shuts its thread
    pools down and waits for their running jobs.

    That happens in a hook ``threading`` runs before ``atexit`` (it is not public, but it is
    what ``concurrent.futures`` itself uses), latest registered first, and the pools' hook is
    registered when ``ThreadPoolExecutor`` is first imported (by :mod:`herdsched.engine`, before
    this module calls here). Without it a scheduler's timer would go on claiming slots through
    the pools' shut-down window, each refused and recorded as missed, and a ``stop()`` made at
    ``atexit`` would come after the jobs it should wait for.
    """
    register = getattr(threading, "_register_atexit", None)
    (register or atexit.register)(func)


def _stop_all_at_exit() -> None:
    """Stop each scheduler still started when the interpreter exits: it dispatches nothing
    more, waits for its running jobs (as the pools' own hook would), records their outcomes and
    lets go of its lease."""
    for scheduler in list(_started):
        if scheduler.is_running():
            scheduler.log.info("The interpreter exits: the scheduler stops, waiting for its jobs.")
            try:
                scheduler.stop(wait_for_jobs=True, timeout=None)
            except Exception:
                scheduler.log.exception("The scheduler did not stop cleanly at exit.")


before_pools_join(_stop_all_at_exit)


class ThreadedScheduler:
    """A synchronous, threaded scheduler for a fleet of agents (see the module docstring).

    ``state_dir=None`` keeps state in memory only; otherwise state lives in
    ``state_dir/state.yaml`` and one scheduler per directory is active at a time (leader lock).
    ``executor_factory(agent, max_workers)`` may replace the per-agent thread pools with any
    :class:`concurrent.futures.Executor`.
    """

    def __init__(
        self,
        agents: Iterable[Agent] = (),
        *,
        state_dir: str | Path | None = DEFAULT_STATE_DIR,
        on_trigger: JobFunc | None = None,
        timezone: str | tzinfo | None = None,
        max_sleep: float = 60.0,
        min_interval: timedelta | float | str = 1,
        jitter_percent: float = 0,
        backoff: Sequence[timedelta | float | str] | None = None,
        max_consecutive_failures: int | None = 5,
        catch_up: CatchUp | str = CatchUp.ONCE,
        catch_up_window: timedelta | float | str | None = None,
        max_run_history: int = DEFAULT_MAX_RUN_HISTORY,
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
        executor_factory: ExecutorFactory | None = None,
        lease_ttl: float | None = None,
    ) -> None:
        check_collaborators(
            on_trigger=on_trigger,
            notifier=notifier,
            executor_factory=executor_factory,
            clock=clock,
            logger=logger,
            work_sources=work_sources,
            leader_lock=leader_lock,
        )
        agents = check_agents(agents)
        self.settings = EngineSettings(
            timezone=timezone,
            max_sleep=max_sleep,
            min_interval=min_interval,
            jitter_percent=jitter_percent,
            backoff=backoff,
            max_consecutive_failures=max_consecutive_failures,
            catch_up=catch_up,
            catch_up_window=catch_up_window,
            max_total_concurrent=max_total_concurrent,
            max_schedules_per_owner=max_schedules_per_owner,
            poll_interval=resolve_poll_interval(
                poll_interval, shared=state_dir is not None or store is not None
            ),
            commit_delay=commit_delay,
            lock_timeout=lock_timeout,
        )
        self.clock: Clock = clock_of(clock, store)
        self.log = logger or logging.getLogger("herdsched")
        self.state_dir = state_dir_of(state_dir, store, max_run_history, self.settings)
        self._owns_store = store is None
        if store is None:
            timing = (self.settings.lock_timeout, self.settings.commit_delay)
            store = default_store(self.state_dir, max_run_history, self.clock, *timing)
        self._core = EngineCore(
            self.settings,
            store,
            self.clock,
            self.log,
            on_trigger=on_trigger,
            work_sources=work_sources or {},
            notifier=notifier,
            executor_factory=executor_factory,
        )
        self._wire(leader_lock, lease_ttl)
        self._started_at: datetime | None = None
        _schedulers.add(self)
        for agent in agents:
            self.add_agent(agent)

    def _wire(self, leader_lock: bool, lease_ttl: float | None) -> None:
        """Build the engine's parts around the core: dispatch, commits, leadership, the timer
        (the lease's ttl: ``lease_ttl``, else the store's own, else the default)."""
        if lease_ttl is None:
            lease_ttl = getattr(self._core.store, "lease_ttl", None) or DEFAULT_LEASE_TTL
        self._dispatch = Dispatcher(self._core)
        self._commits = GroupCommitter(self._core)
        self._leadership = Leadership(self._core, enabled=leader_lock, ttl=lease_ttl)
        self._others = OtherProcesses(self._core, self._dispatch)
        self._changes = Changes(self._core, self.refresh)
        self._timer = Timer(
            self._core, self._dispatch, self._commits, self._leadership, self._others
        )

    # ---------------------------------------------------------------- settings, as before

    @property
    def store(self) -> StateStore:
        return self._core.store

    @property
    def timezone(self) -> tzinfo:
        return self.settings.timezone

    @property
    def max_sleep(self) -> float:
        return self.settings.max_sleep

    @property
    def poll_interval(self) -> float | None:
        return self.settings.poll_interval

    @property
    def notifier(self) -> Callable[[Notification], None] | None:
        return self._core.notifier

    @property
    def on_trigger(self) -> JobFunc | None:
        return self._core.on_trigger

    @on_trigger.setter
    def on_trigger(self, job: JobFunc | None) -> None:
        if job is not None and not callable(job):
            raise TypeError(
                f"on_trigger must be callable or None, got {type(job).__name__} {job!r}"
            )
        if job is not None:
            check_job_arguments(job, "on_trigger")
        core = self._core
        with core.lock:
            if job is None:
                registry.check_nothing_needs_on_trigger(core)
            core.on_trigger = job

    @property
    def work_sources(self) -> dict[str, WorkSource]:
        return self._core.work_sources

    # ------------------------------------------------------------------------ lifecycle

    @property
    def status(self) -> str:
        """``"stopped"``, ``"running"``, ``"stopping"`` or ``"standby"``."""
        return self._core.status

    def is_running(self) -> bool:
        """Whether the scheduler is started (active or standing by) and not stopping."""
        return self._core.status in ("running", "standby")

    @property
    def is_leader(self) -> bool:
        """Whether this scheduler is the active one for its state directory."""
        return self._core.leading

    def start(self) -> None:
        """Start the timer thread and return at once (idempotent).

        Becomes the active scheduler when the leader lock is free (running restart recovery
        first), otherwise stands by and takes over when the holder stops or dies. Raises
        :class:`~herdsched.errors.StateCorruptedError` when the state file became unusable since
        the store was opened (the constructor, which opens it, raises it for a file unusable
        from the start) and could not be restored, and :class:`~herdsched.errors.StateError`
        saying what to do when the state directory cannot be created or written.
        """
        core = self._core
        where = _location(self)
        if where is not None and self._leadership.enabled:
            handover.hand_over(where, self, self._timer.lead_soon)
        with core.lock:
            if core.status in ("running", "standby"):
                return
            if core.status == "stopping":
                raise SchedulerShutdownError("cannot start while stop() is in progress")
            if self.state_dir is not None and self._owns_store:
                check_state_dir(self.state_dir)
            # listening first: a database store then answers recovery's reads from its view
            call_if_offered(core.store, "watch", self._timer.changed_elsewhere)
            self._started_at = self.clock.now()
            core.status = "standby"
            try:
                core.store.refresh()
                core.unadopted = True  # what others changed since add_agent: at the next look
                leading = self._leadership.try_lead()
            except BaseException:
                core.status, self._started_at = "stopped", None
                call_if_offered(core.store, "unwatch")
                raise
            core.status = "running" if leading else "standby"
            _warn_of_twins(self, core.agents)
            _started.add(self)
            if not leading:
                self._leadership.log_standby(_location(self))
            core.wake.clear()
            self._timer.start()
            self._commits.start()
            core.emit(ev.SchedulerStarted(at=self.clock.now(), status=core.status))
        core.listeners.deliver()

    def stop(self, wait_for_jobs: bool = True, timeout: float | None = 30.0) -> None:
        """Stop dispatching, wait for running jobs (up to ``timeout`` real seconds), commit state.

        Nothing is dispatched once ``stop()`` has begun; running jobs are not cancelled (unless
        the lease is lost meanwhile: nothing could record them, and another scheduler may run
        their schedules), and the outcome of every job that returns before the end is recorded
        as it comes, within the commit delay. Jobs still running at the
        timeout are asked to stop through their cancel event (a command job's process group is
        ended, the lease kept until it has), since nothing will record them, and
        :class:`~herdsched.errors.SchedulerShutdownError` (``timed_out=True``) is raised. The
        scheduler is ``stopped`` either way; an interrupt while it waits (Ctrl-C) ends it as
        the timeout would, then goes on up. Idempotent, safe from a job or a listener.
        """
        check_flag(wait_for_jobs, "wait_for_jobs")
        self._stop(wait_for_jobs, check_timeout(timeout, "timeout"))

    def _stop_for_successor(self) -> None:
        """:meth:`stop` for a newer scheduler of this process taking over
        (:mod:`herdsched.handover`): its running jobs finish, however long; one past its
        timeout that ignores its cancel event is waited for :data:`LINGER` seconds more."""
        self._stop(True, None, linger=LINGER)

    def _stop(
        self, wait_for_jobs: bool, timeout: float | None, linger: float | None = None
    ) -> None:
        core = self._core
        with core.lock:
            if core.status in ("stopped", "stopping"):
                return
            if core.status == "standby":  # jobs of a lead it lost: it will not lead again to
                for run in core.running.values():  # record them, and another may run their
                    run.cancel()  # schedules (as a leader losing its lease while stopping)
            core.status = "stopping"
        core.changed()
        parts = (self._dispatch, self._leadership, self._commits)
        try:
            wait = timeout if wait_for_jobs else 0.0
            left = wait_for_runs(*parts, wait, cancel_left=wait_for_jobs, linger=linger)
        except BaseException:  # interrupted (Ctrl-C, a notebook's interrupt): wait no more
            left = wait_for_runs(*parts, 0.0, cancel_left=True, end_commands=False)
            self.log.warning("stop() was interrupted: it gave up %d running job(s).", len(left))
            self._stopped(timed_out=bool(left), remaining=len(left))
            raise
        remaining = len(left)
        timed_out = wait_for_jobs and remaining > 0
        self._stopped(timed_out, remaining)
        if timed_out:
            raise SchedulerShutdownError(
                f"stop() timed out after {timeout} s with {remaining} job(s) still running",
                timed_out=True,
                running_job_count=remaining,
                running_jobs=left,
            )

    def _stopped(self, timed_out: bool, remaining: int) -> None:
        """The end of ``stop()`` once it waits no more: commit, give up the lease, ``stopped``.
        An interrupt in one step (Ctrl-C while the commit waits) is raised after the others."""
        core = self._core
        # past the lease nothing can be written: a store that does not answer holds the last
        # commit and the release no longer than the lease has left
        with self._leadership.bounded():
            failed = _each(self._timer.join, self._commits.stop)
            with core.lock:
                core.clear_plan()
                core.status = "stopped"
                core.executors.shutdown()
                core.emit(
                    ev.SchedulerStopped(
                        at=self.clock.now(), timed_out=timed_out, running_job_count=remaining
                    )
                )
            release = self._leadership.release
            let_go = _each(release, lambda: call_if_offered(core.store, "unwatch"))
        failed = failed or let_go
        _started.discard(self)
        core.listeners.deliver()
        self.log.info("The scheduler stopped.")
        if failed is not None:
            raise failed

    def run_forever(self) -> None:
        """Start (if needed) and block until SIGINT, SIGTERM, SIGHUP or ``stop()``, then stop
        gracefully (the signals are answered off the main thread: see
        :mod:`herdsched.stop_signals`)."""
        run_until_stopped(self)

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

    # ------------------------------------------------------------------------ the fleet

    def add_agent(self, agent: Agent) -> None:
        """Register an agent and its schedules; persisted state of the same names is kept."""
        if not isinstance(agent, Agent):
            raise TypeError(f"add_agent() takes an Agent, got {type(agent).__name__}")
        core = self._core
        with core.changes, core.lock:
            if agent.name in core.agents:
                raise InvalidScheduleError(
                    f"agent {agent.name!r} is already registered; use set_agents() to replace it",
                    field="name",
                    value=agent.name,
                )
            registry.install_agent(core, agent)
        core.changed()
        _warn_of_twins(self, (agent.name,))

    def remove_agent(self, name: str) -> None:
        """Forget an agent, its schedules and their persisted state (running jobs finish).

        The state goes first: when the store cannot be written, ``StateError`` is raised and
        the agent stays registered."""
        core = self._core
        with core.changes, core.lock:
            core.require_agent(name)
            registry.forget_agent(core, name)
        core.changed()

    def set_agents(self, agents: Iterable[Agent]) -> None:
        """Replace the fleet (hot reload), keeping persisted state of every name that stays; all
        or nothing: a schedule that could not run here is refused, the fleet left as it was."""
        new = {agent.name: agent for agent in check_agents(agents)}
        core = self._core
        with core.changes, core.lock:
            for agent in new.values():
                registry.check_agent(core, agent)
            for name in list(core.agents):
                # an agent that stays keeps its ad hoc runs' entry; one that goes, every entry
                kept = [*new[name].schedules, AD_HOC_SCHEDULE] if name in new else []
                for schedule in [s for a, s in list(core.entries) if a == name]:
                    if schedule not in kept:
                        registry.retire_entry(core, name, schedule)
                if name not in new:
                    del core.agents[name]
                    core.executors.forget(name)
            for agent in new.values():
                registry.install_agent(core, agent)
        core.changed()
        _warn_of_twins(self, new)

    def add_schedule(
        self,
        agent: str,
        name: str,
        schedule: Schedule,
        *,
        persist: bool = False,
        owner: str | None = None,
    ) -> None:
        """Add a schedule at run time (``persist=True`` keeps it across restarts and shares it
        with every process on the store).

        Validated completely before anything is written (``InvalidScheduleError``), against
        ``min_interval`` and ``max_schedules_per_owner`` too; a new once schedule whose time has
        passed is refused. A name that is taken, here or (``persist=True``) by another process
        at the same moment, raises :class:`~herdsched.errors.ConflictError`. ``owner``: the
        owner adding it, whose schedule it becomes (one naming another owner is refused).
        """
        check_schedule_arguments(
            agent, name, schedule, owner=owner, persist=persist, need_schedule=True
        )
        self._changes.add_schedule(agent, name, schedule, persist=persist, owner=owner)

    def update_schedule(
        self,
        agent: str,
        name: str,
        *,
        owner: str | None = None,
        if_revision: str | None = None,
        **changes: Any,
    ) -> Schedule:
        """Change a schedule; a new cadence (``interval=``, ``cron=``, ``at=``, ``timezone=``,
        ``anchor=``...) recomputes its next run. Returns the new definition.

        A schedule created at run time with ``persist=True`` (or over REST) changes for every
        process; one defined in code or a fleet file changes in this process only (change the
        code or the file to change it everywhere). ``if_revision``: change it only if its
        definition still has that :func:`~herdsched.schedule_revision` in every process (``"*"``:
        if it still exists), else :class:`~herdsched.errors.RevisionMismatchError`, nothing
        written."""
        check_schedule_arguments(agent, name, owner=owner)
        return self._changes.update_schedule(agent, name, owner, changes, if_revision)

    def replace_schedule(
        self,
        agent: str,
        name: str,
        schedule: Schedule,
        *,
        owner: str | None = None,
        if_revision: str | None = None,
    ) -> Schedule:
        """Replace a schedule's whole definition (its job stays, and its owner unless the new
        one names one: an ``owner`` caller cannot name another); returns the new one. Unlike
        :meth:`update_schedule`, a stored definition is written as given, so a field another
        process changed meanwhile is not kept beside it (REST ``PUT``); ``if_revision`` as there."""
        check_schedule_arguments(agent, name, schedule, owner=owner, need_schedule=True)
        return self._changes.replace_schedule(agent, name, owner, schedule, if_revision)

    def remove_schedule(
        self, agent: str, name: str, *, owner: str | None = None, if_revision: str | None = None
    ) -> None:
        """Remove a schedule and its persisted state and definition (``if_revision`` as for
        :meth:`update_schedule`).

        Its run history stays (``history(agent, name)`` still shows it, bounded by
        ``max_run_history`` as before) until :meth:`purge_history` removes it. A schedule
        defined in code or a fleet file is removed from this process only.
        """
        self._changes.remove_schedule(agent, name, owner, if_revision)

    def pause(self, agent: str, schedule: str | None = None, *, owner: str | None = None) -> None:
        """Pause one schedule (or every schedule of the agent) for every process.

        Durable before it returns; when the store cannot be written, ``StateError`` is raised
        and that schedule did not change (an agent's schedules are paused one after another:
        the error names those paused before it; calling again finishes). A running job is not
        interrupted; a paused schedule can still be ``trigger()``-ed.
        """
        self._changes.pause(agent, schedule, owner)

    def resume(self, agent: str, schedule: str | None = None, *, owner: str | None = None) -> None:
        """Resume paused or auto-disabled schedules: status idle, failure count reset.

        A schedule whose due time passed while paused runs once right away (catch-up).
        """
        self._changes.resume(agent, schedule, owner)

    def every(
        self,
        interval: timedelta | float | str,
        *,
        agent: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> Callable[[_F], _F]:
        """Decorator: run the function every ``interval`` (measured from completion)."""
        return _register_as_job(self, Schedule.interval, interval, options, agent, name)

    def cron(
        self,
        expression: str,
        *,
        agent: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> Callable[[_F], _F]:
        """Decorator: run the function on a cron expression."""
        return _register_as_job(self, Schedule.cron, expression, options, agent, name)

    def once(
        self,
        at: datetime | str,
        *,
        agent: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> Callable[[_F], _F]:
        """Decorator: run the function once at ``at``."""
        return _register_as_job(self, Schedule.once, at, options, agent, name)

    # ----------------------------------------------------------------------------- runs

    def trigger(
        self,
        agent: str,
        schedule: str | None = None,
        *,
        prompt: str | None = None,
        wait: bool = False,
        bypass_concurrency: bool = False,
    ) -> TriggerResult:
        """Run a schedule now, through the agent's executor (works on paused schedules too).

        ``schedule=None`` runs the agent's job ad hoc (recorded as schedule ``manual``). On a
        standby scheduler the request is queued durably for the active one, which runs it under
        the returned ``run_id`` once the schedule and its agent are free (``wait`` does not
        apply). With ``wait=True`` the call returns when the run has finished and ``success``
        says whether it succeeded.
        """
        check_prompt_override(prompt)
        check_flag(wait, "wait")
        check_flag(bypass_concurrency, "bypass_concurrency")
        core = self._core
        with core.lock:
            agent_obj = core.require_agent(agent)
            if schedule is not None:
                core.require_entry(agent, schedule)
            if core.status == "standby":
                name = schedule or AD_HOC_SCHEDULE
                return _request(core, agent_obj, name, prompt, bypass_concurrency)
            if not core.leading:
                return _skipped(
                    SkipReason.STOPPING, f"scheduler is {core.status}: nothing is dispatched"
                )
            named = core.entries[(agent, schedule)] if schedule is not None else None
            _require_job(core, agent_obj, named)  # before an ad hoc entry's state is written
            entry = named if named is not None else registry.ad_hoc_entry(core, agent_obj)
            if entry.run is not None:
                return _skipped(SkipReason.ALREADY_RUNNING, f"{agent}/{entry.name} is running")
            full = core.capacity.why_full(agent, agent_obj.max_concurrent)
            if full is not None and not bypass_concurrency:
                return _skipped(SkipReason.AT_CAPACITY, full)
            run = self._dispatch.prepare(
                entry, TriggerType.MANUAL, None, self.clock.now(), prompt=prompt
            )
        if run.deadline is not None:  # before its JobSubmitted listeners, which may be slow
            core.wake.set()  # the timer may sleep past the timeout it is to enforce
        self._dispatch.launch([run], bypass=bypass_concurrency)
        with core.idle:  # a run has ended once it gave its slot back (its claim failed, say)
            if not wait and run.run_id in core.running:
                return TriggerResult(success=True, run_id=run.run_id)
            core.idle.wait_for(lambda: run.run_id not in core.running or _recorded_timeout(run))
        return _finished(run)

    def get_running_job_count(self, agent: str) -> int:
        """Jobs of ``agent`` running now."""
        with self._core.lock:
            self._core.require_agent(agent)
            return self._core.capacity.running(agent)

    def get_total_running_job_count(self) -> int:
        """Jobs of every agent running now."""
        with self._core.lock:
            return self._core.capacity.total

    def get_agent(self, name: str) -> Agent:
        """The registered agent called ``name`` (:class:`AgentNotFoundError` when unknown)."""
        with self._core.lock:
            return self._core.require_agent(name)

    def get_schedule(self, agent: str, name: str) -> Schedule:
        """The current definition of one schedule (:class:`ScheduleNotFoundError` if none)."""
        self.refresh()
        with held(self._core.lock, f"read the schedule {agent}/{name}"):
            return self._core.require_entry(agent, name).schedule

    def history(self, agent: str, schedule: str | None = None, limit: int = 20) -> list[RunRecord]:
        """Run records newest first (bounded per schedule by ``max_run_history``).

        Run-now requests queued through another process come first, as ``queued`` until the
        active scheduler starts them and ``running`` until their record is stored."""
        check_count(limit, "limit", minimum=1)
        return named_history(self._core, agent, schedule, limit)

    def purge_history(self, agent: str, schedule: str) -> None:
        """Delete the run history of one schedule, removed or not (durable when it returns). A
        name nobody knows and no history holds is refused, as by :meth:`history`: a mistyped
        one would purge nothing without a word."""
        check_name_types(agent, schedule, needed=True)
        if not self.store.get_history(agent, schedule, limit=1):
            require_known(self._core, agent, schedule)
        self.store.purge_history(agent, schedule)

    def run_stats(
        self, agent: str, schedule: str | None = None, since: datetime | None = None
    ) -> RunStats:
        """Counts by status, success rate, mean and p95 duration, last success and failure."""
        check_name_types(agent, schedule)
        records = self.store.get_history(agent, schedule, limit=READ_ALL_HISTORY)
        if not records:  # a mistyped name is told, not answered with empty counts
            require_known(self._core, agent, schedule)
        return compute_run_stats(records, since=since)

    def wait_until_idle(self, timeout: float | None = None) -> bool:
        """Block until no job runs and none waits for capacity (``timeout`` in real seconds).

        Called from a run's own thread (its job, a listener of its events, its notifier) it
        raises ``RuntimeError`` at once, as ``Thread.join()`` does for its own thread: the
        run could not end while the call waited for it."""
        timeout = check_timeout(timeout, "timeout")
        core = self._core
        with core.idle:
            own = run_of_this_thread(self._dispatch)
            if own is not None:
                raise RuntimeError(
                    f"wait_until_idle() was called by run {own.run_id} of {own.agent}/"
                    f"{own.schedule_name} (its job, a listener or its notifier), and would "
                    "wait for that run, which cannot end while it waits"
                )
            return core.idle.wait_for(
                lambda: not core.running and not core.plan.anything_waiting, timeout
            )

    def add_listener(self, callback: Callable[[_E], None], *event_types: type[_E]) -> None:
        """Call ``callback(event)`` for events of ``event_types`` (all events when none given).

        Listeners are called on the thread that delivers, never under the scheduler's lock, in
        the order the events happened; they may call any method of the scheduler."""
        self._core.listeners.add(callback, event_types)

    def remove_listener(self, callback: Callable[..., None]) -> None:
        self._core.listeners.remove(callback)

    # ------------------------------------------------------------------------ reporting

    def get_state(self) -> SchedulerState:
        return SchedulerState(
            status=self.status,
            started_at=self._started_at,
            check_count=self._timer.check_count,
            trigger_count=self._core.trigger_count,
            last_check_at=self._timer.last_check_at,
        )

    def get_status(self) -> SchedulerStatus:
        """Every schedule's status, next/last run and the reason it is not firing now."""
        core = self._core
        self.refresh()
        rejected = core.store_call(core.store.rejected_definitions) or []
        leader = self._leadership.holder()  # not under the lock: the store may be slow to answer
        core.listeners.deliver()  # a store error's event, collected by either read
        with held(core.lock, "read the schedules' status"):
            now = self.clock.now()
            items = all_statuses(core, now, leader)
            return SchedulerStatus(
                running=self.is_running(),
                active_jobs=core.capacity.total,
                schedules=items,
                status=core.status,
                leader=leader,
                rejected=rejected,
            )

    def refresh(self) -> None:
        """Take in now what other processes wrote to the store (pauses, resumes, definitions).

        The timer does this every ``poll_interval``; :meth:`get_status`, :meth:`get_schedule`
        and the REST API call it before they answer, so every process answers what any wrote.
        """
        # a standby always looks; a leader when its store may be shared (polling is on)
        if self.settings.poll_interval is not None or not self._core.leading:
            self._others.adopt(look=True)
            self._core.listeners.deliver()  # what the look collected (a store error's event)

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
        return search_statuses(
            self.get_status().schedules,
            owner=owner,
            name_contains=name_contains,
            status=status,
            cadence_type=cadence_type,
            limit=limit,
            offset=offset,
        )

    def _repr_html_(self) -> str:
        return status_table(self.get_status(), self._core.store_health.trouble())

    def __repr__(self) -> str:
        core = self._core
        return (
            f"<ThreadedScheduler {core.status} agents={len(core.agents)} "
            f"schedules={len(core.entries)} running={core.capacity.total}>"
        )

    # ------------------------------------------------------------------------ the timer

    def run_pending(self) -> None:
        """One timer pass on the calling thread: fire what is due (for FakeClock tests).

        Jobs still run on the executors; use :meth:`wait_until_idle` to wait for them. A group
        commit that is due happens on the calling thread too, so tests see it at once. On a
        scheduler never started it is an error (it would fire nothing); after ``stop()`` it
        fires nothing, as nothing is dispatched once the stop began.
        """
        if self._started_at is None:
            raise SchedulerShutdownError(
                "run_pending() fires nothing on a scheduler never started: call start() first"
            )
        self._timer.run_pass(timer_thread=False)


def _register_as_job(
    scheduler: ThreadedScheduler,
    build: Callable[..., Schedule],
    cadence: object,
    options: dict[str, Any],
    agent: str | None,
    name: str | None,
) -> Callable[[_F], _F]:
    """The decorators' body: the function becomes the schedule ``build(cadence, **options)``
    makes, its agent made if new; a schedule the scheduler refuses leaves no agent behind (one
    did, and a later ``add_agent`` of that name was refused as already registered)."""
    if callable(cadence):  # @sched.every written without its call: the function came first
        raise InvalidScheduleError(
            f'the decorator takes the cadence first (@sched.every("5m"), @sched.cron("0 9 * '
            f'* *"), @sched.once("2027-12-01T09:00:00Z")), got the function {cadence!r}',
            value=cadence,
        )
    schedule = build(cadence, **options)

    def register(func: _F) -> _F:
        # an empty name is refused by the checks, not replaced: it is more often an unset
        # variable than a choice
        schedule_name = name if name is not None else registry.name_after(func, agent)
        agent_name = agent if agent is not None else schedule_name
        core = scheduler._core
        with core.lock:
            made = agent_name not in core.agents
            if made:
                registry.install_agent(core, Agent(agent_name))
        try:
            scheduler.add_schedule(agent_name, schedule_name, schedule.with_changes(job=func))
        except BaseException:
            if made:  # in memory only: schedules stored for that name belong to other processes
                with core.changes, core.lock:
                    for stored in list(core.agents[agent_name].schedules):
                        registry.drop_entry(core, agent_name, stored)
                    del core.agents[agent_name]
            raise
        return func

    return register


def _each(*steps: Callable[[], object]) -> BaseException | None:
    """Run every step even when one raises (an interrupt); returns the first exception."""
    first: BaseException | None = None
    for step in steps:
        try:
            step()
        except BaseException as exc:
            first = first or exc
    return first


def _skipped(reason: SkipReason, error: str) -> TriggerResult:
    return TriggerResult(success=False, error=error, skipped=True, skip_reason=reason)


def _request(
    core: EngineCore, agent: Agent, name: str, prompt: str | None, bypass: bool
) -> TriggerResult:
    """``trigger()`` on a standby: queued durably for the active scheduler, unless the
    stored state refuses it now (the schedule running, the agent full)."""
    refused = stored_refusal(core.store, agent, name, bypass_concurrency=bypass)
    if refused is not None:
        return _skipped(*refused)
    run_id = core.store.request_trigger(agent.name, name, prompt=prompt)
    return TriggerResult(success=True, run_id=run_id)


def _location(sched: ThreadedScheduler) -> Path | str | None:
    """Where ``sched``'s state lives: its state directory, or the location of the store it
    was given (a database names itself; a YAML store its directory)."""
    if sched._owns_store:
        return sched.state_dir
    store = sched.store
    location = getattr(store, "location", None) or getattr(store, "state_dir", None)
    return location if isinstance(location, (str, Path)) else None


def _warn_of_twins(new: ThreadedScheduler, agents: Iterable[str]) -> None:
    """Warn when ``new``, running, runs ``agents`` (at its start: all of them; later: those
    added) of which another scheduler of this process runs one with its state elsewhere (or in
    memory): the hand-over goes by state directory, so nothing hands over between the two and
    both fire their schedules, as notebook cells run again with ``state_dir`` edited make them.
    """
    where = _location(new)
    if not new.is_running() or handover.imitating_processes():
        return
    names = set(agents)
    for other in list(_started):
        there = _location(other)
        if (
            other is new
            or not other.is_running()
            or other._core.store is new._core.store  # one store object: the lease decides
            or (where is not None and there == where)  # the hand-over stops the older one
        ):
            continue
        shared = sorted(names & set(other._core.agents))
        if shared:
            new.log.warning(
                "Another scheduler in this process (%s) runs agent(s) %s too: nothing hands "
                "over between schedulers whose state is in different places, so both fire "
                "their schedules. Stop the older one (stop()), or give both the same state_dir: "
                "then the newer one takes over.",
                "state in memory" if there is None else f"state in {there}",
                ", ".join(repr(name) for name in shared),
            )
            return


def _require_job(core: EngineCore, agent: Agent, named: Entry | None) -> None:
    """Refuse a run-now of a schedule (``named``) or agent (``None``: ad hoc) with no job."""
    if (core.job_for(named) if named is not None else agent.job or core.on_trigger) is None:
        schedule = None if named is None else named.name
        raise ScheduleTriggerError(
            f"{agent.name}/{schedule or AD_HOC_SCHEDULE} has no job: give the agent or schedule "
            "a job",
            agent.name,
            schedule,
        )


def _recorded_timeout(run: Run) -> bool:
    """Whether ``run`` timed out and its settling is over (caller holds the lock): its record
    is written while a job ignoring its cancel event may go on for long."""
    return run.timed_out and run.finalized and run.settled_by is None


def _finished(run: Run) -> TriggerResult:
    """What ``trigger(wait=True)`` answers about a run that has ended: its record's outcome."""
    outcome = run.outcome
    if run.given_up or run.written_off:  # by a stop, by a lost lead: its outcome is not its own
        why = (
            f"{GIVEN_UP} before it ended"
            if run.given_up
            else f"{run.written_off} before the run ended"
        )
        return TriggerResult(success=False, run_id=run.run_id, error=f"{why}: {_UNRECORDED}")
    if outcome is not None and outcome.no_work and not run.timed_out:
        return TriggerResult(False, run.run_id, _NO_WORK, True, SkipReason.NO_WORK)
    ok = outcome is not None and outcome.status is RunStatus.SUCCESS and not run.timed_out
    error = None if ok else (outcome.error if outcome else "run did not finish")
    if run.timed_out:
        error = timeout_message(run.schedule.timeout)
    return TriggerResult(success=ok, run_id=run.run_id, error=error)


_UNRECORDED = "its outcome is not recorded"
_NO_WORK = "its work source had no work"
