"""One scheduler per state directory per process: a newer one takes over from an older one.

A notebook cell that builds and starts a scheduler is run again after every edit. Each run makes a
new scheduler on the same state directory while the old one still holds it; without a rule the
new one would only stand by, and the old code would keep running. So, within one process, the
scheduler started last wins: the older one stops dispatching at once, its running jobs finish and
are recorded, its threads end, and then the newer one takes the lead. Across processes nothing
changes: there the leader lock (or lease) decides.

Tests that imitate two processes with two schedulers in one process turn the rule off with
:func:`herdsched.testing.as_separate_processes`.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from herdsched.errors import SchedulerShutdownError

__all__ = ["Successor", "hand_over", "imitating_processes", "separate_processes"]

_log = logging.getLogger("herdsched")
_lock = threading.Lock()
_latest: dict[Path | str, weakref.ref[Successor]] = {}
_separate = [0]  # > 0 while tests imitate separate processes


class Successor(Protocol):
    """What a hand-over needs of a scheduler."""

    def is_running(self) -> bool: ...

    def get_total_running_job_count(self) -> int: ...

    def _stop_for_successor(self) -> None: ...


def hand_over(state_dir: Path | str, new: Successor, lead_now: Callable[[], None]) -> bool:
    """Record ``new`` as this process's scheduler of ``state_dir`` (a directory, or the
    location of a database store) and stop the older one.

    Returns ``True`` when the older one is still finishing its running jobs: then it stops on a
    short-lived thread (``herdsched-handover``) and calls ``lead_now`` when it has let go, so
    that ``new`` takes the lead without waiting for its next standby attempt. Returns ``False``
    when nothing was in the way or the older one stopped at once.
    """
    key = state_dir.resolve() if isinstance(state_dir, Path) else state_dir
    with _lock:
        if _separate[0]:
            return False
        ref = _latest.get(key)
        old = ref() if ref is not None else None
        _latest[key] = weakref.ref(new)
    if old is None or old is new or not old.is_running():
        return False
    running = old.get_total_running_job_count()
    if running == 0:
        _log.info("A newer scheduler for %s takes over from the older one in this process.", key)
        _finish(old, lambda: None)
        return False
    _log.info(
        "A newer scheduler for %s takes over from the older one in this process once its "
        "%d running job(s) finish; the older one dispatches nothing more.",
        key,
        running,
    )
    threading.Thread(
        target=_finish, args=(old, lead_now), name="herdsched-handover", daemon=True
    ).start()
    return True


def _finish(old: Successor, lead_now: Callable[[], None]) -> None:
    """Let ``old`` finish its running jobs and stop, then wake its successor. A job past its
    timeout that goes on though told to stop is waited for a few seconds, not for ever: its
    run is recorded, and no thread can be ended from outside."""
    try:
        old._stop_for_successor()
    except SchedulerShutdownError as exc:
        _log.warning(
            "The newer scheduler takes the lead while the job(s) of %s, started by the older "
            "one, run on in this process: past their timeout and told to stop, they have not "
            "returned (their runs are recorded as timed out; a job should return when its "
            "cancel_event is set).",
            ", ".join(exc.running_jobs),
        )
    except Exception:
        _log.exception("The older scheduler failed to stop cleanly while handing over.")
    lead_now()


@contextmanager
def separate_processes() -> Iterator[None]:
    """While inside, schedulers of one process on one directory behave as in two processes."""
    with _lock:
        _separate[0] += 1
    try:
        yield
    finally:
        with _lock:
            _separate[0] -= 1


def imitating_processes() -> bool:
    """Whether tests imitate separate processes (:func:`separate_processes`) just now."""
    return _separate[0] > 0
