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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol, runtime_checkable

import attrs

from herdsched.models import RejectedDefinition, RunRecord, ScheduleState

__all__ = [
    "USER_INTENT_STATUSES",
    "RunClaim",
    "StateStore",
    "TriggerRequest",
    "newest_first",
]

#: Statuses set by people (or auto-disable) that a pending run transition must not undo.
USER_INTENT_STATUSES = frozenset({"paused", "disabled", "completed"})

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


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
    prompt: str | None = None
    started_at: datetime | None = None


@attrs.frozen
class RunClaim:
    """A run about to start: what must be durable before its job runs (at most once per slot)."""

    agent: str
    schedule: str
    run_id: str
    run_at: datetime
    slot: datetime | None = None


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
        """Make every pending transition and run record durable now."""

    def flush_deadline(self) -> float | None:
        """Monotonic time by which :meth:`flush` should run, ``None`` when nothing is pending."""

    def refresh(self) -> bool:
        """Re-read if another process changed the data; returns whether anything changed.

        Also true when a change by another process was adopted since the previous call by any
        other read or write of this store, so a poller never misses one.
        """

    def claim_runs(self, claims: Sequence[RunClaim]) -> None:
        """Make ``claims`` durable now, cheaply (their transitions follow with the next flush)."""

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
        """Records newest first; all of the agent's schedules when ``schedule`` is None."""

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
    ) -> None:
        """Store one definition; durable when it returns.

        The preconditions are checked in the same locked write, against what every process
        wrote (compare-and-set): ``exists=False`` refuses a name that is taken
        (:class:`~herdsched.errors.ConflictError`), ``exists=True`` one that is gone
        (:class:`~herdsched.errors.ScheduleNotFoundError`), and ``owner`` a definition owned by
        someone else (:class:`~herdsched.errors.UnauthorizedError`).
        """

    def delete_definition(self, agent: str, schedule: str, *, owner: str | None = None) -> None:
        """Remove one definition (no error when absent); durable when it returns.

        ``owner``: refuse (``UnauthorizedError``) when the stored definition is someone else's.
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

    # -- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        """Flush and release resources; the store may not be used afterwards."""
