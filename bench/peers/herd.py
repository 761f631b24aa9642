"""herdsched in the benchmark scenarios: in memory (``state_dir=None``), with the YAML store, or
with the PostgreSQL store (a fresh namespace per case on the runner's server).

All schedules belong to one agent whose ``max_concurrent`` equals the peers' worker-pool size,
so every library has the same number of threads to run jobs on.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from bench.measure import cpu_seconds, settled_rss, sleep_until, wait_for
from bench.peers.common import (
    GRID_ANCHOR,
    Countdown,
    LatenessWindow,
    await_start,
    lateness_result,
    settle_samples,
)
from bench.peers.fleet import FleetPlan, FleetRecorder, configure_jobs, cron_every, sleep_for_run
from bench.postgres import with_connection_options
from herdsched import Agent, JobStarted, JobSucceeded, Schedule, ThreadedScheduler, TriggerInfo

__all__ = [
    "burst",
    "cold_prepare",
    "cold_start",
    "fleet",
    "idle",
    "lateness",
    "pg_idle",
    "state_prepare",
    "state_worker",
]

AGENT = "bench"


def _noop(info: TriggerInfo) -> None:
    """The job of every scenario: returns at once."""


def _state_dir(params: dict[str, Any]) -> Path:
    return Path(params["workdir"]) / "herdsched"


def _scheduler(
    variant: dict[str, Any], params: dict[str, Any], **settings: Any
) -> ThreadedScheduler:
    """The variant's scheduler: in memory, on the YAML store, or on the PostgreSQL store."""
    if variant.get("database") == "postgres":
        return ThreadedScheduler(
            state_dir=None, store=_postgres_store(params), **variant["options"], **settings
        )
    state_dir = _state_dir(params) if variant["persistent"] else None
    return ThreadedScheduler(state_dir=state_dir, **variant["options"], **settings)


def _postgres_store(params: dict[str, Any]) -> Any:
    """The PostgreSQL store on the case's namespace, its connections named after this process
    (``pg_app``) and, when ``pg_log`` is set, every statement logged by the server."""
    from herdsched.store.postgres import PostgresStateStore

    options = {"application_name": params.get("pg_app", "herdsched-bench")}
    if params.get("pg_log"):
        options["options"] = "-c log_statement=all"
    dsn = with_connection_options(params["pg_dsn"], **options)
    return PostgresStateStore(dsn, namespace=params["pg_namespace"])


def _yaml_store(params: dict[str, Any]) -> Any:
    from herdsched.store.yaml_store import YamlStateStore

    return YamlStateStore(_state_dir(params))


def _wait_durable(scheduler: ThreadedScheduler, timeout: float) -> bool:
    """True once the store has nothing pending (every transition and record is on disk)."""
    return wait_for(lambda: scheduler.store.flush_deadline() is None, timeout)


def lateness(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """N interval schedules on a shared whole-second grid; lateness = job start − due time."""
    count = params["lateness_schedules"]
    interval = params["lateness_interval"]
    samples: list[tuple[float, float]] = []

    def job(info: TriggerInfo) -> None:
        started = time.time()
        assert info.scheduled_for is not None
        samples.append((info.scheduled_for.timestamp(), started))

    anchor = datetime.fromtimestamp(GRID_ANCHOR, timezone.utc)
    scheduler = _scheduler(variant, params)
    scheduler.add_agent(
        Agent(
            AGENT,
            max_concurrent=params["workers"],
            job=job,
            schedules={f"s{i}": Schedule.interval(interval, anchor=anchor) for i in range(count)},
        )
    )
    scheduler.start()
    window = LatenessWindow(interval, params["lateness_seconds"], params["lateness_warmup"])
    sleep_until(window.start)
    checks, cpu = scheduler.get_state().check_count, cpu_seconds()
    sleep_until(window.end)
    cpu = cpu_seconds() - cpu
    checks = scheduler.get_state().check_count - checks
    settle_samples(samples, window.end, params["lateness_settle"])
    scheduler.stop(wait_for_jobs=True, timeout=60)
    return lateness_result(samples, window, count, cpu, checks)


def burst(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """N schedules all due at one instant of a running scheduler; time from that instant until
    all ran (and, with the YAML store, are durable).

    The schedules are registered and planned before the instant (``start_at``), as APScheduler's
    jobs are in its store before the paused scheduler resumes.
    """
    count = params["burst_schedules"]
    timeout = params["case_timeout"]
    finished = Countdown(count)
    lead = params["burst_lead_database" if variant.get("database") else "burst_lead"]
    due_wall = time.time() + lead
    due = datetime.fromtimestamp(due_wall, timezone.utc)
    scheduler = _scheduler(variant, params)
    scheduler.add_agent(
        Agent(
            AGENT,
            max_concurrent=params["workers"],
            job=_noop,
            schedules={f"s{i}": Schedule.interval("1h", start_at=due) for i in range(count)},
        )
    )
    scheduler.add_listener(finished.tick, JobSucceeded)
    scheduler.start()
    overran = time.time() >= due_wall
    offset = time.perf_counter() - time.time()
    sleep_until(due_wall - 0.02)
    cpu, checks = cpu_seconds(), scheduler.get_state().check_count
    began = due_wall + offset
    complete = finished.done.wait(timeout)
    ran = (finished.reached_at or time.perf_counter()) - began
    durable = None
    if variant["persistent"]:
        complete = _wait_durable(scheduler, timeout) and complete
        durable = time.perf_counter() - began
    cpu = cpu_seconds() - cpu
    checks = scheduler.get_state().check_count - checks
    scheduler.stop(wait_for_jobs=True, timeout=60)
    return {
        "jobs": finished.count,
        "complete": complete,
        "setup_overran": overran,
        "ran_s": ran,
        "durable_s": durable,
        "done_s": durable if durable is not None else ran,
        "cpu_s": cpu,
        "wakeups": checks,
    }


def idle(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """N schedules next due in an hour: timer wakeups and CPU seconds over the window."""
    count = params["idle_schedules"]
    start_at = datetime.now(timezone.utc) + timedelta(hours=1)
    scheduler = _scheduler(variant, params)
    scheduler.add_agent(
        Agent(
            AGENT,
            max_concurrent=params["workers"],
            job=_noop,
            schedules={f"s{i}": Schedule.interval("1h", start_at=start_at) for i in range(count)},
        )
    )
    scheduler.start()
    _wait_durable(scheduler, 60)
    time.sleep(params["idle_settle"])
    checks, cpu, began = scheduler.get_state().check_count, cpu_seconds(), time.monotonic()
    time.sleep(params["idle_seconds"])
    cpu = cpu_seconds() - cpu
    elapsed = time.monotonic() - began
    checks = scheduler.get_state().check_count - checks
    max_sleep = scheduler.max_sleep
    scheduler.stop(wait_for_jobs=True, timeout=60)
    return {
        "seconds": elapsed,
        "wakeups": checks,
        "cpu_s": cpu,
        "max_sleep": max_sleep,
        "poll_interval": scheduler.poll_interval,
    }


def pg_idle(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """One host of the idle scenario on PostgreSQL: N schedules next due in an hour.

    Every host adds the same agent, as each replica of an app does. The process says it is
    ready once started (the first host started leads, the others stand by), is given the
    window's start, and stays until the window is over; the runner counts the statements the
    server logged for this process's ``application_name`` within the window.
    """
    count = params["pg_idle_schedules"]
    start_at = datetime.now(timezone.utc) + timedelta(hours=1)
    scheduler = _scheduler(variant, params, max_sleep=params["pg_idle_max_sleep"])
    scheduler.add_agent(
        Agent(
            AGENT,
            max_concurrent=params["workers"],
            job=_noop,
            schedules={f"s{i}": Schedule.interval("1h", start_at=start_at) for i in range(count)},
        )
    )
    scheduler.start()
    _wait_durable(scheduler, 60)
    led_at_start = scheduler.is_leader
    start = await_start()
    checks, cpu = scheduler.get_state().check_count, cpu_seconds()
    sleep_until(start + params["pg_idle_seconds"])
    cpu = cpu_seconds() - cpu
    checks = scheduler.get_state().check_count - checks
    leading = scheduler.is_leader
    time.sleep(0.5)  # the window's last statements reach the server's log
    scheduler.stop(wait_for_jobs=True, timeout=60)
    return {
        "app": params.get("pg_app"),
        "leader": leading,
        "led_at_start": led_at_start,
        "max_sleep": scheduler.max_sleep,
        "poll_interval": scheduler.poll_interval,
        "wakeups": checks,
        "cpu_s": cpu,
    }


def fleet(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The agent fleet (see :mod:`bench.peers.fleet`): one agent per fleet agent, each with
    ``max_concurrent`` slots, its interval schedules (measured from completion, first due at
    ``start_at``) and its cron schedule. Only the public API is used."""
    began = time.time()
    plan = FleetPlan.build(params, began + params["fleet_lead"])
    configure_jobs(params)
    recorder = FleetRecorder(plan)

    def job(info: TriggerInfo) -> None:
        assert info.scheduled_for is not None
        run = recorder.started(info.agent, info.scheduled_for.timestamp())
        sleep_for_run(info.agent, info.schedule)
        recorder.ended(run)

    cron, _ = cron_every(plan.cron_seconds)
    scheduler = _scheduler(variant, params)
    for agent in plan.agents:
        schedules = {
            s.name: (
                Schedule.cron(cron, timezone="UTC")
                if s.every is None
                else Schedule.interval(
                    s.every, start_at=datetime.fromtimestamp(s.first_due or 0, timezone.utc)
                )
            )
            for s in plan.of_agent(agent)
        }
        scheduler.add_agent(
            Agent(agent, max_concurrent=plan.max_concurrent, job=job, schedules=schedules)
        )
    scheduler.start()
    setup_s = time.time() - began
    overran = time.time() >= plan.start
    recorder.watch_window()
    recorder.settle(params["fleet_settle"])
    scheduler.stop(wait_for_jobs=True, timeout=60)
    return recorder.result(setup_s, setup_overran=overran, complete=True)


def _cold_agent(params: dict[str, Any]) -> Agent:
    """``s0`` is due at once (or overdue on disk); every other schedule waits an hour."""
    schedules = {"s0": Schedule.interval("1h")}
    later = Schedule.interval("1h", start_at=params["cold_start_at"])
    schedules.update({f"s{i}": later for i in range(1, params["cold_schedules"])})
    return Agent(AGENT, max_concurrent=params["workers"], job=_noop, schedules=schedules)


def cold_prepare(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Persist N schedules (a run of the same fleet), then make ``s0`` overdue on disk."""
    began = time.perf_counter()
    scheduler = _scheduler(variant, params)
    scheduler.add_agent(_cold_agent(params))
    scheduler.start()
    scheduler.stop(wait_for_jobs=True, timeout=60)
    store = _yaml_store(params)
    overdue = datetime.now(timezone.utc) - timedelta(seconds=5)
    store.update_schedule_state(AGENT, "s0", next_run_at=overdue, status="idle")
    store.close()
    size = (_state_dir(params) / "state.yaml").stat().st_size
    return {"seconds": time.perf_counter() - began, "state_bytes": size}


def cold_start(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Fresh process: build the fleet, ``start()``, wait for the first job; memory per schedule."""
    count = params["cold_schedules"]
    baseline = settled_rss()
    first = Countdown(1)
    began = time.perf_counter()
    scheduler = _scheduler(variant, params)
    scheduler.add_listener(first.tick, JobStarted)
    scheduler.add_agent(_cold_agent(params))
    registered = time.perf_counter()
    scheduler.start()
    complete = first.done.wait(params["case_timeout"])
    reached = first.reached_at or time.perf_counter()
    resident = settled_rss()
    scheduler.stop(wait_for_jobs=True, timeout=60)
    return {
        "complete": complete,
        "register_s": registered - began,
        "start_to_first_s": reached - registered,
        "total_s": reached - began,
        "rss_per_schedule_b": (resident - baseline) / count,
        "rss_mb": resident / 2**20,
    }


def state_prepare(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A state file holding ``state_schedules`` schedules plus ten per writer process."""
    store = _yaml_store(params)
    now = datetime.now(timezone.utc)
    for i in range(params["state_schedules"]):
        store.record_transition(
            "fleet",
            f"s{i}",
            status="idle",
            last_run_at=now,
            last_finished_at=now,
            next_run_at=now + timedelta(hours=1),
            last_result="success",
        )
    for process in range(max(params["state_processes"])):
        for i in range(10):
            store.record_transition(f"p{process}", f"s{i}", status="idle", next_run_at=now)
    store.flush()
    store.close()
    return {"state_bytes": (_state_dir(params) / "state.yaml").stat().st_size}


def state_worker(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Durable ``update_schedule_state`` calls, as many as fit in the window."""
    from herdsched.errors import StateError

    store = _yaml_store(params)
    agent = f"p{params['process']}"
    start = await_start()
    end = start + params["state_seconds"]
    updates = errors = 0
    late_start = max(0.0, time.time() - start)
    sleep_until(start)
    while time.time() < end:
        try:
            store.update_schedule_state(
                agent, f"s{updates % 10}", consecutive_failures=updates % 5, last_error=None
            )
            updates += 1
        except StateError:
            errors += 1
    elapsed = time.time() - start
    store.close()
    return {
        "updates": updates,
        "errors": errors,
        "seconds": elapsed,
        "late_start_s": late_start,
    }
