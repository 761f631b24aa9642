"""Shared helpers for scheduler tests: a FakeClock-driven scheduler and recording jobs."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from herdsched import StateError, Status, ThreadedScheduler, TriggerInfo, TriggerType
from herdsched.store import YamlStateStore
from herdsched.store.base import Lease
from herdsched.store.state_file import StateRenderer
from herdsched.testing import FakeClock

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)  # a Monday


class Recorder:
    """A job that records every call; ``action`` decides what each call does."""

    def __init__(self, action: Callable[[TriggerInfo], Any] | None = None) -> None:
        self.calls: list[TriggerInfo] = []
        self.action = action
        self._lock = threading.Lock()

    def __call__(self, info: TriggerInfo) -> Any:
        with self._lock:
            self.calls.append(info)
        return self.action(info) if self.action else "done"

    def slots(self) -> list[datetime | None]:
        return [c.scheduled_for for c in self.calls]

    def schedules(self) -> list[str]:
        return [c.schedule for c in self.calls]


def step(sched: ThreadedScheduler, clock: FakeClock | None = None, by: object = None) -> None:
    """Advance the clock (optionally), run one timer pass, wait for the jobs it started."""
    if clock is not None and by is not None:
        clock.advance(by)  # type: ignore[arg-type]
    sched.run_pending()
    assert sched.wait_until_idle(10)
    sched.run_pending()  # settle: fire what completions made due at this same instant
    assert sched.wait_until_idle(10)


@contextmanager
def running(**kwargs: Any) -> Iterator[tuple[ThreadedScheduler, FakeClock]]:
    """A started in-memory scheduler on a FakeClock at T0, stopped afterwards."""
    clock = kwargs.pop("clock", None) or getattr(kwargs.get("store"), "clock", None)
    if not isinstance(clock, FakeClock):  # a given store's own fake clock, else one at T0
        clock = FakeClock(T0)
    kwargs.setdefault("state_dir", None)
    kwargs.setdefault("timezone", "UTC")
    sched = ThreadedScheduler(clock=clock, **kwargs)
    try:
        yield sched, clock
    finally:
        sched.stop(timeout=5)


def drop_flocks_as_at_kill(store: YamlStateStore) -> None:
    """What the kernel does to the locks of a lease holder killed with ``kill -9``: its
    liveness lock and its hold on ``scheduler.lock`` go; its lease record and its liveness
    lock's file stay (closing the descriptors as the kernel does: no unlock, no removal)."""
    leases: Any = store._leases  # type: ignore[attr-defined]
    leases._liveness.forget_after_fork()
    leases._pre_lease.release()


class LeaseCallsCutOff:
    """Mixed into a store: its lease calls fail while ``broken`` (the store does not
    answer), and its writes while ``full`` (its reads still work: a full disk)."""

    broken = False
    full = False

    def _check(self, write: bool = True) -> None:
        if self.broken:
            raise StateError("the store does not answer")
        if self.full and write:
            raise StateError("No space left on device")

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        self._check()
        return super().renew_lease(lease, ttl)

    def acquire_lease(self, holder: str, ttl: float) -> Lease | None:
        self._check()
        return super().acquire_lease(holder, ttl)

    def current_lease(self) -> Lease | None:
        self._check(write=False)
        return super().current_lease()


def trigger_info(prompt: str = "do it", session_id: str | None = None) -> TriggerInfo:
    """What a job is given for one run of triage/check."""
    return TriggerInfo(
        agent="triage",
        schedule="check",
        prompt=prompt,
        trigger_type=TriggerType.CRON,
        scheduled_for=None,
        fired_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        run_id="run-123",
        session_id=session_id,
    )


def process_runs(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (one killed is reaped by its parent,
    or, once orphaned, by whatever is process 1: in a container late or never)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, step: float = 0.005) -> bool:
    """Poll ``predicate`` (real seconds) until it is true or ``timeout`` passes; its last answer.

    For what real threads and processes do on their own time; fake time needs no polling.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return bool(predicate())
        threading.Event().wait(step)
    return True


class Blocker:
    """A job that blocks until released (ignoring its cancel event) and says when it began."""

    def __init__(self) -> None:
        self.began = threading.Event()
        self.release = threading.Event()

    def __call__(self, info: object) -> None:
        self.began.set()
        assert self.release.wait(10)


def crash_copy(live: Path, crash: Path) -> Path:
    """What a kill -9 right now would leave on disk (locks are not copied)."""
    shutil.copytree(live, crash, ignore=shutil.ignore_patterns("*.lock", "leader*"))
    return crash


def trace_on_disk(state_dir: Path, schedule: str) -> tuple[Status, list[str]]:
    """What a restart would find of a/``schedule``: its status and the schedules of the
    claims in ``claims.log`` that count as started."""
    reader = YamlStateStore(state_dir)
    try:
        claims = [claim.schedule for claim in reader.load_claims()]
        return reader.get_schedule_state("a", schedule).status, claims
    finally:
        reader.close()


def fail_next_claim_write(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Make the claim journal's next ``os.write`` fail (ENOSPC) while the returned flag is
    true; the flag turns false once it has failed.

    ``os`` is one module for the whole process, so only a write of claim lines fails: another
    thread's write (the lease file, a log) must not take the failure meant for a claim."""
    real_write = os.write
    failing = [False]

    def write(fd: int, data: Any) -> int:
        if failing[0] and b'"run_at"' in bytes(data):
            failing[0] = False
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr("herdsched.store.claims.os.write", write)
    return failing


@contextmanager
def tmpfs_mount(mount: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``mount`` with ``options`` for a test, unmounted afterwards; the test
    is skipped where mounting is not allowed (not root, or no permission in a container)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for the test needs root")
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def rendered(renderer: StateRenderer, raw: Mapping[str, Any]) -> str:
    """The YAML text the renderer writes for ``raw``: its parts joined."""
    return "".join(renderer.parts(raw))


def entry_texts(renderer: StateRenderer) -> dict[tuple[str, str], tuple[Any, str]]:
    """(agent, schedule) → (raw entry, its text) as last rendered."""
    return {(agent, name): (entry, text) for agent, name, entry, text in renderer.each_entry_text()}
