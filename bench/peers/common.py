"""Pieces the adapters share: the lateness sample, the settle wait, job counting."""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import Any

from bench.measure import quantile_points, summarize_ms

__all__ = [
    "GRID_ANCHOR",
    "READY_LINE",
    "Countdown",
    "LatenessWindow",
    "await_start",
    "lateness_result",
    "settle_samples",
]

#: What a writer process prints once it is set up; the runner answers with the start time.
READY_LINE = "BENCH-READY"

#: Every library's interval grid starts here (2020-01-01T00:00:00Z), so due times coincide.
GRID_ANCHOR = 1_577_836_800.0


class Countdown:
    """Thread-safe counter that sets :attr:`done` when it reaches ``target``."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.done = threading.Event()
        self.reached_at: float | None = None
        self._lock = threading.Lock()

    def tick(self, *_: Any) -> None:
        with self._lock:
            self.count += 1
            if self.count >= self.target and not self.done.is_set():
                self.reached_at = time.perf_counter()
                self.done.set()


class LatenessWindow:
    """The measured window: due times in ``[start, end)`` count, earlier ones are warm-up.

    The window starts on a grid point (:data:`GRID_ANCHOR` + k·interval) after setup, plus
    ``warmup_slots`` intervals, so every library is measured on the same due times.
    """

    def __init__(self, interval: float, seconds: float, warmup_slots: int) -> None:
        self.interval = interval
        steps = math.ceil((time.time() + 0.05 - GRID_ANCHOR) / interval)
        first_grid = GRID_ANCHOR + steps * interval
        self.start = first_grid + warmup_slots * interval
        self.end = self.start + seconds
        self.slots = max(1, round(seconds / interval))


def settle_samples(samples: list[tuple[float, float]], end: float, quiet: float) -> None:
    """Wait until no run due before ``end`` has started for ``quiet`` seconds (at most 30 s).

    Stopping right at the window's end would drop the latest (largest) lateness values.
    """
    deadline = time.time() + 30.0
    seen = -1
    quiet_since = time.time()
    while time.time() < deadline:
        count = sum(1 for due, _ in list(samples) if due < end)
        now = time.time()
        if count != seen:
            seen, quiet_since = count, now
        elif now - quiet_since >= quiet:
            return
        time.sleep(0.05)


def lateness_result(
    samples: list[tuple[float, float]],
    window: LatenessWindow,
    schedules: int,
    cpu_s: float,
    wakeups: int | None,
) -> dict[str, Any]:
    """Lateness (start − due) of the runs due within the window, with CPU and wakeups."""
    late = [started - due for due, started in list(samples) if window.start <= due < window.end]
    result: dict[str, Any] = dict(summarize_ms(late))
    result.update(
        runs=len(late),
        expected_runs=schedules * window.slots,
        cpu_s=cpu_s,
        wakeups=wakeups,
        quantiles_ms=quantile_points(late),
    )
    return result


def await_start() -> float:
    """Tell the runner this process is ready and wait for the common start (wall time).

    Several writer processes must overlap for the whole window whatever their start-up time,
    so the runner waits until all are ready before it names the start.
    """
    print(READY_LINE, flush=True)
    line = sys.stdin.readline()
    if not line.strip():
        raise RuntimeError("the runner closed stdin without naming a start time")
    return float(line)
