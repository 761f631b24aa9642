"""Real processes, real locks, real ``kill -9``: the state file never loses or tears an update."""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from herdsched.errors import StateLockTimeoutError
from herdsched.models import Status
from herdsched.store import YamlStateStore, update_schedule_state
from herdsched.store.locking import FileLock
from herdsched.store.state_file import StateRenderer
from herdsched.store.state_reader import StateReader

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and SIGKILL"),
]

CTX: Any = multiprocessing.get_context("fork") if hasattr(os, "fork") else None
LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
TEMP = re.compile(r"^\..+\.tmp-\d+-[0-9a-f]{8}$")


def debris(directory: Path) -> list[Path]:
    return [path for path in directory.rglob(".*") if TEMP.match(path.name)]


# -- workers (module level, run in child processes) ---------------------------------------------
def _update_many(state_dir: str, worker: int, count: int, long_lived: bool) -> None:
    if long_lived:
        with YamlStateStore(state_dir) as store:
            for index in range(count):
                store.update_schedule_state(
                    f"agent-{worker}", f"s{index}", consecutive_failures=index
                )
    else:
        for index in range(count):
            update_schedule_state(
                state_dir, f"agent-{worker}", f"s{index}", consecutive_failures=index
            )


def _write_forever(state_dir: str, started: Any, seed: int) -> None:
    rng = random.Random(seed)
    store = YamlStateStore(state_dir)
    started.set()
    while True:
        store.update_schedule_state(
            "fleet", f"s{rng.randrange(1000)}", consecutive_failures=rng.randrange(100)
        )


def _hold_lock(state_dir: str, locked: Any) -> None:
    lock = FileLock(Path(state_dir) / "state.yaml.lock", Path(state_dir) / "state.yaml", 5.0)
    lock.acquire()
    locked.set()
    time.sleep(600)


def _pause(state_dir: str) -> None:
    update_schedule_state(state_dir, "a", "s", status="paused")


# -- tests -------------------------------------------------------------------------------------
def test_four_processes_updating_concurrently_lose_nothing(tmp_path: Path) -> None:
    processes = [
        CTX.Process(target=_update_many, args=(str(tmp_path), worker, 100, worker % 2 == 0))
        for worker in range(4)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    with YamlStateStore(tmp_path) as store:
        states = store.get_all_schedule_states()
    assert sorted(states) == ["agent-0", "agent-1", "agent-2", "agent-3"]
    for worker in range(4):
        schedules = states[f"agent-{worker}"]
        assert len(schedules) == 100
        assert all(schedules[f"s{i}"].consecutive_failures == i for i in range(100))
    assert debris(tmp_path) == []


def test_kill_9_mid_write_never_tears_the_file(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        for index in range(1000):
            store.record_transition("fleet", f"s{index}", consecutive_failures=0)
    expected = {f"s{index}" for index in range(1000)}
    rng = random.Random(1234)
    debris_seen = 0
    for attempt in range(20):  # 2 in 5 kills land inside a write
        started = CTX.Event()
        writer = CTX.Process(target=_write_forever, args=(str(tmp_path), started, attempt))
        writer.start()
        assert started.wait(10)
        time.sleep(rng.uniform(0.0, 0.1))
        os.kill(writer.pid, signal.SIGKILL)
        writer.join(10)
        assert writer.exitcode == -signal.SIGKILL
        debris_seen += len(debris(tmp_path))
        # any reader, at any moment: the file parses and holds every schedule
        if attempt % 5 == 0:  # an independent parser now and then (PyYAML is slow)
            document = yaml.load((tmp_path / "state.yaml").read_bytes(), Loader=LOADER)
            assert set(document["agents"]["fleet"]["schedules"]) == expected
        with YamlStateStore(tmp_path) as reader:  # opening sweeps the dead writer's debris
            assert set(reader.get_agent_schedule_states("fleet")) == expected
            assert reader.last_corruption is None
        assert debris(tmp_path) == []
        backup = StateReader(StateRenderer()).parse((tmp_path / "state.yaml.bak").read_bytes())
        assert set(backup.states["fleet"]) == expected
    assert not list(tmp_path.glob("*.corrupt-*"))
    # the kills did land inside writes (temp files were left behind) at least once
    assert debris_seen > 0


def test_lock_held_elsewhere_times_out_and_kill_9_frees_it(tmp_path: Path) -> None:
    with YamlStateStore(tmp_path) as store:
        store.update_schedule_state("a", "s", status="idle")
    locked = CTX.Event()
    holder = CTX.Process(target=_hold_lock, args=(str(tmp_path), locked))
    holder.start()
    try:
        assert locked.wait(10)
        store = YamlStateStore(tmp_path, lock_timeout=0.3)
        began = time.monotonic()
        with pytest.raises(StateLockTimeoutError) as info:
            store.update_schedule_state("a", "s", status="paused")
        waited = time.monotonic() - began
        assert 0.3 <= waited < 0.3 + 5.0
        assert info.value.timeout == 0.3
        assert str(tmp_path / "state.yaml") in str(info.value)
        assert "0.3 s" in str(info.value)
        assert info.value.path == tmp_path / "state.yaml.lock"
        # reads need no lock
        assert store.get_schedule_state("a", "s").status is Status.IDLE
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)
        store.update_schedule_state("a", "s", status="paused")  # free at once
        assert store.get_schedule_state("a", "s").status is Status.PAUSED
        store.close()
    finally:
        if holder.is_alive():
            os.kill(holder.pid, signal.SIGKILL)
            holder.join(10)


def test_pause_from_another_process_beats_a_pending_transition(tmp_path: Path) -> None:
    scheduler = YamlStateStore(tmp_path)
    scheduler.update_schedule_state("a", "s", status="idle")
    scheduler.record_transition("a", "s", status="running", consecutive_failures=1)
    cli = CTX.Process(target=_pause, args=(str(tmp_path),))
    cli.start()
    cli.join(30)
    assert cli.exitcode == 0
    scheduler.flush()
    scheduler.close()
    with YamlStateStore(tmp_path) as reader:
        state = reader.get_schedule_state("a", "s")
    assert state.status is Status.PAUSED
    assert state.consecutive_failures == 1
