"""Changes through the REST API of a real ``gunicorn -w 4`` app, and bad stored data.

``tests/apps/gunicorn_open_app.py`` opens writes to anyone and names the serving worker in an
``X-Worker-Pid`` header. Bad ``PUT``s must be refused and leave nothing in ``schedules.yaml``;
a good one must be seen by every worker right away; killing the active worker with SIGKILL must
let gunicorn boot a new worker that serves; and an invalid definition already stored must never
stop a worker from booting (it is set aside and listed under ``rejected``).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from gunicorn_helpers import WORKERS, call, children_of, get_json, gunicorn, wait_for

from herdsched.store.leases import read_leader_info

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads worker pids from /proc"),
]

APP = "gunicorn_open_app:app"
BAD_NAMES = ["bad%20name", "-dash", "x.y", "%C3%A9t%C3%A9"]
BOOT_FAILED = "Worker failed to boot"

Answer = tuple[int, Any, int]  # status, JSON body, pid of the worker that answered


def stored(state_dir: Path) -> dict[str, Any]:
    path = state_dir / "schedules.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def stored_names(state_dir: Path) -> set[str]:
    agents = stored(state_dir).get("agents") or {}
    return {name for agent in agents.values() for name in (agent.get("schedules") or {})}


def ask_every_worker(url: str, workers: set[int], *, at_least: int = 12) -> list[Answer]:
    """GET ``url`` until each of ``workers`` answered at least once (and ``at_least`` in all).

    Four requests at a time: a sync worker serves one at a time, so concurrent requests reach
    different workers.
    """
    answers: list[Answer] = []

    def one(_: int) -> Answer:
        status, body, headers = call("GET", url)
        return status, body, int(headers["X-Worker-Pid"])

    def everyone_answered() -> bool:
        with ThreadPoolExecutor(WORKERS) as pool:
            answers.extend(pool.map(one, range(WORKERS)))
        return len(answers) >= at_least and workers <= {pid for _, _, pid in answers}

    wait_for(everyone_answered, 15, f"every worker of {sorted(workers)} to answer {url}")
    return answers


def workers_of(master: int, *, without: int | None = None) -> set[int] | None:
    """The master's workers once there are all of them (and ``without`` is gone)."""
    found = children_of(master)
    return found if len(found) == WORKERS and without not in found else None


def running_workers(master: int) -> set[int]:
    return wait_for(lambda: workers_of(master), 20, f"{WORKERS} workers")


@contextmanager
def open_app(state_dir: Path) -> Iterator[tuple[int, str, set[int]]]:
    """The open app under gunicorn, serving; (master pid, base URL, worker pids).

    On a failed assertion the end of gunicorn's log is shown.
    """
    pytest.importorskip("gunicorn")
    with gunicorn(state_dir, preload=False, app=APP) as (master, base):
        try:
            wait_for(lambda: get_json(f"{base}/api/status"), 30, "gunicorn to serve")
            yield master.pid, base, running_workers(master.pid)
        except AssertionError:
            sys.stderr.write((state_dir / "gunicorn.log").read_text(errors="replace")[-4000:])
            raise


def kill_the_active_worker(state_dir: Path, master: int, workers: set[int]) -> tuple[int, set[int]]:
    """SIGKILL the active worker; wait for another to take over and for gunicorn to boot a
    replacement. Returns (the new active worker's pid, the new set of workers)."""
    leader = wait_for(lambda: read_leader_info(state_dir), 15, "an active scheduler")["pid"]
    assert leader in workers, "the active scheduler must be a worker"
    os.kill(leader, signal.SIGKILL)
    new_leader = wait_for(
        lambda: (info := read_leader_info(state_dir)) and info["pid"] != leader and info["pid"],
        15,
        "another worker to take over",
    )
    after = wait_for(
        lambda: workers_of(master, without=leader), 20, "gunicorn to boot a new worker"
    )
    assert new_leader in after
    assert len(after - workers) == 1  # exactly the replacement is new
    return new_leader, after


def gunicorn_log(state_dir: Path) -> str:
    return (state_dir / "gunicorn.log").read_text(errors="replace")


# ------------------------------------------------------------------------------ the tests


def test_bad_puts_write_nothing_a_good_one_is_seen_everywhere_and_workers_still_boot(
    tmp_path: Path,
) -> None:
    with open_app(tmp_path) as (master, base, workers):
        for name in BAD_NAMES:
            status, body, _ = call("PUT", f"{base}/api/schedule/clock/{name}", {"interval": "1h"})
            assert status == 400, (name, body)
            assert "name" in body["error"], body
        assert stored_names(tmp_path) == set()
        assert not (tmp_path / "schedules.yaml.bak").exists()

        good = f"{base}/api/schedule/clock/good"
        status, body, _ = call("PUT", good, {"interval": "1h", "prompt": "made over REST"})
        assert status == 201, body
        answers = ask_every_worker(good, workers)  # the first GETs come right after the PUT
        assert [(s, b.get("prompt")) for s, b, _ in answers] == [(200, "made over REST")] * len(
            answers
        ), answers
        assert stored_names(tmp_path) == {"good"}
        status, body, _ = call("PATCH", good, {"prompt": "changed over REST"})
        assert status == 200, body
        answers = ask_every_worker(good, workers)
        assert {(s, b.get("prompt")) for s, b, _ in answers} == {(200, "changed over REST")}, (
            answers
        )

        _, replaced = kill_the_active_worker(tmp_path, master, workers)
        answers = ask_every_worker(good, replaced)  # the replacement worker serves too
        assert {(s, b.get("prompt")) for s, b, _ in answers} == {(200, "changed over REST")}, (
            answers
        )
        for name in BAD_NAMES:  # still refused, still nothing written
            assert call("PUT", f"{base}/api/schedule/clock/{name}", {"interval": "1h"})[0] == 400
        assert stored_names(tmp_path) == {"good"}
        log = gunicorn_log(tmp_path)
        assert BOOT_FAILED not in log
        assert "InvalidScheduleError" not in log
        assert "set aside" not in log  # nothing invalid was ever stored


def test_an_invalid_stored_definition_never_stops_a_worker_from_booting(tmp_path: Path) -> None:
    (tmp_path / "schedules.yaml").write_text(
        yaml.safe_dump(
            {
                "format_version": 1,
                "agents": {
                    "clock": {
                        "schedules": {
                            "bad name": {"type": "interval", "interval": "1h"},
                            "bad-cron": {"type": "cron", "cron": "61 * * * *"},
                            "good": {"type": "interval", "interval": "1h", "prompt": "kept"},
                        }
                    }
                },
            }
        )
    )
    with open_app(tmp_path) as (master, base, workers):
        for status, body, _ in ask_every_worker(f"{base}/api/status", workers):
            assert status == 200
            assert {r["schedule"] for r in body["rejected"]} == {"bad name", "bad-cron"}
        for status, body, _ in ask_every_worker(f"{base}/api/schedule/clock/good", workers):
            assert (status, body["prompt"]) == (200, "kept")
        doc = stored(tmp_path)
        assert stored_names(tmp_path) == {"good"}
        # four workers booting at once set each one aside exactly once
        assert sorted(r["schedule"] for r in doc["rejected"]) == ["bad name", "bad-cron"]

        _, replaced = kill_the_active_worker(tmp_path, master, workers)
        for status, body, _ in ask_every_worker(f"{base}/api/status", replaced):
            assert status == 200
            assert {r["schedule"] for r in body["rejected"]} == {"bad name", "bad-cron"}
        assert BOOT_FAILED not in gunicorn_log(tmp_path)


def test_of_concurrent_changes_from_one_revision_on_every_worker_exactly_one_holds(
    tmp_path: Path,
) -> None:
    """Clients that read a schedule, change it and write it back with ``If-Match`` (the
    revision of the definition they read): however the requests spread over the workers, one
    write per revision holds, the others are 412 and write nothing, so no acknowledged change
    is lost."""
    with open_app(tmp_path) as (_, base, _workers):
        url = f"{base}/api/schedule/clock/contended"
        status, body, _ = call("PUT", url, {"interval": "1h"}, {"If-None-Match": "*"})
        assert status == 201, body
        revision = body["revision"]
        for _round in range(3):
            prompts = [f"{revision}-{i}" for i in range(WORKERS * 2)]

            def write(prompt: str, revision: str = revision) -> tuple[int, str, int]:
                headers = {"If-Match": f'"{revision}"'}
                status, _, answer = call("PATCH", url, {"prompt": prompt}, headers)
                return status, prompt, int(answer["X-Worker-Pid"])

            with ThreadPoolExecutor(WORKERS) as pool:
                answers = list(pool.map(write, prompts))
            held = [prompt for status, prompt, _ in answers if status == 200]
            assert len(held) == 1, answers
            assert sorted(status for status, _, _ in answers)[1:] == [412] * (len(prompts) - 1)
            status, body, _ = call("GET", url)
            assert body["prompt"] == held[0]  # the acknowledged change is the stored one
            assert (
                stored(tmp_path)["agents"]["clock"]["schedules"]["contended"]["prompt"] == held[0]
            )
            revision = body["revision"]
