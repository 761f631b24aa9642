"""Run-now requests queued by other processes, run by the active scheduler under their own ids.

A standby scheduler, a web worker or the CLI queues a request in the store
(:meth:`~herdsched.store.base.StateStore.request_trigger`) and answers with the run id the
request got there. The active scheduler, on each poll of other processes:

1. settles the requests whose runs it finished: once their records are durable in history
   (a flush), their requests are removed;
2. starts each waiting request whose schedule is free and whose agent has a slot, under the
   request's run id; the request is marked started (durably) before its job can run. A request
   whose schedule is running, or whose agent or the fleet is at capacity, keeps waiting, in the
   order the requests came, and starts at the first poll after a slot frees;
3. records as ``skipped``, with the reason, a request that cannot run at all (its agent or
   schedule was removed, or nothing can run it), and removes it;
4. records as ``interrupted`` a request marked started by a scheduler that stopped before its
   run was recorded: its job may have run, so it never runs a second time.

No request vanishes: it stays in the store from its acceptance until its outcome is durable.
"""

from __future__ import annotations

import threading
from datetime import datetime

from herdsched.engine.core import AD_HOC_SCHEDULE, EngineCore
from herdsched.engine.dispatch import Dispatcher
from herdsched.engine.planning import Entry
from herdsched.engine.registry import ad_hoc_entry
from herdsched.errors import LeadershipLostError
from herdsched.models import Agent, RunRecord, RunStatus, SkipReason, Status, TriggerType
from herdsched.runner import Run
from herdsched.store.base import READ_ALL_HISTORY, StateStore, TriggerRequest

__all__ = ["RunRequests", "stored_refusal"]


def stored_refusal(
    store: StateStore, agent: Agent, schedule: str, *, bypass_concurrency: bool = False
) -> tuple[SkipReason, str] | None:
    """Why the active scheduler would refuse a run-now of ``agent``/``schedule`` now, judged
    from the store by a process that does not run jobs (a standby, a web worker), so that a
    run-now gets one answer whichever process it reaches: the schedule shows running, or the
    agent has ``max_concurrent`` runs going on. ``None``: the request is queued. A run that
    started within the leader's last ``commit_delay`` is not in the store yet; a request made
    then waits and runs after it."""
    states = {
        name: state
        for name, state in store.get_agent_schedule_states(agent.name).items()
        if state.removed_at is None
    }
    state = states.get(schedule)
    if state is not None and state.status is Status.RUNNING:
        return SkipReason.ALREADY_RUNNING, f"{agent.name}/{schedule} is already running"
    busy = sum(1 for other in states.values() if other.status is Status.RUNNING)
    if busy >= agent.max_concurrent and not bypass_concurrency:
        limit = agent.max_concurrent
        return (
            SkipReason.AT_CAPACITY,
            f"agent {agent.name!r} is at capacity ({busy} of {limit} running)",
        )
    return None


class RunRequests:
    """The active scheduler's side of run-now requests (see the module docstring)."""

    def __init__(self, core: EngineCore, dispatch: Dispatcher) -> None:
        self.core = core
        self.dispatch = dispatch
        self._active: set[str] = set()  # the run ids of requests started here
        self._waiting: set[str] = set()  # requests already logged as waiting
        # one serve at a time (the timer thread, run_pending()): each reads the requests afresh,
        # so none acts on a request another has started or settled meanwhile
        self._serving = threading.Lock()

    def serve(self) -> None:
        """One poll's work on the stored requests, oldest first."""
        with self._serving:
            self._settle_finished()
            try:
                requests = self.core.store.trigger_requests()
            except Exception as exc:
                self.core.state_error(exc)
                return
            self._serve(requests)

    def _serve(self, requests: list[TriggerRequest]) -> None:
        # what an earlier request of this pass waits for (its schedule, its agent, the fleet):
        # later requests for the same wait too, even if a run ends meanwhile and frees it, so
        # requests start in the order they came
        blocked: set[tuple[str | None, str | None]] = set()
        for request in requests:
            if request.run_id in self._active:
                continue
            if request.started_at is not None:
                self._close_orphan(request)
            elif not self._try_start(request, blocked):
                return  # the store refused to mark it started: later ones wait their turn

    def _settle_finished(self) -> None:
        """Remove the requests whose runs ended here, once their records are durable."""
        core = self.core
        done = [run_id for run_id in self._active if run_id not in core.running]
        if not done:
            return
        try:
            core.store.flush()
            for run_id in done:
                core.store.settle_trigger_request(run_id)
                self._active.remove(run_id)
        except Exception as exc:  # retried on the next poll
            core.state_error(exc)

    def _try_start(
        self, request: TriggerRequest, blocked: set[tuple[str | None, str | None]]
    ) -> bool:
        """Start ``request``'s run if its schedule and agent are free and no earlier request
        waits for them (``blocked``, updated here); record it skipped if it can never run;
        otherwise leave it waiting. ``False`` when it could not be marked started (the store
        failed): it is retried on the next poll, before any later one."""
        core = self.core
        with core.lock:
            if not core.leading:
                return True
            entry, problem = self._entry_for(request)
            if entry is None:
                run = None
            elif self._must_wait(entry, blocked):
                self._note_waiting(request, entry)
                return True
            else:
                run = self._prepare(request, entry)
                if run is None:
                    return False
        if run is None:
            self._skip(request, problem)
            return True
        self._waiting.discard(request.run_id)
        self.dispatch.launch([run])
        core.log.info(
            "The run-now request for %s/%s started as run %s.",
            request.agent,
            request.schedule,
            run.run_id,
        )
        return True

    def _entry_for(self, request: TriggerRequest) -> tuple[Entry | None, str]:
        """The entry ``request`` runs, or ``None`` and why it cannot run (caller holds the
        lock)."""
        core = self.core
        agent = core.agents.get(request.agent)
        if agent is None:
            return None, f"removed: agent {request.agent!r} no longer exists"
        entry = core.entries.get((request.agent, request.schedule))
        if entry is None and request.schedule == AD_HOC_SCHEDULE:
            entry = ad_hoc_entry(core, agent)
        if entry is None:
            return None, f"removed: {request.agent}/{request.schedule} no longer exists"
        if core.job_for(entry) is None:
            return None, f"no job: {request.agent}/{request.schedule} has nothing to run"
        return entry, ""

    def _must_wait(self, entry: Entry, blocked: set[tuple[str | None, str | None]]) -> bool:
        """Whether a request for ``entry`` waits: for its running schedule, for a slot, or
        behind an earlier request waiting for either; if so, later requests for the same
        schedule, agent or fleet wait behind it (caller holds the lock)."""
        core = self.core
        agent = core.agents[entry.agent]
        keys = {(entry.agent, entry.name), (entry.agent, None), (None, None)}
        if entry.run is None and not core.is_full(agent) and not keys & blocked:
            return False
        blocked.add((entry.agent, entry.name))
        if core.capacity.running(agent.name) >= agent.max_concurrent:
            blocked.add((agent.name, None))
        if core.capacity.fleet_is_full():  # both may hold: each frees on its own
            blocked.add((None, None))
        return True

    def _prepare(self, request: TriggerRequest, entry: Entry) -> Run | None:
        """Mark ``request`` started durably, then take its slot (caller holds the lock)."""
        core = self.core
        now = core.clock.now()
        try:
            core.store.mark_trigger_started(request.run_id, now)
        except Exception as exc:
            core.state_error(exc, entry)
            return None
        run = self.dispatch.prepare(
            entry, TriggerType.MANUAL, None, now, prompt=request.prompt, run_id=request.run_id
        )
        self._active.add(run.run_id)
        return run

    def _note_waiting(self, request: TriggerRequest, entry: Entry) -> None:
        """Log once that ``request`` waits for its schedule or a slot (caller holds the
        lock)."""
        if request.run_id in self._waiting:
            return
        self._waiting.add(request.run_id)
        limit = self.core.agents[entry.agent].max_concurrent
        full = self.core.capacity.why_full(entry.agent, limit)
        if entry.run is not None:
            why = "its schedule is running"
        else:
            why = full or "an earlier request waits for the same schedule or slot"
        self.core.log.info(
            "The run-now request %s for %s/%s waits: %s.",
            request.run_id,
            request.agent,
            request.schedule,
            why,
        )

    def _skip(self, request: TriggerRequest, reason: str) -> None:
        """Record ``request`` as skipped with ``reason``, durably, then remove it."""
        self.core.log.warning(
            "The run-now request %s for %s/%s is skipped: %s.",
            request.run_id,
            request.agent,
            request.schedule,
            reason,
        )
        self._record(request, RunStatus.SKIPPED, reason, started_at=None)

    def _close_orphan(self, request: TriggerRequest) -> None:
        """A request started by a scheduler that stopped: settle it if its run is recorded,
        otherwise record it interrupted (its job may have run: it never runs again)."""
        core = self.core
        try:
            records = core.store.get_history(request.agent, request.schedule, READ_ALL_HISTORY)
        except Exception as exc:
            core.state_error(exc)
            return
        if any(record.run_id == request.run_id for record in records):
            try:  # the record may wait for a commit: durable first, then the request goes
                core.store.flush()
            except Exception as exc:
                core.state_error(exc)
                return
            self._settle(request)
            return
        recorded = self._record(
            request,
            RunStatus.INTERRUPTED,
            "the scheduler that started this run stopped before the run was recorded",
            started_at=request.started_at,
        )
        if recorded:  # not when the write was refused: a leader that lost its lead says nothing
            core.log.warning(
                "The run-now request %s for %s/%s was started by a scheduler that stopped "
                "before it was recorded; it is recorded as interrupted and not run again.",
                request.run_id,
                request.agent,
                request.schedule,
            )

    def _record(
        self,
        request: TriggerRequest,
        status: RunStatus,
        error: str,
        *,
        started_at: datetime | None,
    ) -> bool:
        """Append ``request``'s final record, make it durable, then remove the request;
        whether it was recorded, or held for the next commit (not when the lease went)."""
        core = self.core
        record = RunRecord(
            run_id=request.run_id,
            agent=request.agent,
            schedule=request.schedule,
            trigger_type=TriggerType.MANUAL,
            started_at=started_at,
            # when an interrupted run stopped is not known: its duration is not made up
            finished_at=None if status is RunStatus.INTERRUPTED else core.clock.now(),
            status=status,
            error=error,
        )
        try:
            core.store.append_run(record)
        except Exception as exc:  # the request stays stored: retried on the next poll
            core.state_error(exc)
            return False
        try:
            core.store.flush()
        except Exception as exc:  # the record waits for a commit; the request stays until then
            core.state_error(exc)
            return not isinstance(exc, LeadershipLostError)  # unless it went with the lease
        self._settle(request)
        return True

    def _settle(self, request: TriggerRequest) -> None:
        self._waiting.discard(request.run_id)
        try:
            self.core.store.settle_trigger_request(request.run_id)
        except Exception as exc:
            self.core.state_error(exc)
