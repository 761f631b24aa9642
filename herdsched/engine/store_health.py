"""How a failing store is told in the log: once when it fails, briefly while it stays down, once
when it works again.

Every part of the engine that calls the store reports its failures here (the timer's poll, the
group commit and its retries, run-now requests, claims). Logged one by one they were an ERROR
line every fraction of a second while a database was down: 926 lines in one outage, the first
and the last telling all there was to tell. So a failure is logged as an ERROR, the same
failure again within :data:`REPEAT_EVERY` seconds only at DEBUG (an ERROR summary follows once
that time has passed), and the first call that reaches the store afterwards (a leader's group
commit, which retries the failed writes until one succeeds, or a standby's try for the lease: a
standby commits nothing) logs how long the store failed and how many calls failed. Listeners
still get a :class:`~herdsched.events.StateErrorOccurred` for every failure the engine meets
(not for a status display's read of the lease).
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from herdsched.cadence import describe_duration
from herdsched.clock import Clock

__all__ = ["FLAPPING", "REPEAT_EVERY", "StoreHealth"]

#: Seconds between two ERROR lines while the store keeps failing.
REPEAT_EVERY = 60.0
#: A failure within this many seconds of a run of failures' end continues it (calls that fail
#: and work by turns); a later one is a new outage, told at once.
FLAPPING = 10.0


def _calls(count: int) -> str:
    return f"{count} failed call" if count == 1 else f"{count} failed calls"


def _seconds(span: float) -> str:
    if span < 1:
        return "less than a second"
    return describe_duration(timedelta(seconds=round(span)))


class StoreHealth:
    """The store's current run of failures and what of it was logged (thread-safe)."""

    def __init__(self, log: logging.Logger, clock: Clock) -> None:
        self._log = log
        self._clock = clock
        self._lock = threading.Lock()
        self._failing_since: float | None = None  # monotonic; None while the store works
        self._failures = 0  # in the current run of failures
        self._failed_at = 0.0  # the latest failure
        self._logged: dict[str, float] = {}  # failures of this run logged as ERROR, and when
        self._consequences: dict[str, float] = {}  # the same, for what they caused
        self._unlogged = 0  # failures since the last ERROR line
        self._latest = ""  # the latest failure's text
        self._told = False  # whether this run of failures was logged as an ERROR
        self._worked_at = float("-inf")  # when a call last ended a run of failures

    def failed(self, exc: BaseException) -> None:
        """A store call failed with ``exc``: an ERROR unless the same failure was logged less
        than :data:`REPEAT_EVERY` seconds ago (two failing calls that fail by turns, as claims
        and commits on a full disk, are each logged once a minute, not at every turn)."""
        now, text = self._clock.monotonic(), str(exc)
        with self._lock:
            if now - self._failed_at > REPEAT_EVERY:  # quiet for a minute: what it caused is
                self._consequences.clear()  # told anew (not at every flap of a failing call)
            if self._failing_since is None or now - self._failed_at > REPEAT_EVERY:
                self._failing_since, self._failures, self._told = now, 0, False
                # what was told is kept while calls fail and work by turns (claims failing
                # while commits work were an ERROR and a "works again" every second), not
                # for an outage that comes after the store worked for a while
                if now - self._worked_at > FLAPPING:
                    self._logged.clear()
            self._failed_at, self._latest = now, text
            self._failures += 1
            if now - self._logged.get(text, float("-inf")) < REPEAT_EVERY:
                self._unlogged += 1
                self._log.debug("The state store failed again: %s", exc)
                return
            first = self._failures == 1
            failing_for, unlogged = now - self._failing_since, self._unlogged
            self._logged[text], self._unlogged, self._told = now, 0, True
        if first:
            self._log.error("The state store failed: %s", exc)
            return
        since = f" ({_calls(unlogged)} more since the last report)" if unlogged else ""
        self._log.error(
            "The state store still fails after %s%s; the latest: %s",
            _seconds(failing_for),
            since,
            exc,
        )

    def tell_consequence(self, exc: BaseException) -> bool:
        """Whether to log what ``exc`` caused (runs that did not start) as an ERROR: the first
        time, then once every :data:`REPEAT_EVERY` seconds while the failure comes back within
        a minute, whatever calls worked between (call it after :meth:`failed`)."""
        now, text = self._clock.monotonic(), str(exc)
        with self._lock:
            if now - self._consequences.get(text, float("-inf")) < REPEAT_EVERY:
                return False
            self._consequences[text] = now
            return True

    def trouble(self) -> str | None:
        """What a status display tells of the current run of failures (``None``: there is
        none, or a call has reached the store since): a notebook view, which logs nothing."""
        with self._lock:
            if self._failing_since is None:
                return None
            now = self._clock.monotonic()
            since, ago = now - self._failing_since, now - self._failed_at
            failures, latest = self._failures, self._latest
        return (
            f"The state store failed {_seconds(ago)} ago ({_calls(failures)} in "
            f"{_seconds(since)}, none known to have reached it since): {latest}"
        )

    def worked(self) -> None:
        """A call reached the store: ends the run of failures, saying how long it lasted (at
        WARNING when an ERROR told of it; a failure logged less than a minute before, in a
        run of failures that another call's success cut short, was only repeated at DEBUG)."""
        with self._lock:
            since, failures, told = self._failing_since, self._failures, self._told
            self._failing_since, self._failures = None, 0
            if since is not None:
                self._worked_at = self._clock.monotonic()
        if since is not None:
            self._log.log(
                logging.WARNING if told else logging.DEBUG,  # as its failures were
                "The state store works again after failing for %s (%s).",
                _seconds(self._clock.monotonic() - since),
                _calls(failures),
            )
