"""Capacity: how many jobs run per agent and in all, against ``max_concurrent`` and
``max_total_concurrent``.

One object instead of counters kept by hand in several places: a run takes a slot when it is
dispatched and gives it back when its job's thread ends (a timed-out job keeps its slot until
then: threads cannot be killed). Not thread-safe by itself; the scheduler holds its lock.
"""

from __future__ import annotations

import collections

__all__ = ["Capacity"]


class Capacity:
    """Running jobs per agent and in all."""

    def __init__(self, max_total: int | None) -> None:
        self.max_total = max_total
        self._per_agent: collections.Counter[str] = collections.Counter()
        self.total = 0

    def running(self, agent: str) -> int:
        return self._per_agent[agent]

    def is_full(self, agent: str, max_concurrent: int) -> bool:
        """Whether ``agent`` (or the whole scheduler) has no free slot."""
        return self._per_agent[agent] >= max_concurrent or self.fleet_is_full()

    def why_full(self, agent: str, max_concurrent: int) -> str | None:
        """Which limit leaves ``agent`` no free slot, in words (``None``: it has one)."""
        if self._per_agent[agent] >= max_concurrent:
            return f"agent {agent!r} is at capacity"
        if self.fleet_is_full():
            return "the scheduler is at max_total_concurrent"
        return None

    def fleet_is_full(self) -> bool:
        """Whether ``max_total_concurrent`` jobs run."""
        return self.max_total is not None and self.total >= self.max_total

    def take(self, agent: str) -> None:
        self._per_agent[agent] += 1
        self.total += 1

    def give_back(self, agent: str) -> None:
        self._per_agent[agent] -= 1
        self.total -= 1
        if not self._per_agent[agent]:
            del self._per_agent[agent]
