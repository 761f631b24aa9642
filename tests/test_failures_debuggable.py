"""A failed run can be debugged: its traceback is kept and logged once, auto-disable is logged."""

from __future__ import annotations

import functools
import gc
import logging
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import T0, running, step

from herdsched import (
    Agent,
    AgentNotFoundError,
    InvalidScheduleError,
    RunStatus,
    Schedule,
    ThreadedScheduler,
)
from herdsched.command import CommandJob
from herdsched.models import MAX_TRACEBACK, RunRecord
from herdsched.testing import FakeClock


def _lookup(info: Any) -> None:
    settings: dict[str, str] = {}
    settings["missing"]


def test_a_failed_run_keeps_its_traceback_and_logs_it_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="herdsched")
    with running() as (sched, _clock):
        sched.add_agent(Agent("a", job=_lookup, schedules={"s": Schedule.interval("1h")}))
        sched.start()
        step(sched)
        (record,) = sched.history("a", "s")
    assert record.status is RunStatus.FAILED
    assert record.error == "KeyError: 'missing'"
    assert record.traceback is not None
    assert record.traceback.startswith("Traceback (most recent call last):")
    assert 'settings["missing"]' in record.traceback
    assert record.traceback.rstrip().endswith("KeyError: 'missing'")
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR and "failed" in r.message]
    assert len(failures) == 1
    assert failures[0].exc_info is not None
    assert failures[0].getMessage() == "The job of a/s failed; its traceback follows."
    assert caplog.text.count("KeyError: 'missing'") == 1  # the traceback's last line


def _cancelled_raises(info: Any) -> None:
    """A job that stops when its run is cancelled, and says so by raising."""
    assert info.cancel_event.wait(10)
    raise RuntimeError("stopped: the run was cancelled")


@pytest.mark.parametrize(
    "job",
    [_cancelled_raises, CommandJob(["sleep", "30"], kill_grace=0.5)],
    ids=["python", "command"],
)
def test_a_timed_out_run_is_logged_once_as_a_timeout_without_a_failure_or_traceback(
    caplog: pytest.LogCaptureFixture, job: Any
) -> None:
    """A timed-out run was logged twice: its WARNING, then "The job of a/s failed" at ERROR
    with a traceback of herdsched's own frames (the command job's answer to the cancel)."""
    caplog.set_level(logging.INFO, logger="herdsched")
    with running() as (sched, clock):
        schedules = {"s": Schedule.interval("1h", timeout="2s")}
        sched.add_agent(Agent("a", job=job, schedules=schedules))
        sched.start()
        sched.run_pending()
        clock.advance("3s")
        sched.run_pending()
        assert sched.wait_until_idle(10)
        (record,) = sched.history("a", "s")
    assert record.status is RunStatus.TIMEOUT
    assert record.error == "timed out after 2s"
    about_the_run = [r for r in caplog.records if "a/s" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in about_the_run] == [
        (
            logging.WARNING,
            f"Run {record.run_id} of a/s timed out after 2s; its slot frees when the job returns.",
        ),
    ]
    assert len([r for r in caplog.records if record.run_id in r.getMessage()]) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if r.exc_info]
    assert "Traceback" not in caplog.text


def test_the_traceback_survives_the_state_directory_and_is_bounded(tmp_path: Path) -> None:
    def deep(info: Any) -> None:
        try:
            raise ValueError("detail " * 2000)  # a cause far longer than the bound
        except ValueError as exc:
            raise RuntimeError("at the bottom") from exc

    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    sched.add_agent(Agent("a", job=deep, schedules={"s": Schedule.interval("1h")}))
    with sched:
        step(sched)
    reopened = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    (record,) = reopened.history("a", "s")
    assert record.traceback is not None
    assert len(record.traceback) <= MAX_TRACEBACK
    assert record.traceback.startswith("...\n")  # the start was cut, the error is kept
    assert record.traceback.rstrip().endswith("RuntimeError: at the bottom")


def test_a_record_without_a_traceback_reads_as_none() -> None:
    record = RunRecord(run_id="r", agent="a", schedule="s", trigger_type="manual", status="success")
    assert record.traceback is None


def test_auto_disable_is_logged_at_error_with_the_schedule_and_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="herdsched")
    with running(max_consecutive_failures=1) as (sched, _clock):
        sched.add_agent(Agent("a", job=_lookup, schedules={"s": Schedule.interval("1h")}))
        sched.start()
        step(sched)
    disabled = [r for r in caplog.records if "is disabled" in r.getMessage()]
    assert len(disabled) == 1
    assert disabled[0].levelno == logging.ERROR
    assert disabled[0].getMessage() == (
        "a/s is disabled: auto-disabled after 1 consecutive failures; last error: "
        "KeyError: 'missing'."
    )


def test_history_outlives_its_schedule_until_purged(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    sched = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    sched.add_agent(Agent("a", job=_lookup, schedules={"s": Schedule.interval("1h")}))
    with sched:
        step(sched)
        sched.remove_schedule("a", "s")
        assert [r.status for r in sched.history("a", "s")] == [RunStatus.FAILED]
    reopened = ThreadedScheduler(state_dir=tmp_path, clock=clock, timezone="UTC")
    assert len(reopened.history("a", "s")) == 1  # after a restart too
    reopened.purge_history("a", "s")
    with pytest.raises(AgentNotFoundError):  # nothing of it is left: the name is unknown now
        reopened.history("a", "s")


async def _fetch(info: Any) -> str:
    return "fetched"


def _lines(info: Any) -> Any:
    yield "one"


class _AsyncJob:
    async def __call__(self, info: Any) -> None: ...


@pytest.mark.parametrize("job", [_fetch, _lines, _AsyncJob(), functools.partial(_fetch)])
def test_an_async_or_generator_job_is_refused_where_it_is_given(job: Any) -> None:
    """An ``async def`` job was accepted, never ran ("coroutine was never awaited") and was
    recorded a success with ``<coroutine object ...>`` as its output, at every run."""
    for give in (
        lambda: Agent("a", job=job, schedules={"s": Schedule.interval("1h")}),
        lambda: Schedule.interval("1h", job=job),
        lambda: ThreadedScheduler(state_dir=None).every("1h", agent="a", name="s")(job),
    ):
        with pytest.raises(InvalidScheduleError, match="is an async def or generator function"):
            give()


def test_a_job_returning_a_coroutine_fails_saying_nothing_ran(
    recwarn: pytest.WarningsRecorder,
) -> None:
    """A plain function handing back a coroutine (a decorator around async code) cannot be
    told when it is given: its run fails, and the coroutine is closed, not left unawaited."""

    def wrapped(info: Any) -> Any:
        return _fetch(info)

    with running() as (sched, _clock):
        sched.add_agent(Agent("a", job=wrapped, schedules={"s": Schedule.interval("1h")}))
        sched.start()
        step(sched)
        (record,) = sched.history("a", "s")
    assert record.status is RunStatus.FAILED
    assert record.error is not None
    assert record.error.startswith("TypeError: the job returned a coroutine instead of running")
    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_a_mock_made_with_a_spec_is_a_job_as_before() -> None:
    """The first check read a spec'd mock's ``__code__`` as a function's: ``Mock(spec=job)``
    raised a ``TypeError`` and ``MagicMock(spec=job)`` was refused as async."""
    from unittest.mock import MagicMock, Mock

    def job(info: Any) -> None: ...

    for mock in (Mock(spec=job), MagicMock(spec=job), MagicMock()):
        Agent("a", job=mock, schedules={"s": Schedule.interval("1h")})
        ThreadedScheduler(state_dir=None, on_trigger=mock, notifier=mock)
