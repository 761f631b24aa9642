"""A state store that keeps everything in memory: for notebooks, tests and throwaway runs.

Nothing survives the process; everything else (semantics, bounded history, trigger requests)
matches :class:`~herdsched.store.yaml_store.YamlStateStore`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from attrs import evolve

from herdsched.clock import Clock, SystemClock
from herdsched.models import RejectedDefinition, RunRecord, ScheduleState
from herdsched.runner import new_run_id
from herdsched.store.base import (
    Lease,
    Precondition,
    RunClaim,
    TriggerRequest,
    check_history_limit,
    check_max_run_history,
    check_ttl,
    leaves_user_intent,
    newest_first,
)
from herdsched.store.definitions import check_preconditions, merge_definition
from herdsched.store.lease_rules import check_fence, grant, renewed

__all__ = ["MemoryStateStore"]


class MemoryStateStore:
    """In-memory :class:`~herdsched.store.base.StateStore` (every write is "durable" at once)."""

    def __init__(self, *, max_run_history: int = 20, clock: Clock | None = None) -> None:
        check_max_run_history(max_run_history)
        self.max_run_history = max_run_history
        self._lock = threading.Lock()
        self._states: dict[str, dict[str, ScheduleState]] = {}
        self._history: dict[tuple[str, str], deque[RunRecord]] = {}
        self._definitions: dict[str, dict[str, dict[str, Any]]] = {}
        self._requests: list[TriggerRequest] = []
        self._rejected: list[RejectedDefinition] = []
        self.clock: Clock = clock if clock is not None else SystemClock()
        # the lease as stored, the highest epoch handed out, and the lease this store gave its
        # scheduler (the fence of its claims); no process outlives the store, so a holder is
        # dead only once it released the lease
        self._lease: Lease | None = None
        self._last_epoch = 0
        self._held: Lease | None = None

    def take_clock(self, clock: Clock) -> bool:
        """Run on ``clock`` from now on unless a lease was handed out already (on the old
        clock's time); whether it does. A scheduler on a ``FakeClock`` given a memory store
        built without one makes the store keep the scheduler's time."""
        with self._lock:
            if self._last_epoch:
                return False
            self.clock = clock
            return True

    def get_schedule_state(self, agent: str, schedule: str) -> ScheduleState:
        with self._lock:
            return self._states.get(agent, {}).get(schedule, ScheduleState())

    def get_agent_schedule_states(self, agent: str) -> dict[str, ScheduleState]:
        with self._lock:
            return dict(self._states.get(agent, {}))

    def get_all_schedule_states(self) -> dict[str, dict[str, ScheduleState]]:
        with self._lock:
            return {agent: dict(states) for agent, states in self._states.items()}

    def update_schedule_state(self, agent: str, schedule: str, **changes: Any) -> ScheduleState:
        return self._apply(agent, schedule, changes, transition=False)

    def record_transition(self, agent: str, schedule: str, **changes: Any) -> ScheduleState:
        """Like :meth:`update_schedule_state`, but never leaves a user-intent status."""
        return self._apply(agent, schedule, changes, transition=True)

    def _apply(
        self, agent: str, schedule: str, changes: dict[str, Any], *, transition: bool
    ) -> ScheduleState:
        with self._lock:
            states = self._states.setdefault(agent, {})
            current = states.get(schedule) or ScheduleState()
            if transition and leaves_user_intent(current, changes):
                del changes["status"]
            updated = evolve(current, **changes)
            states[schedule] = updated
            return updated

    def remove_schedule_state(self, agent: str, schedule: str) -> None:
        with self._lock:
            self._states.get(agent, {}).pop(schedule, None)

    def remove_schedule_state_unless_defined(self, agent: str, schedule: str) -> None:
        """Nothing is ever pending here: a namesake's state is all there is of that name."""
        with self._lock:
            if schedule not in self._definitions.get(agent, {}):
                self._states.get(agent, {}).pop(schedule, None)

    def purge_history(self, agent: str, schedule: str) -> None:
        with self._lock:
            self._history.pop((agent, schedule), None)

    def claim_runs(self, claims: Sequence[RunClaim]) -> None:
        """Nothing outlives the process: claims need no journal, only the lease's fence."""
        self._fence()

    def load_claims(self) -> list[RunClaim]:
        return []

    def flush(self) -> None:
        """Nothing is ever pending in memory (so there is nothing to fence)."""

    def _fence(self) -> None:
        with self._lock:
            if self._held is not None or self._last_epoch:
                check_fence(self._held, self._lease, self)

    # -- leadership lease ---------------------------------------------------------------
    def acquire_lease(self, holder: str, ttl: float) -> Lease | None:
        """Hand the lease to ``holder`` unless another holder has it and renewed it in time."""
        ttl = check_ttl(ttl)
        with self._lock:
            lease = grant(
                self._lease,
                holder,
                ttl,
                self.clock.now(),
                holder_dead=False,
                last_epoch=self._last_epoch,
            )
            if lease is not None:
                self._lease = self._held = lease
                self._last_epoch = max(self._last_epoch, lease.epoch)
            return lease

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend ``lease``; ``LeadershipLostError`` when another holder took over."""
        ttl = check_ttl(ttl)
        with self._lock:
            check_fence(lease, self._lease, self)
            self._lease = self._held = renewed(lease, ttl, self.clock.now())
            return self._lease

    def release_lease(self, lease: Lease) -> None:
        with self._lock:
            if self._lease is not None and self._lease.holder == lease.holder:
                self._lease = None
            if self._held is not None and self._held.holder == lease.holder:
                self._held = None

    def current_lease(self) -> Lease | None:
        with self._lock:
            return self._lease

    def flush_deadline(self) -> float | None:
        return None

    def refresh(self) -> bool:
        return False

    def append_run(self, record: RunRecord) -> None:
        with self._lock:
            key = (record.agent, record.schedule)
            history = self._history.setdefault(key, deque(maxlen=self.max_run_history))
            for earlier in [r for r in history if r.run_id == record.run_id]:
                history.remove(earlier)  # a later record of a run replaces the earlier one
            history.appendleft(record)

    def get_history(
        self, agent: str, schedule: str | None = None, limit: int = 20
    ) -> list[RunRecord]:
        check_history_limit(limit)
        with self._lock:
            records = [
                record
                for (owner, name), history in self._history.items()
                if owner == agent and (schedule is None or name == schedule)
                for record in reversed(history)  # oldest first, as appended
            ]
        return newest_first(records)[:limit]

    def load_definitions(self) -> dict[str, dict[str, dict[str, Any]]]:
        with self._lock:
            return {
                a: {n: dict(d) for n, d in defs.items()} for a, defs in self._definitions.items()
            }

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
        with self._lock:
            current = self._definitions.get(agent, {}).get(schedule)
            check_preconditions(
                current, agent, schedule, exists=exists, owner=owner, base=base, check=check
            )
            merged = merge_definition(current, base, definition)
            self._definitions.setdefault(agent, {})[schedule] = merged

    def delete_definition(
        self,
        agent: str,
        schedule: str,
        *,
        owner: str | None = None,
        check: Precondition | None = None,
    ) -> None:
        with self._lock:
            current = self._definitions.get(agent, {}).get(schedule)
            check_preconditions(current, agent, schedule, exists=None, owner=owner, check=check)
            self._definitions.get(agent, {}).pop(schedule, None)

    def reject_definition(self, agent: str, schedule: str, reason: str) -> None:
        with self._lock:
            current = self._definitions.get(agent, {}).pop(schedule, None)
            if current is not None:
                at = datetime.now(timezone.utc)
                self._rejected.append(RejectedDefinition(agent, schedule, reason, at, current))

    def rejected_definitions(self) -> list[RejectedDefinition]:
        with self._lock:
            return list(self._rejected)

    def request_trigger(self, agent: str, schedule: str, *, prompt: str | None = None) -> str:
        request = TriggerRequest(new_run_id(), agent, schedule, datetime.now(timezone.utc), prompt)
        with self._lock:
            self._requests.append(request)
        return request.run_id

    def trigger_requests(self) -> list[TriggerRequest]:
        with self._lock:
            return list(self._requests)

    def mark_trigger_started(self, run_id: str, at: datetime) -> None:
        with self._lock:
            self._requests = [
                evolve(r, started_at=at) if r.run_id == run_id else r for r in self._requests
            ]

    def settle_trigger_request(self, run_id: str) -> None:
        with self._lock:
            self._requests = [r for r in self._requests if r.run_id != run_id]

    def close(self) -> None:
        """Nothing to release."""
