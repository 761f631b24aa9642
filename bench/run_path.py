"""CPU of one run's path without threads: ``python -m bench.run_path [--schedules N] [--rounds R]``.

Scenario 1's second (N interval schedules due at once, no-op jobs) on a fake clock, through the
public API only: the agent's ``executor_factory`` gives an executor that keeps what it is given
instead of running it, so one timer pass dispatches every due run (``max_concurrent=N``), and the
calling thread then runs them one after another. With no worker threads there are no GIL
hand-offs and no lock waits: the figures move with the code on the path, not with the threads
around it, and ``python -m bench.cpu_split`` (the same scenario on real threads) minus these
figures is what the hand-offs cost. Group commits are left out (``commit_delay`` is huge); the YAML
store's figure includes the claim's fsync, once per pass. Compare the minimum over the rounds of
two commits measured one after the other.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from herdsched import Agent, Schedule, ThreadedScheduler
from herdsched.testing import FakeClock

_ANCHOR = datetime(2020, 1, 1, tzinfo=timezone.utc)
_WARMUP_ROUNDS = 3


class _Holding(Executor):
    """An executor that keeps every call for the caller to run later."""

    def __init__(self, calls: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> None:
        self._calls = calls

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self._calls.append((fn, args))
        return Future()


def _wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("the timer did not dispatch the round: the harness no longer fits")
        time.sleep(0.0002)


def measure(persistent: bool, schedules: int, rounds: int) -> tuple[list[float], list[float]]:
    """Microseconds per run of each round: the timer's pass, and the runs on this thread."""
    calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=timezone.utc))
    passes: list[float] = []
    runs: list[float] = []
    with tempfile.TemporaryDirectory(prefix="herdsched-path-") as workdir:
        scheduler = ThreadedScheduler(
            state_dir=Path(workdir) if persistent else None,
            clock=clock,
            commit_delay=86_400,  # the longest: no commit while it measures
            max_sleep=86_400,  # the longest: the timer sleeps through the rounds
            poll_interval=None,
            executor_factory=lambda agent, size: _Holding(calls),
        )
        every = Schedule.interval(1, anchor=_ANCHOR)
        scheduler.add_agent(
            Agent(
                "bench",
                max_concurrent=schedules,
                job=lambda info: None,
                schedules={f"s{i}": every for i in range(schedules)},
            )
        )
        scheduler.start()
        for _ in range(rounds + _WARMUP_ROUNDS):
            assert clock.wait_for_waiters(1), "the timer thread is not waiting"
            began = time.perf_counter()
            clock.advance(1)  # the timer thread wakes and dispatches the second's runs
            _wait_for(lambda: len(calls) >= schedules and clock.waiters >= 1)
            dispatched = time.perf_counter()
            for fn, args in calls:
                fn(*args)
            ended = time.perf_counter()
            calls.clear()
            passes.append((dispatched - began) * 1e6 / schedules)
            runs.append((ended - dispatched) * 1e6 / schedules)
        scheduler.stop()
    return passes[_WARMUP_ROUNDS:], runs[_WARMUP_ROUNDS:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run_path", description=__doc__)
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    for persistent in (False, True):
        passes, runs = measure(persistent, args.schedules, args.rounds)
        totals = [p + r for p, r in zip(passes, runs, strict=True)]
        print(
            f"{'YAML store' if persistent else 'in memory'}: {min(totals):.1f} µs per run "
            f"(min of {args.rounds} rounds; median {statistics.median(totals):.1f}): "
            f"timer pass {min(passes):.1f}, the run on its worker {min(runs):.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
