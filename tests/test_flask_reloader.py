"""``python app.py`` ending in ``app.run(debug=True)``, with Werkzeug's real reloader: the jobs
run in the server child, and an edit of their code is what runs next (the watcher that loaded
the app first ran them all, with the code of before every edit)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from gunicorn_helpers import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

APP = """
import os
from datetime import datetime, timedelta, timezone
from flask import Flask
from herdsched import Agent, Schedule, ThreadedScheduler
from herdsched.contrib.flask import init_app
import jobs

app = Flask("script")
sched = ThreadedScheduler(state_dir="state", max_sleep=1)
# set in the first process, inherited by the server child: two seconds after the first process
# loaded the app, long after its app.run() has begun, so nothing is due in the first process
later = datetime.now(timezone.utc) + timedelta(seconds=2)
start = os.environ.setdefault("START", later.isoformat())
sched.add_agent(
    Agent("a", job=jobs.tick, schedules={"s": Schedule.interval("1s", start_at=start)})
)
init_app(app, sched)

if __name__ == "__main__":
    app.run(port=int(os.environ["PORT"]), debug=True, reloader_type="stat")
"""

JOBS = """
import os

def tick(info):
    with open("ledger.txt", "a") as ledger:
        ledger.write(f"{os.getpid()} {VERSION}\\n")

VERSION = "{version}"
"""


def _ledger(where: Path) -> list[tuple[int, str]]:
    path = where / "ledger.txt"
    lines = path.read_text().split("\n") if path.exists() else []
    return [(int(pid), version) for pid, version in (line.split() for line in lines if line)]


def _wait_for(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_app_run_in_debug_mode_runs_the_jobs_in_the_server_child_with_the_edited_code(
    tmp_path: Path,
) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    (tmp_path / "jobs.py").write_text(JOBS.replace("{version}", "v1"))
    env = {**os.environ, "PORT": str(free_port()), "PYTHONPATH": str(ROOT)}
    for key in ("START", "FLASK_RUN_FROM_CLI", "FLASK_DEBUG", "WERKZEUG_RUN_MAIN"):
        env.pop(key, None)
    watcher = subprocess.Popen(
        [sys.executable, "app.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert _wait_for(lambda: len(_ledger(tmp_path)) >= 2, 30), "no job ran"
        assert watcher.pid not in {pid for pid, _ in _ledger(tmp_path)}, _ledger(tmp_path)
        # written seconds after the first version (runs begin two seconds after the app is
        # loaded): the stat reloader sees a newer modification time even in whole seconds
        (tmp_path / "jobs.py").write_text(JOBS.replace("{version}", "v2"))

        def edited() -> list[tuple[int, str]]:
            runs = _ledger(tmp_path)
            return (
                runs[[version for _, version in runs].index("v2") :] if runs[-1][1] == "v2" else []
            )

        assert _wait_for(lambda: len(edited()) >= 2, 30), _ledger(tmp_path)[-5:]
        assert {version for _, version in edited()} == {"v2"}  # the old code runs no more
        assert watcher.pid not in {pid for pid, _ in _ledger(tmp_path)}
    finally:
        os.killpg(watcher.pid, signal.SIGTERM)
        try:
            watcher.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(watcher.pid, signal.SIGKILL)
            watcher.wait(10)
        assert watcher.stderr is not None
        watcher.stderr.close()
