"""What ``stop()`` waits for: the running jobs, their own timeouts and the lease still kept.

The timer thread ends when ``stop()`` begins (nothing is dispatched any more), and with it the
look that times runs out and renews the lease: a job past its timeout while ``stop()`` waited
ran on and was recorded a success, and a wait longer than the lease let a standby take over
while this scheduler's jobs still ran. So the wait does both itself, as the timer would have.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from herdsched.command import CommandJob
from herdsched.engine.dispatch import Dispatcher
from herdsched.engine.recovery import Leadership
from herdsched.runner import Run

__all__ = ["LINGER", "StopGate", "wait_for_runs"]

#: The longest the wait sleeps between two looks (real seconds): a ``FakeClock`` moved by a
#: test, or a lease due for renewal, is seen within it.
_LOOK_EVERY = 1.0

#: How long a hand-over waits for a job past its timeout that goes on though told to stop
#: (seconds of the scheduler's clock after the timeout): its run is recorded, and a Python
#: thread cannot be ended, so waiting longer would only hold its successor back, for ever.
LINGER = 5.0


class StopGate:
    """The ``stop()`` under way, which a later ``stop()`` joins instead of returning at once
    (a notebook's ``old.stop(timeout=3)`` while a newer scheduler takes over, a signal handler
    beside the main thread's stop): the earlier of their deadlines holds for both, and the
    later one returns when the first has ended. One called from the first's own thread or
    from a herdsched thread (a job, a listener delivered there) returns at once, as the first
    may be waiting for that very thread."""

    def __init__(self) -> None:
        self._ended = threading.Event()
        self._ended.set()
        self._thread: int | None = None
        #: When the wait for the jobs ends (real monotonic seconds; ``None``: when they end).
        self.end: float | None = None
        #: The jobs the last stop left running (``agent/schedule``).
        self.left: tuple[str, ...] = ()

    def open(self, timeout: float | None) -> None:
        """The first ``stop()`` begins (the caller holds the core lock)."""
        self._ended.clear()
        self._thread = threading.get_ident()
        self.end = None if timeout is None else time.monotonic() + timeout
        self.left = ()

    def wait_no_more(self) -> None:
        """End the wait for the jobs now (the first ``stop()`` was interrupted)."""
        self.end = time.monotonic()

    def close(self, left: tuple[str, ...]) -> None:
        """The first ``stop()`` has ended, leaving ``left`` running."""
        self.left, self._thread = left, None
        self._ended.set()

    def join(self, timeout: float | None, idle: threading.Condition) -> tuple[str, ...] | None:
        """A later ``stop()``: bring the deadline forward to ``timeout`` from now, then wait
        for the first to end; the jobs it left, or ``None`` when this one may not wait."""
        with idle:
            if timeout is not None:
                end = time.monotonic() + timeout
                self.end = end if self.end is None else min(self.end, end)
            idle.notify_all()  # the wait looks at its deadline again
        me = threading.current_thread()
        if me.ident == self._thread or me.name.startswith("herdsched-"):
            return None
        self._ended.wait()
        return self.left


def wait_for_runs(
    dispatch: Dispatcher,
    leadership: Leadership,
    gate: StopGate,
    *,
    cancel_left: bool,
    end_commands: bool = True,
    linger: float | None = None,
) -> tuple[str, ...]:
    """Wait until no job runs but the caller's own, or the ``gate``'s end; returns
    the jobs still running (a timed-out job whose thread goes on included) as sorted
    ``agent/schedule`` names. Runs the caller was about to start (it is a ``JobSubmitted``
    listener) are given up first. Meanwhile the lease is renewed and a run past its timeout
    is timed out (told to stop; recorded unless the lease was lost meanwhile: the next leader
    records what ran then).

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
    with core.lock:  # runs another thread hands to their executors never start now
        for run in core.running.values():
            if run.launched_by not in (None, me) and not run.finalized:
                run.finalized = run.given_up = True

    def others() -> list[Run]:  # not the runs this thread executes, settles or launches
        running = core.running.values()
        return [r for r in running if me not in (r.thread_id, r.settled_by, r.launched_by)]

    def lingering(run: Run) -> bool:
        if linger is None or run.deadline is None or run.settled_by is not None:
            return False
        over = core.clock.monotonic() >= run.deadline + linger
        return run.timed_out and run.finalized and over  # recorded, and long told to stop

    _wait(dispatch, leadership, lambda: gate.end, lambda: all(map(lingering, others())))
    with core.idle:
        left = others()
        for run in left if cancel_left else ():
            if not run.finalized:  # a timed-out run, or one being settled, has its record
                run.finalized = run.given_up = True
            run.cancel()
    graces = {run: run.job.kill_grace for run in left if isinstance(run.job, CommandJob)}
    if cancel_left and end_commands and graces:
        end = time.monotonic() + max(graces.values()) + 1.0
        _wait(dispatch, leadership, lambda: end, lambda: all(run.returned for run in graces))
    return tuple(sorted(f"{run.agent}/{run.schedule_name}" for run in left))


def _wait(
    dispatch: Dispatcher,
    leadership: Leadership,
    until: Callable[[], float | None],
    done: Callable[[], bool],
) -> None:
    """Wait until ``done()`` or ``until()`` (real monotonic seconds, read at every look: a
    later ``stop()`` may bring it forward), renewing the lease and timing out runs past their
    timeout, as the timer would have."""
    core = dispatch.core
    while True:
        with core.idle:
            end = until()
            due = dispatch.next_deadline()  # on the scheduler's clock
            steps = [_LOOK_EVERY]
            if end is not None:
                steps.append(max(0.0, end - time.monotonic()))
            if due is not None:
                steps.append(max(0.0, due - core.clock.monotonic()))
            if done():
                return
            core.idle.wait(min(steps))  # a run's end, or a later stop() bringing ours forward
            if done():
                return
            end = until()
        if end is not None and time.monotonic() >= end:
            return
        leadership.heartbeat()  # a lease lost ends the runs' records, not their timeouts
        dispatch.expire_timeouts(core.clock.now())
