"""What the log tells an operator about leadership: the store in words, honest causes.

Time is a FakeClock; the YAML store's liveness locks are real flocks, dropped as a kill would.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

import pytest
from scheduler_helpers import Blocker, drop_flocks_as_at_kill, wait_until

from herdsched import Agent, Schedule, ThreadedScheduler
from herdsched.models import RunStatus
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
TTL = 30.0


def test_losing_the_lead_names_the_store_in_words_and_the_interrupted_run_its_possible_causes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The log said "lost the lead of YamlStateStore('...') (epoch 1)", a Python repr, and,
    for a run its scheduler left behind by losing the lead (not by stopping), "was running
    when its scheduler stopped"."""
    caplog.set_level(logging.INFO, logger="herdsched")
    clock = FakeClock(T0)
    job = Blocker()
    sched = ThreadedScheduler(
        state_dir=tmp_path, clock=clock, lease_ttl=TTL, commit_delay=0, timezone="UTC"
    )
    sched.add_agent(Agent("a", job=job, schedules={"s": Schedule.interval("1h")}))
    with sched:
        sched.run_pending()
        assert job.began.wait(10)
        other = YamlStateStore(tmp_path, clock=clock)
        try:
            drop_flocks_as_at_kill(sched.store)  # as if it hung past its lease
            taken = other.acquire_lease("other", TTL)
            assert taken is not None
            clock.advance(11)  # the heartbeat is due: refused, the scheduler steps down
            sched.run_pending()
            assert wait_until(lambda: sched.status == "standby")
            job.release.set()
            assert sched.wait_until_idle(10)
            other.release_lease(taken)
        finally:
            other.close()
        clock.advance(10)
        sched.run_pending()
        sched.run_pending()
        assert wait_until(lambda: sched.status == "running")
        (record,) = sched.history("a", "s")
    assert record.status is RunStatus.INTERRUPTED
    messages = [r.getMessage() for r in caplog.records]
    lost = [m for m in messages if m.startswith("This scheduler lost the lead")]
    assert len(lost) == 1
    assert lost[0].startswith(f"This scheduler lost the lead of {tmp_path} (epoch 1): ")
    assert "StateStore" not in caplog.text
    assert (
        "a/s was running when its scheduler stopped or lost the lead; the run is recorded as "
        "interrupted."
    ) in messages
