"""A script that starts a scheduler and lets its main thread end while a job runs.

Usage: exit_child.py STATE_DIR LEDGER

``tick`` runs every 0.2 s; ``slow`` runs once at the start and takes 2 s. Each job appends a line
to LEDGER. The main thread returns (no ``stop()``) as soon as ``slow`` has started, so the
interpreter exits while ``slow`` runs and ``tick`` keeps falling due.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo


def main() -> None:
    state_dir, ledger = Path(sys.argv[1]), Path(sys.argv[2])
    slow_started = threading.Event()

    def note(what: str) -> None:
        with ledger.open("a") as out:
            out.write(f"{what}\n")

    def tick(info: TriggerInfo) -> None:
        note("tick")

    def slow(info: TriggerInfo) -> None:
        slow_started.set()
        time.sleep(2)
        note("slow")

    sched = ThreadedScheduler(state_dir=state_dir, min_interval=0, timezone="UTC")
    sched.add_agent(Agent("t", job=tick, schedules={"tick": Schedule.interval(0.2)}))
    sched.add_agent(Agent("s", job=slow, schedules={"slow": Schedule.interval("1h")}))
    sched.start()
    if not slow_started.wait(30):
        raise SystemExit("slow never started")
    note("main returns")


if __name__ == "__main__":
    main()
