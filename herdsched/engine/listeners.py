"""Events: listeners, and the rule that they are never called under the scheduler's lock.

The engine *collects* an event where it happens, under its lock or not, and the thread that
collected it *delivers* it once it has let go of the lock (at the end of a public call, a timer
pass, a run's start and its end). Delivery is per thread and in order, and the engine delivers
a run's ``JobSubmitted`` before it hands the run to a worker, so a run's events arrive in their
order (submitted, started, succeeded or failed, disabled); only a run a listener starts goes to
its worker before its ``JobSubmitted``, which that listener's loop delivers once it returns.
A listener may call any scheduler method, ``stop()`` included: what that call collects is
delivered after the listener returns, by the same loop (a ``stop()`` by a ``JobSubmitted``
listener gives up the runs submitted). A slow listener delays only the thread that delivers
to it (and a timeout's events, which wait until the run's ``JobStarted`` has been heard).
"""

from __future__ import annotations

import abc
import collections
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, get_args

import herdsched.events as ev

__all__ = ["Listeners", "call_safely", "check_listener"]

_Callback = Callable[[Any], None]


def call_safely(func: _Callback, arg: Any, *, what: str, log: logging.Logger) -> bool:
    """Call a listener or the notifier; what it raises is logged, never passed on.

    Off the main thread that includes ``KeyboardInterrupt`` and ``SystemExit``: there only the
    callback itself can raise them, and a worker must go on recording its runs. On the main
    thread they may be a real Ctrl-C or exit, and propagate. Returns whether the call succeeded.
    """
    try:
        func(arg)
    except Exception:
        log.exception("The %s %r raised an error, which was ignored.", what, func)
        return False
    except BaseException:
        if threading.current_thread() is threading.main_thread():
            raise
        log.exception("The %s %r raised an error, which was ignored.", what, func)
        return False
    return True


def check_listener(callback: object, types: tuple[object, ...]) -> None:
    """Refuse an ``add_listener()`` whose callback cannot be called or whose event types
    ``isinstance`` cannot take (a list of them, a name as text, a protocol that is not
    runtime-checkable) or that no event can be an instance of (``int``): such a listener
    failed at every event (the type check, made in the timer's pass, stopped the scheduler's
    runs) or was never called. Event classes, their bases, ABCs, runtime-checkable protocols
    and unions of them are taken."""
    if not callable(callback):
        raise TypeError(
            f"add_listener() takes a callable, got {type(callback).__name__} {callback!r}"
        )
    probe = ev.SchedulerStopped(at=datetime.now(timezone.utc))
    for kind in types:
        try:
            isinstance(probe, kind)  # type: ignore[arg-type]
        except TypeError as exc:
            hint = (
                ": give the event classes as separate arguments, add_listener(callback, "
                "JobFailed, JobSucceeded)"
                if isinstance(kind, (list, tuple, set, frozenset))
                else f" ({exc}; event classes are in herdsched.events: JobSucceeded, ...)"
            )
            raise TypeError(f"add_listener() takes event classes, got {kind!r}{hint}") from None
        for member in get_args(kind) or (kind,):  # a union's members, or itself
            if not _may_hold_events(member):
                raise TypeError(
                    f"add_listener() takes event classes, got {kind!r}: no event is "
                    f"{getattr(member, '__name__', member)!r} (event classes are in "
                    "herdsched.events: JobSucceeded, JobFailed, ...)"
                )


def _may_hold_events(kind: object) -> bool:
    """Whether an event can be an instance of ``kind``: an event class, a base of them
    (``object``), an ABC or runtime-checkable protocol (``None`` in an ``Optional`` too)."""
    if kind is type(None) or isinstance(kind, abc.ABCMeta):
        return True
    return isinstance(kind, type) and (issubclass(kind, ev.Event) or issubclass(ev.Event, kind))


class Listeners:
    """The registered listeners, and the events each thread collected for them."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._guard = threading.Lock()
        self._listeners: list[tuple[_Callback, tuple[type[ev.Event], ...]]] = []
        self._local = threading.local()

    def add(self, callback: _Callback, types: tuple[type[ev.Event], ...]) -> None:
        """Register ``callback`` for events of ``types`` (all events when none); what is no
        callable or no event class is refused here, not met at the next event."""
        check_listener(callback, types)
        with self._guard:
            self._listeners = [*self._listeners, (callback, types or (ev.Event,))]

    def remove(self, callback: _Callback) -> None:
        with self._guard:
            self._listeners = [(cb, t) for cb, t in self._listeners if cb is not callback]

    def _pending(self) -> collections.deque[ev.Event]:
        pending: collections.deque[ev.Event] | None = getattr(self._local, "pending", None)
        if pending is None:
            pending = self._local.pending = collections.deque()
        return pending

    def collect(self, event: ev.Event) -> None:
        """Queue ``event`` for this thread to deliver (cheap; safe under any lock)."""
        if self._listeners:
            self._pending().append(event)

    def deliver(self) -> None:
        """Deliver what this thread collected, in order. Call it holding no scheduler lock; a
        call from inside a listener returns at once (the loop it runs in delivers)."""
        if getattr(self._local, "delivering", False):
            return
        pending = self._pending()
        self._local.delivering = True
        try:
            while pending:
                event = pending.popleft()
                for callback, types in self._listeners:  # replaced, never mutated
                    if isinstance(event, types):
                        call_safely(callback, event, what="listener", log=self._log)
        finally:
            self._local.delivering = False
