"""The agent-fleet scenario: its plan and measurements, shared by the herdsched and APScheduler
adapters.

A fleet of ``fleet_agents`` agents, each with ``fleet_intervals`` interval schedules (every
``fleet_interval_min``..``fleet_interval_max`` whole seconds, chosen by a seeded RNG, first due at a
seeded point within one interval after the window starts) and one cron schedule (every
``fleet_cron_seconds``: every minute at the full scale). Each run's job sleeps
``fleet_job_min``..``fleet_job_max`` seconds, drawn from a seeded RNG per schedule, so every library
runs the same sequence of job lengths.

Measured in the window ``[start, start + fleet_seconds)``:

- lateness of every run due in the window (job start − the time it was due, as the job or the
  executor sees it), over all runs and over the runs whose agent had a free slot when they fell
  due (a run that waited for one of its agent's ``max_concurrent`` slots is late by design, not by
  the engine). A slot counts as taken from the moment another run of the agent fell due (or
  started, if sooner) until its job returned, judged from the jobs' own times: a run due earlier
  that still waits takes the next slot that frees. The p99 of the runs with a free slot is also
  given apart for the runs due at a cron instant (every agent's cron schedule at once: a burst of
  ``fleet_agents`` runs) and for the others, so the report shows which of the two sets it;
- the peak number of threads alive in the process (``threading.active_count()``, and the OS's
  count from psutil beside it), sampled every 50 ms by the main thread (no sampling thread of its
  own) from ``start()`` until the last runs of the window have started;
- process CPU seconds over the window.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.measure import cpu_seconds, quantile_points, summarize_ms

__all__ = [
    "FleetPlan",
    "FleetRecorder",
    "FleetSchedule",
    "configure_jobs",
    "cron_every",
    "sleep_for_run",
]

#: Threads a herdsched process may have beyond its agents' slots: main, timer, flusher.
EXTRA_THREADS = 3

_SAMPLE_STEP = 0.05


@dataclass(frozen=True)
class FleetSchedule:
    """One schedule of the fleet: an interval one (``every`` seconds) or the cron one."""

    agent: str
    name: str
    every: int | None  # seconds between runs; None for the cron schedule
    first_due: float | None  # wall time of the first run of an interval schedule


@dataclass(frozen=True)
class FleetPlan:
    """Every agent and schedule of one fleet run, drawn from the seeded RNG."""

    start: float  # wall time the measured window starts
    end: float
    agents: tuple[str, ...]
    schedules: tuple[FleetSchedule, ...]
    max_concurrent: int
    cron_seconds: int
    seed: int

    @property
    def total_slots(self) -> int:
        """The sum of every agent's ``max_concurrent``: the fleet's thread budget for jobs."""
        return len(self.agents) * self.max_concurrent

    def of_agent(self, agent: str) -> list[FleetSchedule]:
        return [s for s in self.schedules if s.agent == agent]

    @classmethod
    def build(cls, params: dict[str, Any], start: float) -> FleetPlan:
        """The fleet for these parameters; the same seed gives every library the same fleet."""
        rng = random.Random(params["fleet_seed"])
        low, high = params["fleet_interval_min"], params["fleet_interval_max"]
        agents = tuple(f"agent{i:03d}" for i in range(params["fleet_agents"]))
        schedules: list[FleetSchedule] = []
        for agent in agents:
            for k in range(params["fleet_intervals"]):
                every = rng.randint(low, high)
                first = start + rng.random() * every
                schedules.append(FleetSchedule(agent, f"every{k}", every, first))
            schedules.append(FleetSchedule(agent, "cron", None, None))
        return cls(
            start=start,
            end=start + params["fleet_seconds"],
            agents=agents,
            schedules=tuple(schedules),
            max_concurrent=params["fleet_max_concurrent"],
            cron_seconds=params["fleet_cron_seconds"],
            seed=params["fleet_seed"],
        )


def cron_every(seconds: int) -> tuple[str, dict[str, str]]:
    """The cron schedule as herdsched's expression and APScheduler's ``CronTrigger`` fields."""
    if seconds == 60:
        return "* * * * *", {"second": "0"}
    if seconds < 1 or 60 % seconds:
        raise ValueError(f"fleet_cron_seconds must divide 60 or be 60, got {seconds!r}")
    return f"*/{seconds} * * * * *", {"second": f"*/{seconds}"}


_durations: dict[tuple[str, str], random.Random] = {}
_durations_lock = threading.Lock()
_job_range: list[float] = [0.0, 0.0]
_seed = [0]


def configure_jobs(params: dict[str, Any]) -> None:
    """Set the range of job lengths and forget earlier draws (one fleet per process)."""
    _job_range[:] = [params["fleet_job_min"], params["fleet_job_max"]]
    _durations.clear()
    _seed[0] = params["fleet_seed"]


def sleep_for_run(agent: str, schedule: str) -> float:
    """Sleep as long as this schedule's next run lasts (seeded per schedule); return that length.

    Runs of one schedule never overlap, so each schedule's RNG is drawn from by one thread at a
    time; the lock only guards creating it.
    """
    key = (agent, schedule)
    rng = _durations.get(key)
    if rng is None:
        with _durations_lock:
            rng = _durations.setdefault(key, random.Random(f"{_seed[0]}:{agent}:{schedule}"))
    seconds = rng.uniform(*_job_range)
    time.sleep(seconds)
    return seconds


@dataclass
class _Run:
    agent: str
    due: float
    started: float
    ended: float | None = None


class FleetRecorder:
    """Collects each run's due, start and end times, and samples the threads alive."""

    def __init__(self, plan: FleetPlan, os_threads: Callable[[], int] | None = None) -> None:
        self.plan = plan
        self._runs: list[_Run] = []
        self._lock = threading.Lock()
        self.peak_threads = threading.active_count()
        self.peak_os_threads = 0
        self._os_threads = os_threads or _os_thread_counter()
        self.cpu_s = 0.0

    def started(self, agent: str, due: float) -> _Run:
        """Note a run's start (call first thing in the job); pass the result to :meth:`ended`."""
        run = _Run(agent, due, time.time())
        with self._lock:
            self._runs.append(run)
        return run

    @staticmethod
    def ended(run: _Run) -> None:
        run.ended = time.time()

    def sample_threads(self) -> None:
        self.peak_threads = max(self.peak_threads, threading.active_count())
        self.peak_os_threads = max(self.peak_os_threads, self._os_threads())

    def watch_window(self) -> None:
        """On the main thread: sample threads until the window ends; CPU seconds of the window."""
        cpu = None
        while True:
            now = time.time()
            if cpu is None and now >= self.plan.start:
                cpu = cpu_seconds()
            if now >= self.plan.end:
                break
            self.sample_threads()
            time.sleep(min(_SAMPLE_STEP, max(0.0, self.plan.end - now)))
        self.cpu_s = cpu_seconds() - (cpu if cpu is not None else cpu_seconds())

    def settle(self, quiet: float, limit: float = 30.0) -> None:
        """Wait until no run due in the window has started for ``quiet`` seconds (at most
        ``limit``): a late run due before the end still counts."""
        deadline = time.time() + limit
        seen, quiet_since = -1, time.time()
        while time.time() < deadline:
            self.sample_threads()
            with self._lock:
                count = sum(1 for run in self._runs if run.due < self.plan.end)
            now = time.time()
            if count != seen:
                seen, quiet_since = count, now
            elif now - quiet_since >= quiet:
                return
            time.sleep(_SAMPLE_STEP)

    def result(self, setup_s: float, **extra: Any) -> dict[str, Any]:
        """The figures of the run (see the module docstring)."""
        with self._lock:
            runs = list(self._runs)
        by_agent: dict[str, list[_Run]] = {}
        for run in runs:
            by_agent.setdefault(run.agent, []).append(run)
        window = [r for r in runs if self.plan.start <= r.due < self.plan.end]
        free = [r for r in window if not self._waited_for_slot(r, by_agent[r.agent])]
        everything = summarize_ms([r.started - r.due for r in window])
        with_slot = summarize_ms([r.started - r.due for r in free])
        burst = [r for r in free if self._at_cron_instant(r)]
        at_cron = summarize_ms([r.started - r.due for r in burst])
        between = summarize_ms([r.started - r.due for r in free if not self._at_cron_instant(r)])
        return {
            "agents": len(self.plan.agents),
            "schedules": len(self.plan.schedules),
            "max_concurrent": self.plan.max_concurrent,
            "runs": len(window),
            "waited_runs": len(window) - len(free),
            "p50_ms": with_slot["p50_ms"],
            "p99_ms": with_slot["p99_ms"],
            "max_ms": with_slot["max_ms"],
            "all_p50_ms": everything["p50_ms"],
            "all_p99_ms": everything["p99_ms"],
            "all_max_ms": everything["max_ms"],
            "cron_runs": len(burst),
            "cron_p99_ms": at_cron["p99_ms"],
            "other_p99_ms": between["p99_ms"],
            "quantiles_ms": quantile_points([r.started - r.due for r in free]),
            "peak_threads": self.peak_threads,
            "peak_os_threads": self.peak_os_threads or None,
            "thread_budget": self.plan.total_slots + EXTRA_THREADS,
            "cpu_s": self.cpu_s,
            "cpu_per_run_ms": 1000 * self.cpu_s / len(window) if window else None,
            "setup_s": setup_s,
            **extra,
        }

    def _at_cron_instant(self, run: _Run) -> bool:
        """Whether ``run`` fell due at a cron instant, when every agent's cron schedule fires
        at once (interval runs are due at seeded fractions of a second, never exactly there)."""
        return run.due % self.plan.cron_seconds == 0

    def _waited_for_slot(self, run: _Run, agent_runs: list[_Run]) -> bool:
        """Whether the agent's other runs, running or already waiting for a slot, filled all of
        its slots when ``run`` fell due (a run due earlier that still waits takes the next slot
        that frees before this one does)."""
        busy = 0
        for other in agent_runs:
            if other is run:
                continue
            ended = other.ended if other.ended is not None else float("inf")
            if min(other.due, other.started) <= run.due < ended:
                busy += 1
        return busy >= self.plan.max_concurrent


def _os_thread_counter() -> Callable[[], int]:
    """The OS's count of this process's threads (psutil, else /proc), or 0 when unknown."""
    try:
        import psutil
    except ImportError:
        return _proc_threads
    process = psutil.Process()
    return lambda: int(process.num_threads())


def _proc_threads() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
