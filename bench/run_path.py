"""CPU of one run's path, on one thread: ``python -m bench.run_path [--schedules N] [--rounds R]``.

Scenario 1's burst (N interval schedules due at once, one agent with 10 slots, no-op jobs) with
the timer's dispatch and the workers' runs done one after the other on the calling thread, with
a fake clock: ``_fire_due`` claims every due run ahead into the agent's ready queue, then
``_drain`` runs them all. With no second thread there are no GIL hand-offs and no lock waits, so
the figure moves only with the code on the path (and the machine's speed: compare the minimum
over the rounds of two commits measured one after the other). The YAML store's figure includes
the claims' fsyncs, which the threaded scheduler overlaps with running jobs. Group commits are
left out (``commit_delay`` is huge); ``python -m bench.cpu_split`` measures them.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import herdsched.scheduler as engine
from herdsched import Agent, Schedule, ThreadedScheduler
from herdsched.testing import FakeClock

_ANCHOR = datetime(2020, 1, 1, tzinfo=timezone.utc)


def measure(persistent: bool, schedules: int, rounds: int) -> tuple[list[float], list[float]]:
    """Microseconds per run of each round: the whole path, and the timer's dispatch alone."""
    saved = engine._LOOKAHEAD
    engine._LOOKAHEAD = schedules  # every due run is dispatched ahead in the pass
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=timezone.utc))
    totals: list[float] = []
    timer: list[float] = []
    try:
        with tempfile.TemporaryDirectory(prefix="herdsched-path-") as workdir:
            scheduler = ThreadedScheduler(
                state_dir=Path(workdir) if persistent else None,
                clock=clock,
                commit_delay=1e9,
                max_sleep=1e9,
            )
            every = Schedule.interval(1, anchor=_ANCHOR)
            scheduler.add_agent(
                Agent(
                    "bench",
                    max_concurrent=10,
                    job=lambda info: None,
                    schedules={f"s{i}": every for i in range(schedules)},
                )
            )
            scheduler.start()
            scheduler._ensure_drain = lambda name: None  # type: ignore[method-assign]
            for _ in range(rounds + 3):  # the first rounds warm up
                clock.advance(1)
                began = time.perf_counter()
                scheduler._fire_due(clock.now(), clock.monotonic())
                dispatched = time.perf_counter()
                scheduler._loops["bench"] += 1
                scheduler._drain("bench")
                ended = time.perf_counter()
                if scheduler._running or scheduler._ready.get("bench"):
                    raise RuntimeError("runs were left over: the harness no longer fits")
                totals.append((ended - began) * 1e6 / schedules)
                timer.append((dispatched - began) * 1e6 / schedules)
            scheduler.stop()
    finally:
        engine._LOOKAHEAD = saved
    return totals[3:], timer[3:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run_path", description=__doc__)
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    for persistent in (False, True):
        totals, timer = measure(persistent, args.schedules, args.rounds)
        print(
            f"{'YAML store' if persistent else 'in memory'}: {min(totals):.1f} µs per run "
            f"(minimum of {len(totals)} rounds; median {statistics.median(totals):.1f}), "
            f"of which the timer's dispatch {min(timer):.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
