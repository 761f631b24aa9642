"""The idle scenario on PostgreSQL: how many queries each host sends while nothing is due.

The main figure is the statements the server logged for each host within the window
(:func:`bench.postgres.count_statements`), each host connecting as a database user of its own.
Each case gets a database of its own on the throwaway server, so the database's transaction
counter (``pg_stat_database``), the cross-check, counts that case's sessions only. On an
existing server (``HERDSCHED_BENCH_PG_DSN``) the log is out of reach and the database is
shared: only the transaction counter is given, and it counts every session of that database.

A *query* is a statement other than ``BEGIN``, ``COMMIT`` or ``ROLLBACK``; the statements
including those, and the transactions they make, are given too. Figures are per ``max_sleep``
(the window divided by it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.measure import sleep_until
from bench.postgres import (
    BenchDatabase,
    count_statements,
    database_transactions,
    run_sql,
    wait_for_log,
    with_connection_options,
)

__all__ = ["IdleDatabase", "IdleWindow", "pg_idle_database"]


@dataclass(frozen=True)
class IdleDatabase:
    """Where one case runs: ``dsn`` (as superuser) and each host's user and DSN."""

    dsn: str
    hosts: list[tuple[str, str]]


@contextlib.contextmanager
def pg_idle_database(database: BenchDatabase, name: str, hosts: int) -> Iterator[IdleDatabase]:
    """A fresh database called ``name`` on the throwaway server with a user per host
    (``<name>_h<i>``; all dropped after), or the existing server's DSN as given for every
    host."""
    if not database.own:
        yield IdleDatabase(database.dsn, [(f"{name}_h{i}", database.dsn) for i in range(hosts)])
        return
    users = [f"{name}_h{i}" for i in range(hosts)]
    run_sql(database.dsn, f'CREATE DATABASE "{name}"')
    try:
        for user in users:
            run_sql(database.dsn, f'CREATE ROLE "{user}" LOGIN SUPERUSER')
        dsn = with_connection_options(database.dsn, dbname=name)
        yield IdleDatabase(dsn, [(u, with_connection_options(dsn, user=u)) for u in users])
    finally:
        run_sql(database.dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        for user in users:
            run_sql(database.dsn, f'DROP ROLE IF EXISTS "{user}"')


class IdleWindow:
    """The measured window ``[start, end)`` (wall time) of one case."""

    def __init__(self, dsn: str, start: float, end: float) -> None:
        self.dsn = dsn
        self.start = start
        self.end = end
        self.transactions: int | None = None

    def watch(self) -> None:
        """Read the database's transaction counter at the window's start and end (the
        runner's two reads are one transaction each: the second counts the first)."""
        sleep_until(self.start)
        before = database_transactions(self.dsn)
        sleep_until(self.end)
        self.transactions = database_transactions(self.dsn) - before - 1

    def result(
        self, workers: list[dict[str, Any]], log: Path | None, max_sleep: float
    ) -> dict[str, Any]:
        """The case's figures from the hosts' own results and the server's log."""
        max_sleep = float(workers[0].get("max_sleep") or max_sleep)
        periods = (self.end - self.start) / max_sleep
        hosts = len(workers)
        result: dict[str, Any] = {
            "ok": True,
            "hosts": hosts,
            "seconds": self.end - self.start,
            "max_sleep": max_sleep,
            "poll_interval": workers[0].get("poll_interval"),
            "leaders": sum(1 for w in workers if w.get("leader")),
            "cpu_s": max(float(w.get("cpu_s") or 0.0) for w in workers),
            "db_transactions": self.transactions,
            "db_tx_per_max_sleep_per_host": (
                None if self.transactions is None else self.transactions / periods / hosts
            ),
        }
        if log is None:
            return result
        wait_for_log(log)
        counts = count_statements(log, self.start, self.end, {w["app"] for w in workers})
        per_host = [
            {
                "app": w["app"],
                "leader": bool(w.get("leader")),
                "statements": counts[w["app"]].statements,
                "queries": counts[w["app"]].queries,
                "transactions": counts[w["app"]].transactions,
            }
            for w in workers
        ]
        result["per_host"] = per_host
        for role, leader in (("leader", True), ("standby", False)):
            of_role = [h for h in per_host if h["leader"] is leader]
            if of_role:  # the busiest host of the role
                result[f"{role}_queries_per_max_sleep"] = (
                    max(h["queries"] for h in of_role) / periods
                )
                result[f"{role}_statements_per_max_sleep"] = (
                    max(h["statements"] for h in of_role) / periods
                )
                result[f"{role}_transactions_per_max_sleep"] = (
                    max(h["transactions"] for h in of_role) / periods
                )
        result["max_queries_per_max_sleep"] = max(h["queries"] for h in per_host) / periods
        result["max_transactions_per_max_sleep"] = (
            max(h["transactions"] for h in per_host) / periods
        )
        return result
