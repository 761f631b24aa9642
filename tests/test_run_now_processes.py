"""Run-now with real processes: a burst of POSTs to standby gunicorn workers, each run once.

The scheduler runs in a process of its own (``tests/apps/runnow_app.py`` run as a script), so
every one of the ``gunicorn -w 4`` workers serving the same app stands by and queues the
requests it answers with 202. Before run-now requests kept their id and waited for their
schedule, 1 of 10 such requests ran, under an id that matched none of the 202s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from gunicorn_helpers import _no_control_socket, free_port, get_json, wait_for

from herdsched.store.leases import read_leader_info

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs a POSIX process model"),
]

APPS = Path(__file__).parent / "apps"
BURST = 10


@contextmanager
def process(
    command: list[str], state_dir: Path, log_name: str
) -> Iterator[subprocess.Popen[bytes]]:
    env = dict(os.environ, HERDSCHED_DEMO_STATE_DIR=str(state_dir), PYTHONUNBUFFERED="1")
    log = open(state_dir / log_name, "wb")  # noqa: SIM115 - closed in finally
    child = subprocess.Popen(
        command, cwd=APPS, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        yield child
    finally:
        with suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=5)
        log.close()


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_burst_of_runs_posted_to_standby_workers_runs_each_once_under_its_id(
    tmp_path: Path,
) -> None:
    pytest.importorskip("gunicorn")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    port = free_port()
    base = f"http://127.0.0.1:{port}/herdsched/api"
    leader_cmd = [sys.executable, "runnow_app.py"]
    web_cmd = [
        sys.executable,
        *("-m", "gunicorn", "--workers", "4", "--bind", f"127.0.0.1:{port}"),
        *("--graceful-timeout", "5", *_no_control_socket(), "runnow_app:app"),
    ]
    with process(leader_cmd, state_dir, "leader.log") as leader:
        info = wait_for(lambda: read_leader_info(state_dir), 30, "the scheduler process")
        assert info["pid"] == leader.pid
        with process(web_cmd, state_dir, "gunicorn.log"):
            try:
                wait_for(lambda: get_json(f"{base}/status"), 30, "gunicorn to serve")
                answers: list[tuple[int, dict[str, Any]]] = []
                lock = threading.Lock()

                def ask(index: int) -> None:
                    answer = post(f"{base}/schedule/a/s/run", {"prompt": f"p{index}"})
                    with lock:
                        answers.append(answer)

                # The scheduler process is held still during the burst, so that it finds every
                # request at once on its next poll (what a burst faster than its poll does);
                # its lock stays held, so no worker takes over meanwhile.
                os.kill(leader.pid, signal.SIGSTOP)
                try:
                    threads = [threading.Thread(target=ask, args=(i,)) for i in range(BURST)]
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join()
                finally:
                    os.kill(leader.pid, signal.SIGCONT)
                assert [status for status, _ in answers] == [202] * BURST, answers
                assert all(body["queued"] for _, body in answers)
                accepted = [body["run_id"] for _, body in answers]
                assert len(set(accepted)) == BURST

                def finished(run_id: str) -> bool:
                    run = get_json(f"{base}/schedule/a/s/runs/{run_id}")
                    assert run["run_id"] == run_id
                    return bool(run["status"] == "success")

                for run_id in accepted:
                    wait_for(lambda run_id=run_id: finished(run_id), 30, f"run {run_id}")
                lines = (state_dir / "runnow.jsonl").read_text().splitlines()
                runs = [json.loads(line) for line in lines if line.strip()]
                assert sorted(r["run_id"] for r in runs) == sorted(accepted)  # each once
                assert {r["pid"] for r in runs} == {leader.pid}
                assert len({r["prompt"] for r in runs}) == len(runs)
            except AssertionError:
                for name in ("leader.log", "gunicorn.log"):
                    text = (state_dir / name).read_text(errors="replace")
                    sys.stderr.write(f"--- {name}\n{text[-4000:]}")
                raise
