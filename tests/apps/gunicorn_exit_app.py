"""A Flask app for the gunicorn test of a worker that exits while a job runs.

Like ``gunicorn_app.py`` (a 1 s ``tick`` whose runs append to ``runs.jsonl``), plus ``slow``: a
job that runs once at the start and takes 3 s, writing ``slow.started`` when it begins, so the
test can stop the active worker while one job runs and ``tick`` keeps falling due.
"""

import json
import os
import time
from pathlib import Path

from flask import Flask

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.contrib.flask import init_app

STATE_DIR = Path(os.environ.get("HERDSCHED_DEMO_STATE_DIR", ".herdsched"))


def _append(line: dict[str, object]) -> None:
    with open(STATE_DIR / "runs.jsonl", "a", encoding="utf-8") as log:  # one short append
        log.write(json.dumps(line) + "\n")


def tick(info: TriggerInfo) -> str:
    started = time.time()
    time.sleep(0.2)
    slot = info.scheduled_for.isoformat() if info.scheduled_for else None
    _append(
        {
            "job": "tick",
            "pid": os.getpid(),
            "run_id": info.run_id,
            "slot": slot,
            "start": started,
            "end": time.time(),
        }
    )
    return "tick"


def slow(info: TriggerInfo) -> str:
    started = time.time()
    (STATE_DIR / "slow.started").write_text(str(os.getpid()))
    time.sleep(3)
    _append(
        {
            "job": "slow",
            "pid": os.getpid(),
            "run_id": info.run_id,
            "slot": None,
            "start": started,
            "end": time.time(),
        }
    )
    return "slow"


scheduler = ThreadedScheduler(state_dir=STATE_DIR, max_sleep=1.0, max_run_history=500)
scheduler.add_agent(Agent("clock", job=tick, schedules={"tick": Schedule.interval("1s")}))
scheduler.add_agent(Agent("slowpoke", job=slow, schedules={"slow": Schedule.interval("1h")}))

app = Flask(__name__)
init_app(app, scheduler)
