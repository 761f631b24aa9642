"""What runs: the compared variants, the scenarios each fits, and the quick/full scales."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FULL",
    "QUICK",
    "SCENARIOS",
    "VARIANTS",
    "Scale",
    "Variant",
    "available_variants",
    "missing_libraries",
]


@dataclass(frozen=True)
class Variant:
    """One library in one configuration (``options`` are passed to its adapter)."""

    key: str
    lib: str  # "herdsched" | "apscheduler" | "schedule"
    label: str
    persistent: bool
    options: dict[str, Any] = field(default_factory=dict)
    #: "postgres": the variant needs a PostgreSQL server (the runner provides one) and runs
    #: only when asked for (``--postgres`` or named in ``--variants``)
    database: str | None = None

    @property
    def is_herdsched(self) -> bool:
        return self.lib == "herdsched"

    def spec(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "lib": self.lib,
            "label": self.label,
            "persistent": self.persistent,
            "options": dict(self.options),
            "database": self.database,
        }


HERD_MEM = Variant("herdsched-mem", "herdsched", "herdsched, in memory", False)
HERD_YAML = Variant("herdsched-yaml", "herdsched", "herdsched, YAML store", True)
HERD_MEM_NOPOLL = Variant(
    "herdsched-mem-nopoll",
    "herdsched",
    "herdsched, in memory, poll_interval=None",
    False,
    {"poll_interval": None},
)
HERD_YAML_NOPOLL = Variant(
    "herdsched-yaml-nopoll",
    "herdsched",
    "herdsched, YAML store, poll_interval=None",
    True,
    {"poll_interval": None},
)
APS_MEM = Variant("aps-mem", "apscheduler", "APScheduler 3, MemoryJobStore", False)
APS_SQLITE = Variant("aps-sqlite", "apscheduler", "APScheduler 3, SQLAlchemyJobStore/SQLite", True)
SCHEDULE = Variant("schedule", "schedule", "schedule (in memory, one thread)", False)
HERD_POSTGRES = Variant(
    "herdsched-postgres",
    "herdsched",
    "herdsched, PostgreSQL store",
    True,
    database="postgres",
)
APS_POSTGRES = Variant(
    "aps-postgres",
    "apscheduler",
    "APScheduler 3, SQLAlchemyJobStore/PostgreSQL",
    True,
    database="postgres",
)

VARIANTS: dict[str, Variant] = {
    v.key: v
    for v in (
        HERD_MEM,
        HERD_YAML,
        HERD_MEM_NOPOLL,
        HERD_YAML_NOPOLL,
        APS_MEM,
        APS_SQLITE,
        SCHEDULE,
        HERD_POSTGRES,
        APS_POSTGRES,
    )
}

_MAIN = ("herdsched-mem", "herdsched-yaml", "aps-mem", "aps-sqlite", "schedule")
_POSTGRES = ("herdsched-postgres", "aps-postgres")

#: scenario key → (title, the variants it fits, in table order)
SCENARIOS: dict[str, tuple[str, tuple[str, ...]]] = {
    "lateness": ("1. Firing lateness", _MAIN + _POSTGRES),
    "burst": ("2. Burst dispatch", _MAIN + _POSTGRES),
    "idle": (
        "3. Idle cost",
        (
            "herdsched-mem",
            "herdsched-mem-nopoll",
            "herdsched-yaml",
            "herdsched-yaml-nopoll",
            "aps-mem",
            "aps-sqlite",
            "schedule",
        ),
    ),
    "cold": ("4. Cold start and memory", _MAIN),
    "state": ("5. Durable state updates", ("herdsched-yaml", "aps-sqlite")),
    "fleet": ("6. Agent fleet", ("herdsched-mem", "herdsched-yaml", "aps-mem", "aps-sqlite")),
    "pg-idle": ("7. Idle queries on PostgreSQL", _POSTGRES),
}

#: variant key → modules it needs beyond herdsched itself
_REQUIRES: dict[str, tuple[str, ...]] = {
    "herdsched-yaml": ("herdsched.store.yaml_store",),
    "herdsched-yaml-nopoll": ("herdsched.store.yaml_store",),
    "aps-mem": ("apscheduler",),
    "aps-sqlite": ("apscheduler", "sqlalchemy"),
    "schedule": ("schedule",),
    "herdsched-postgres": ("psycopg", "herdsched.store.postgres"),
    "aps-postgres": ("apscheduler", "sqlalchemy", "psycopg"),
}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def missing_libraries() -> dict[str, str]:
    """Variant key → the first module it needs that is not installed."""
    missing: dict[str, str] = {}
    for key, modules in _REQUIRES.items():
        for module in modules:
            if not _importable(module):
                missing[key] = module
                break
    return missing


def available_variants(keys: tuple[str, ...]) -> list[Variant]:
    """The variants among ``keys`` whose libraries are installed."""
    missing = missing_libraries()
    return [VARIANTS[k] for k in keys if k not in missing]


@dataclass(frozen=True)
class Scale:
    """How big each scenario is. The issue's sizes are :data:`FULL`."""

    name: str
    repeat: int  # runs of the short scenarios (burst, cold start, state updates)
    repeat_long: int  # runs of the long scenarios (lateness, idle cost)
    workers: int  # worker threads per scheduler (APScheduler's default pool size)
    lateness_schedules: int
    lateness_interval: float
    lateness_seconds: float
    lateness_warmup: int  # grid slots after setup that are not measured
    lateness_settle: float  # quiet seconds that end the wait for the window's last runs
    burst_schedules: int
    burst_lead: float  # seconds from registering the burst to its due time (covers setup)
    burst_lead_database: float  # the same for the postgres variants (setup is much slower)
    idle_schedules: int
    idle_seconds: float
    idle_settle: float  # seconds between start() and the measured window
    cold_schedules: int
    state_schedules: int  # schedules already in the store when updates start
    state_seconds: float
    state_processes: tuple[int, ...]
    state_start_margin: float  # seconds from "all writers ready" to the window's start
    fleet_agents: int
    fleet_intervals: int  # interval schedules per agent (plus one cron schedule)
    fleet_interval_min: int  # seconds; each interval is drawn from min..max by the seeded RNG
    fleet_interval_max: int
    fleet_cron_seconds: int  # the cron schedule fires every this many seconds (60: every minute)
    fleet_job_min: float  # seconds a job sleeps, drawn per run from min..max
    fleet_job_max: float
    fleet_seconds: float  # the measured window
    fleet_lead: float  # seconds from building the fleet to the window's start (covers setup)
    fleet_settle: float  # quiet seconds that end the wait for the window's last runs
    fleet_max_concurrent: int  # per agent; APScheduler's pool is agents x this
    fleet_seed: int
    fleet_repeat: int  # runs of the fleet scenario
    pg_idle_schedules: int  # schedules next due in an hour
    pg_idle_seconds: float  # the measured window
    pg_idle_settle: float  # seconds from the last host's start to the window's start
    pg_idle_max_sleep: float  # the schedulers' max_sleep: the unit queries are counted in
    pg_idle_hosts: tuple[int, ...]  # scheduler processes on one namespace: a leader + standbys
    case_timeout: float  # seconds before a case is abandoned and reported as failed
    concurrent_cases: bool  # run the variants of a scenario side by side (smoke runs only)

    def as_params(self) -> dict[str, Any]:
        params = {k: v for k, v in self.__dict__.items() if k != "name"}
        params.update(pg_idle_hosts=list(self.pg_idle_hosts))
        return params


QUICK = Scale(
    name="quick",
    repeat=1,
    repeat_long=1,
    workers=10,
    lateness_schedules=50,
    lateness_interval=1.0,
    lateness_seconds=1.0,
    lateness_warmup=0,
    lateness_settle=0.2,
    burst_schedules=50,
    burst_lead=0.5,
    burst_lead_database=3.0,
    idle_schedules=200,
    idle_seconds=1.0,
    idle_settle=0.1,
    cold_schedules=300,
    state_schedules=20,
    state_seconds=0.4,
    state_processes=(1, 4),
    state_start_margin=0.2,
    fleet_agents=10,
    fleet_intervals=3,
    fleet_interval_min=1,
    fleet_interval_max=3,
    fleet_cron_seconds=2,
    fleet_job_min=0.02,
    fleet_job_max=0.2,
    fleet_seconds=3.0,
    fleet_lead=1.0,
    fleet_settle=0.5,
    fleet_max_concurrent=2,
    fleet_seed=16,
    fleet_repeat=1,
    pg_idle_schedules=20,
    pg_idle_seconds=1.0,
    pg_idle_settle=0.5,
    pg_idle_max_sleep=1.0,
    pg_idle_hosts=(1, 2),
    case_timeout=60.0,
    concurrent_cases=True,
)

FULL = Scale(
    name="full",
    repeat=3,
    repeat_long=3,
    workers=10,
    lateness_schedules=1000,
    lateness_interval=1.0,
    lateness_seconds=30.0,
    lateness_warmup=2,
    lateness_settle=1.0,
    burst_schedules=10_000,
    burst_lead=3.0,
    burst_lead_database=90.0,
    idle_schedules=10_000,
    idle_seconds=120.0,
    idle_settle=2.0,
    cold_schedules=10_000,
    state_schedules=1000,
    state_seconds=5.0,
    state_processes=(1, 4),
    state_start_margin=0.5,
    fleet_agents=500,
    fleet_intervals=3,
    fleet_interval_min=5,
    fleet_interval_max=30,
    fleet_cron_seconds=60,
    fleet_job_min=0.2,
    fleet_job_max=3.0,
    fleet_seconds=120.0,
    fleet_lead=5.0,
    fleet_settle=3.5,
    fleet_max_concurrent=2,
    fleet_seed=16,
    fleet_repeat=3,
    pg_idle_schedules=100,
    pg_idle_seconds=150.0,
    pg_idle_settle=10.0,
    pg_idle_max_sleep=10.0,
    pg_idle_hosts=(1, 3),
    case_timeout=900.0,
    concurrent_cases=False,
)
