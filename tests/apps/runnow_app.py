"""A Flask app whose workers all stand by, for the run-now test with real processes.

Run the scheduler in a process of its own first (``python runnow_app.py``): it takes the leader
lock, so every gunicorn worker serving ``runnow_app:app`` stands by and queues the "run now"
requests it receives for that process. Each run appends one JSON line (pid, run id, prompt) to
``runnow.jsonl`` in the state directory, so a test can check that each request ran once, under
the id its 202 gave.
"""

import json
import os
import time

from flask import Flask

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.api import ALLOW_ANYONE
from herdsched.contrib.flask import init_app

STATE_DIR = os.environ.get("HERDSCHED_DEMO_STATE_DIR", ".herdsched")
RUN_LOG = os.path.join(STATE_DIR, "runnow.jsonl")


def poke(info: TriggerInfo) -> str:
    time.sleep(0.1)  # long enough that the requests of a burst find the schedule running
    line = {"pid": os.getpid(), "run_id": info.run_id, "prompt": info.prompt}
    with open(RUN_LOG, "a", encoding="utf-8") as log:  # one short append: atomic
        log.write(json.dumps(line) + "\n")
    return "poked"


scheduler = ThreadedScheduler(
    state_dir=STATE_DIR, max_sleep=1.0, poll_interval=0.1, commit_delay=0.05, max_run_history=100
)
scheduler.add_agent(Agent("a", job=poke, schedules={"s": Schedule.manual()}))

app = Flask(__name__)
init_app(app, scheduler, auth=ALLOW_ANYONE)

if __name__ == "__main__":
    scheduler.run_forever()
