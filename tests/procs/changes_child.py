"""A scheduler process that changes schedules through its REST API, for multi-process tests.

Usage: changes_child.py STATE_DIR INDEX PROCESSES MODE ROUNDS

Builds a ThreadedScheduler on STATE_DIR (agent ``a``, one schedule ``coded`` defined in code),
starts it, writes ``ready-INDEX`` and waits for the file ``go`` (the barrier), then changes
schedules through :class:`herdsched.api.RestApi`:

``own``
    creates ``own-INDEX-0..2`` with PUT, then for ROUNDS rounds rewrites each (PUT and PATCH
    in turn, prompt ``INDEX-K-ROUND``) and PATCHes the prompt of the stored schedule
    ``shared`` to ``INDEX-ROUND``.
``field``
    PATCHes one field of ``shared`` per process ROUNDS times: process 0 ``prompt``, 1
    ``metadata``, 2 ``jitter_percent`` (see :data:`FIELDS`).
``create``
    creates ``race-0..ROUNDS-1`` with ``add_schedule(persist=True, owner="ownerINDEX")``
``create-rest``
    the same with PUT (the owner in the body).

Then it writes ``done-INDEX``, waits until every process is done, and writes ``out-INDEX.json``:
the answers that were not a success (``errors``, or ``outcomes`` for the create modes) and
what its API answers for every schedule (``definitions``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from herdsched import Agent, ConflictError, Schedule, ThreadedScheduler
from herdsched.api import RestApi

SHARED = "shared"
OWN = 3


def field_value(index: int, round_: int) -> tuple[str, Any]:
    """The field process ``index`` changes in ``field`` mode, and its value in ``round_``."""
    return FIELDS[index], VALUES[index](index, round_)


FIELDS = ("prompt", "metadata", "jitter_percent")
VALUES = (
    lambda index, round_: f"{index}-{round_}",
    lambda index, round_: {"round": round_},
    lambda index, round_: round_ + 1,
)


def wait_for_files(*paths: Path) -> None:
    deadline = time.monotonic() + 60
    while not all(path.exists() for path in paths):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {[str(p) for p in paths]}")
        time.sleep(0.001)


def touch(path: Path) -> None:
    path.with_suffix(".tmp").write_text("")
    path.with_suffix(".tmp").rename(path)  # appears whole


class Client:
    """Calls the REST API of one scheduler; keeps the answers that were not a success."""

    def __init__(self, sched: ThreadedScheduler) -> None:
        self.api = RestApi(sched)
        self.errors: list[list[Any]] = []

    def __call__(self, method: str, name: str, body: dict[str, Any] | None = None) -> int:
        answer = self.api.handle(method, f"/api/schedule/a/{name}", body=body)
        if answer.status >= 300:
            self.errors.append([method, name, body, answer.status, answer.body])
        return answer.status


def change_own(client: Client, index: int, rounds: int) -> None:
    for k in range(OWN):
        client("PUT", f"own-{index}-{k}", {"interval": "1h", "prompt": f"{index}-{k}-start"})
    for round_ in range(rounds):
        for k in range(OWN):
            prompt = f"{index}-{k}-{round_}"
            if round_ % 2:
                client("PUT", f"own-{index}-{k}", {"interval": "1h", "prompt": prompt})
            else:
                client("PATCH", f"own-{index}-{k}", {"prompt": prompt})
        client("PATCH", SHARED, {"prompt": f"{index}-{round_}"})


def change_field(client: Client, index: int, rounds: int) -> None:
    for round_ in range(rounds):
        field, value = field_value(index, round_)
        client("PATCH", SHARED, {field: value})


def create(sched: ThreadedScheduler, index: int, rounds: int, *, rest: bool) -> list[str]:
    """Create ``race-N`` for each round as ``ownerINDEX``; the outcome of each."""
    api = RestApi(sched)
    outcomes = []
    for round_ in range(rounds):
        name, owner = f"race-{round_}", f"owner{index}"
        if rest:
            body = {"interval": "1h", "owner": owner}
            outcomes.append(str(api.handle("PUT", f"/api/schedule/a/{name}", body=body).status))
            continue
        try:
            sched.add_schedule("a", name, Schedule.interval("1h"), persist=True, owner=owner)
            outcomes.append("created")
        except ConflictError:
            outcomes.append("conflict")
    return outcomes


def answers(sched: ThreadedScheduler) -> dict[str, Any]:
    """What this process's API answers for every schedule (name -> definition fields)."""
    api = RestApi(sched)
    listed = api.handle("GET", "/api/schedule", query={"limit": "50"}).body["schedules"]
    found = {}
    for item in listed:
        body = api.handle("GET", f"/api/schedule/a/{item['name']}").body
        found[item["name"]] = {
            k: body.get(k) for k in ("interval", "prompt", "metadata", "owner", "jitter_percent")
        }
    return found


def main() -> None:
    state_dir, index, processes = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    mode, rounds = sys.argv[4], int(sys.argv[5])
    sched = ThreadedScheduler(state_dir=state_dir, max_sleep=0.5)
    coded = {"coded": Schedule.interval("1h", prompt="from code")}
    sched.add_agent(Agent("a", job=lambda info: "ok", schedules=coded))
    sched.start()
    try:
        touch(state_dir / f"ready-{index}")
        wait_for_files(state_dir / "go")
        client = Client(sched)
        outcomes: list[str] = []
        if mode == "own":
            change_own(client, index, rounds)
        elif mode == "field":
            change_field(client, index, rounds)
        else:
            outcomes = create(sched, index, rounds, rest=mode == "create-rest")
        touch(state_dir / f"done-{index}")
        wait_for_files(*(state_dir / f"done-{i}" for i in range(processes)))
        result = {"errors": client.errors, "outcomes": outcomes, "definitions": answers(sched)}
        (state_dir / f"out-{index}.json").write_text(json.dumps(result))
    finally:
        sched.stop()


if __name__ == "__main__":
    main()
