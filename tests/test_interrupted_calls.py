"""Ctrl-C (a notebook's "interrupt kernel") landing in the middle of a call on the main thread
leaves the scheduler as it would be had the call not been made, or had it finished."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import T0, Recorder, running, step, wait_until

from herdsched import Agent, JobSubmitted, Schedule
from herdsched.models import RunStatus, Status
from herdsched.store import YamlStateStore
from herdsched.testing import FakeClock

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="a listener's KeyboardInterrupt reaches the caller only on the main thread",
)


def _fleet(job: Recorder) -> Agent:
    return Agent(
        "nb",
        job=job,
        schedules={"report": Schedule.manual(), "tick": Schedule.interval("1m")},
    )


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def test_a_trigger_interrupted_in_its_jobsubmitted_listener_leaves_no_run_behind() -> None:
    """A run-now interrupted while its ``JobSubmitted`` listener ran stayed ``running`` for
    ever with its agent's slot taken: the agent's other schedules never fired again,
    ``trigger()`` answered ``already_running`` and ``stop()`` timed out."""
    job = Recorder()
    with running() as (sched, clock):
        sched.add_agent(_fleet(job))
        sched.start()
        step(sched)
        sched.add_listener(_interrupt, JobSubmitted)
        with pytest.raises(KeyboardInterrupt):
            sched.trigger("nb", "report")
        sched.remove_listener(_interrupt)
        assert sched.store.get_schedule_state("nb", "report").status is Status.IDLE
        [record] = sched.history("nb", "report")
        assert record.status is RunStatus.SKIPPED
        assert "the call that started it was interrupted (KeyboardInterrupt)" in str(record.error)
        assert sched.get_running_job_count("nb") == 0
        assert sched.trigger("nb", "report", wait=True).success
        step(sched, clock, 60)
        assert job.schedules() == ["tick", "report", "tick"]
        assert sched.wait_until_idle(5)


def test_a_trigger_interrupted_while_its_claim_is_written_leaves_no_run_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same interrupt landing in the claim's write (its fsync takes the longest)."""
    job = Recorder()
    store = YamlStateStore(tmp_path, clock=FakeClock(T0))
    with running(store=store) as (sched, _):
        sched.add_agent(_fleet(job))
        sched.start()
        step(sched)
        real = store.claim_runs
        monkeypatch.setattr(store, "claim_runs", _interrupt)
        with pytest.raises(KeyboardInterrupt):
            sched.trigger("nb", "report")
        monkeypatch.setattr(store, "claim_runs", real)
        assert sched.store.get_schedule_state("nb", "report").status is Status.IDLE
        assert [r.status for r in sched.history("nb", "report")] == [RunStatus.SKIPPED]
        assert sched.get_running_job_count("nb") == 0
        assert sched.trigger("nb", "report", wait=True).success
        assert job.schedules() == ["tick", "report"]


@pytest.mark.parametrize("where", ["save_definition", "delete_definition", "update_schedule_state"])
def test_a_change_interrupted_after_its_write_is_taken_into_memory_at_the_next_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """An ``add_schedule(persist=True)``, ``remove_schedule()`` or ``pause()`` interrupted
    once its write was durable left this process's fleet and the store disagreeing for good:
    the schedule another process ran was unknown here (``remove_schedule`` answered not
    found), or one gone everywhere still fired here, or a paused one ran on."""
    job = Recorder()
    clock = FakeClock(T0)
    store = YamlStateStore(tmp_path, clock=clock)
    with running(store=store) as (sched, _):
        sched.add_agent(Agent("nb", job=job))
        sched.start()
        if where != "save_definition":
            sched.add_schedule("nb", "x", Schedule.interval("1m"), persist=True)
        real = getattr(store, where)

        def written_then_interrupted(*args: Any, **kwargs: Any) -> Any:
            real(*args, **kwargs)
            raise KeyboardInterrupt

        monkeypatch.setattr(store, where, written_then_interrupted, raising=False)
        with pytest.raises(KeyboardInterrupt):
            if where == "save_definition":
                sched.add_schedule("nb", "x", Schedule.interval("1m"), persist=True)
            elif where == "delete_definition":
                sched.remove_schedule("nb", "x")
            else:
                sched.pause("nb", "x")
        monkeypatch.setattr(store, where, real, raising=False)
        sched.refresh()
        names = [s.schedule for s in sched.get_status().schedules]
        assert names == ([] if where == "delete_definition" else ["x"])
        assert sched.wait_until_idle(5)
        before = len(job.calls)
        step(sched, clock, 120)
        assert job.schedules()[before:] == (["x"] if where == "save_definition" else [])
        if where == "update_schedule_state":
            assert sched.get_status().schedules[0].status is Status.PAUSED


def test_a_trigger_interrupted_after_its_run_timed_out_leaves_no_run_behind() -> None:
    """A ``JobSubmitted`` listener slow past the run's timeout (the run recorded ``timeout``
    meanwhile), then Ctrl-C: the run stayed in memory for ever, its agent's slot taken,
    ``wait_until_idle()`` on the main thread refused as "called by" it."""
    job = Recorder()
    with running() as (sched, clock):
        sched.add_agent(Agent("nb", job=job, schedules={"report": Schedule.manual(timeout="1s")}))
        sched.start()

        def slow_then_interrupted(event: JobSubmitted) -> None:
            clock.advance(5)  # past the run's timeout: the timer records it
            assert wait_until(lambda: sched.history("nb", "report"))
            raise KeyboardInterrupt

        sched.add_listener(slow_then_interrupted, JobSubmitted)
        with pytest.raises(KeyboardInterrupt):
            sched.trigger("nb", "report")
        sched.remove_listener(slow_then_interrupted)
        assert [r.status for r in sched.history("nb", "report")] == [RunStatus.TIMEOUT]
        assert sched.get_running_job_count("nb") == 0
        assert sched.wait_until_idle(5)
        assert sched.trigger("nb", "report", wait=True).success
        assert len(job.calls) == 1
