"""A scheduler process for the lease tests.

Usage: lease_child.py STATE_DIR LEDGER LEASE_TTL

Runs a 1-second cron whose job appends ``pid schedule slot`` to LEDGER (O_APPEND, one write per
line), so the parent can check that no slot ran twice across processes. Logs WARNING and above
to stderr.
"""

from __future__ import annotations

import logging
import os
import sys

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.timestamps import format_timestamp


def main() -> None:
    state_dir, ledger, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

    def record(info: TriggerInfo) -> str:
        slot = format_timestamp(info.scheduled_for) if info.scheduled_for else "manual"
        line = f"{os.getpid()} {info.schedule} {slot}\n".encode()
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return "ran"

    sched = ThreadedScheduler(
        state_dir=state_dir,
        max_sleep=0.2,
        min_interval=0,
        poll_interval=0.2,
        commit_delay=0.1,
        lease_ttl=ttl,
    )
    sched.add_agent(Agent("a", job=record, schedules={"tick": Schedule.cron("* * * * * *")}))
    sched.run_forever()


if __name__ == "__main__":
    main()
