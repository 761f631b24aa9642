"""A scheduler process on a PostgreSQL store, for the multi-host fault tests.

Usage: pg_child.py DSN NAMESPACE LEDGER LEASE_TTL [STALL_FLAG]

Runs schedules on a 1-second cadence (``tick`` and ``held``: cron every second; ``every``: a
1-second interval) and ``manual`` (hourly, for run-now requests) whose job appends
``pid schedule slot`` to LEDGER (O_APPEND, one write per line; a run-now's slot is its run id),
so the parent can check that no slot ran twice across processes. Logs INFO and above to stderr
(the parent looks for "lost the lead" and "Reconnected").

With STALL_FLAG, the process that next claims runs while that file exists (the leader) removes
it and stops itself (SIGSTOP) just before its claim transaction: a leader stalled in the middle
of dispatching, whose claim reaches the database only after it is resumed.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.errors import LeadershipLostError
from herdsched.store.base import RunClaim
from herdsched.store.postgres import PostgresStateStore
from herdsched.timestamps import format_timestamp


class StallingStore(PostgresStateStore):
    """The store, stopping its process before a claim once the stall flag file appears."""

    stall_flag: str | None = None

    def claim_runs(self, claims: Sequence[RunClaim]) -> None:
        if self.stall_flag is None or not claims:
            super().claim_runs(claims)
            return
        try:
            os.unlink(self.stall_flag)
        except FileNotFoundError:
            super().claim_runs(claims)
            return
        os.kill(os.getpid(), signal.SIGSTOP)
        try:
            super().claim_runs(claims)
        except LeadershipLostError:
            logging.getLogger("herdsched").warning("The claim made after the stall was refused.")
            raise


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

    store = StallingStore(dsn, namespace=namespace, commit_delay=0.1, connect_timeout=3)
    store.stall_flag = sys.argv[5] if len(sys.argv) > 5 else None
    sched = ThreadedScheduler(
        store=store,
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
