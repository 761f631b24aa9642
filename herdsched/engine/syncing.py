"""Other processes: what they wrote to the store, and the "run now" requests they queued.

A CLI, a web worker or another scheduler may pause, resume or create schedules and queue runs
while this scheduler leads. The timer polls the store every ``poll_interval``: changed statuses
and definitions are applied here, and queued run-now requests are served by
:class:`~herdsched.engine.requests.RunRequests` (each runs under the run id it was given when
accepted). A standby refreshes its view before answering status questions.
"""

from __future__ import annotations

import logging
from typing import Any

from attrs import evolve

from herdsched.engine.core import EngineCore
from herdsched.engine.dispatch import Dispatcher
from herdsched.engine.planning import Entry
from herdsched.engine.recovery import plan_resumed, resets_backoff, show_running
from herdsched.engine.registry import drop_entry, install_entry, stored_definitions
from herdsched.engine.requests import RunRequests
from herdsched.errors import StateError
from herdsched.models import Status
from herdsched.store.base import call_if_offered, remove_state_unless_defined
from herdsched.store.deadline import Deadline, current_deadline, held

__all__ = ["OtherProcesses"]


class OtherProcesses:
    """Applies what other processes wrote, and runs the requests they queued."""

    def __init__(self, core: EngineCore, dispatch: Dispatcher) -> None:
        self.core = core
        self.requests = RunRequests(core, dispatch)
        self._looked_for: Deadline | None = None  # the request whose calls looked already

    def poll(self) -> None:
        """The active scheduler's poll: apply changes, then run queued requests."""
        self.adopt()
        self.requests.serve()

    def adopt(self, *, look: bool = False) -> None:
        """Take in what other processes wrote since the last look: a leader applies pauses,
        resumes and definitions to its plan, a standby takes the store as it is. Called by the
        poll and before a user is answered (``look``: past a database store's listener, so a
        change made a moment ago through another process is in the answer)."""
        core = self.core
        if not core.leading:
            self.refresh_view(look=look)
            return
        with held(core.changes, "take in what other processes wrote"):
            try:
                if look:
                    self._look()
                changed = core.store.refresh()
            except Exception as exc:  # the leader answers from what it holds
                core.state_error(exc)
                return
            unadopted, core.unadopted = core.unadopted, False
            interrupted, core.change_interrupted = core.change_interrupted, False
            if changed or interrupted:
                core.store_call(core.store.flush)  # ours first: the store is then the truth
                self._apply_status_changes()
            if changed or unadopted:  # recovery planned from the stored states already
                self._apply_definitions()

    def refresh_view(self, *, look: bool = False) -> None:
        """A standby's refresh: take every state and definition from the store as it is.

        All under ``changes``: the store's refresh reports a change once, so a second caller
        (a web request while the timer polls) that found nothing new must wait until the
        first has applied what it found, or it would answer from the view before it."""
        core = self.core
        with held(core.changes, "take in what other processes wrote"):
            try:
                if look:
                    self._look()
                if not (core.store.refresh() or core.unadopted):
                    return
                core.unadopted = False
                self._apply_definitions()
                with core.lock:
                    for entry in core.entries.values():
                        entry.state = core.store.get_schedule_state(entry.agent, entry.name)
            except Exception as exc:
                core.state_error(exc)
                _raise_for_a_request(exc, look)

    def _look(self) -> None:
        """Look past a database store's listener (``look_now``), once per REST request: its
        calls share one deadline, and its first look saw every change committed before the
        request began (a page of 50 schedules asks once, not 50 times)."""
        deadline = current_deadline()
        if deadline is None or deadline is not self._looked_for:
            call_if_offered(self.core.store, "look_now")
            self._looked_for = deadline

    def _apply_status_changes(self) -> None:
        """Apply pauses, resumes and disables written by other processes; a resume of a
        schedule still idle in its failure backoff shows as its failure count reset."""
        core = self.core
        now = core.clock.now()
        with core.lock:
            for entry in core.entries.values():
                stored = core.store.get_schedule_state(entry.agent, entry.name)
                reset = stored.consecutive_failures == 0 < entry.state.consecutive_failures
                if (stored.status == entry.state.status and not reset) or (
                    stored.status is Status.RUNNING
                ):
                    continue
                if entry.state.status is Status.RUNNING and stored.status is Status.IDLE:
                    continue  # our own transition not yet committed
                core.log.info(
                    "%s/%s was changed by another process from %s to %s%s.",
                    entry.agent,
                    entry.name,
                    entry.state.status,
                    stored.status,
                    " (its failures reset)" if reset else "",
                )
                backed_off = resets_backoff(entry.state, stored.consecutive_failures)
                entry.state = evolve(
                    entry.state,
                    status=stored.status,
                    consecutive_failures=stored.consecutive_failures,
                    disabled_reason=stored.disabled_reason,
                )
                if not entry.planned_by_its_run:
                    plan_resumed(core, entry, now, backed_off=backed_off)
                elif stored.status is Status.IDLE:
                    show_running(core, entry)

    def _apply_definitions(self) -> None:
        """Apply what another process did to the run-time definitions: drop, add, change."""
        core = self.core
        try:
            stored = core.store.load_definitions()
        except Exception as exc:
            core.state_error(exc)
            return
        with core.lock:
            for agent_name in list(core.agents):
                self._apply_agent_definitions(agent_name, stored.get(agent_name, {}))

    def _apply_agent_definitions(self, agent_name: str, kept: dict[str, Any]) -> None:
        core = self.core
        # the leader, which plans the change, tells it; a standby's view follows quietly (every
        # worker of every host telling each REST write was a line per worker per write)
        tell = logging.INFO if core.leading else logging.DEBUG
        gone = [
            entry.name
            for entry in core.entries.values()
            if entry.agent == agent_name and entry.persisted_definition and entry.name not in kept
        ]
        for schedule_name in gone:
            drop_entry(core, agent_name, schedule_name)
            core.agents[agent_name] = core.agents[agent_name].without_schedule(schedule_name)
            if core.leading:  # the state a commit of ours wrote after the removal goes too,
                # not the state of a namesake created since
                core.store_call(remove_state_unless_defined, core.store, agent_name, schedule_name)
        for schedule_name, schedule in stored_definitions(core, agent_name).items():
            entry = core.entries.get((agent_name, schedule_name))
            if entry is not None and not entry.persisted_definition:
                continue  # a code or fleet-file schedule wins over a stored one
            if entry is not None and _replaced(core, entry):
                core.log.log(
                    tell,
                    "%s/%s was removed and created again in another process: a new schedule "
                    "(a run of the removed one still going on here is recorded as its own).",
                    agent_name,
                    schedule_name,
                )
                drop_entry(core, agent_name, schedule_name)
            elif entry is not None and entry.schedule == schedule:
                continue
            else:
                core.log.log(
                    tell,
                    "The definition of %s/%s changed in another process.",
                    agent_name,
                    schedule_name,
                )
            agent = core.agents[agent_name].with_schedule(schedule_name, schedule)
            core.agents[agent_name] = agent
            install_entry(
                core, agent, schedule_name, schedule, persisted=True, changed_at_run_time=True
            )


def _replaced(core: EngineCore, entry: Entry) -> bool:
    """Whether another process removed ``entry``'s schedule and created a namesake since this
    leader last looked: the stored state is fresh, though this process knew a run of it. Its
    own transitions show in its store's view (pending, or in a commit under way) until a
    removal elsewhere drops them. A run already settled (a timed-out job that goes on) keeps
    its entry: its outcome is written, and its job's return plans the schedule."""
    run = entry.run
    if not core.leading or entry.state.last_run_at is None or (run and run.finalized):
        return False
    return core.store.get_schedule_state(entry.agent, entry.name).last_run_at is None


def _raise_for_a_request(exc: Exception, look: bool) -> None:
    """A look for a request (the REST API, the status page: under their deadline) that the
    store refused is the request's answer (503) in a process that does not lead: its view, as
    last read, may be from before an outage and the leader's runs and changes. (The leader
    answers from what it holds, the runs it makes.) A call of the Python API answers from the
    view, as the timer does, and the failure is told as every store failure is."""
    if look and isinstance(exc, StateError) and current_deadline() is not None:
        raise exc
