"""Changes as transactions across real processes on one state directory.

Each process runs ``tests/procs/changes_child.py``: a ThreadedScheduler with its REST API (one
process active, the others standby) that waits for a barrier file and then changes schedules
at the same time as the others. At the end every process must answer the same definitions,
``schedules.yaml`` must hold them, and no change that was answered as a success may be lost;
of two owners creating one name at once exactly one wins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from herdsched.store.yaml_store import YamlStateStore

pytestmark = pytest.mark.slow
CHILD = Path(__file__).parent / "procs" / "changes_child.py"
ROUNDS = 8


@pytest.fixture
def run_children(tmp_path: Path) -> Iterator[Any]:
    """Start N children in a mode, release them together, and return their outputs."""
    started: list[subprocess.Popen[bytes]] = []

    def run(processes: int, mode: str, rounds: int = ROUNDS) -> list[dict[str, Any]]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERDSCHED_")}
        for index in range(processes):
            command = [sys.executable, str(CHILD), str(tmp_path), str(index), str(processes)]
            started.append(
                subprocess.Popen(
                    [*command, mode, str(rounds)],
                    cwd=tmp_path,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
        wait_for_files([tmp_path / f"ready-{i}" for i in range(processes)], started)
        (tmp_path / "go").write_text("")  # the barrier: every process starts changing now
        for proc in started:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
        return [json.loads((tmp_path / f"out-{i}.json").read_text()) for i in range(processes)]

    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def wait_for_files(paths: list[Path], procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 30
    while not all(path.exists() for path in paths):
        for proc in procs:
            if proc.poll() is not None:
                _, err = proc.communicate()
                raise AssertionError(f"a child ended early: {err.decode(errors='replace')}")
        assert time.monotonic() < deadline, "the children did not get ready"
        time.sleep(0.02)


def stored_definitions(state_dir: Path) -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load((state_dir / "schedules.yaml").read_text())
    schedules: dict[str, dict[str, Any]] = doc["agents"]["a"]["schedules"]
    return schedules


def store_shared(state_dir: Path) -> None:
    """``shared``: a definition created at run time (persisted), before the processes start."""
    store = YamlStateStore(state_dir)
    try:
        definition = {"type": "interval", "interval": "1h", "prompt": "initial"}
        store.save_definition("a", "shared", definition, exists=False)
    finally:
        store.close()


def test_four_processes_changing_schedules_at_once_lose_nothing_and_agree(
    tmp_path: Path, run_children: Any
) -> None:
    store_shared(tmp_path)
    outputs = run_children(4, "own")
    for index, output in enumerate(outputs):
        assert output["errors"] == [], f"process {index}: {output['errors']}"
    first = outputs[0]["definitions"]
    for index, output in enumerate(outputs[1:], start=1):
        assert output["definitions"] == first, f"process {index} answers otherwise"
    own = {f"own-{i}-{k}": f"{i}-{k}-{ROUNDS - 1}" for i in range(4) for k in range(3)}
    assert {name: d["prompt"] for name, d in first.items() if name in own} == own
    assert set(first) == {"coded", "shared", *own}
    last_shared = {f"{i}-{ROUNDS - 1}" for i in range(4)}
    assert first["shared"]["prompt"] in last_shared  # the last write of one of them
    stored = stored_definitions(tmp_path)
    assert set(stored) == {"shared", *own}  # "coded" lives in code, not in the file
    assert {name: d["prompt"] for name, d in stored.items()} == {
        name: first[name]["prompt"] for name in stored
    }


def test_concurrent_changes_of_different_fields_of_one_schedule_all_hold(
    tmp_path: Path, run_children: Any
) -> None:
    """Process 0 changes the prompt, 1 the metadata, 2 the jitter: a PATCH of one field must
    not put back an older value of another field that a concurrent PATCH had just set."""
    store_shared(tmp_path)
    outputs = run_children(3, "field")
    for index, output in enumerate(outputs):
        assert output["errors"] == [], f"process {index}: {output['errors']}"
    expected = {"prompt": f"0-{ROUNDS - 1}", "metadata": {"round": ROUNDS - 1}}
    expected["jitter_percent"] = ROUNDS
    stored = stored_definitions(tmp_path)["shared"]
    assert {field: stored.get(field) for field in expected} == expected
    for output in outputs:
        shared = output["definitions"]["shared"]
        assert {field: shared[field] for field in expected} == expected


@pytest.mark.parametrize("mode", ["create", "create-rest"])
def test_two_owners_creating_one_name_at_once_exactly_one_wins(
    tmp_path: Path, run_children: Any, mode: str
) -> None:
    one, two = run_children(2, mode)
    stored = stored_definitions(tmp_path)
    won = {"create": "created", "create-rest": "201"}[mode]
    # over REST the loser gets 409 when the store refused its creation, or 400 ("the owner
    # cannot change") when it already saw the winner's schedule: never a takeover
    lost = {"create": {"conflict"}, "create-rest": {"409", "400"}}[mode]
    for round_, outcomes in enumerate(zip(one["outcomes"], two["outcomes"], strict=True)):
        assert sorted(o == won for o in outcomes) == [False, True], (round_, outcomes)
        loser = next(o for o in outcomes if o != won)
        assert loser in lost, (round_, outcomes)
        winner = f"owner{outcomes.index(won)}"
        assert stored[f"race-{round_}"].get("owner") == winner
        for output in (one, two):  # and both processes answer the winner's definition
            assert output["definitions"][f"race-{round_}"]["owner"] == winner
