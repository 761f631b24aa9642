"""What ``stop()`` waits for: the running jobs, their own timeouts and the lease still kept.

The timer thread ends when ``stop()`` begins (nothing is dispatched any more), and with it the
looks it took: a job past its timeout while ``stop()`` waited ran on and was recorded a
success; a wait longer than the lease let a standby take over while this scheduler's jobs still
ran; and the outcomes of jobs that ended during the wait stayed unwritten until it was over,
so a process killed meanwhile (a web server ending a worker that waits too long) left them to
be recorded ``interrupted``. So the wait does all of it, as the timer would have.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from herdsched.command import CommandJob
from herdsched.engine.committer import GroupCommitter
from herdsched.engine.dispatch import Dispatcher
from herdsched.engine.recovery import Leadership
from herdsched.runner import GIVEN_UP, Run

__all__ = ["LINGER", "run_of_this_thread", "wait_for_runs"]

#: The longest the wait sleeps between two looks (real seconds): a ``FakeClock`` moved by a
#: test, or a lease due for renewal, is seen within it.
_LOOK_EVERY = 1.0

#: How long a hand-over waits for a job past its timeout that goes on though told to stop
#: (seconds of the scheduler's clock after the timeout): its run is recorded, and a Python
#: thread cannot be ended, so waiting longer would only hold its successor back, for ever.
LINGER = 5.0


def _of_thread(run: Run, me: int) -> bool:
    """Whether thread ``me`` executes ``run`` (its job), settles it (its notifier, a
    timeout's listeners) or hands it to its executor (a ``JobSubmitted`` listener)."""
    return me in (run.thread_id, run.settled_by, run.launched_by)


def run_of_this_thread(dispatch: Dispatcher) -> Run | None:
    """The run the calling thread executes, settles or launches, if any (caller holds the
    lock): a wait for every run to end would wait for it, which cannot end meanwhile."""
    me = threading.get_ident()
    return next((run for run in dispatch.core.running.values() if _of_thread(run, me)), None)


def wait_for_runs(
    dispatch: Dispatcher,
    leadership: Leadership,
    commits: GroupCommitter,
    timeout: float | None,
    *,
    cancel_left: bool,
    end_commands: bool = True,
    linger: float | None = None,
) -> tuple[str, ...]:
    """Wait up to ``timeout`` real seconds until no job runs but the caller's own; returns
    the jobs still running (a timed-out job whose thread goes on included) as sorted
    ``agent/schedule`` names. Runs the caller was about to start (it is a ``JobSubmitted``
    listener) are given up first. Meanwhile the lease is renewed, a run past its timeout is
    timed out (told to stop; recorded unless the lease was lost meanwhile: the next leader
    records what ran then), and what ended is committed when due.

    With ``cancel_left`` those left are given up (settled: whatever they return now is not
    recorded, as the lease is about to go; the next start records them interrupted), then
    asked to stop through their cancel event; with ``end_commands`` too, the wait goes on
    while the process groups of the command jobs among them are ended (SIGTERM, then SIGKILL
    after their ``kill_grace``), the lease still kept: a standby taking over sooner would
    start their schedules while their programs still ran here. With ``linger``, a run past
    its timeout (recorded, told to stop) is waited for no more than ``linger`` seconds after
    it."""
    core, me = dispatch.core, threading.get_ident()
    dispatch.give_up_launching()
    if not cancel_left:  # stop(wait_for_jobs=False): what has not begun never begins, as no
        with core.lock:  # one waits for it (claimed, handed over, queued in its executor)
            for run in core.running.values():  # (a timed-out one is recorded by its timeout)
                if run.thread_id is None and run.launched_by != me and not run.finalized:
                    run.finalized = run.given_up = not run.timed_out

    def others() -> list[Run]:  # not the runs this thread executes, settles or launches
        running = core.running.values()
        return [r for r in running if not _of_thread(r, me)]

    def lingering(run: Run) -> bool:
        if linger is None or run.deadline is None or run.settled_by is not None:
            return False
        over = core.clock.monotonic() >= run.deadline + linger
        return run.timed_out and run.finalized and over  # recorded, and long told to stop

    parts = (dispatch, leadership, commits)
    _wait(*parts, timeout, lambda: all(map(lingering, others())))
    with core.idle:
        left = others()
        for run in left if cancel_left else ():
            if not run.finalized:  # a timed-out run, or one being settled, has its record
                run.finalized = run.given_up = True
                run.written_off = GIVEN_UP
            run.cancel()
    graces = {run: run.job.kill_grace for run in left if isinstance(run.job, CommandJob)}
    if cancel_left and end_commands and graces:
        wait = max(graces.values()) + 1.0
        core.log.warning(  # the wait below is silent, up to the longest kill_grace
            "The stop's wait is over with %d job(s) still running (%s): each is told to stop, "
            "and the processes of %d command job(s) get SIGTERM, then SIGKILL after their "
            "kill_grace; the lease is kept until they are gone (up to %s s).",
            len(left),
            ", ".join(sorted(f"{run.agent}/{run.schedule_name}" for run in left)),
            len(graces),
            f"{wait:g}",
        )
        _wait(*parts, wait, lambda: all(run.returned for run in graces))
    return tuple(sorted(f"{run.agent}/{run.schedule_name}" for run in left))


def _wait(
    dispatch: Dispatcher,
    leadership: Leadership,
    commits: GroupCommitter,
    timeout: float | None,
    done: Callable[[], bool],
) -> None:
    """Wait up to ``timeout`` real seconds until ``done()``, renewing the lease, timing out
    runs past their timeout and committing what ended, as the timer would have."""
    core = dispatch.core
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        with core.idle:
            steps = [_LOOK_EVERY]
            if end is not None:
                steps.append(max(0.0, end - time.monotonic()))
            for due in (dispatch.next_deadline(), commits.deadline()):
                if due is not None:  # on the scheduler's clock
                    steps.append(max(0.0, due - core.clock.monotonic()))
            if core.idle.wait_for(done, min(steps)):
                return
        if end is not None and time.monotonic() >= end:
            return
        leadership.heartbeat()  # a lease lost tells the jobs to stop (step_down)
        dispatch.expire_timeouts(core.clock.now())
        commits.commit_if_due(background=True)
