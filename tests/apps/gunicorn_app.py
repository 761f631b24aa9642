"""A Flask app served by gunicorn in the tests (and shown in docs/embedding.md).

Run it with several workers; exactly one worker's scheduler is active::

    HERDSCHED_DEMO_STATE_DIR=/tmp/demo gunicorn -w 4 gunicorn_app:app            # or --preload

Every run of the 1 s interval schedule appends one JSON line (pid, run id, slot, start, end) to
``runs.jsonl`` in the state directory, so a test can check that each slot ran exactly once.
"""

import json
import os
import time

from flask import Flask

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.contrib.flask import init_app

STATE_DIR = os.environ.get("HERDSCHED_DEMO_STATE_DIR", ".herdsched")
RUN_LOG = os.path.join(STATE_DIR, "runs.jsonl")


def tick(info: TriggerInfo) -> str:
    started = time.time()
    time.sleep(0.2)  # long enough that two schedulers firing the same slot would overlap
    line = {
        "pid": os.getpid(),
        "run_id": info.run_id,
        "slot": info.scheduled_for.isoformat() if info.scheduled_for else None,
        "start": started,
        "end": time.time(),
    }
    with open(RUN_LOG, "a", encoding="utf-8") as log:  # one short append: atomic
        log.write(json.dumps(line) + "\n")
    return "tick"


# Every worker builds the same scheduler on the same state directory; the leader lock makes
# one of them active. max_sleep bounds how long a standby waits before trying to take over.
scheduler = ThreadedScheduler(state_dir=STATE_DIR, max_sleep=1.0, max_run_history=500)
scheduler.add_agent(Agent("clock", job=tick, schedules={"tick": Schedule.interval("1s")}))

app = Flask(__name__)
init_app(app, scheduler)  # REST API under /herdsched/api, status page at /herdsched/
