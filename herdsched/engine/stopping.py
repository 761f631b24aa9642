"""What ``stop()`` waits for: the running jobs, their own timeouts still kept.

The timer thread ends when ``stop()`` begins (nothing is dispatched any more), and with it the
look that times runs out; a job past its timeout while ``stop()`` waited ran on, was recorded
a success, and kept ``stop()`` waiting to its own timeout. So the wait times runs out itself,
as the timer would have.
"""

from __future__ import annotations

import threading
import time

from herdsched.engine.dispatch import Dispatcher
from herdsched.runner import Run

__all__ = ["wait_for_runs"]


def wait_for_runs(
    dispatch: Dispatcher, timeout: float | None, *, cancel_left: bool
) -> tuple[str, ...]:
    """Wait up to ``timeout`` real seconds until no job runs but the caller's own; returns
    the jobs still running (a timed-out job whose thread goes on included) as sorted
    ``agent/schedule`` names. Runs the caller was about to start (it is a ``JobSubmitted``
    listener) are given up first; a run past its timeout meanwhile is timed out.

    With ``cancel_left`` those left are given up (settled: whatever they return now is not
    recorded, as the lease is about to go; the next start records them interrupted), then
    asked to stop through their cancel event."""
    core, me = dispatch.core, threading.get_ident()
    dispatch.give_up_launching()

    def others() -> list[Run]:  # not the runs this thread executes, settles or launches
        running = core.running.values()
        return [r for r in running if me not in (r.thread_id, r.settled_by, r.launched_by)]

    end = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = None if end is None else max(0.0, end - time.monotonic())
        with core.idle:
            due = dispatch.next_deadline()  # on the scheduler's clock
            until_due = None if due is None else max(0.0, due - core.clock.monotonic())
            steps = [step for step in (remaining, until_due) if step is not None]
            if core.idle.wait_for(lambda: not others(), min(steps, default=None)):
                break
        if remaining == 0.0:
            break
        if until_due is not None and (remaining is None or until_due <= remaining):
            dispatch.expire_timeouts(core.clock.now())
    with core.idle:
        left = others()
        for run in left if cancel_left else ():
            if not run.finalized:  # a timed-out run, or one being settled, has its record
                run.finalized = run.given_up = True
            run.cancel()
        return tuple(sorted(f"{run.agent}/{run.schedule_name}" for run in left))
