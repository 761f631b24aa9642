"""Runs the scenarios: one fresh worker process per case, collecting figures per variant.

Results have the shape ``{scenario: {row key: [figures of run 1, run 2, ...]}}``; a row key is a
variant key, or ``"<variant>|<processes>"`` for the state-update and PostgreSQL idle scenarios.
A case that fails or times out is kept as ``{"ok": False, "error": ...}`` so the report shows it
instead of hiding it.

The postgres variants run only when asked for (``postgres=True`` or named in ``variants``);
then the runner starts a throwaway PostgreSQL server for the whole run, or uses
``HERDSCHED_BENCH_PG_DSN`` (see :mod:`bench.postgres`), and gives every case a fresh namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from bench.config import SCENARIOS, VARIANTS, Scale, Variant, missing_libraries
from bench.peers.common import READY_LINE
from bench.pg_idle import IdleWindow, pg_idle_database
from bench.postgres import BenchDatabase, bench_database, unique_name
from bench.worker import RESULT_PREFIX

__all__ = ["REPO_ROOT", "Runner"]

REPO_ROOT = Path(__file__).resolve().parent.parent
_STDERR_TAIL = 2000

Results = dict[str, dict[str, list[dict[str, Any]]]]


class _Case:
    """A worker process in flight."""

    def __init__(self, spec: dict[str, Any], timeout: float, *, interactive: bool = False) -> None:
        self.spec = spec
        self.timeout = timeout
        self.began = time.monotonic()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
        )
        env.setdefault("PYTHONHASHSEED", "0")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.worker", json.dumps(spec)],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE if interactive else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.early_output: list[str] = []

    def wait_ready(self) -> bool:
        """Read stdout until the worker says it is ready (False if it ended first)."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip() == READY_LINE:
                return True
            self.early_output.append(line)
        return False

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(text)
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # the worker died; finish() reports it

    def finish(self) -> dict[str, Any]:
        remaining = max(1.0, self.timeout - (time.monotonic() - self.began))
        try:
            out, err = self.process.communicate(timeout=remaining)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate()
            return self._failed(f"timed out after {self.timeout:.0f} s", err)
        wall = time.monotonic() - self.began
        lines = [*self.early_output, *out.splitlines()]
        for line in reversed(lines):
            if line.startswith(RESULT_PREFIX):
                result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
                result.update(ok=result.get("complete", True) is not False, wall_s=wall)
                if not result["ok"]:
                    result["error"] = "did not complete within the case timeout"
                return result
        return self._failed(f"worker exited with status {self.process.returncode}", err)

    def _failed(self, why: str, stderr: str) -> dict[str, Any]:
        tail = stderr[-_STDERR_TAIL:].strip()
        return {"ok": False, "error": f"{why}: {tail}" if tail else why}


class Runner:
    """Runs the selected scenarios at one :class:`~bench.config.Scale`."""

    def __init__(
        self,
        scale: Scale,
        *,
        workdir: Path | None = None,
        variants: Iterable[str] | None = None,
        repeat: int | None = None,
        repeat_long: int | None = None,
        keep: bool = False,
        postgres: bool = False,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.scale = scale
        self.postgres = postgres
        self.database: BenchDatabase | None = None
        self._database_context = contextlib.ExitStack()
        self.repeat = repeat if repeat is not None else scale.repeat
        self.repeat_long = repeat_long if repeat_long is not None else scale.repeat_long
        self.only_variants = set(variants) if variants else None
        self.keep = keep
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="herdsched-bench-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.progress = progress or (lambda message: None)
        self.params = scale.as_params()
        self.params["state_processes"] = list(scale.state_processes)
        start_at = datetime.now(timezone.utc) + timedelta(hours=1)
        self.params["cold_start_at"] = start_at.isoformat().replace("+00:00", "Z")

    # ------------------------------------------------------------------------------ plumbing

    def wanted(self, scenario: str) -> list[Variant]:
        """The scenario's variants this run asks for, installed or not: ``variants`` when
        given (plus the postgres ones with ``postgres``), else all but the postgres ones
        (unless ``postgres``)."""
        chosen = [VARIANTS[k] for k in SCENARIOS[scenario][1]]
        return [
            v
            for v in chosen
            if (self.postgres and v.database is not None)
            or (v.key in self.only_variants if self.only_variants is not None else not v.database)
        ]

    def variants(self, scenario: str) -> list[Variant]:
        """The wanted variants whose libraries are installed."""
        missing = missing_libraries()
        return [v for v in self.wanted(scenario) if v.key not in missing]

    def skipped(self, scenarios: Iterable[str]) -> list[str]:
        """The wanted variants that cannot run, each with the module it lacks."""
        missing = missing_libraries()
        keys = {v.key for scenario in scenarios for v in self.wanted(scenario)}
        return [f"{key} (needs {missing[key]})" for key in sorted(keys & set(missing))]

    def _open_database(self, scenarios: list[str]) -> None:
        """Start (or reach) the PostgreSQL server when a chosen variant needs one."""
        if self.database is not None:
            return
        if any(v.database for scenario in scenarios for v in self.variants(scenario)):
            self.progress("PostgreSQL: starting a throwaway server (or HERDSCHED_BENCH_PG_DSN) ...")
            self.database = self._database_context.enter_context(bench_database())
            self.params["pg_dsn"] = self.database.dsn
            self.params["pg_log"] = self.database.own
            self.params["pg_server"] = self.database.version
            where = "a throwaway server" if self.database.own else "HERDSCHED_BENCH_PG_DSN"
            self.progress(f"PostgreSQL {self.database.version} on {where}")

    def _pg_case(self, variant: Variant, scenario: str, run: int, host: int = 0) -> dict[str, Any]:
        """A postgres case's own namespace (or APScheduler table) and connection name."""
        if not variant.database:
            return {}
        return {
            "pg_namespace": unique_name(f"bench_{scenario.replace('-', '_')}_{run}"),
            "pg_app": f"{variant.key}-{run}-{host}",
        }

    def _case_dir(self, *parts: object) -> Path:
        path = self.workdir.joinpath("-".join(str(p) for p in parts))
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def _start(
        self,
        variant: Variant,
        phase: str,
        case_dir: Path,
        *,
        interactive: bool = False,
        **extra: Any,
    ) -> _Case:
        params = dict(self.params, workdir=str(case_dir), **extra)
        spec = {"variant": variant.spec(), "phase": phase, "params": params}
        return _Case(spec, self.scale.case_timeout, interactive=interactive)

    def _run(self, variant: Variant, phase: str, case_dir: Path, **extra: Any) -> dict[str, Any]:
        return self._start(variant, phase, case_dir, **extra).finish()

    def _note(self, scenario: str, key: str, result: dict[str, Any]) -> None:
        error = " ".join(str(result.get("error", "?")).split())
        status = "ok" if result.get("ok") else f"FAILED ({error[-300:]})"
        if result.get("setup_overran"):
            status += " (setup overran the burst's due time; the figure includes setup)"
        self.progress(f"  {scenario:<8} {key:<24} {status}")

    def close(self) -> None:
        self._database_context.close()
        self.database = None
        if self._own_workdir and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ----------------------------------------------------------------------------- scenarios

    def run(self, scenarios: Iterable[str]) -> Results:
        """The scenarios that have a variant to run, in order (the server is started first
        when a postgres variant is among them)."""
        chosen = [s for s in scenarios if self.variants(s)]
        self._open_database(chosen)
        results: Results = {}
        for scenario in chosen:
            self.progress(f"{SCENARIOS[scenario][0]} ...")
            results[scenario] = getattr(self, f"_{scenario.replace('-', '_')}")()
        return results

    def _each(
        self, scenario: str, run: int, case: Callable[[Variant, int], dict[str, dict[str, Any]]]
    ) -> dict[str, dict[str, Any]]:
        """``case(variant, run)`` for every variant of the scenario: one after another, or all
        at once when the scale says so (the quick smoke run, whose figures nobody compares)."""
        variants = self.variants(scenario)
        if not self.scale.concurrent_cases or len(variants) < 2:
            outcomes = [case(variant, run) for variant in variants]
        else:
            with ThreadPoolExecutor(max_workers=len(variants)) as pool:
                outcomes = list(pool.map(lambda v: case(v, run), variants))
        merged: dict[str, dict[str, Any]] = {}
        for outcome in outcomes:
            for key, result in outcome.items():
                merged[key] = result
                self._note(scenario, key, result)
        return merged

    def _repeat(
        self,
        scenario: str,
        repeat: int,
        case: Callable[[Variant, int], dict[str, dict[str, Any]]],
    ) -> dict[str, list[dict[str, Any]]]:
        rows: dict[str, list[dict[str, Any]]] = {}
        for run in range(repeat):
            for key, result in self._each(scenario, run, case).items():
                rows.setdefault(key, []).append(result)
        return rows

    def _simple(self, scenario: str, phase: str, repeat: int) -> dict[str, list[dict[str, Any]]]:
        def case(variant: Variant, run: int) -> dict[str, dict[str, Any]]:
            case_dir = self._case_dir(scenario, variant.key, run)
            result = self._run(variant, phase, case_dir, **self._pg_case(variant, scenario, run))
            return {variant.key: result}

        return self._repeat(scenario, repeat, case)

    def _lateness(self) -> dict[str, list[dict[str, Any]]]:
        return self._simple("lateness", "lateness", self.repeat_long)

    def _burst(self) -> dict[str, list[dict[str, Any]]]:
        return self._simple("burst", "burst", self.repeat)

    def _idle(self) -> dict[str, list[dict[str, Any]]]:
        """All idle cases at once: an idle process's wakeups and CPU seconds do not depend on
        its neighbours, and the window is long."""
        rows: dict[str, list[dict[str, Any]]] = {}
        for run in range(self.repeat_long):
            cases = [
                (v.key, self._start(v, "idle", self._case_dir("idle", v.key, run)))
                for v in self.variants("idle")
            ]
            for key, case in cases:
                result = case.finish()
                rows.setdefault(key, []).append(result)
                self._note("idle", key, result)
        return rows

    def _fleet(self) -> dict[str, list[dict[str, Any]]]:
        return self._simple("fleet", "fleet", self.scale.fleet_repeat)

    def _cold(self) -> dict[str, list[dict[str, Any]]]:
        def case(variant: Variant, run: int) -> dict[str, dict[str, Any]]:
            case_dir = self._case_dir("cold", variant.key, run)
            prepared: dict[str, Any] = {"ok": True}
            if variant.persistent:
                prepared = self._run(variant, "cold_prepare", case_dir)
            if not prepared.get("ok"):
                return {variant.key: prepared}
            result = self._run(variant, "cold_start", case_dir)
            if prepared.get("state_bytes") is not None:
                result["state_bytes"] = prepared["state_bytes"]
            return {variant.key: result}

        return self._repeat("cold", self.repeat, case)

    def _state(self) -> dict[str, list[dict[str, Any]]]:
        def case(variant: Variant, run: int) -> dict[str, dict[str, Any]]:
            return {
                f"{variant.key}|{processes}": self._state_case(variant, processes, run)
                for processes in self.scale.state_processes
            }

        return self._repeat("state", self.repeat, case)

    def _state_case(self, variant: Variant, processes: int, run: int) -> dict[str, Any]:
        case_dir = self._case_dir("state", variant.key, processes, run)
        prepared = self._run(variant, "state_prepare", case_dir)
        if not prepared.get("ok"):
            return prepared
        cases = [
            self._start(variant, "state_worker", case_dir, interactive=True, process=p)
            for p in range(processes)
        ]
        ready = [case.wait_ready() for case in cases]  # a worker that died reports in finish()
        start_wall = f"{time.time() + self.scale.state_start_margin!r}\n"
        for case, is_ready in zip(cases, ready, strict=True):
            if is_ready:
                case.send(start_wall)
        workers = [case.finish() for case in cases]
        failed = [w for w in workers if not w.get("ok")]
        if failed:
            return failed[0]
        updates = sum(int(w["updates"]) for w in workers)
        seconds = max(float(w["seconds"]) for w in workers)
        return {
            "ok": True,
            "processes": processes,
            "updates": updates,
            "errors": sum(int(w["errors"]) for w in workers),
            "updates_per_s": updates / seconds,
            "late_start_s": max(float(w.get("late_start_s", 0.0)) for w in workers),
            "state_bytes": prepared.get("state_bytes"),
        }

    def _pg_idle(self) -> dict[str, list[dict[str, Any]]]:
        """Each case alone (the database's transaction counter, the cross-check, counts every
        session): herdsched with one host and with a leader and standbys, APScheduler alone
        (it cannot share a job store between schedulers)."""
        rows: dict[str, list[dict[str, Any]]] = {}
        for run in range(self.repeat_long):
            for variant in self.variants("pg-idle"):
                for hosts in self.scale.pg_idle_hosts if variant.is_herdsched else (1,):
                    key = f"{variant.key}|{hosts}"
                    result = self._pg_idle_case(variant, hosts, run)
                    rows.setdefault(key, []).append(result)
                    self._note("pg-idle", key, result)
        return rows

    def _pg_idle_case(self, variant: Variant, hosts: int, run: int) -> dict[str, Any]:
        """``hosts`` processes on one namespace, started one after another (the first leads);
        the statements each sends within the window, counted from the server's log."""
        assert self.database is not None
        case_dir = self._case_dir("pg-idle", variant.key, hosts, run)
        namespace = self._pg_case(variant, "pg-idle", run)["pg_namespace"]
        with pg_idle_database(self.database, namespace, hosts) as database:
            cases: list[_Case] = []
            for user, dsn in database.hosts:
                extra = {"pg_namespace": namespace, "pg_app": user, "pg_dsn": dsn}
                case = self._start(variant, "pg_idle", case_dir, interactive=True, **extra)
                cases.append(case)
                if not case.wait_ready():  # it died: finish() says why
                    return self._abandon(cases)
            start = time.time() + self.scale.pg_idle_settle
            for case in cases:
                case.send(f"{start!r}\n")
            window = IdleWindow(database.dsn, start, start + self.scale.pg_idle_seconds)
            window.watch()
            workers = [case.finish() for case in cases]
        failed = [w for w in workers if not w.get("ok")]
        if failed:
            return failed[0]
        return window.result(workers, self.database.log, self.scale.pg_idle_max_sleep)

    @staticmethod
    def _abandon(cases: list[_Case]) -> dict[str, Any]:
        """End the hosts started before the last one, which died: its failure is the result."""
        failed = cases[-1].finish()
        for case in cases[:-1]:
            case.process.kill()
            case.finish()
        return failed
