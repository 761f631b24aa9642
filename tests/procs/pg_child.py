"""A scheduler process on a PostgreSQL store, for the multi-host fault tests.

Usage: pg_child.py DSN NAMESPACE LEDGER LEASE_TTL

Runs schedules on a 1-second cadence (``tick`` and ``held``: cron every second; ``every``: a
1-second interval) and ``manual`` (hourly, for run-now requests) whose job appends
``pid schedule slot`` to LEDGER (O_APPEND, one write per line; a run-now's slot is its run id),
so the parent can check that no slot ran twice across processes. Logs INFO and above to stderr
(the parent looks for "lost the lead" and "Reconnected").
"""

from __future__ import annotations

import logging
import os
import sys

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.store.postgres import PostgresStateStore
from herdsched.timestamps import format_timestamp


def main() -> None:
    dsn, namespace, ledger, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s %(message)s"
    )

    def record(info: TriggerInfo) -> str:
        slot = format_timestamp(info.scheduled_for) if info.scheduled_for else info.run_id
        line = f"{os.getpid()} {info.schedule} {slot}\n".encode()
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return "ran"

    sched = ThreadedScheduler(
        store=PostgresStateStore(dsn, namespace=namespace, commit_delay=0.1, connect_timeout=3),
        max_sleep=0.2,
        min_interval=0,
        poll_interval=0.2,
        lease_ttl=ttl,
    )
    every_second = Schedule.cron("* * * * * *")
    schedules = {
        "tick": every_second,
        "held": every_second,
        "every": Schedule.interval("1s"),
        "manual": Schedule.interval("1h"),
    }
    sched.add_agent(Agent("a", job=record, max_concurrent=4, schedules=schedules))
    sched.run_forever()


if __name__ == "__main__":
    main()
