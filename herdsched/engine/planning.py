"""Planning: every schedule's entry, the heap of due times, and when a schedule is due.

Nothing here takes a lock, starts a thread or touches the store: the scheduler calls it while
holding its own lock, and decides what to persist. The heap holds ``(due, seq, agent, name,
version)``; changing an entry's plan bumps its version, which turns its older heap items stale
(they are dropped when they reach the top, or all at once when they outnumber the entries)
instead of searching the heap.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import random
from datetime import datetime, tzinfo

import attrs

from herdsched.engine.settings import EngineSettings
from herdsched.models import Schedule, ScheduleState, SkipReason, Status
from herdsched.policy import CatchUpPlan, catch_up_plan
from herdsched.runner import Run

__all__ = ["Entry", "Plan", "due_after_downtime", "fresh_due"]

_HeapItem = tuple[datetime, int, str, str, int]
_STALE_ALLOWANCE = 64  # stale heap items tolerated beyond one per entry before a rebuild


@attrs.define(eq=False)
class Entry:
    """One schedule as the scheduler holds it: definition, state, plan and the run in flight.

    ``due`` is when the timer fires it next (``None``: not planned), ``scheduled_for`` the slot
    that run stands for (it differs from ``due`` after a catch-up or a backoff).
    """

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
    #: whether the timer said that it has nothing to run (said once, until it runs)
    told_no_job: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.agent, self.name)

    @property
    def planned_by_its_run(self) -> bool:
        """Whether the run going on plans this schedule when it is settled, so a change to its
        status leaves the plan to it. A timed-out run was settled at its timeout while its job
        may go on: a change then plans the schedule itself."""
        run = self.run
        return run is not None and not (run.finalized and run.settled_by is None)

    @property
    def schedulable(self) -> bool:
        """Whether the timer may plan it: a timer cadence, enabled, and not paused, disabled or
        completed."""
        return (
            self.schedule.fires_on_timer
            and self.schedule.enabled
            and self.state.status in (Status.IDLE, Status.RUNNING)
        )


class Plan:
    """The entries by key, the heap of their due times, and the due ones waiting for a slot."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], Entry] = {}
        self._heap: list[_HeapItem] = []
        self._seq = itertools.count()
        # due schedules whose agent is full, per agent, in due order
        self._waiting: dict[str, collections.deque[_HeapItem]] = {}

    def set_due(self, entry: Entry, due: datetime | None, scheduled_for: datetime | None) -> None:
        """Plan ``entry`` for ``due`` (``None``: unplanned); on the heap unless it is running."""
        entry.version += 1
        entry.due = due
        entry.scheduled_for = scheduled_for if due is not None else None
        if due is not None and entry.run is None:
            self.push(entry)

    def unplan(self, entry: Entry) -> None:
        """Take ``entry`` off the plan (its heap and waiting items turn stale)."""
        entry.version += 1
        entry.due = None

    def push(self, entry: Entry) -> None:
        assert entry.due is not None
        item = (entry.due, next(self._seq), entry.agent, entry.name, entry.version)
        heapq.heappush(self._heap, item)
        if len(self._heap) > 2 * len(self.entries) + _STALE_ALLOWANCE:
            self._drop_stale()

    def _drop_stale(self) -> None:
        """Rebuild the heap from its current items: a daily schedule paused and resumed all
        day would otherwise keep every stale item until the next day."""
        self._heap = [item for item in self._heap if self._current(item) is not None]
        heapq.heapify(self._heap)

    def _current(self, item: _HeapItem) -> Entry | None:
        """The entry ``item`` stands for, or ``None`` when the item is stale."""
        entry = self.entries.get((item[2], item[3]))
        if entry is None or entry.version != item[4] or entry.due is None:
            return None
        return entry

    def next_due(self) -> datetime | None:
        """The earliest planned due time (stale items on top are dropped)."""
        while self._heap and self._current(self._heap[0]) is None:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def collect_due(self, now: datetime, settings: EngineSettings) -> list[str]:
        """Move everything due at ``now`` to its agent's waiting line; returns the agents with
        schedules waiting (ordered by their earliest due time when global slots are shared)."""
        while self._heap and self._heap[0][0] <= now:
            item = heapq.heappop(self._heap)
            self._waiting.setdefault(item[2], collections.deque()).append(item)
        # stale heads go first (a schedule paused while it waited): an agent is placed by its
        # first current item, and one with none left waits no more
        agents = [name for name in list(self._waiting) if self.first_waiting(name) is not None]
        if settings.max_total_concurrent is not None:
            agents.sort(key=lambda name: self._waiting[name][0])
        return agents

    def first_waiting(self, agent: str) -> Entry | None:
        """The agent's earliest waiting entry (stale items dropped), ``None`` when none waits."""
        queue = self._waiting.get(agent)
        while queue:
            entry = self._current(queue[0])
            if entry is not None:
                return entry
            queue.popleft()
        self._waiting.pop(agent, None)
        return None

    def take_waiting(self, agent: str) -> None:
        """Remove the agent's first waiting item (after :meth:`first_waiting` returned it)."""
        queue = self._waiting[agent]
        queue.popleft()
        if not queue:
            del self._waiting[agent]

    @property
    def anything_waiting(self) -> bool:
        return bool(self._waiting)

    def drop_waiting(self) -> None:
        """Nothing waits for a slot any more: a scheduler that stopped leading runs none of it,
        and the next lead plans every schedule afresh (``recover_all``)."""
        self._waiting.clear()

    def clear(self) -> None:
        self._heap.clear()
        self._waiting.clear()


def fresh_due(
    entry: Entry, now: datetime, zone: tzinfo, rng: random.Random, *, recompute: bool
) -> datetime | None:
    """Due time from the cadence (``recompute``) or from the persisted plan, never in the past.

    Recomputed, a cadence of wall-clock slots (a cron, an anchored interval) whose next slot
    after the last run has passed plans its first slot from now: that time was no slot of the
    cadence when it passed (the cadence or its zone changed since), so nothing was missed and
    nothing fires at once. An interval measured from the last run fires at once when it is
    overdue by its new length."""
    if not entry.schedulable:
        return None
    cadence = entry.schedule.cadence
    assert cadence is not None
    state = entry.state
    if not recompute and entry.due is not None:
        return entry.due
    if not recompute and state.next_run_at is not None:
        return max(state.next_run_at, now)
    if state.last_finished_at is not None and not cadence.runs_once:
        due = cadence.next_due(
            slot=state.last_slot_at or state.last_finished_at,
            finished_at=state.last_finished_at,
            now=now,
            zone=zone,
            rng=rng,
        )
        if due is not None and (due >= now or cadence.waits_elapsed_time):
            return max(due, now)
    return cadence.first_due(now, zone)


def due_after_downtime(
    entry: Entry,
    persisted: datetime,
    now: datetime,
    settings: EngineSettings,
    rng: random.Random,
) -> CatchUpPlan:
    """The catch-up decision for a due time that may have passed while nothing ran."""
    cadence = entry.schedule.cadence
    assert cadence is not None
    following = None
    if persisted <= now:
        following = cadence.next_due(
            slot=now, finished_at=now, now=now, zone=settings.timezone, rng=rng
        )
    policy = entry.schedule.catch_up or settings.catch_up
    return catch_up_plan(persisted, now, policy, settings.catch_up_window, following)
