"""APScheduler 3 in the benchmark scenarios: ``BackgroundScheduler`` with ``MemoryJobStore``, or
with ``SQLAlchemyJobStore`` on SQLite (SQLite's defaults: rollback journal, ``synchronous=FULL``)
or on PostgreSQL (psycopg 3, the server's durable defaults; a fresh table per case).

Jobs use APScheduler's default thread pool size (10), ``coalesce=True``, ``max_instances=1``
and ``misfire_grace_time=None`` (a late job still runs, as in herdsched, so lateness is measured
rather than hidden). Timer wakeups are calls of the scheduler's ``_process_jobs``.

Loading thousands of jobs through APScheduler into SQLite costs one fsynced transaction each;
setup phases therefore load through a second engine with ``PRAGMA synchronous=OFF`` and the
measured scheduler opens the database with the default, durable settings. On PostgreSQL the
setup phases load with ``synchronous_commit=off`` for the same reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from apscheduler.events import EVENT_JOB_EXECUTED, EVENT_JOB_SUBMITTED
from apscheduler.executors.base import run_job
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.background import BackgroundScheduler

from bench.measure import cpu_seconds, settled_rss, sleep_until
from bench.peers.common import (
    GRID_ANCHOR,
    Countdown,
    LatenessWindow,
    await_start,
    lateness_result,
    settle_samples,
)
from bench.peers.fleet import FleetPlan, FleetRecorder, configure_jobs, cron_every, sleep_for_run
from bench.postgres import run_sql, sqlalchemy_url

__all__ = [
    "burst",
    "cold_prepare",
    "cold_start",
    "fleet",
    "fleet_job",
    "idle",
    "lateness",
    "mark_first",
    "noop",
    "pg_idle",
    "state_prepare",
    "state_worker",
]

JOB_DEFAULTS = {"misfire_grace_time": None, "coalesce": True, "max_instances": 1}
FIRST_RUN = threading.Event()
_first_run_at: list[float] = []


def noop() -> None:
    """The job of every scenario (importable by reference, as SQLAlchemyJobStore needs)."""


def mark_first() -> None:
    """Cold start's first job: note when it ran."""
    if not FIRST_RUN.is_set():
        _first_run_at.append(time.perf_counter())
        FIRST_RUN.set()


class TimedExecutor(ThreadPoolExecutor):  # type: ignore[misc]
    """APScheduler's thread pool, noting (due time, start time) as each job starts."""

    def __init__(self, max_workers: int, sink: list[tuple[float, float]]) -> None:
        super().__init__(max_workers)
        self._sink = sink

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        sink = self._sink

        def timed(job: Any, alias: str, run_times: list[datetime], logger_name: str) -> Any:
            started = time.time()
            sink.append((run_times[-1].timestamp(), started))
            return run_job(job, alias, run_times, logger_name)

        def callback(future: Any) -> None:
            exc = future.exception()
            if exc:
                self._run_job_error(job.id, exc, getattr(exc, "__traceback__", None))
            else:
                self._run_job_success(job.id, future.result())

        future = self._pool.submit(timed, job, job._jobstore_alias, run_times, self._logger.name)
        future.add_done_callback(callback)


def fleet_job(agent: str, schedule: str) -> None:
    """The agent fleet's job (importable by reference, as SQLAlchemyJobStore needs)."""
    sleep_for_run(agent, schedule)


class FleetExecutor(ThreadPoolExecutor):  # type: ignore[misc]
    """APScheduler's thread pool, noting each fleet run's due, start and end times."""

    def __init__(self, max_workers: int, recorder: FleetRecorder) -> None:
        super().__init__(max_workers)
        self._recorder = recorder

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        recorder = self._recorder

        def timed(job: Any, alias: str, run_times: list[datetime], logger_name: str) -> Any:
            run = recorder.started(job.args[0], run_times[-1].timestamp())
            try:
                return run_job(job, alias, run_times, logger_name)
            finally:
                recorder.ended(run)

        def callback(future: Any) -> None:
            exc = future.exception()
            if exc:
                self._run_job_error(job.id, exc, getattr(exc, "__traceback__", None))
            else:
                self._run_job_success(job.id, future.result())

        future = self._pool.submit(timed, job, job._jobstore_alias, run_times, self._logger.name)
        future.add_done_callback(callback)


def _db_url(params: dict[str, Any]) -> str:
    return f"sqlite:///{Path(params['workdir']) / 'apscheduler.sqlite'}"


def _on_postgres(variant: dict[str, Any]) -> bool:
    return variant.get("database") == "postgres"


def _postgres_url(params: dict[str, Any], **settings: str) -> str:
    """The case's server as a SQLAlchemy URL, its connections named after this process and,
    when ``pg_log`` is set, every statement logged; ``settings`` are server settings."""
    options = [f"-c {name}={value}" for name, value in settings.items()]
    if params.get("pg_log"):
        options.append("-c log_statement=all")
    query = {"application_name": params.get("pg_app", "aps-bench")}
    if options:
        query["options"] = " ".join(options)
    return sqlalchemy_url(params["pg_dsn"], **query)


def _job_store(variant: dict[str, Any], params: dict[str, Any], *, loading: bool = False) -> Any:
    """The variant's SQLAlchemyJobStore; ``loading``: through a fast, non-durable connection
    (only setup phases load that way)."""
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from sqlalchemy import create_engine, event

    if _on_postgres(variant):
        url = _postgres_url(params, synchronous_commit="off") if loading else _postgres_url(params)
        return SQLAlchemyJobStore(url=url, tablename=params["pg_namespace"])
    if not loading:
        return SQLAlchemyJobStore(url=_db_url(params))
    engine = create_engine(_db_url(params))

    @event.listens_for(engine, "connect")
    def _unsynced(dbapi_connection: Any, connection_record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA synchronous=OFF")
        cursor.close()

    return SQLAlchemyJobStore(engine=engine)


def _drop_table(variant: dict[str, Any], params: dict[str, Any]) -> None:
    """Remove the case's job table from the PostgreSQL server (it may be a shared one)."""
    if _on_postgres(variant):
        run_sql(params["pg_dsn"], f'DROP TABLE IF EXISTS "{params["pg_namespace"]}"')


def _scheduler(
    variant: dict[str, Any], params: dict[str, Any], executor: Any = None
) -> tuple[BackgroundScheduler, list[int]]:
    """A scheduler and its wakeup counter (calls of ``_process_jobs``)."""
    store = _job_store(variant, params) if variant["persistent"] else MemoryJobStore()
    scheduler = BackgroundScheduler(
        timezone="UTC",
        jobstores={"default": store},
        executors={"default": executor or ThreadPoolExecutor(params["workers"])},
        job_defaults=JOB_DEFAULTS,
    )
    wakeups = [0]
    process_jobs: Callable[[], Any] = scheduler._process_jobs

    def counted() -> Any:
        wakeups[0] += 1
        return process_jobs()

    scheduler._process_jobs = counted
    return scheduler, wakeups


JobSpec = tuple[str, Callable[..., None], dict[str, Any]]  # id, function, add_job keywords


def _load(
    variant: dict[str, Any], params: dict[str, Any], scheduler: Any, jobs: Iterable[JobSpec]
) -> None:
    """Put jobs in the scheduler's store: directly for memory, by a fast bulk load for a
    database."""
    if not variant["persistent"]:
        for job_id, func, kwargs in jobs:
            scheduler.add_job(func, id=job_id, **kwargs)
        return
    store = _job_store(variant, params, loading=True)
    loader = BackgroundScheduler(
        timezone="UTC", jobstores={"default": store}, job_defaults=JOB_DEFAULTS
    )
    loader._process_jobs = lambda: None  # never run a job, not even while shutting down
    loader.start(paused=True)
    for job_id, func, kwargs in jobs:
        loader.add_job(func, id=job_id, replace_existing=True, **kwargs)
    loader.shutdown(wait=False)
    store.engine.dispose()


def lateness(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """N interval jobs on the shared whole-second grid; lateness = job start − run time."""
    count = params["lateness_schedules"]
    interval = params["lateness_interval"]
    samples: list[tuple[float, float]] = []
    anchor = datetime.fromtimestamp(GRID_ANCHOR, timezone.utc)
    scheduler, wakeups = _scheduler(variant, params, TimedExecutor(params["workers"], samples))
    trigger = {"trigger": "interval", "seconds": interval, "start_date": anchor}
    _load(variant, params, scheduler, ((f"s{i}", noop, trigger) for i in range(count)))
    scheduler.start()
    window = LatenessWindow(interval, params["lateness_seconds"], params["lateness_warmup"])
    sleep_until(window.start)
    checks, cpu = wakeups[0], cpu_seconds()
    sleep_until(window.end)
    cpu = cpu_seconds() - cpu
    checks = wakeups[0] - checks
    settle_samples(samples, window.end, params["lateness_settle"])
    scheduler.shutdown(wait=True)
    _drop_table(variant, params)
    return lateness_result(samples, window, count, cpu, checks)


def burst(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """N jobs all due when the paused scheduler resumes; time until all ran (and are durable).

    APScheduler updates each job's next run time in its store in the same pass that submits
    it and announces ``EVENT_JOB_SUBMITTED`` after the pass, so the N-th submitted event means
    every update has been committed.
    """
    count = params["burst_schedules"]
    timeout = params["case_timeout"]
    executed, submitted = Countdown(count), Countdown(count)
    scheduler, wakeups = _scheduler(variant, params)
    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    trigger = {"trigger": "interval", "hours": 1, "next_run_time": past}
    _load(variant, params, scheduler, ((f"s{i}", noop, trigger) for i in range(count)))
    scheduler.add_listener(executed.tick, EVENT_JOB_EXECUTED)
    scheduler.add_listener(submitted.tick, EVENT_JOB_SUBMITTED)
    scheduler.start(paused=True)
    before = wakeups[0]
    cpu = cpu_seconds()
    began = time.perf_counter()
    scheduler.resume()
    complete = executed.done.wait(timeout) and submitted.done.wait(timeout)
    ran = (executed.reached_at or time.perf_counter()) - began
    durable = None
    if variant["persistent"]:
        last = max(executed.reached_at or 0.0, submitted.reached_at or 0.0)
        durable = (last if complete else time.perf_counter()) - began
    cpu = cpu_seconds() - cpu
    result = {
        "jobs": executed.count,
        "complete": complete,
        "ran_s": ran,
        "durable_s": durable,
        "done_s": durable if durable is not None else ran,
        "cpu_s": cpu,
        "wakeups": wakeups[0] - before,
    }
    scheduler.shutdown(wait=True)
    _drop_table(variant, params)
    return result


def idle(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """N jobs next due in an hour: wakeups and CPU seconds over the window."""
    count = params["idle_schedules"]
    scheduler, wakeups = _scheduler(variant, params)
    trigger = {"trigger": "interval", "hours": 1}
    _load(variant, params, scheduler, ((f"s{i}", noop, trigger) for i in range(count)))
    scheduler.start()
    time.sleep(params["idle_settle"])
    checks, cpu, began = wakeups[0], cpu_seconds(), time.monotonic()
    time.sleep(params["idle_seconds"])
    cpu = cpu_seconds() - cpu
    elapsed = time.monotonic() - began
    checks = wakeups[0] - checks
    scheduler.shutdown(wait=True)
    return {"seconds": elapsed, "wakeups": checks, "cpu_s": cpu}


def pg_idle(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The idle scenario on PostgreSQL (one process: APScheduler 3 cannot share a job store
    between schedulers): N jobs next due in an hour; the runner counts the statements."""
    count = params["pg_idle_schedules"]
    scheduler, wakeups = _scheduler(variant, params)
    trigger = {"trigger": "interval", "hours": 1}
    _load(variant, params, scheduler, ((f"s{i}", noop, trigger) for i in range(count)))
    scheduler.start()
    start = await_start()
    checks, cpu = wakeups[0], cpu_seconds()
    sleep_until(start + params["pg_idle_seconds"])
    cpu = cpu_seconds() - cpu
    checks = wakeups[0] - checks
    time.sleep(0.5)  # the window's last statements reach the server's log
    scheduler.shutdown(wait=True)
    _drop_table(variant, params)
    return {"app": params.get("pg_app"), "leader": True, "wakeups": checks, "cpu_s": cpu}


def _fleet_jobs(plan: FleetPlan) -> Iterable[JobSpec]:
    """Every fleet schedule as a job: interval ones on ``IntervalTrigger`` (measured from the
    previous start, APScheduler's only interval rule), the cron one on ``CronTrigger``."""
    _, cron_fields = cron_every(plan.cron_seconds)
    for s in plan.schedules:
        trigger: dict[str, Any]
        if s.every is None:
            trigger = {"trigger": "cron", **cron_fields}
        else:
            first = datetime.fromtimestamp(s.first_due or 0, timezone.utc)
            trigger = {"trigger": "interval", "seconds": s.every, "start_date": first}
        yield (f"{s.agent}-{s.name}", fleet_job, {"args": (s.agent, s.name), **trigger})


def fleet(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The agent fleet (see :mod:`bench.peers.fleet`) on one thread pool whose size is the sum
    of the herdsched agents' ``max_concurrent`` (APScheduler 3 has no per-group limit)."""
    began = time.time()
    plan = FleetPlan.build(params, began + params["fleet_lead"])
    configure_jobs(params)
    recorder = FleetRecorder(plan)
    executor = FleetExecutor(plan.total_slots, recorder)
    scheduler, wakeups = _scheduler(variant, params, executor)
    _load(variant, params, scheduler, _fleet_jobs(plan))
    scheduler.start()
    setup_s = time.time() - began
    overran = time.time() >= plan.start
    recorder.watch_window()
    recorder.settle(params["fleet_settle"])
    scheduler.shutdown(wait=True)
    return recorder.result(setup_s, setup_overran=overran, complete=True, wakeups=wakeups[0])


def _cold_jobs(params: dict[str, Any], first_due: datetime) -> Iterable[JobSpec]:
    later = datetime.fromisoformat(params["cold_start_at"].replace("Z", "+00:00"))
    yield ("s0", mark_first, {"trigger": "interval", "hours": 1, "next_run_time": first_due})
    for i in range(1, params["cold_schedules"]):
        yield (f"s{i}", noop, {"trigger": "interval", "hours": 1, "start_date": later})


def cold_prepare(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Persist N jobs in SQLite; ``s0`` is overdue when the cold start comes."""
    began = time.perf_counter()
    overdue = datetime.now(timezone.utc) - timedelta(seconds=5)
    _load(variant, params, None, _cold_jobs(params, overdue))
    size = Path(_db_url(params).removeprefix("sqlite:///")).stat().st_size
    return {"seconds": time.perf_counter() - began, "state_bytes": size}


def cold_start(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Fresh process: open the store (or add the jobs), ``start()``, wait for the first job."""
    count = params["cold_schedules"]
    if variant["persistent"]:  # import before the baseline, as herdsched's store is imported
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore  # noqa: F401
    baseline = settled_rss()
    began = time.perf_counter()
    scheduler, _ = _scheduler(variant, params)
    if not variant["persistent"]:
        _load(variant, params, scheduler, _cold_jobs(params, datetime.now(timezone.utc)))
    registered = time.perf_counter()
    scheduler.start()
    complete = FIRST_RUN.wait(params["case_timeout"])
    reached = _first_run_at[0] if _first_run_at else time.perf_counter()
    resident = settled_rss()
    scheduler.shutdown(wait=True)
    return {
        "complete": complete,
        "register_s": registered - began,
        "start_to_first_s": reached - registered,
        "total_s": reached - began,
        "rss_per_schedule_b": (resident - baseline) / count,
        "rss_mb": resident / 2**20,
    }


def state_prepare(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A database holding ``state_schedules`` jobs plus ten per writer process."""
    trigger = {"trigger": "interval", "hours": 1}
    jobs: list[JobSpec] = [(f"s{i}", noop, trigger) for i in range(params["state_schedules"])]
    for process in range(max(params["state_processes"])):
        jobs.extend((f"p{process}-s{i}", noop, trigger) for i in range(10))
    _load(variant, params, None, jobs)
    size = Path(_db_url(params).removeprefix("sqlite:///")).stat().st_size
    return {"state_bytes": size}


def state_worker(variant: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Durable ``modify_job`` calls (look-up + update, each its own transaction)."""
    scheduler, _ = _scheduler(variant, params)
    scheduler.start(paused=True)
    prefix = f"p{params['process']}-s"
    start = await_start()
    end = start + params["state_seconds"]
    updates = errors = 0
    late_start = max(0.0, time.time() - start)
    sleep_until(start)
    while time.time() < end:
        try:
            scheduler.modify_job(f"{prefix}{updates % 10}", name=f"n{updates}")
            updates += 1
        except Exception:  # "database is locked" under contention
            errors += 1
    elapsed = time.time() - start
    scheduler.shutdown(wait=False)
    return {
        "updates": updates,
        "errors": errors,
        "seconds": elapsed,
        "late_start_s": late_start,
    }
