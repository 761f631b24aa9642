"""A scheduler process for multi-process tests.

Usage: scheduler_child.py STATE_DIR LOG_FILE MODE

Each run appends ``pid slot`` to LOG_FILE (O_APPEND, one write per line) so the parent can check
that no slot ran twice across processes. MODE ``tick`` runs a 1-second cron; ``hang`` runs a job
that never returns (to be killed mid-run); ``hang-queue`` gives one slot to three schedules due
together, so the first hangs while the other two wait, unclaimed, for the slot. A hanging job
writes its run id to ``LOG_FILE.run-id``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.timestamps import format_timestamp


def main() -> None:
    state_dir, log_file, mode = sys.argv[1], sys.argv[2], sys.argv[3]

    def record(info: TriggerInfo) -> str:
        slot = format_timestamp(info.scheduled_for) if info.scheduled_for else "manual"
        line = f"{os.getpid()} {info.schedule} {slot}\n".encode()
        fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        if mode in ("hang", "hang-unflushed", "hang-queue"):
            Path(f"{log_file}.run-id").write_text(info.run_id)  # the id the job ran with
            time.sleep(3600)
        return "ran"

    schedule = Schedule.cron("* * * * * *") if mode == "tick" else Schedule.interval("1h")
    # hang-unflushed: the group commit never comes, only the claim journal knows of the run
    commit_delay = 3600.0 if mode in ("hang-unflushed", "hang-queue") else 0.1
    sched = ThreadedScheduler(
        state_dir=state_dir,
        max_sleep=0.5,
        min_interval=0,
        poll_interval=0.2,
        commit_delay=commit_delay,
    )
    names = ("s", "t", "u") if mode == "hang-queue" else ("s",)
    slots = 1 if mode == "hang-queue" else 10
    schedules = dict.fromkeys(names, schedule)
    sched.add_agent(Agent("a", job=record, max_concurrent=slots, schedules=schedules))
    sched.run_forever()


if __name__ == "__main__":
    main()
