"""The plan's heap: changes of plan leave stale items, which must not pile up."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from herdsched.engine.planning import Entry, Plan
from herdsched.engine.settings import EngineSettings
from herdsched.models import Schedule, ScheduleState

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


def _plan_with(count: int) -> tuple[Plan, list[Entry]]:
    plan = Plan()
    entries = []
    for n in range(count):
        entry = Entry("bot", f"s{n}", Schedule.cron("0 9 * * *"), ScheduleState())
        plan.entries[entry.key] = entry
        plan.set_due(entry, T0 + timedelta(days=1), T0 + timedelta(days=1))
        entries.append(entry)
    return plan, entries


def test_pausing_and_resuming_all_day_keeps_the_heap_bounded() -> None:
    """Before, each pause/resume of a daily schedule left an item on the heap until the next
    day: 10,000 changes, 10,000 items."""
    plan, entries = _plan_with(10)
    for _ in range(1_000):
        for entry in entries:
            plan.unplan(entry)
            plan.set_due(entry, T0 + timedelta(days=1), T0 + timedelta(days=1))
    assert len(plan._heap) <= 2 * len(entries) + 64


def test_dropping_stale_items_keeps_every_current_one_in_due_order() -> None:
    plan, entries = _plan_with(100)
    for n, entry in enumerate(entries):  # each re-planned many times, to a due time of its own
        for _ in range(5):
            plan.set_due(entry, T0 + timedelta(minutes=100 - n), T0)
    del plan.entries[entries[0].key]  # a removed schedule's item turns stale too
    due = []
    while (first := plan.next_due()) is not None:
        agents = plan.collect_due(first, EngineSettings(timezone=timezone.utc))
        assert agents == ["bot"]
        entry = plan.first_waiting("bot")
        assert entry is not None
        due.append(entry.name)
        plan.take_waiting("bot")
        plan.unplan(entry)
    assert due == [f"s{n}" for n in range(99, 0, -1)]


def test_agents_sharing_global_slots_are_ordered_by_their_first_current_waiting_item() -> None:
    """With ``max_total_concurrent``, agents were ordered by the head of their waiting line
    even when it was stale (a schedule paused while it waited): a2 (due 10:10) went before b1
    (due 10:05) on the strength of a paused a1 (due 10:01)."""
    plan = Plan()
    due = {"a1": 1, "a2": 10, "b1": 5}
    entries = {}
    for name, minute in due.items():
        entry = Entry(name[0], name, Schedule.interval("1h"), ScheduleState())
        plan.entries[entry.key] = entry
        plan.set_due(entry, T0 + timedelta(minutes=minute), None)
        entries[name] = entry
    settings = EngineSettings(timezone=timezone.utc, max_total_concurrent=1)
    assert plan.collect_due(T0 + timedelta(minutes=15), settings) == ["a", "b"]
    plan.unplan(entries["a1"])  # paused while it waited: its item is stale
    assert plan.collect_due(T0 + timedelta(minutes=15), settings) == ["b", "a"]
    assert plan.first_waiting("b") is entries["b1"]
