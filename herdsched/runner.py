"""One run, start to finish, on a worker thread: work item → prompt → job → outcome.

The runner knows nothing about heaps, capacity or the state file: it turns a :class:`Run` into a
:class:`RunOutcome`, and the scheduler decides what the outcome means for the schedule.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import reprlib
import threading
import traceback
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import attrs

from herdsched.cadence import describe_duration
from herdsched.clock import Clock
from herdsched.command import CommandError, CommandJob, quitting
from herdsched.models import (
    JobFunc,
    JobResult,
    RunStatus,
    Schedule,
    TriggerInfo,
    TriggerType,
    storable_text,
)
from herdsched.prompts import build_schedule_prompt, fill_prompt_template
from herdsched.signals import Deferred, SessionNotFound
from herdsched.timestamps import format_timestamp
from herdsched.worksource import WorkItem, WorkOutcome, WorkSource

__all__ = [
    "GIVEN_UP",
    "LEAD_LOST",
    "Run",
    "RunOutcome",
    "execute_run",
    "new_run_id",
    "timeout_message",
]

_log = logging.getLogger("herdsched")
_ERROR_LIMIT = 2000
#: what the source of a run given up by ``stop()`` before its job began is told
GIVEN_UP = "stop() gave the run up"
#: why a run whose scheduler lost the lead was told to stop (see ``Run.written_off``)
LEAD_LOST = "its scheduler lost the lead"

#: what a work source returned instead of an item, as its error shows it: short, whatever it is
_short = reprlib.Repr()
_short.maxstring = _short.maxother = 80


#: run ids come from a generator of their own: a job calling ``random.seed()`` must not make
#: them repeat (they key the running runs, the claims and the history)
_ids = random.Random()
os.register_at_fork(after_in_child=_ids.seed)  # forked workers must not repeat the parent's


def new_run_id() -> str:
    """16 random hex digits: unique across processes and restarts, and cheap to make."""
    return f"{_ids.getrandbits(64):016x}"


@attrs.define(eq=False)
class Run:
    """A run in flight: what to execute and the handles to watch or cancel it."""

    run_id: str
    agent: str
    schedule_name: str
    schedule: Schedule
    job: JobFunc
    trigger_type: TriggerType
    scheduled_for: datetime | None
    fired_at: datetime
    prompt: str | None
    default_prompt: str | None
    consecutive_failures: int
    session_id: str | None
    last_run_at: datetime | None
    #: the leadership term it was dispatched in (:attr:`EngineCore.term`)
    term: int = 0
    deadline: float | None = None  # monotonic
    timed_out: bool = False
    # settled (as timed out, when its job returned, or given up by a stop that timed out): a
    # run is recorded once
    finalized: bool = False
    #: while its notification, record and state are being written (:meth:`Dispatcher.settle`):
    #: the thread that writes them
    settled_by: int | None = None
    #: its job's thread returned and gave the agent's slot back
    returned: bool = False
    #: the thread handing it to its executor, until it has (it first tells the run's
    #: ``JobSubmitted`` listeners, which may call ``stop()``)
    launched_by: int | None = None
    #: given up by ``stop()`` before it ended: what its job returns is not recorded
    given_up: bool = False
    #: why it was told to stop with its outcome left unrecorded (given up by ``stop()``, the
    #: lead lost): its work source is told the item failed, whatever its job returns
    written_off: str | None = None
    #: its job returned (or raised): what it is written off as is decided (see :func:`job_ended`)
    job_ended: bool = False
    #: set once its ``JobStarted`` was delivered: a timeout's events are delivered after it
    start_heard: threading.Event = attrs.field(factory=threading.Event)
    #: the worker running its job (``None`` until one began it: a run settled while still
    #: queued, timed out say, never starts)
    thread_id: int | None = None
    outcome: RunOutcome | None = None
    cancel_event: threading.Event = attrs.field(factory=threading.Event)

    def cancel(self) -> None:
        """Ask the job to stop (timeout); safe before the job has started."""
        self.cancel_event.set()


_NO_RESULT = JobResult()  # frozen: every job returning None shares it


@attrs.frozen(kw_only=True)
class RunOutcome:
    """How a run ended, as the scheduler needs it to update state and history."""

    status: RunStatus
    started_at: datetime
    finished_at: datetime
    # a job's own text, as every store keeps it (also what notifiers and listeners are given;
    # ``output`` comes from a JobResult, which escapes it)
    output: str | None = None
    error: str | None = attrs.field(default=None, converter=storable_text)
    result: JobResult = _NO_RESULT
    defer_delay: timedelta | None = None
    session_cleared: bool = False
    #: checked here, where the run still settles (a bad one, reaching the record, failed the
    #: record and left its schedule ``running`` for good)
    work_item_id: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )
    no_work: bool = False
    traceback: str | None = attrs.field(default=None, converter=storable_text)


def _as_job_result(value: Any) -> JobResult:
    if value is None:
        return _NO_RESULT
    if isinstance(value, JobResult):
        return value
    if isinstance(value, str):
        return JobResult(output=value)
    if inspect.iscoroutine(value) or inspect.isgenerator(value) or inspect.isasyncgen(value):
        # a sync wrapper of async code that registration could not tell: nothing ran
        if inspect.iscoroutine(value):
            value.close()  # else "coroutine ... was never awaited" at its collection
        raise TypeError(
            f"the job returned a {type(value).__name__} instead of running: jobs are called on "
            "threads, which never await or iterate what they return; call asyncio.run(...) "
            "in the job for async code"
        )
    return JobResult(output=str(value))


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _ERROR_LIMIT else text[: _ERROR_LIMIT - 3] + "..."


def _claim(run: Run, source: WorkSource | None) -> tuple[WorkItem | None, bool]:
    """The work item for ``run``; ``(None, True)`` means the source has nothing to do.

    Raises :class:`TypeError` naming the source and what it returned when that is neither a
    :class:`WorkItem` nor ``None`` (a look-alike object, a dict, an id): its fields reach the
    prompt, the run's record and state, where a wrong type failed far from its cause.
    """
    if source is None:
        return None, False
    try:
        item = source.get_next_work_item(run.agent, run.schedule_name)
    except Exception:
        _log.warning(
            "work source %r failed to give an item for %s/%s; running with the plain prompt",
            run.schedule.work_source,
            run.agent,
            run.schedule_name,
            exc_info=True,
        )
        return None, False
    if item is not None and not isinstance(item, WorkItem):
        raise TypeError(
            f"work source {run.schedule.work_source!r} returned {type(item).__name__} "
            f"{_short.repr(item)}, not a WorkItem or None"
        )
    return item, item is None


def _prompt(run: Run, item: WorkItem | None, clock: Clock) -> str:
    base = run.prompt if run.prompt is not None else run.schedule.prompt or run.default_prompt
    if base:
        now = clock.now()
        values = {
            "agent": run.agent,
            "schedule": run.schedule_name,
            "now": format_timestamp(now),
            "date": now.date().isoformat(),
            "last_run": format_timestamp(run.last_run_at) if run.last_run_at else "never",
            "run_id": run.run_id,
        }
        base = fill_prompt_template(base, values)
    return build_schedule_prompt(base, item)


def timeout_message(timeout: timedelta | None) -> str:
    """The error a run that outlived its ``timeout`` is recorded with: ``timed out after 30s``,
    worded as the timeout was written, not as ``0:00:30``."""
    return f"timed out after {describe_duration(timeout) if timeout else 'its timeout'}"


#: held while a job's end reads what its run is written off as, and while a scheduler that
#: leads again takes runs back (clears that): the two never interleave
_ENDING = threading.Lock()


def job_ended(run: Run) -> str | None:
    """Mark ``run``'s job as returned; what the run is written off as from now on."""
    with _ENDING:
        run.job_ended = True
        return run.written_off


def take_back(runs: list[Run], term: int) -> bool:
    """Clear the write-off of ``runs`` (a lead lost to a store that did not answer), so their
    outcomes are recorded under ``term``: all of them, or none when a job already ended (its
    work source has heard that its item failed)."""
    with _ENDING:
        if any(run.job_ended for run in runs):
            return False
        for run in runs:
            run.written_off, run.term = None, term
        return True


def write_off(runs: list[Run], why: str) -> None:
    """Write ``runs`` off again (a lead taken back could not recover): their work sources
    hear their items failed (a job that ended meanwhile has told its own already)."""
    with _ENDING:
        for run in runs:
            run.written_off = why


def execute_run(run: Run, *, clock: Clock, work_sources: Mapping[str, WorkSource]) -> RunOutcome:
    """Execute ``run`` on the calling (worker) thread and describe how it ended."""
    started = clock.now()
    source = work_sources.get(run.schedule.work_source) if run.schedule.work_source else None
    try:
        item, no_work = _claim(run, source)
    except TypeError as exc:  # not an item (what the source raises, _claim logs and drops)
        _log.error("Run %s of %s/%s failed: %s", run.run_id, run.agent, run.schedule_name, exc)
        return RunOutcome(
            status=RunStatus.FAILED,
            started_at=started,
            finished_at=clock.now(),
            error=_describe(exc),
        )
    if no_work:
        return RunOutcome(
            status=RunStatus.SKIPPED, started_at=started, finished_at=clock.now(), no_work=True
        )
    if source is not None and (ended := _written_off(run, started, clock)) is not None:
        if item is None:
            return ended
        _report(source, item, ended, run, run.written_off)  # not done: it may hand it out again
        return attrs.evolve(ended, work_item_id=item.id)
    try:
        info = TriggerInfo(
            agent=run.agent,
            schedule=run.schedule_name,
            prompt=_prompt(run, item, clock),
            trigger_type=run.trigger_type,
            scheduled_for=run.scheduled_for,
            fired_at=run.fired_at,
            run_id=run.run_id,
            consecutive_failures=run.consecutive_failures,
            session_id=run.session_id if run.schedule.persist_session else None,
            work_item=item,
            cancel_event=run.cancel_event,
            metadata=dict(run.schedule.metadata),
        )
        outcome = _call_job(run, info, started, clock)
    except Exception as exc:  # the claimed item is still reported before the run fails
        written_off = job_ended(run)
        if item is not None and source is not None:
            failed = RunOutcome(
                status=RunStatus.FAILED,
                started_at=started,
                finished_at=clock.now(),
                error=_describe(exc),
            )
            _report(source, item, failed, run, written_off)
        raise
    written_off = job_ended(run)
    if item is not None and source is not None:
        _report(source, item, outcome, run, written_off)
    return outcome if item is None else attrs.evolve(outcome, work_item_id=item.id)


def _written_off(run: Run, started: datetime, clock: Clock) -> RunOutcome | None:
    """How ``run`` ended while its work source was asked for an item, or ``None`` when it goes
    on: timed out (or past its deadline, the timer not having looked yet), or given up by a
    ``stop()``. Its job is not called then: it did its work after its run was recorded as
    timed out (or given up), told only by its cancel event, which it may not read."""
    if run.timed_out or (run.deadline is not None and clock.monotonic() >= run.deadline):
        status, error = RunStatus.TIMEOUT, timeout_message(run.schedule.timeout)
    elif run.cancel_event.is_set():
        status, error = RunStatus.FAILED, f"{run.written_off or GIVEN_UP} before its job began"
    else:
        return None
    _log.warning(
        "Run %s of %s/%s ended (%s) while its work source was asked for an item: its job is "
        "not called.",
        run.run_id,
        run.agent,
        run.schedule_name,
        error,
    )
    return RunOutcome(status=status, started_at=started, finished_at=clock.now(), error=error)


def _call_job(run: Run, info: TriggerInfo, started: datetime, clock: Clock) -> RunOutcome:
    session_cleared = False
    while True:
        try:
            result = _as_job_result(run.job(info))
        except SessionNotFound as exc:
            if info.session_id is None or session_cleared:
                return RunOutcome(
                    status=RunStatus.FAILED,
                    started_at=started,
                    finished_at=clock.now(),
                    error=_describe(exc),
                    session_cleared=session_cleared,
                )
            _log.info(
                "session %s of %s/%s is gone; retrying without it",
                info.session_id,
                run.agent,
                run.schedule_name,
            )
            info = attrs.evolve(info, session_id=None)
            session_cleared = True
            continue
        except Deferred as exc:
            return RunOutcome(
                status=RunStatus.DEFERRED,
                started_at=started,
                finished_at=clock.now(),
                error=exc.reason or None,
                defer_delay=exc.delay,
                session_cleared=session_cleared,
            )
        except BaseException as exc:  # SystemExit too: a job must never take its slot with it
            if isinstance(exc, (KeyboardInterrupt, GeneratorExit)):
                raise
            _log_failure(run, exc)
            return RunOutcome(
                status=RunStatus.FAILED,
                started_at=started,
                finished_at=clock.now(),
                error=_describe(exc),
                session_cleared=session_cleared,
                traceback="".join(traceback.format_exception(exc)),
            )
        return RunOutcome(
            status=RunStatus.SUCCESS,
            started_at=started,
            finished_at=clock.now(),
            output=result.output,
            result=result,
            session_cleared=session_cleared,
        )


def _log_failure(run: Run, exc: BaseException) -> None:
    """Log a job that raised: once, at ERROR, with its traceback (whose last line says what
    failed); a command job's failure without one (its exit status and stderr say what
    failed), its frames being herdsched's own.

    Not when the run had timed out or was given up by a stop: that was logged already, and
    the job raising now is most often its answer to the cancel event (a command job's killed
    process), whose traceback shows herdsched's own frames and nothing of the job; nor when
    the process quits at once (a second Ctrl-C), which killed the job's program itself.
    """
    if run.timed_out or run.finalized or quitting():
        _log.debug(
            "The job of %s/%s, timed out or given up already (or cut short by the process "
            "quitting), ended with %s.",
            run.agent,
            run.schedule_name,
            _describe(exc),
        )
        return
    if isinstance(run.job, CommandJob) and isinstance(exc, CommandError):  # no frame is its
        _log.error("The job of %s/%s failed: %s", run.agent, run.schedule_name, exc)
        return
    _log.error(
        "The job of %s/%s failed; its traceback follows.",
        run.agent,
        run.schedule_name,
        exc_info=exc,
    )


def _report(
    source: WorkSource, item: WorkItem, outcome: RunOutcome, run: Run, written_off: str | None
) -> None:
    """Tell ``source`` how ``item`` went; a source that raises is logged, never fatal.

    A run the scheduler already recorded as timed out, or wrote off (``written_off`` when its
    job ended: given up by ``stop()``, its lead lost), is a failure even when the job returned
    afterwards (it saw the cancel event and stopped early): its record will not say it
    succeeded either.
    """
    success = outcome.status is RunStatus.SUCCESS and not run.timed_out and not written_off
    error = outcome.error or str(outcome.status)
    if run.timed_out:
        error = timeout_message(run.schedule.timeout)
    elif written_off and outcome.status is RunStatus.SUCCESS:
        error = f"{written_off} before its job finished"
    report = WorkOutcome(
        success=success,
        summary=(outcome.output or "Job completed")[:500] if success else None,
        error=None if success else error,
        run_id=run.run_id,
    )
    try:
        source.report_outcome(item, report)
    except Exception:
        _log.warning(
            "work source %r failed to record the outcome of item %s (%s/%s)",
            run.schedule.work_source,
            item.id,
            run.agent,
            run.schedule_name,
            exc_info=True,
        )
