"""The contract every state store fulfils, whatever it keeps its data in.

Two kinds of writes, with two durability promises:

* **user intent** (:meth:`StateStore.update_schedule_state`, definitions, trigger requests):
  durable when the call returns;
* **run transitions** (:meth:`StateStore.record_transition`, :meth:`StateStore.append_run`):
  visible to this process at once, durable on the next :meth:`StateStore.flush`, which the
  scheduler calls no later than :meth:`StateStore.flush_deadline` and always at ``stop()``.
  This group commit is what lets 10,000 schedules run without rewriting the file per transition.

A transition never takes a schedule out of a user-intent status: when the stored ``status`` is
``paused``, ``disabled`` or ``completed`` (set here or by another process), a transition's
``status`` other than those is dropped; its other fields still apply. Only
:meth:`StateStore.update_schedule_state` (resume) leaves those statuses.

Stores never start threads and never know about the scheduler; they only guard their own data
with locks.

**Leadership is a lease the store hands out** (:meth:`StateStore.acquire_lease`). Its expiry is
measured on the store's clock (the YAML store: the host's wall clock; a database store: the
server's), and its ``epoch`` grows by one every time the lease changes hands. Once a store has
handed a lease to its scheduler it **fences** that scheduler's run writes by the epoch: every
:meth:`StateStore.claim_runs` and every :meth:`StateStore.flush` checks, in the same locked section
(or transaction) that writes, that the store's current epoch is still the one it handed out, and
otherwise raises :class:`~herdsched.errors.LeadershipLostError` and writes nothing (its pending
transitions and records are dropped: they belong to a lease that is gone). User-intent writes are
never fenced. Safety never depends on clocks: a takeover always raises the epoch, and a stale
leader's next claim or commit is refused whatever its clock says. One store object serves one
scheduler.

A store may also say how long a standby waits between tries, with an optional method
``lease_retry_in(ttl: float) -> float`` (seconds after an :meth:`StateStore.acquire_lease` that
returned ``None``): a database store, where a try is a query, tries less often than a file store
and wakes for the expiry it saw. Without it a standby tries every ``min(5 s, ttl / 3)``.

A store shared by processes may also show its claims to the others, with an optional method
``read_claims() -> list[RunClaim]``: the claims :meth:`StateStore.load_claims` would return,
taking none over. A run the active scheduler started is then found ``running`` by any process
from its claim on, not only once the group commit wrote its start
(:func:`herdsched.store.runs.find_run`).

A store shared by processes should also offer a compare-and-remove,
``remove_schedule_state_unless_defined(agent: str, schedule: str) -> None``: what
:meth:`StateStore.remove_schedule_state` does, unless a definition of that name is stored,
looked at in the same locked step that a creation's compare-and-set holds. Either way the
transitions of that name this process has not committed are dropped and the claims it holds
for its runs are taken for a removed schedule's: the caller has no schedule of that name (it
removed it, or is about to create it), so they are the removed one's and must not land in a
namesake's state. The scheduler clears with it the state a removed run-time schedule leaves
(after the removal, and before a creation of that name), so a namesake another process creates
and runs meanwhile keeps its state. Without it the scheduler reads the
definitions first, then removes (:func:`remove_state_unless_defined`), and a creation
elsewhere can fall between the two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol, runtime_checkable

import attrs

from herdsched.models import RejectedDefinition, RunRecord, ScheduleState, check_prompt
from herdsched.timestamps import format_timestamp

#: A caller's own precondition of a definition's write: called with the stored definition
#: (``None``: there is none) inside the store's locked write, it raises to refuse the write.
Precondition = Callable[[Mapping[str, Any] | None], None]

__all__ = [
    "DEFAULT_LEASE_TTL",
    "READ_ALL_HISTORY",
    "USER_INTENT_STATUSES",
    "Lease",
    "Precondition",
    "RunClaim",
    "StateStore",
    "TriggerRequest",
    "call_if_offered",
    "check_history_limit",
    "check_max_run_history",
    "check_ttl",
    "leaves_user_intent",
    "merged_history",
    "newest_first",
    "remove_state_unless_defined",
]

#: Statuses set by people (or auto-disable) that a pending run transition must not undo.
USER_INTENT_STATUSES = frozenset({"paused", "disabled", "completed"})

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def leaves_user_intent(before: Any, changes: Mapping[str, Any]) -> bool:
    """Would ``changes`` take the state ``before`` out of a user-intent status (no run
    transition may, see the module docstring)?"""
    status = changes.get("status")
    return (
        status is not None
        and before.status in USER_INTENT_STATUSES
        and status not in USER_INTENT_STATUSES
    )


def _moment(record: RunRecord) -> datetime:
    return record.started_at or record.scheduled_for or record.finished_at or _EPOCH


def newest_first(appended: Sequence[RunRecord]) -> list[RunRecord]:
    """``appended`` (oldest first, as written) sorted newest first by when each run started.

    Runs that started in the same millisecond keep their written order, the later one first:
    timestamps alone cannot tell them apart, and random run ids must not decide.
    """
    records = list(reversed(appended))
    records.sort(key=_moment, reverse=True)  # stable: equal moments keep newest-written first
    return records


def merged_history(written: Sequence[RunRecord], per_schedule: int, limit: int) -> list[RunRecord]:
    """The history a store shows from its records in written order (stored, then pending):
    a later record of a run replaces the earlier one, each schedule keeps its newest
    ``per_schedule``, and the result is newest first, at most ``limit``."""
    by_schedule: dict[str, dict[str, RunRecord]] = {}
    for record in written:
        runs = by_schedule.setdefault(record.schedule, {})
        runs.pop(record.run_id, None)
        runs[record.run_id] = record
    records = [
        record for runs in by_schedule.values() for record in list(runs.values())[-per_schedule:]
    ]
    return newest_first(records)[:limit]


@attrs.frozen
class TriggerRequest:
    """A "run now" asked for by another process (CLI, web worker) for the active scheduler.

    ``run_id`` is given when the request is accepted and is the id its run has in history.
    ``started_at`` is ``None`` while the request waits, and set once the active scheduler has
    started its run.
    """

    run_id: str
    agent: str
    schedule: str
    requested_at: datetime
    prompt: str | None = attrs.field(default=None, validator=lambda _, __, v: check_prompt(v))
    started_at: datetime | None = None


@attrs.frozen
class RunClaim:
    """A run about to start: what must be durable before its job runs (at most once per slot)."""

    agent: str
    schedule: str
    run_id: str
    run_at: datetime
    slot: datetime | None = None


def _aware(instance: object, attribute: attrs.Attribute[datetime], value: datetime) -> None:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"Lease.{attribute.name} must be an aware datetime, got {value!r}")


def _non_empty(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"Lease.{attribute.name} must be a non-empty string, got {value!r}")


def _positive_epoch(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Lease.epoch must be a positive integer, got {value!r}")


@attrs.frozen
class Lease:
    """The leadership lease as a store hands it out (times on the store's clock, aware UTC).

    ``holder`` names one acquisition (host, pid and a random part), ``epoch`` grows with every
    change of holder, ``acquired_at`` is when this holder took it ("leader since"),
    ``expires_at`` when it lapses unless renewed.
    """

    holder: str = attrs.field(validator=_non_empty)
    epoch: int = attrs.field(validator=_positive_epoch)
    acquired_at: datetime = attrs.field(validator=_aware)
    renewed_at: datetime = attrs.field(validator=_aware)
    expires_at: datetime = attrs.field(validator=_aware)
    pid: int | None = None
    host: str | None = None
    #: the store's clock when the lease was read, from a store whose clock is not the reader's
    #: (PostgreSQL's server): ``describe`` judges the expiry on it, not on the reader's clock
    read_at: datetime | None = attrs.field(
        default=None, eq=False, validator=attrs.validators.optional(_aware)
    )

    def expired(self, now: datetime) -> bool:
        """Whether the lease lapsed at ``now`` (a standby may take it over)."""
        return now >= self.expires_at

    def describe(self, now: datetime) -> dict[str, Any]:
        """The lease as plain JSON-ready data: what ``status`` and the CLI show as "leader";
        ``expired`` at ``read_at`` when the store gave it, else at ``now``."""
        return {
            "holder": self.holder,
            "epoch": self.epoch,
            "pid": self.pid,
            "host": self.host,
            "started_at": format_timestamp(self.acquired_at),
            "renewed_at": format_timestamp(self.renewed_at),
            "expires_at": format_timestamp(self.expires_at),
            "expired": self.expired(self.read_at or now),
        }


#: Seconds a lease lasts without renewal. Renewed every ttl/3 (10 s), a leader survives two
#: missed heartbeats (a slow disk, a long pass) before anyone may take over, and a hung leader
#: is replaced within about 30 s; a dead one (``kill -9``) is replaced at a standby's next try.
DEFAULT_LEASE_TTL = 30.0


#: The longest lease: a hung leader keeps every standby out for that long.
LONGEST_LEASE_TTL = 86_400.0


def check_ttl(ttl: float) -> float:
    """``ttl`` as float seconds; a clear ``ValueError`` unless it is a positive number of at
    most a day (a longer one overflowed the lease's expiry and kept a hung leader for ever)."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise ValueError(f"lease_ttl must be a positive number of seconds, got {ttl!r}")
    if not ttl <= LONGEST_LEASE_TTL:
        raise ValueError(
            f"lease_ttl must be at most a day ({LONGEST_LEASE_TTL:g} s): a hung leader keeps "
            f"every standby out for that long; got {ttl!r}"
        )
    return float(ttl)


#: The longest ``lock_timeout`` or ``commit_delay``: a day, as the longest lease.
LONGEST_WAIT = 86_400.0


def check_wait(value: float, name: str) -> float:
    """``value`` (``lock_timeout``, ``commit_delay``) as float seconds; a clear ``ValueError``
    naming it unless a number from 0 to a day (a longer lock wait overflowed the thread waits
    of every write and of ``stop()``; an endless commit delay wrote nothing until ``stop()``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}")
    if not value <= LONGEST_WAIT:
        raise ValueError(f"{name} must be at most a day ({LONGEST_WAIT:g} s), got {value!r}")
    return float(value)


#: A ``get_history`` limit (or ``max_run_history``) that reads every stored record: a store
#: keeps at most ``max_run_history`` per schedule, far fewer.
READ_ALL_HISTORY = 1_000_000


def check_history_limit(limit: int) -> int:
    """``limit`` as how many records ``get_history`` returns; a ``ValueError`` unless it is a
    whole number of at least 0."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be a non-negative integer, got {limit!r}")
    return limit


def check_max_run_history(value: int) -> int:
    """``value`` as the number of run records a store keeps per schedule; a ``ValueError``
    naming ``max_run_history`` unless it is a whole number of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"max_run_history must be a whole number of records, got {type(value).__name__} "
            f"{value!r}"
        )
    if value < 1:
        raise ValueError(f"max_run_history must be at least 1, got {value!r}")
    return value


@runtime_checkable
class StateStore(Protocol):
    """Where schedule state, run history, run-time definitions and trigger requests live."""

    # -- schedule state -------------------------------------------------------------------
    def get_schedule_state(self, agent: str, schedule: str) -> ScheduleState:
        """The state of one schedule; defaults (idle, no times, 0 failures) when unknown."""

    def get_agent_schedule_states(self, agent: str) -> dict[str, ScheduleState]:
        """Every schedule state of ``agent`` (empty when the agent is unknown)."""

    def get_all_schedule_states(self) -> dict[str, dict[str, ScheduleState]]:
        """agent → schedule → state, for the whole file (refreshed if another process wrote)."""

    def update_schedule_state(self, agent: str, schedule: str, **changes: Any) -> ScheduleState:
        """Shallow-merge ``changes`` into one schedule's state; durable when it returns."""

    def record_transition(self, agent: str, schedule: str, **changes: Any) -> ScheduleState:
        """Like :meth:`update_schedule_state` but group-committed (durable on :meth:`flush`)."""

    def remove_schedule_state(self, agent: str, schedule: str) -> None:
        """Forget a schedule's state (durable when it returns); its history stays."""

    def flush(self) -> None:
        """Make every pending transition and run record durable now (fenced by the lease
        epoch once the store handed out a lease: ``LeadershipLostError``)."""

    def flush_deadline(self) -> float | None:
        """Monotonic time by which :meth:`flush` should run, ``None`` when nothing is pending."""

    def refresh(self) -> bool:
        """Re-read if another process changed the data; returns whether anything changed.

        Also true when a change by another process was adopted since the previous call by any
        other read or write of this store, so a poller never misses one.
        """

    def claim_runs(self, claims: Sequence[RunClaim]) -> None:
        """Make ``claims`` durable now, cheaply (their transitions follow with the next flush).

        Fenced by the lease epoch once the store handed out a lease: ``LeadershipLostError``
        and nothing written when another holder took the lease over."""

    def load_claims(self) -> list[RunClaim]:
        """Durable claims not yet covered by a flush (read by restart recovery).

        The caller takes them over: its transitions for them go out with this store's flushes,
        which then drop them. A store that neither claimed nor loaded claims never drops any.
        """

    # -- run history ----------------------------------------------------------------------
    def append_run(self, record: RunRecord) -> None:
        """Add a record to its schedule's bounded history (group-committed)."""

    def purge_history(self, agent: str, schedule: str) -> None:
        """Delete one schedule's run history (durable when it returns)."""

    def get_history(
        self, agent: str, schedule: str | None = None, limit: int = 20
    ) -> list[RunRecord]:
        """Records newest first; all of the agent's schedules when ``schedule`` is None.

        At most ``limit`` of them, a whole number of at least 0 (else a ``ValueError``, see
        :func:`check_history_limit`)."""

    # -- definitions created at run time (``persist=True``) ---------------------------------
    def load_definitions(self) -> dict[str, dict[str, dict[str, Any]]]:
        """agent → schedule name → definition mapping (fleet-file schedule fields)."""

    def save_definition(
        self,
        agent: str,
        schedule: str,
        definition: Mapping[str, Any],
        *,
        exists: bool | None = None,
        owner: str | None = None,
        base: Mapping[str, Any] | None = None,
        check: Precondition | None = None,
    ) -> None:
        """Store one definition; durable when it returns.

        The preconditions are checked in the same locked write, against what every process
        wrote (compare-and-set): ``exists=False`` refuses a name that is taken
        (:class:`~herdsched.errors.ConflictError`), ``exists=True`` one that is gone
        (:class:`~herdsched.errors.ScheduleNotFoundError`), and ``owner`` a definition owned by
        someone else (:class:`~herdsched.errors.UnauthorizedError`). ``base`` is the definition
        the change started from: then only the fields where ``definition`` differs from it are
        written over the stored one (:func:`herdsched.store.definitions.merge_definition`), so
        concurrent changes of different fields all hold; a stored definition of another type
        than ``base`` (the schedule was removed and created again) refuses the change with a
        ``ConflictError``. ``check``, last, is the caller's own precondition: called with the
        stored definition (``None``: there is none) inside the same locked write, it raises to
        refuse it (a change made from a given revision, :mod:`herdsched.revisions`).
        """

    def delete_definition(
        self,
        agent: str,
        schedule: str,
        *,
        owner: str | None = None,
        check: Precondition | None = None,
    ) -> None:
        """Remove one definition (no error when absent); durable when it returns.

        ``owner``: refuse (``UnauthorizedError``) when the stored definition is someone else's;
        ``check`` as for :meth:`save_definition`.
        """

    def reject_definition(self, agent: str, schedule: str, reason: str) -> None:
        """Set a stored definition aside with ``reason``: no longer loaded, but listed by
        :meth:`rejected_definitions` (no error when it is already gone). Durable."""

    def rejected_definitions(self) -> list[RejectedDefinition]:
        """The definitions set aside, oldest first."""

    # -- cross-process trigger requests ----------------------------------------------------
    # A request stays stored from its acceptance until its run's outcome is durable in the
    # history: a crash at any point loses none (see docs/scheduler.md, "Run now").
    def request_trigger(self, agent: str, schedule: str, *, prompt: str | None = None) -> str:
        """Queue a "run now" for the active scheduler; returns the run id its run will have
        (from :func:`herdsched.runner.new_run_id`). Durable when it returns."""

    def trigger_requests(self) -> list[TriggerRequest]:
        """Every stored request, waiting or started, oldest first (nothing is removed)."""

    def mark_trigger_started(self, run_id: str, at: datetime) -> None:
        """Record that the run of request ``run_id`` starts at ``at``; durable when it returns
        (before the job starts, so a scheduler taking over never runs it a second time)."""

    def settle_trigger_request(self, run_id: str) -> None:
        """Remove request ``run_id`` once its run's record is durable in the history (no error
        when it is gone already); durable when it returns."""

    # -- leadership lease (see the module docstring) ----------------------------------------
    def acquire_lease(self, holder: str, ttl: float) -> Lease | None:
        """Hand the lease to ``holder`` for ``ttl`` seconds, or return ``None`` when another
        live holder has it.

        The lease is free when nobody took it, its holder released it, its holder is known to be
        dead (the store decides how: a free file lock, a closed database session), or it was not
        renewed within its ttl (a hung holder). Taking it raises the epoch by one. From then on
        this store fences its claims and group commits by the new epoch.
        """

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend ``lease`` to ``ttl`` seconds from now (store's clock) and return it.

        Raises :class:`~herdsched.errors.LeadershipLostError` when the store's current lease is
        not this one any more (another holder took over), and another
        :class:`~herdsched.errors.StateError` when the store cannot be reached.
        """

    def release_lease(self, lease: Lease) -> None:
        """Give ``lease`` up so a standby may take over at once; forgets it here in any case.

        Does nothing to the stored lease when another holder has it by now.
        """

    def current_lease(self) -> Lease | None:
        """The lease as stored, ``None`` when nobody holds one (released, or its holder is
        known to be dead). An expired lease of a live holder is returned (``expired``)."""

    # -- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        """Flush and release resources; the store may not be used afterwards."""


def call_if_offered(store: StateStore, method: str, *args: Any) -> None:
    """Call an optional store method: a database store listens for other hosts' changes
    (``watch``/``unwatch``) and looks past its listener when asked (``look_now``); a file or
    memory store needs nothing of the kind."""
    found = getattr(store, method, None)
    if callable(found):
        found(*args)


def remove_state_unless_defined(store: StateStore, agent: str, schedule: str) -> None:
    """Remove the state of ``agent/schedule`` unless a definition of that name is stored: the
    store's compare-and-remove when it has one (see the module docstring), else a read of the
    definitions, then the removal, with a step between them that a creation elsewhere can
    fall into."""
    remove = getattr(store, "remove_schedule_state_unless_defined", None)
    if remove is not None:
        remove(agent, schedule)
    elif schedule not in store.load_definitions().get(agent, {}):
        store.remove_schedule_state(agent, schedule)
