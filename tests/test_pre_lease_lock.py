"""``scheduler.lock``, the leader lock of versions before the lease: a leader of this version
holds it too, and neither takes nor keeps the lead while such a version holds it.

Store objects of this process stand for processes (each lock is taken on its own descriptor,
as separate processes would take it); time is a FakeClock. The same across real processes:
``tests/test_lease_processes.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import portalocker
import pytest
from scheduler_helpers import drop_flocks_as_at_kill

from herdsched.errors import LeadershipLostError
from herdsched.store.leases import LeaseFile, read_leader_info
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
TTL = 30.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def stores(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[[], YamlStateStore]]:
    made: list[YamlStateStore] = []

    def make() -> YamlStateStore:
        store = YamlStateStore(tmp_path, clock=clock, commit_delay=0)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@contextmanager
def older_version_leading(state_dir: Path) -> Iterator[None]:
    """Hold ``scheduler.lock`` as a version before the lease did: pid, host and start written
    into it, no lease holder."""
    with open(state_dir / "scheduler.lock", "a+", encoding="utf-8") as handle:
        portalocker.lock(handle, portalocker.LOCK_EX | portalocker.LOCK_NB)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": 1, "host": "old", "started_at": "2026-03-01T11:00:00Z"}))
        handle.flush()
        yield
        portalocker.unlock(handle)


def free_for_an_older_version(state_dir: Path) -> bool:
    """Whether a version before the lease could take ``scheduler.lock`` now."""
    with open(state_dir / "scheduler.lock", "a+", encoding="utf-8") as handle:
        try:
            portalocker.lock(handle, portalocker.LOCK_EX | portalocker.LOCK_NB)
        except portalocker.AlreadyLocked:
            return False
        portalocker.unlock(handle)
        return True


def test_a_free_lease_is_not_taken_while_an_older_version_leads(
    stores: Callable[[], YamlStateStore], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = stores()
    with older_version_leading(tmp_path):
        assert store.acquire_lease("new", TTL) is None
        assert store.acquire_lease("new", TTL) is None
    assert caplog.text.count("an older herdsched leads this state directory") == 1
    lease = store.acquire_lease("new", TTL)
    assert lease is not None
    assert not free_for_an_older_version(tmp_path)  # it stands by behind this leader
    named = json.loads((tmp_path / "scheduler.lock").read_text())
    assert (named["holder"], named["pid"]) == ("new", lease.pid)


def test_a_leader_that_took_over_from_a_hung_one_takes_scheduler_lock_once_it_is_free(
    stores: Callable[[], YamlStateStore], clock: FakeClock, tmp_path: Path
) -> None:
    hung, current = stores(), stores()
    assert hung.acquire_lease("hung", TTL) is not None
    clock.advance(TTL)
    lease = current.acquire_lease("current", TTL)
    assert lease is not None  # the hung holder's scheduler.lock does not hold the takeover up
    assert not free_for_an_older_version(tmp_path)
    drop_flocks_as_at_kill(hung)  # the hung process dies at last
    current.renew_lease(lease, TTL)
    assert not free_for_an_older_version(tmp_path)


def test_a_leader_steps_down_when_an_older_version_took_scheduler_lock_first(
    stores: Callable[[], YamlStateStore], clock: FakeClock, tmp_path: Path
) -> None:
    """A leader that took over from a hung holder leads without the lock; when the hung one
    dies and a version before the lease takes the lock first, both led."""
    hung, current, third = stores(), stores(), stores()
    assert hung.acquire_lease("hung", TTL) is not None
    clock.advance(TTL)
    lease = current.acquire_lease("current", TTL)
    assert lease is not None
    drop_flocks_as_at_kill(hung)
    with older_version_leading(tmp_path):
        with pytest.raises(LeadershipLostError, match="before the lease"):
            current.renew_lease(lease, TTL)
        assert read_leader_info(tmp_path) is None  # the lease was given up
        assert third.acquire_lease("third", TTL) is None
    assert third.acquire_lease("third", TTL) is not None


def test_a_released_lease_lets_scheduler_lock_go_before_the_lease_reads_free(
    stores: Callable[[], YamlStateStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Else a standby of this version could take the free lease without the lock in between,
    and a version before the lease take the lock as it went: two leaders."""
    store = stores()
    lease = store.acquire_lease("me", TTL)
    assert lease is not None
    free_when_written: list[bool] = []
    write = LeaseFile._write

    def watched(self: LeaseFile, held: Any, epoch: int, lock_name: str | None) -> None:
        if held is None:
            free_when_written.append(free_for_an_older_version(tmp_path))
        write(self, held, epoch, lock_name)

    monkeypatch.setattr(LeaseFile, "_write", watched)
    store.release_lease(lease)
    assert free_when_written == [True]


def test_a_scheduler_lock_that_cannot_be_used_is_told_and_not_waited_for(
    stores: Callable[[], YamlStateStore], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "scheduler.lock").mkdir()  # nobody can open or lock it, root included
    store = stores()
    with caplog.at_level(logging.WARNING, logger="herdsched"):
        lease = store.acquire_lease("me", TTL)
        assert lease is not None
        store.renew_lease(lease, TTL)
    assert caplog.text.count("Cannot use") == 1
    assert "an older herdsched leads" not in caplog.text
