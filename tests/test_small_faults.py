"""The small faults: a lock wait that lasts the timeout it names, an unusable state directory at
``start()``, wrong argument types to schedule calls, intervals that cannot be planned."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import tmpfs_mount

from herdsched import Agent, Schedule, ThreadedScheduler
from herdsched.errors import InvalidScheduleError, StateError, StateLockTimeoutError
from herdsched.store import YamlStateStore
from herdsched.testing import FakeClock


def _flush_failing(store: Any) -> None:
    """A group commit that fails on the held lock (run in its own thread)."""
    with pytest.raises(StateError):
        store.flush()


def _agent() -> Agent:
    return Agent("a", job=lambda info: None, schedules={"s": Schedule.interval("1h")})


# -- a lock wait lasts the timeout it names ----------------------------------------------------

_HOLDER = """
import sys, time, portalocker
handle = open(sys.argv[1], "a")
portalocker.lock(handle, portalocker.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


@pytest.fixture
def lock_held_elsewhere(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path/state.yaml.lock`` held by another process for the test's duration."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path / "state.yaml.lock")],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        yield tmp_path
    finally:
        holder.kill()
        holder.wait(10)
        if holder.stdout:
            holder.stdout.close()


@pytest.mark.slow
def test_a_write_waits_no_longer_than_its_timeout_while_another_thread_waits_too(
    lock_held_elsewhere: Path,
) -> None:
    """pause() called while the group commit waits for the same lock: it used to wait for the
    commit's whole wait first, then for its own, twice the timeout its error names."""
    timeout = 2.0  # the fault waited about 3.5 s here: clear of the bound on a loaded machine
    store = YamlStateStore(lock_held_elsewhere, lock_timeout=timeout)
    store.record_transition("a", "t", consecutive_failures=1)
    flusher = threading.Thread(target=_flush_failing, args=(store,))
    flusher.start()
    time.sleep(0.5)  # the flush now waits for the file lock
    began = time.monotonic()
    with pytest.raises(StateLockTimeoutError, match=f"within {timeout:g} s"):
        store.update_schedule_state("a", "s", status="paused")
    waited = time.monotonic() - began
    flusher.join(10)
    assert waited < timeout * 1.4, f"waited {waited:.2f} s for a {timeout} s timeout"


@pytest.mark.slow
def test_pause_on_a_running_scheduler_waits_its_timeout_once(lock_held_elsewhere: Path) -> None:
    sched = ThreadedScheduler(state_dir=lock_held_elsewhere, lock_timeout=2.0, commit_delay=0)
    sched.add_agent(_agent())
    # not started: the leader lock is a different file, but start() would wait on state.yaml
    sched.store.record_transition("a", "s", consecutive_failures=1)
    flusher = threading.Thread(target=_flush_failing, args=(sched.store,))
    flusher.start()
    time.sleep(0.5)
    began = time.monotonic()
    with pytest.raises(StateError):
        sched.pause("a", "s")
    waited = time.monotonic() - began
    flusher.join(10)
    assert waited < 2.8, f"pause() waited {waited:.2f} s for a 2 s timeout"


# -- an unusable state directory at start() ---------------------------------------------------


def test_start_under_a_regular_file_raises_a_state_error_that_says_what_to_do(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    sched = ThreadedScheduler(state_dir=blocker / "state")
    sched.add_agent(_agent())
    with pytest.raises(StateError) as caught:
        sched.start()
    message = str(caught.value)
    assert f"{blocker} is a file, not a directory" in message
    assert "Pass another state_dir, or move that file away" in message
    assert caught.value.path == blocker / "state"
    assert sched.status == "stopped"


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write to a read-only directory"
)
def test_start_in_a_read_only_directory_raises_a_state_error_that_says_what_to_do(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    state_dir.chmod(0o555)
    try:
        sched = ThreadedScheduler(state_dir=state_dir)
        sched.add_agent(_agent())
        with pytest.raises(StateError, match=r"may not create files in it.*write access"):
            sched.start()
    finally:
        state_dir.chmod(0o755)


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    """A read-only tmpfs (read-only for root too); skipped where mounting is not allowed."""
    with tmpfs_mount(tmp_path / "ro", "ro,size=64k") as mount:
        yield mount


def test_start_on_a_read_only_file_system_raises_a_state_error_that_says_what_to_do(
    read_only_mount: Path,
) -> None:
    for state_dir in (read_only_mount, read_only_mount / "state"):
        sched = ThreadedScheduler(state_dir=state_dir)
        sched.add_agent(_agent())
        with pytest.raises(StateError, match=r"read-only file system.*writable"):
            sched.start()
        assert sched.status == "stopped"


# -- wrong argument types -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "field"),
    [
        (("a", "n", "not a schedule"), {}, "schedule"),
        (("a", "n", None), {}, "schedule"),
        (("a", "n", {"interval": "5m"}), {}, "schedule"),
        (("a", 5, Schedule.interval("1h")), {}, "name"),
        ((5, "n", Schedule.interval("1h")), {}, "agent"),
        (("a", "n", Schedule.interval("1h")), {"owner": 5}, "owner"),
        (("a", "n", Schedule.interval("1h")), {"persist": "yes"}, "persist"),
    ],
)
def test_add_schedule_with_a_wrong_type_raises_invalid_schedule_error(
    args: tuple[Any, ...], kwargs: dict[str, Any], field: str
) -> None:
    sched = ThreadedScheduler(state_dir=None)
    sched.add_agent(_agent())
    with pytest.raises(InvalidScheduleError, match=field) as caught:
        sched.add_schedule(*args, **kwargs)
    assert caught.value.field == field
    assert set(sched.get_agent("a").schedules) == {"s"}


@pytest.mark.parametrize(
    ("args", "kwargs", "field"),
    [
        (("a", 5), {"prompt": "x"}, "name"),
        ((None, "s"), {"prompt": "x"}, "agent"),
        (("a", "s"), {"owner": 5, "prompt": "x"}, "owner"),
        (("a", "s"), {"interval": object()}, "interval"),
        (("a", "s"), {"prompt": 5}, "prompt"),
    ],
)
def test_update_schedule_with_a_wrong_type_raises_invalid_schedule_error(
    args: tuple[Any, ...], kwargs: dict[str, Any], field: str
) -> None:
    sched = ThreadedScheduler(state_dir=None)
    sched.add_agent(_agent())
    with pytest.raises(InvalidScheduleError, match=field):
        sched.update_schedule(*args, **kwargs)


# -- intervals that cannot be planned -----------------------------------------------------------


@pytest.mark.parametrize(
    "every",
    [timedelta(days=3_000_000), timedelta(days=999_999_999), 1e12, "3000000d"],
)
def test_an_interval_whose_next_run_would_pass_the_year_9999_is_refused(every: Any) -> None:
    with pytest.raises(InvalidScheduleError, match="after the year 9999") as caught:
        Schedule.interval(every)
    assert caught.value.field == "interval"


def test_jitter_anchor_and_start_count_toward_the_year_9999() -> None:
    Schedule.interval(timedelta(days=2_000_000))  # about 5,500 years: still plannable
    with pytest.raises(InvalidScheduleError, match="after the year 9999"):
        Schedule.interval(timedelta(days=2_000_000), jitter_percent=100)
    late = datetime(9990, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(InvalidScheduleError, match="after the year 9999") as caught:
        Schedule.interval(timedelta(days=5000), start_at=late)
    # the late start is the culprit, not the interval (which was blamed, with its field)
    assert caught.value.field == "start_at"
    assert str(caught.value) == (
        "start_at 9990-01-01T00:00:00.000Z is too late for interval 5000d: the run after it "
        "would fall after the year 9999"
    )
    with pytest.raises(InvalidScheduleError) as caught:
        Schedule.interval("5m", anchor="9999-12-31T23:59:59Z")
    assert caught.value.field == "anchor"


def test_add_schedule_checks_the_year_9999_against_the_scheduler_clock() -> None:
    clock = FakeClock(datetime(9000, 1, 1, tzinfo=timezone.utc))
    sched = ThreadedScheduler(state_dir=None, clock=clock)
    sched.add_agent(Agent("a", job=lambda info: None))
    with pytest.raises(InvalidScheduleError, match="after the year 9999"):
        sched.add_schedule("a", "far", Schedule.interval(timedelta(days=1100 * 365)))


@pytest.mark.parametrize("every", [timedelta(microseconds=400), 0.0004, timedelta(0, 0, 999)])
def test_an_interval_under_one_millisecond_is_refused(every: Any) -> None:
    with pytest.raises(InvalidScheduleError, match="1 millisecond"):
        Schedule.interval(every)


# -- a job's odd value fails its own run, never the store ---------------------------------------


def test_a_deferred_reason_that_is_not_text_fails_its_run_and_no_other(tmp_path: Path) -> None:
    """``Deferred("1m", Path("lockfile"))`` was taken: its reason became the schedule's
    ``last_error``, every commit after it failed, and the runs of another schedule were
    recorded ``interrupted`` after a restart instead of ``success``."""
    from herdsched import Deferred

    def job(info: Any) -> str:
        if info.schedule == "bad":
            raise Deferred("1m", Path("lockfile"))
        return "fine"

    def started() -> ThreadedScheduler:
        sched = ThreadedScheduler(state_dir=tmp_path, clock=FakeClock(datetime(2026, 1, 5, 12)))
        schedules = {"bad": Schedule.manual(), "good": Schedule.manual()}
        sched.add_agent(Agent("a", job=job, schedules=schedules))
        sched.start()
        return sched

    sched = started()
    bad = sched.trigger("a", "bad", wait=True)
    assert not bad.success and bad.error is not None
    assert bad.error.startswith("TypeError: Deferred reason must be a string, got PosixPath")
    assert all(sched.trigger("a", "good", wait=True).success for _ in range(3))
    sched.stop()
    again = started()
    try:
        assert [(r.schedule, r.status) for r in again.history("a")] == [
            *[("good", "success")] * 3,
            ("bad", "failed"),
        ]
    finally:
        again.stop()
