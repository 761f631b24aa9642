"""A Flask app served by gunicorn in the tests, whose REST API lets anyone write.

Like ``gunicorn_app.py`` (every worker builds the same scheduler on the same state directory,
one is active), but ``auth=ALLOW_ANYONE`` opens ``PUT``/``PATCH``/``DELETE`` so a test can
change schedules through any worker. Each answer carries the serving worker's pid in an
``X-Worker-Pid`` header, so a test can tell which worker answered::

    HERDSCHED_DEMO_STATE_DIR=/tmp/demo gunicorn -w 4 gunicorn_open_app:app
"""

import os

from flask import Flask, Response

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.api import ALLOW_ANYONE
from herdsched.contrib.flask import init_app

STATE_DIR = os.environ.get("HERDSCHED_DEMO_STATE_DIR", ".herdsched")


def tick(info: TriggerInfo) -> str:
    return f"tick {info.schedule}"


scheduler = ThreadedScheduler(state_dir=STATE_DIR, max_sleep=1.0, max_run_history=500)
scheduler.add_agent(Agent("clock", job=tick, schedules={"tick": Schedule.interval("1s")}))

app = Flask(__name__)
init_app(app, scheduler, auth=ALLOW_ANYONE)  # REST API under /herdsched/api


@app.after_request
def name_the_worker(response: Response) -> Response:
    response.headers["X-Worker-Pid"] = str(os.getpid())
    return response
