"""The fleet: registering agents and schedules, checking them, and run-time definitions.

A schedule is checked against the scheduler's settings (``min_interval``, a job to run, a known
work source, a once time still ahead) before anything changes; definitions created with
``persist=True`` live in the store, as fleet-file mappings, and come back when their agent is
registered again. Every function here is called with the engine lock held.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs

from herdsched.cadence import CADENCE_FIELDS
from herdsched.definitions import schedule_from_mapping
from herdsched.engine.core import AD_HOC_SCHEDULE, EngineCore
from herdsched.engine.planning import Entry, fresh_due
from herdsched.engine.recovery import (
    plan_from_state,
    plan_resumed,
    show_running,
    take_up_claims,
)
from herdsched.errors import (
    InvalidScheduleError,
    LimitExceededError,
    StateError,
    UnauthorizedError,
)
from herdsched.models import Agent, Schedule, ScheduleState, Status, check_name

__all__ = [
    "CheckedWhen",
    "ad_hoc_entry",
    "apply_changes",
    "check_cadence",
    "check_nothing_needs_on_trigger",
    "check_owner",
    "check_owner_limit",
    "drop_entry",
    "forget_agent",
    "install_agent",
    "install_entry",
    "name_after",
    "validate_schedule",
]


def check_agent(core: EngineCore, agent: Agent) -> None:
    """Refuse ``agent`` when one of its schedules could not run here (before anything
    changes: a hot reload checks every agent of the new fleet first)."""
    for name, schedule in agent.schedules.items():
        validate_schedule(core, agent.name, name, schedule, when="registered", registering=agent)


def install_agent(core: EngineCore, agent: Agent) -> None:
    """Register ``agent`` (replacing one of the same name), with its stored definitions."""
    check_agent(core, agent)
    old = core.agents.get(agent.name)
    core.agents[agent.name] = agent
    if old is not None and old.max_concurrent != agent.max_concurrent:
        core.executors.forget(agent.name)
    # one read of the agent's stored states, not one per schedule: a store on another host
    # would otherwise cost a round trip for each schedule of a large fleet
    stored = core.store.get_agent_schedule_states(agent.name)
    for name, schedule in agent.schedules.items():
        install_entry(core, agent, name, schedule, persisted=False, stored=stored)
    for name, schedule in stored_definitions(core, agent.name).items():
        if name not in agent.schedules:
            updated = core.agents[agent.name].with_schedule(name, schedule)
            core.agents[agent.name] = updated
            install_entry(core, updated, name, schedule, persisted=True, stored=stored)


def install_entry(
    core: EngineCore,
    agent: Agent,
    name: str,
    schedule: Schedule,
    *,
    persisted: bool,
    stored: Mapping[str, ScheduleState] | None = None,
    changed_at_run_time: bool = False,
) -> None:
    """Add or update the entry of one schedule and plan it when this scheduler leads.

    ``stored`` is the agent's stored states when the caller read them already.
    ``changed_at_run_time``: another process changed the stored definition, so a new cadence
    opens a completed once schedule again; a definition registered again from code or a fleet
    file does not (a relative ``at`` names a new time at every load, and a once schedule that
    ran stays completed across restarts)."""
    existing = core.entries.get((agent.name, name))
    now = core.clock.now()
    if existing is None:
        if stored is None:
            state = core.store.get_schedule_state(agent.name, name)
        else:
            state = stored.get(name) or ScheduleState()
        entry = Entry(agent.name, name, schedule, state, persisted_definition=persisted)
        core.entries[entry.key] = entry
        if core.leading:  # otherwise planned when this scheduler starts leading
            take_up_claims(core, entry, core.left_claims.pop(entry.key, []))
            plan_from_state(core, entry, now)
        return
    cadence_changed = existing.schedule.cadence != schedule.cadence
    existing.schedule = schedule
    existing.persisted_definition = existing.persisted_definition or persisted
    if cadence_changed and changed_at_run_time:  # as for a change made in this process
        reopen(core, existing)
    # a run whose end is being written (settled) planned from the old cadence already
    settling = existing.run is not None and existing.run.finalized
    if core.leading and cadence_changed and (settling or not existing.planned_by_its_run):
        due = fresh_due(existing, now, core.settings.timezone, core.rng, recompute=True)
        core.set_due(existing, due, due)  # on the plan once that run has ended
    elif core.leading and not existing.planned_by_its_run:
        plan_resumed(core, existing, now)  # the same plan; a passed slot: the catch-up rule
    core.persist_description(existing)


def reopen(core: EngineCore, entry: Entry) -> None:
    """A completed once schedule given a new cadence at run time is live again (see
    :meth:`EngineCore.reopen_completed`), also while a run-now of it goes on: that run's end
    plans the new time, and it shows ``running`` meanwhile (caller holds the lock)."""
    core.reopen_completed(entry)
    show_running(core, entry)


def drop_entry(core: EngineCore, agent: str, name: str) -> None:
    """Forget one schedule's entry (its stored state stays)."""
    entry = core.entries.pop((agent, name), None)
    if entry is not None:
        core.plan.unplan(entry)


def forget_agent(core: EngineCore, name: str) -> None:
    """Remove an agent's stored definitions and states, then forget its entries (its ad hoc
    ``manual`` one included) and the agent (caller holds the lock).

    The store goes first, one schedule after another: when it fails, the schedules already
    removed there are forgotten here too (kept, a paused one would come back unpaused at the
    next start), the others stay registered, and ``StateError`` names both."""
    entries = [entry for (agent, _), entry in core.entries.items() if agent == name]
    gone: list[Entry] = []
    for entry in entries:
        defined = entry.persisted_definition
        try:
            if defined:
                core.store.delete_definition(name, entry.name)
                defined = False  # gone for every process once its definition is
            core.store.remove_schedule_state(name, entry.name)
        except StateError as exc:
            core.state_error(exc, entry)
            if entry.persisted_definition and not defined:
                gone.append(entry)  # its state stays, marked removed at the next start
            _forget(core, name, gone)
            raise StateError(_not_removed(name, entry, gone, exc), exc.path, exc) from exc
        gone.append(entry)
    _forget(core, name, gone)
    del core.agents[name]
    core.executors.forget(name)


def _forget(core: EngineCore, agent: str, entries: list[Entry]) -> None:
    for entry in entries:
        drop_entry(core, agent, entry.name)
        core.agents[agent] = core.agents[agent].without_schedule(entry.name)


def _not_removed(agent: str, failed: Entry, gone: list[Entry], exc: StateError) -> str:
    where = f"the state store failed at {agent}/{failed.name} ({exc})"
    if not gone:
        return f"agent {agent!r} was not removed: {where}; it is still registered, try again"
    removed = ", ".join(f"{agent}/{entry.name}" for entry in gone)
    return (
        f"agent {agent!r} was removed only in part: {where}; {removed} "
        f"{'is' if len(gone) == 1 else 'are'} gone, the rest is still registered: try again"
    )


def retire_entry(core: EngineCore, agent: str, name: str) -> None:
    """Drop a schedule the fleet no longer has (a hot reload): its state stays, marked removed
    (as a restart without it marks it), so that no process shows it waiting for a run."""
    entry = core.entries.get((agent, name))
    if entry is not None and core.leading:  # a run-time definition keeps its plan (see there)
        core.mark_removed(agent, name, core.clock.now(), keep_next=entry.persisted_definition)
    drop_entry(core, agent, name)


def ad_hoc_entry(core: EngineCore, agent: Agent) -> Entry:
    """The entry that records ``trigger(agent)`` runs of the agent's own job."""
    key = (agent.name, AD_HOC_SCHEDULE)
    entry = core.entries.get(key)
    if entry is None:
        state = core.store.get_schedule_state(agent.name, AD_HOC_SCHEDULE)
        entry = Entry(agent.name, AD_HOC_SCHEDULE, Schedule.manual(), state)
        core.entries[key] = entry
        if core.leading:  # a run a dead process left: recorded before this one starts
            take_up_claims(core, entry, core.left_claims.pop(key, []))
            plan_from_state(core, entry, core.clock.now())
        core.persist_description(entry)
    return entry


def check_nothing_needs_on_trigger(core: EngineCore) -> None:
    """Refuse (``InvalidScheduleError``) to take ``on_trigger`` away while a schedule with no
    job, of its own or its agent's, runs it (caller holds the lock)."""
    needing = sorted(
        f"{entry.agent}/{entry.name}"
        for entry in core.entries.values()
        if entry.name != AD_HOC_SCHEDULE
        and entry.schedule.job is None
        and getattr(core.agents.get(entry.agent), "job", None) is None
    )
    if needing:
        raise InvalidScheduleError(
            f"on_trigger cannot be set to None: it is what runs {', '.join(needing[:10])}"
            f"{f' and {len(needing) - 10} more' if len(needing) > 10 else ''} "
            "(no job of their own, nor of their agent)",
            field="on_trigger",
        )


def stored_definitions(core: EngineCore, agent: str) -> dict[str, Schedule]:
    """The run-time definitions stored for ``agent``.

    One that fails validation (it cannot be read, its name is invalid, its cadence is refused)
    is set aside in the store with the reason and logged at ERROR: bad stored data never keeps
    the rest of the fleet from booting and running.
    """
    try:
        raw = core.store.load_definitions().get(agent, {})
    except Exception as exc:
        core.state_error(exc)
        return {}
    loaded: dict[str, Schedule] = {}
    for name, mapping in raw.items():
        try:
            schedule = schedule_from_mapping(mapping, relative_at=False)
            check_name("schedule", name)
            check_cadence(core, agent, name, schedule, when="registered")
        except Exception as exc:
            _set_aside(core, agent, name, exc)
            continue
        loaded[name] = schedule
    return loaded


def _set_aside(core: EngineCore, agent: str, name: str, exc: Exception) -> None:
    reason = str(exc) or type(exc).__name__
    core.log.error(
        "The stored definition of %s/%s is invalid and was set aside: %s. The rest of the "
        "fleet runs; create the schedule again to replace it.",
        agent,
        name,
        reason,
    )
    core.store_call(core.store.reject_definition, agent, name, reason)


#: When a schedule is checked: registered (at start-up, or read from the store), added at run
#: time, or given a new cadence at run time. See :func:`check_cadence`.
CheckedWhen = Literal["registered", "added", "changed"]


def validate_schedule(
    core: EngineCore,
    agent: str,
    name: str,
    schedule: Schedule,
    *,
    when: CheckedWhen = "added",
    registering: Agent | None = None,
) -> None:
    """Refuse a schedule the scheduler could not run as asked (``InvalidScheduleError``);
    ``registering``: the agent it comes with, not registered yet."""
    where = f"{agent}/{name}"
    check_name("schedule", name)
    check_cadence(core, agent, name, schedule, when=when)
    agent_obj = registering or core.agents.get(agent)
    agent_job = agent_obj.job if agent_obj is not None else None
    if schedule.job is None and agent_job is None and core.on_trigger is None:
        raise InvalidScheduleError(
            f"{where}: nothing to run: give the schedule or agent a job, or the scheduler "
            "an on_trigger callback",
            field="job",
        )
    if schedule.work_source is not None and schedule.work_source not in core.work_sources:
        known = ", ".join(sorted(core.work_sources)) or "none registered"
        raise InvalidScheduleError(
            f"{where}: unknown work source {schedule.work_source!r} ({known})",
            field="work_source",
            value=schedule.work_source,
        )


def check_cadence(
    core: EngineCore, agent: str, name: str, schedule: Schedule, *, when: CheckedWhen
) -> None:
    """Refuse a cadence the scheduler's settings do not allow, naming the schedule.

    A once time must still be ahead when the schedule is added (unless it ran already:
    registering a finished once again at start-up, or adding it again in the code that
    starts the process, is fine) and when it is given a new cadence at run time (which makes
    it run again, see :meth:`EngineCore.reopen_completed`).
    """
    cadence = schedule.cadence
    if cadence is None:
        return
    ahead = when == "changed" or (when == "added" and not _has_run(core, agent, name))
    now = core.clock.now() if ahead else None
    try:
        cadence.check(min_interval=core.settings.min_interval, zone=core.settings.timezone, now=now)
    except InvalidScheduleError as exc:
        raise InvalidScheduleError(
            f"{agent}/{name}: {exc.message}", field=exc.field, value=exc.value, cause=exc
        ) from exc


def _has_run(core: EngineCore, agent: str, name: str) -> bool:
    state = core.store.get_schedule_state(agent, name)
    return state.last_run_at is not None or state.status is Status.COMPLETED


#: What ``update_schedule`` may change: a schedule's fields (``cadence``: a whole new one, as
#: the REST API sends) and its cadence's fields.
_CHANGEABLE = frozenset(field.name for field in attrs.fields(Schedule)) | set(CADENCE_FIELDS)


def apply_changes(schedule: Schedule, changes: dict[str, Any]) -> Schedule:
    """``schedule`` with ``update_schedule``'s keyword changes applied and checked.

    A whole new ``cadence`` may be of another type: the type follows it (``type`` must be
    given for a schedule without a cadence, such as ``manual``)."""
    if "type" in changes and "cadence" not in changes:
        raise InvalidScheduleError(
            "a new type needs its cadence too: give cadence= with it (None for a schedule "
            "that runs only when triggered)",
            field="type",
        )
    kind = getattr(changes.get("cadence"), "kind", None)
    if kind is not None:
        changes.setdefault("type", kind)
    unknown = sorted(set(changes) - _CHANGEABLE)
    if unknown:  # named here: the model's TypeError quoted Schedule.__init__
        raise InvalidScheduleError(
            f"unknown schedule field {unknown[0]!r} (known: {', '.join(sorted(_CHANGEABLE))})",
            field=unknown[0],
        )
    cadence = schedule.cadence
    cadence_changes = {k: changes.pop(k) for k in list(changes) if k in CADENCE_FIELDS}
    updated = schedule.with_changes(**changes)
    if not cadence_changes:
        return updated
    if cadence is None:
        raise InvalidScheduleError(
            f"a {schedule.type} schedule has no cadence to change",
            field=next(iter(cadence_changes)),
        )
    return updated.with_changes(cadence=cadence.with_fields(cadence_changes))


def check_owner(entry: Entry, owner: str | None) -> None:
    """Refuse a change by an owner who does not own ``entry`` (``None``: anyone may)."""
    if owner is not None and entry.schedule.owner != owner:
        raise UnauthorizedError(
            f"{entry.agent}/{entry.name} is not owned by {owner!r}", owner=owner
        )


def check_owner_limit(core: EngineCore, owner: str | None) -> None:
    """Refuse one more schedule for an owner at ``max_schedules_per_owner``."""
    limit = core.settings.max_schedules_per_owner
    if owner is None or limit is None:
        return
    count = sum(1 for e in core.entries.values() if e.schedule.owner == owner)
    if count >= limit:
        raise LimitExceededError(
            f"owner {owner!r} already has {count} schedules (limit {limit})",
            limit=limit,
            owner=owner,
        )


def name_after(func: Callable[..., Any], agent: str | None) -> str:
    """The name a decorator gives the schedule (and a new agent, without ``agent``): the
    function's, when that is a valid name; else an error saying to give ``name=``."""
    derived = getattr(func, "__name__", None)
    try:
        for kind in ("schedule",) if agent else ("schedule", "agent"):
            check_name(kind, derived)
    except InvalidScheduleError:  # a lambda, a partial, a callable object, "_cleanup", "größe"
        also, give = ("", "name=") if agent else (" and its agent", "name= and agent=")
        raise InvalidScheduleError(
            f"the decorators name the schedule{also} after the function, and {func!r} has no "
            "name that can be one (ASCII letters, digits, '-' and '_', starting with a letter or "
            f"digit): give {give}",
            field="name",
            value=func,
        ) from None
    return str(derived)
