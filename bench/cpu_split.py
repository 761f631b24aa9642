"""Where a run's CPU goes: ``python -m bench.cpu_split [--schedules N] [--seconds S]``.

Runs scenario 1 of the benchmark (N interval schedules on a shared one-second grid, no-op jobs,
one agent with 10 slots) in this process, in memory and with the YAML store, and reads each
thread's user and system CPU time from ``/proc/self/task`` (Linux only). It prints the CPU
microseconds per run spent by the timer thread, the worker threads and the flusher thread, with
the lateness p50/p99 of the same window, so a change to the hot path can be judged by where its
cost moved, not only by the total.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo

_ANCHOR = datetime(2020, 1, 1, tzinfo=timezone.utc)


def _thread_cpu() -> collections.Counter[str]:
    """Seconds of user and system CPU per kind of thread (timer, flusher, worker, other)."""
    tick = os.sysconf("SC_CLK_TCK")
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    totals: collections.Counter[str] = collections.Counter()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        name = names.get(int(tid), "")
        if name.startswith("herdsched-timer"):
            kind = "timer"
        elif name.startswith("herdsched-flusher"):
            kind = "flusher"
        elif name.startswith("herdsched-"):
            kind = "workers"
        else:
            kind = "other"
        totals[f"{kind} user"] += int(fields[11]) / tick
        totals[f"{kind} sys"] += int(fields[12]) / tick
    return totals


def measure(
    persistent: bool, schedules: int, seconds: float, warmup: float = 2.5
) -> dict[str, Any]:
    """One variant; ``warmup`` seconds (startup, the first grid points) are not measured."""
    lateness: list[float] = []

    def job(info: TriggerInfo) -> None:
        assert info.scheduled_for is not None
        lateness.append(time.time() - info.scheduled_for.timestamp())

    with tempfile.TemporaryDirectory(prefix="herdsched-cpu-") as workdir:
        scheduler = ThreadedScheduler(state_dir=Path(workdir) if persistent else None)
        every = Schedule.interval(1, anchor=_ANCHOR)
        scheduler.add_agent(
            Agent(
                "bench",
                max_concurrent=10,
                job=job,
                schedules={f"s{i}": every for i in range(schedules)},
            )
        )
        scheduler.start()
        time.sleep(warmup)
        lateness.clear()
        before, cpu = _thread_cpu(), time.process_time()
        time.sleep(seconds)
        after, cpu = _thread_cpu(), time.process_time() - cpu
        runs = len(lateness)
        window = sorted(lateness)
        scheduler.stop()
    per_run = {key: 1e6 * (after[key] - before[key]) / runs for key in sorted(after)}
    return {
        "variant": "YAML store" if persistent else "in memory",
        "runs": runs,
        "cpu_us_per_run": 1e6 * cpu / runs,
        "p50_ms": 1e3 * statistics.median(window),
        "p99_ms": 1e3 * window[int(len(window) * 0.99)],
        "threads_us_per_run": per_run,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_split", description=__doc__)
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.5)
    args = parser.parse_args(argv)
    if not os.path.isdir("/proc/self/task"):
        print("needs Linux (/proc/self/task)", file=sys.stderr)
        return 2
    for persistent in (False, True):
        result = measure(persistent, args.schedules, args.seconds, args.warmup)
        print(
            f"{result['variant']}: {result['runs']} runs, {result['cpu_us_per_run']:.0f} µs CPU "
            f"per run, lateness p50 {result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms"
        )
        for key, value in result["threads_us_per_run"].items():
            if value >= 0.5:
                print(f"  {key:<13} {value:6.0f} µs per run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
