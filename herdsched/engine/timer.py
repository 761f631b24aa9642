"""The timer thread (``herdsched-timer``): one pass at a time, asleep in between.

It sleeps on the core's wake event for ``min(time until the next due time, max_sleep)``, or less
when a timeout, a group commit or a poll of other processes comes first, and wakes early on any
change, a finished job or ``stop()``. Each pass notices clock jumps, renews the leadership lease
when its heartbeat is due (stepping down when that fails), polls other processes, expires
timeouts, fires what is due and plans the group commit; a standby takes in what the leader
changed, then tries to take the lead.
The thread never dies: a failed pass is logged and retried a second later.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from herdsched.engine.committer import GroupCommitter
from herdsched.engine.core import EngineCore
from herdsched.engine.dispatch import Dispatcher
from herdsched.engine.recovery import Leadership, replan_after_jump
from herdsched.engine.syncing import OtherProcesses

__all__ = ["Timer"]

_CLOCK_JUMP_TOLERANCE = 2.0  # seconds of disagreement between wall and monotonic progress
_RETRY_SECONDS = 1.0  # how soon a failed pass is retried
_STANDBY_RETRY = 5.0  # how often a standby tries to take the lead (at most max_sleep)
#: The least time between two tries a standby makes when told of changes: a busy leader's
#: commits notify several times a second, and only a released lease is worth a try at once.
_NOTIFIED_TRY_GAP = 1.0


class Timer:
    """Runs timer passes on the ``herdsched-timer`` thread (or on the caller's, for tests)."""

    def __init__(
        self,
        core: EngineCore,
        dispatch: Dispatcher,
        commits: GroupCommitter,
        leadership: Leadership,
        others: OtherProcesses,
    ) -> None:
        self.core = core
        self.dispatch = dispatch
        self.commits = commits
        self.leadership = leadership
        self.others = others
        self.check_count = 0
        self.last_check_at: datetime | None = None
        self._thread: threading.Thread | None = None
        self._last_wall: datetime | None = None
        self._last_mono: float | None = None
        self._next_poll = 0.0
        self._next_leader_try = 0.0
        self._last_leader_try = float("-inf")
        # one pass at a time, also when run_pending() runs one beside the thread: a pass
        # reads and sets the times of its next poll, lease try and heartbeat
        self._one_pass = threading.RLock()
        self._pass_thread: int | None = None  # the thread in a pass

    def start(self) -> None:
        """Start the thread; clock jumps are measured from now."""
        self._last_wall, self._last_mono = self.core.clock.now(), self.core.clock.monotonic()
        self._thread = threading.Thread(target=self._loop, name="herdsched-timer", daemon=True)
        self._thread.start()

    def lead_soon(self) -> None:
        """A standby tries to take the lead on its next pass, which begins now."""
        self._next_leader_try = 0.0
        self.core.wake.set()

    def changed_elsewhere(self) -> None:
        """Another process changed the store (a database notification): poll, or try to lead
        (at most once a second: a released lease is announced the same way as a commit), on a
        pass that begins now instead of at the next ``poll_interval``."""
        self._next_poll = 0.0
        soon = self._last_leader_try + _NOTIFIED_TRY_GAP
        self._next_leader_try = min(self._next_leader_try, soon)
        self.core.wake.set()

    def join(self) -> None:
        """Wait (up to 5 s) for the thread to end after the status left running/standby; not
        from inside a pass (a listener's ``stop()``), which the thread may be waiting for."""
        thread, self._thread = self._thread, None
        inside = threading.get_ident() == self._pass_thread
        if thread is not None and thread is not threading.current_thread() and not inside:
            thread.join(timeout=5.0)

    def _loop(self) -> None:
        core, me = self.core, threading.current_thread()
        while True:
            # cleared before the status is read: a stop() after this point is seen either by
            # the check below or, through the event it sets, by the wait
            core.wake.clear()
            with core.lock:  # a thread stop() gave up joining ends once it is replaced
                if core.status not in ("running", "standby") or self._thread is not me:
                    return
                core.planned_wake = None  # awake: the pass reads whatever changes now
            try:
                timeout = self.run_pass(timer_thread=True)
            except Exception:  # the timer thread never dies
                self.core.log.exception("A timer pass failed; it is retried in a second.")
                timeout = min(self.core.settings.max_sleep, _RETRY_SECONDS)
            self.core.clock.wait(core.wake, timeout)

    def run_pass(self, *, timer_thread: bool) -> float:
        """Fire what is due now; returns how long the timer may sleep (seconds).

        A pass begun meanwhile by the other caller (the thread, or ``run_pending()``) is
        waited for, so a pass run by ``run_pending()`` has seen everything that was due."""
        with self._one_pass:  # reentrant: a listener may call run_pending()
            outer, self._pass_thread = self._pass_thread, threading.get_ident()
            try:
                return self._pass(timer_thread=timer_thread)
            finally:
                self._pass_thread = outer

    def _pass(self, *, timer_thread: bool) -> float:
        core = self.core
        now = self.core.clock.now()
        mono = self.core.clock.monotonic()
        with core.lock:
            self.check_count += 1
            self.last_check_at = now
            self._detect_clock_jump(now, mono)
        if core.status == "standby":
            return self._standby_pass(mono)
        if not core.leading:
            return self.core.settings.max_sleep
        if not self.leadership.heartbeat():  # stepped down: dispatch nothing
            return 0.0
        poll = self.core.settings.poll_interval
        if poll is not None and mono >= self._next_poll:
            self._next_poll = mono + poll
            self.others.poll()
        self.dispatch.expire_timeouts(now)
        self.dispatch.fire_due(now)
        self.commits.commit_if_due(background=timer_thread)
        core.listeners.deliver()
        return self._sleep_for(plan=timer_thread)

    def _standby_pass(self, mono: float) -> float:
        core = self.core
        if mono >= self._next_leader_try:
            self._last_leader_try = mono
            self._next_leader_try = mono + min(  # in case the try raises
                self.core.settings.max_sleep, _STANDBY_RETRY, self.leadership.ttl / 3
            )
            # what the leader changed meanwhile (schedules removed, added, paused): a standby
            # that takes over must not plan, or write states back for, what is gone
            self.others.adopt()
            self.leadership.stop_runs_of_a_lost_lead()
            with core.lock:
                if core.status == "standby" and self.leadership.try_lead():
                    core.status = "running"
                    self.core.log.info("This scheduler took over as the active one.")
                    core.wake.set()
                    return 0.0
            self._next_leader_try = mono + self._standby_retry()
        return max(0.0, self._next_leader_try - mono)

    def _standby_retry(self) -> float:
        """Seconds until a standby's next try: what the store advises (``lease_retry_in``),
        else ``min(5 s, lease_ttl / 3)``; never longer than ``max_sleep``."""
        ttl = self.leadership.ttl
        advise = getattr(self.core.store, "lease_retry_in", None)
        retry = float(advise(ttl)) if callable(advise) else min(_STANDBY_RETRY, ttl / 3)
        return min(self.core.settings.max_sleep, retry)

    def _sleep_for(self, *, plan: bool) -> float:
        """How long the timer may sleep: until the next due time, timeout, commit or poll.

        ``plan``: the timer thread's own pass, which records when it will wake, so that a run
        finishing meanwhile wakes it only when that changes (see ``Dispatcher.finish``)."""
        core = self.core
        now, mono = self.core.clock.now(), self.core.clock.monotonic()
        with core.lock:
            candidates = [self.core.settings.max_sleep]
            due = core.plan.next_due()
            if due is not None:
                candidates.append((due - now).total_seconds())
            for deadline in (
                self.dispatch.next_deadline(),
                self.commits.deadline(),
                self._next_poll if self.core.settings.poll_interval is not None else None,
                self.leadership.next_heartbeat(),
            ):
                if deadline is not None:
                    candidates.append(deadline - mono)
            timeout = max(0.0, min(candidates))
            if plan:
                core.planned_wake = (now + timedelta(seconds=timeout), mono + timeout)
        return timeout

    def _detect_clock_jump(self, now: datetime, mono: float) -> None:
        """Re-plan every schedule when wall-clock time moved unlike monotonic time (caller
        holds the lock)."""
        if self._last_wall is not None and self._last_mono is not None:
            wall = (now - self._last_wall).total_seconds()
            elapsed = mono - self._last_mono
            if abs(wall - elapsed) > _CLOCK_JUMP_TOLERANCE:
                self.core.log.warning(
                    "The wall clock jumped by %.1f s (suspend and resume, or a clock change); "
                    "every schedule is re-evaluated.",
                    wall - elapsed,
                )
                replan_after_jump(self.core, now, timedelta(seconds=wall - elapsed))
        self._last_wall, self._last_mono = now, mono
