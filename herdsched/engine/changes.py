"""Changes by people are transactions: validated, then written to the store, then to memory.

Every add, update, remove, pause and resume, from the Python API, REST or the CLI, in any
process, goes the same way:

1. it is validated completely (types, names, cadence, owner, limits) before anything is written;
2. one locked store write checks its preconditions against what every process wrote (the name is
   still free, the definition still exists, the caller still owns it) and writes the change:
   a lost race is a :class:`~herdsched.errors.ConflictError` (or ``ScheduleNotFoundError``,
   ``UnauthorizedError``), a store that fails is a ``StateError``, and either way nothing is
   left behind;
3. only then does memory (the fleet, the plan) change.

The changes of one process are serialized by :attr:`EngineCore.changes`, which the adoption of
other processes' writes (:mod:`herdsched.engine.syncing`) takes too, so memory and disk cannot
disagree about a schedule. Run transitions (a job finished) are not changes by people: they go
through the group commit and never undo a pause (see :mod:`herdsched.store.base`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from attrs import evolve

import herdsched.events as ev
from herdsched.definitions import schedule_to_mapping
from herdsched.engine import registry
from herdsched.engine.core import EngineCore
from herdsched.engine.planning import Entry, fresh_due
from herdsched.engine.recovery import (
    cadence_plan,
    plan_resumed,
    resets_backoff,
    show_running,
)
from herdsched.errors import ConflictError, StateError, UnauthorizedError
from herdsched.models import Schedule, Status, check_schedule_arguments
from herdsched.revisions import check_revision, schedule_revision, stored_revision_check
from herdsched.store.base import Precondition, remove_state_unless_defined

__all__ = ["Changes"]


class Changes:
    """The fleet's changes as transactions (see the module docstring)."""

    def __init__(self, core: EngineCore, adopt: Callable[[], None]) -> None:
        self.core = core
        # takes in what other processes wrote, so that a change is checked against it (a
        # standby's view is not kept up to date between changes)
        self.adopt = adopt

    def add_schedule(
        self, agent: str, name: str, schedule: Schedule, *, persist: bool, owner: str | None
    ) -> None:
        """Add one schedule; ``persist`` creates its definition in the store (compare-and-set on
        the name: of two concurrent creations exactly one wins)."""
        if owner is not None and schedule.owner not in (None, owner):
            raise UnauthorizedError(
                f"{owner!r} cannot create {agent}/{name} for {schedule.owner!r}", owner=owner
            )
        core = self.core
        self.adopt()
        with core.change():
            with core.lock:
                current = core.require_agent(agent)
                registry.validate_schedule(core, agent, name, schedule)
                if owner is not None and schedule.owner is None:
                    schedule = schedule.with_changes(owner=owner)
                if name in current.schedules:
                    raise ConflictError(
                        f"schedule {name!r} already exists on agent {agent!r}", agent, name
                    )
                registry.check_owner_limit(core, schedule.owner)
            if persist:
                mapping = schedule_to_mapping(schedule)
                _clear_leftover_state(core, agent, name)
                _durable(core, core.store.save_definition, agent, name, mapping, exists=False)
            with core.lock:
                updated = core.agents[agent].with_schedule(name, schedule)
                core.agents[agent] = updated
                registry.install_entry(core, updated, name, schedule, persisted=persist)

    def update_schedule(
        self,
        agent: str,
        name: str,
        owner: str | None,
        changes: dict[str, Any],
        if_revision: str | None = None,
    ) -> Schedule:
        """Change some fields of one schedule's definition; a stored one is rewritten for every
        process, where only the changed fields are written (another process's change of other
        fields holds too)."""

        def make(old: Schedule) -> Schedule:
            return registry.apply_changes(old, dict(changes))

        return self._rewrite(agent, name, owner, make, merge=True, if_revision=if_revision)

    def replace_schedule(
        self,
        agent: str,
        name: str,
        owner: str | None,
        schedule: Schedule,
        if_revision: str | None = None,
    ) -> Schedule:
        """Replace one schedule's whole definition (REST ``PUT``): a stored one is written as
        given, so no field another process changed meanwhile is mixed into it. The job stays,
        and so does the owner unless the new definition names one; a caller acting as an owner
        cannot name another."""
        if owner is not None and schedule.owner not in (None, owner):
            raise UnauthorizedError(
                f"{owner!r} cannot give {agent}/{name} to {schedule.owner!r}", owner=owner
            )

        def make(old: Schedule) -> Schedule:
            return schedule.with_changes(job=old.job, owner=schedule.owner or old.owner)

        return self._rewrite(agent, name, owner, make, merge=False, if_revision=if_revision)

    def _rewrite(
        self,
        agent: str,
        name: str,
        owner: str | None,
        make: Callable[[Schedule], Schedule],
        *,
        merge: bool,
        if_revision: str | None,
    ) -> Schedule:
        """Validate the definition ``make`` turns the current one into, write it (merged field
        by field into the stored one, or whole), then take it into memory. ``if_revision``:
        only if the definition still has that revision, here and in the store's write."""
        core = self.core
        self.adopt()
        with core.change():
            with core.lock:
                entry = core.require_entry(agent, name)
                registry.check_owner(entry, owner)
                if if_revision is not None:
                    check_revision(agent, name, schedule_revision(entry.schedule), if_revision)
                schedule = make(entry.schedule)
                cadence_changed = schedule.cadence != entry.schedule.cadence
                when: registry.CheckedWhen = "changed" if cadence_changed else "registered"
                registry.validate_schedule(core, agent, name, schedule, when=when)
                if schedule.owner != entry.schedule.owner:
                    registry.check_owner_limit(core, schedule.owner)
                seen_owner = entry.schedule.owner
                toggled = schedule.enabled != entry.schedule.enabled
                base = schedule_to_mapping(entry.schedule) if merge else None
            if entry.persisted_definition:
                mapping = schedule_to_mapping(schedule)
                _durable(
                    core,
                    core.store.save_definition,
                    agent,
                    name,
                    mapping,
                    exists=True,
                    owner=seen_owner,
                    base=base,
                    check=_revision_check(agent, name, if_revision),
                )
            with core.lock:
                core.agents[agent] = core.agents[agent].with_schedule(name, schedule)
                entry.schedule = schedule
                if cadence_changed:
                    registry.reopen(core, entry)
                    now = core.clock.now()
                    due = fresh_due(entry, now, core.settings.timezone, core.rng, recompute=True)
                    core.set_due(entry, due, due)
                elif toggled and not entry.planned_by_its_run:  # as a pause or resume
                    plan_resumed(core, entry, core.clock.now())
                core.persist_description(entry)
        return schedule

    def remove_schedule(
        self, agent: str, name: str, owner: str | None, if_revision: str | None = None
    ) -> None:
        """Remove one schedule, its stored definition and state (its history stays);
        ``if_revision`` as for :meth:`update_schedule`."""
        core = self.core
        self.adopt()
        with core.change():
            with core.lock:
                entry = core.require_entry(agent, name)
                registry.check_owner(entry, owner)
                if if_revision is not None:
                    check_revision(agent, name, schedule_revision(entry.schedule), if_revision)
                seen = entry.state
            if entry.persisted_definition:
                # the change itself: with its definition gone it is gone for every process
                _durable(
                    core,
                    core.store.delete_definition,
                    agent,
                    name,
                    owner=entry.schedule.owner,
                    check=_revision_check(agent, name, if_revision),
                )
                _clear_removed_state(core, agent, name)
            else:
                _durable(core, core.store.remove_schedule_state, agent, name)
            with core.lock:
                registry.drop_entry(core, agent, name)
                core.agents[agent] = core.agents[agent].without_schedule(name)
                raced = entry.state is not seen
            if raced:  # a run ended in between and its transition went to the store: remove
                if entry.persisted_definition:  # that too, not a namesake's created since
                    core.store_call(remove_state_unless_defined, core.store, agent, name)
                else:
                    core.store_call(core.store.remove_schedule_state, agent, name)

    def pause(self, agent: str, schedule: str | None, owner: str | None) -> None:
        """Pause one schedule or every schedule of the agent; durable before memory changes.

        A completed once schedule stays completed: paused, a resume would run it again."""
        core = self.core
        self.adopt()
        with core.change():
            done: list[Entry] = []
            for entry in self._targets(agent, schedule, owner):
                was = entry.state.status
                if was is Status.COMPLETED:
                    continue
                _write_intent(core, entry, "paused", done, status=Status.PAUSED)
                done.append(entry)
                with core.lock:
                    core.plan.unplan(entry)
                    entry.state = evolve(entry.state, status=Status.PAUSED)
                if was is not Status.PAUSED:  # heard once, not at every pause of a paused one
                    core.emit(
                        ev.SchedulePaused(
                            at=core.clock.now(), agent=entry.agent, schedule=entry.name
                        )
                    )

    def resume(self, agent: str, schedule: str | None, owner: str | None) -> None:
        """Resume paused or auto-disabled schedules (status idle, failures reset)."""
        core = self.core
        self.adopt()
        changes: dict[str, Any] = {
            "status": Status.IDLE,
            "consecutive_failures": 0,
            "disabled_reason": None,
        }
        with core.change():
            done: list[Entry] = []
            for entry in self._targets(agent, schedule, owner):
                was = entry.state.status
                if was is Status.COMPLETED:
                    continue
                written = {**changes, **_replan(core, entry)}
                _write_intent(core, entry, "resumed", done, **written)
                done.append(entry)
                with core.lock:
                    self._plan_resumed(entry, written)
                if was in (Status.PAUSED, Status.DISABLED):  # not for one that was not stopped
                    core.emit(
                        ev.ScheduleResumed(
                            at=core.clock.now(), agent=entry.agent, schedule=entry.name
                        )
                    )

    def _plan_resumed(self, entry: Entry, changes: dict[str, Any]) -> None:
        """Memory after a resume: a due time that passed while paused follows the catch-up
        policy (by default it fires once)."""
        backed_off = resets_backoff(entry.state, changes["consecutive_failures"])
        entry.state = evolve(entry.state, **changes)
        if not entry.planned_by_its_run:
            plan_resumed(self.core, entry, self.core.clock.now(), backed_off=backed_off)
        else:
            show_running(self.core, entry)

    def _targets(self, agent: str, schedule: str | None, owner: str | None) -> list[Entry]:
        """The entries ``pause``/``resume`` act on, each checked against ``owner``."""
        check_schedule_arguments(agent, "" if schedule is None else schedule, owner=owner)
        core = self.core
        with core.lock:
            if schedule is not None:
                entries = [core.require_entry(agent, schedule)]
            else:
                names = core.require_agent(agent).schedules
                entries = [e for e in core.entries.values() if e.agent == agent and e.name in names]
            for entry in entries:
                registry.check_owner(entry, owner)
            return entries


def _revision_check(agent: str, name: str, if_revision: str | None) -> Precondition | None:
    return None if if_revision is None else stored_revision_check(agent, name, if_revision)


def _clear_removed_state(core: EngineCore, agent: str, name: str) -> None:
    """Remove the state of a schedule whose definition was just deleted. The removal is made
    whatever happens here, so a store failure is logged, not raised: raised, it would tell
    the caller that nothing changed."""
    try:
        remove_state_unless_defined(core.store, agent, name)
    except StateError as exc:
        core.state_error(exc)
        core.log.warning(
            "%s/%s is removed, but its state could not be cleared (%s); the command line "
            "lists it until `herdsched forget %s/%s` clears it.",
            agent,
            name,
            exc,
            agent,
            name,
        )


def _clear_leftover_state(core: EngineCore, agent: str, name: str) -> None:
    """Before a schedule is created with its name: clear the state a removed schedule of that
    name left (its removal could not), so the new one starts afresh; with it, the new schedule
    would take the old one's status (a pause), failures and plan. A compare-and-remove (see
    :mod:`herdsched.store.base`): a namesake another process created meanwhile keeps its
    state, and the save refuses ours. When the clearing fails, nothing is created."""
    if name not in core.store.get_agent_schedule_states(agent):
        return
    try:
        remove_state_unless_defined(core.store, agent, name)
    except StateError as exc:
        core.state_error(exc)
        raise StateError(
            f"{agent}/{name} was not created: the state a removed schedule of that name left "
            f"could not be cleared ({exc})",
            exc.path,
        ) from exc


def _durable(core: EngineCore, write: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """A change's durable store write: when the store fails, the caller gets the
    ``StateError`` and the listeners a ``StateErrorOccurred``, as for every store failure."""
    try:
        write(*args, **kwargs)
    except StateError as exc:
        core.state_error(exc)
        raise


def _replan(core: EngineCore, entry: Entry) -> dict[str, Any]:
    """What a resume on a scheduler not leading writes beside its status: the plan the
    leader will make when the resume drops a failure backoff (the cadence's own next run
    after the last one), so that every process shows it at once rather than the backoff's
    time until the leader has taken the resume in."""
    if core.leading or not resets_backoff(entry.state, 0):
        return {}
    return {"next_run_at": cadence_plan(core, entry)}


def _write_intent(
    core: EngineCore, entry: Entry, done: str, before: Sequence[Entry], **changes: Any
) -> None:
    """A durable user-intent write; when the store fails, this schedule did not change and
    the caller is told, with those of the same call changed ``before`` it (an agent-wide
    pause or resume writes one schedule after another: trying again finishes it)."""
    try:
        core.store.update_schedule_state(entry.agent, entry.name, **changes)
    except StateError as exc:
        core.state_error(exc, entry)
        told = "nothing changed"
        if before:
            changed = ", ".join(f"{e.agent}/{e.name}" for e in before)
            told = f"{changed} {'was' if len(before) == 1 else 'were'}, the rest were not"
        raise StateError(
            f"{entry.agent}/{entry.name} was not {done}: the state store failed ({exc}); "
            f"{told}; try again",
            exc.path,
            exc,
        ) from exc
