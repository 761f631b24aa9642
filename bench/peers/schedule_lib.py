"""The ``schedule`` library in the scenarios that fit it (it keeps nothing on disk).

``schedule`` has no thread of its own: the documented pattern is a loop calling
``run_pending()``. The loop here sleeps exactly until the next job (``idle_seconds``, capped at
60 s like herdsched's ``max_sleep``), the best case for ``schedule``; its wakeups are the loop's
passes. Jobs run one after another on that loop's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import schedule as schedule_lib

from bench.measure import cpu_seconds, settled_rss, sleep_until
from bench.peers.common import Countdown, LatenessWindow, lateness_result, settle_samples

__all__ = ["burst", "cold_start", "idle", "lateness"]

MAX_SLEEP = 60.0


class Loop:
    """The ``run_pending()`` loop on its own daemon thread."""

    def __init__(self, scheduler: schedule_lib.Scheduler) -> None:
        self.scheduler = scheduler
        self.wakeups = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="schedule-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.is_set():
            idle = self.scheduler.idle_seconds
            wait = MAX_SLEEP if idle is None else min(idle, MAX_SLEEP)
            if wait > 0 and self._stop.wait(wait):
                return
            self.wakeups += 1
            self.scheduler.run_pending()


def _add(
    scheduler: schedule_lib.Scheduler, seconds: float, func: Callable[..., Any], *args: Any
) -> schedule_lib.Job:
    return scheduler.every(seconds).seconds.do(func, *args)


def _noop(*_: Any) -> None:
    """The job of every scenario."""


def lateness(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """N jobs every interval, first run on the shared grid; lateness = start − ``next_run``.

    ``schedule`` plans the next run from the end of the previous one, so after the first
    second the jobs drift apart; the lateness of each run is still start − its due time.
    """
    count = params["lateness_schedules"]
    interval = params["lateness_interval"]
    samples: list[tuple[float, float]] = []

    def job(holder: list[schedule_lib.Job]) -> None:
        started = time.time()
        due = holder[0].next_run
        assert due is not None
        samples.append((due.timestamp(), started))

    scheduler = schedule_lib.Scheduler()
    for _ in range(count):
        holder: list[schedule_lib.Job] = []
        holder.append(_add(scheduler, interval, job, holder))
    window = LatenessWindow(interval, params["lateness_seconds"], params["lateness_warmup"])
    first = datetime.fromtimestamp(window.start - params["lateness_warmup"] * interval)
    for scheduled in scheduler.jobs:
        scheduled.next_run = first
    loop = Loop(scheduler)
    loop.start()
    sleep_until(window.start)
    checks, cpu = loop.wakeups, cpu_seconds()
    sleep_until(window.end)
    cpu = cpu_seconds() - cpu
    checks = loop.wakeups - checks
    settle_samples(samples, window.end, params["lateness_settle"])
    loop.stop()
    return lateness_result(samples, window, count, cpu, checks)


def burst(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """N jobs all due when the loop starts; time until all ran."""
    count = params["burst_schedules"]
    finished = Countdown(count)
    scheduler = schedule_lib.Scheduler()
    past = datetime.now() - timedelta(seconds=1)
    for _ in range(count):
        _add(scheduler, 3600, finished.tick).next_run = past
    loop = Loop(scheduler)
    cpu = cpu_seconds()
    began = time.perf_counter()
    loop.start()
    complete = finished.done.wait(params["case_timeout"])
    ran = (finished.reached_at or time.perf_counter()) - began
    cpu = cpu_seconds() - cpu
    loop.stop()
    return {
        "jobs": finished.count,
        "complete": complete,
        "ran_s": ran,
        "durable_s": None,
        "done_s": ran,
        "cpu_s": cpu,
        "wakeups": loop.wakeups,
    }


def idle(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """N jobs next due in an hour: loop passes and CPU seconds over the window."""
    scheduler = schedule_lib.Scheduler()
    for _ in range(params["idle_schedules"]):
        _add(scheduler, 3600, _noop)
    loop = Loop(scheduler)
    loop.start()
    time.sleep(params["idle_settle"])
    checks, cpu, began = loop.wakeups, cpu_seconds(), time.monotonic()
    time.sleep(params["idle_seconds"])
    cpu = cpu_seconds() - cpu
    elapsed = time.monotonic() - began
    checks = loop.wakeups - checks
    loop.stop()
    return {"seconds": elapsed, "wakeups": checks, "cpu_s": cpu, "max_sleep": MAX_SLEEP}


def cold_start(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Build N jobs (the first due now), start the loop, wait for the first job; memory."""
    count = params["cold_schedules"]
    baseline = settled_rss()
    first = Countdown(1)
    began = time.perf_counter()
    scheduler = schedule_lib.Scheduler()
    _add(scheduler, 3600, first.tick).next_run = datetime.now()
    for _ in range(1, count):
        _add(scheduler, 3600, _noop)
    registered = time.perf_counter()
    loop = Loop(scheduler)
    loop.start()
    complete = first.done.wait(params["case_timeout"])
    reached = first.reached_at or time.perf_counter()
    resident = settled_rss()
    loop.stop()
    return {
        "complete": complete,
        "register_s": registered - began,
        "start_to_first_s": reached - registered,
        "total_s": reached - began,
        "rss_per_schedule_b": (resident - baseline) / count,
        "rss_mb": resident / 2**20,
    }
