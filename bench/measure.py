"""Measuring helpers shared by every adapter: percentiles, CPU seconds, resident memory, waits.

CPU seconds come from :func:`time.process_time` (every thread of the process, user + system);
resident memory from psutil when it is installed, else from ``/proc/self/statm`` (Linux), else
the peak from :func:`resource.getrusage` (an upper bound, flagged as such).
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "cpu_seconds",
    "percentile",
    "quantile_points",
    "rss_bytes",
    "settled_rss",
    "sleep_until",
    "summarize_ms",
    "wait_for",
]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, linearly interpolated."""
    if not sorted_values:
        raise ValueError("percentile of an empty sample")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q!r}")
    position = (len(sorted_values) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = position - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


def summarize_ms(seconds: Sequence[float]) -> dict[str, float | int | None]:
    """p50, p99 and max of a sample of durations given in seconds, in milliseconds."""
    values = sorted(seconds)
    if not values:
        return {"samples": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    return {
        "samples": len(values),
        "p50_ms": percentile(values, 50) * 1000,
        "p99_ms": percentile(values, 99) * 1000,
        "max_ms": values[-1] * 1000,
    }


def quantile_points(seconds: Sequence[float], points: int = 400) -> list[float]:
    """At most ``points`` evenly spaced quantiles (in ms) of a sample: enough to draw its CDF."""
    values = sorted(seconds)
    if not values:
        return []
    if len(values) <= points:
        return [v * 1000 for v in values]
    return [percentile(values, 100 * i / (points - 1)) * 1000 for i in range(points)]


def cpu_seconds() -> float:
    """CPU seconds used by this process so far (all threads, user + system)."""
    return time.process_time()


def rss_bytes() -> tuple[int, str]:
    """Resident memory of this process now, and how it was measured."""
    try:
        import psutil
    except ImportError:
        pass
    else:
        return int(psutil.Process().memory_info().rss), "psutil"
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            resident_pages = int(handle.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE"), "statm"
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) * 1024, "peak"


def settled_rss() -> int:
    """Resident memory after a full garbage collection (so garbage is not counted)."""
    gc.collect()
    return rss_bytes()[0]


def sleep_until(wall_time: float) -> None:
    """Sleep until the wall clock (``time.time()``) reaches ``wall_time``."""
    while True:
        remaining = wall_time - time.time()
        if remaining <= 0:
            return
        time.sleep(min(remaining, 0.5))


def wait_for(predicate: Callable[[], Any], timeout: float, step: float = 0.002) -> bool:
    """Poll ``predicate`` every ``step`` seconds until it is true or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
    return True
