"""A scheduler process for the full-disk test.

Usage: full_disk_child.py STATE_DIR LEDGER SCHEDULES

Runs SCHEDULES schedules on a 1-second cron. Each run appends ``schedule slot`` to LEDGER
(O_APPEND, one write per line; the ledger lives on another file system than the state
directory), so the parent can check that no slot ran twice across a ``kill -9``.
"""

from __future__ import annotations

import os
import sys

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.timestamps import format_timestamp


def main() -> None:
    state_dir, ledger, count = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def record(info: TriggerInfo) -> str:
        slot = format_timestamp(info.scheduled_for) if info.scheduled_for else "manual"
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{info.schedule} {slot}\n".encode())
        finally:
            os.close(fd)
        return "ran"

    sched = ThreadedScheduler(
        state_dir=state_dir, max_sleep=0.5, min_interval=0, poll_interval=0.2, commit_delay=0.1
    )
    schedules = {f"s{i}": Schedule.cron("* * * * * *") for i in range(count)}
    sched.add_agent(Agent("a", job=record, max_concurrent=count, schedules=schedules))
    sched.run_forever()


if __name__ == "__main__":
    main()
