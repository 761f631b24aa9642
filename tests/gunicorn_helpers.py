"""Helpers of the tests that run a real ``gunicorn`` serving an app of ``tests/apps``.

Shared by ``test_gunicorn.py`` (exactly once per slot) and ``test_gunicorn_changes.py``
(changes through the REST API of several workers).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

APPS = Path(__file__).parent / "apps"
WORKERS = 4


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def children_of(pid: int) -> set[int]:
    """The pids whose parent is ``pid`` (read from ``/proc``)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.add(int(entry.name))
    return found


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it is truthy (``OSError`` counts as not yet); its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def call(
    method: str, url: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any, dict[str, str]]:
    """One HTTP request with a JSON body; (status, parsed JSON answer, headers), errors too."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as error:
        with error:
            raw = error.read()
            return error.code, json.loads(raw) if raw else None, dict(error.headers)


def read_runs(state_dir: Path) -> list[dict[str, Any]]:
    log = state_dir / "runs.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _no_control_socket() -> list[str]:
    """gunicorn >= 24 opens a control socket in the home directory unless told not to."""
    from gunicorn import config

    names = {setting.name for setting in config.KNOWN_SETTINGS}
    return ["--no-control-socket"] if "control_socket_disable" in names else []


@contextmanager
def gunicorn(
    state_dir: Path, *, preload: bool, app: str = "gunicorn_app:app"
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``gunicorn -w 4`` serving ``app`` of ``tests/apps`` on ``state_dir``; (master, base URL).

    Its output goes to ``state_dir/gunicorn.log``; the whole process group is ended on exit.
    """
    port = free_port()
    env = dict(os.environ, HERDSCHED_DEMO_STATE_DIR=str(state_dir), PYTHONUNBUFFERED="1")
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "--workers",
        str(WORKERS),
        "--bind",
        f"127.0.0.1:{port}",
        "--chdir",
        str(APPS),
        "--graceful-timeout",
        "5",
        *(["--preload"] if preload else []),
        *_no_control_socket(),
        app,
    ]
    log = open(state_dir / "gunicorn.log", "wb")  # noqa: SIM115 - closed in finally
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        yield process, f"http://127.0.0.1:{port}/herdsched"
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        finally:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
            log.close()
