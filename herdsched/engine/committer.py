"""Group commit: run transitions become durable together, within ``commit_delay``.

Every run changes its schedule's state twice (running, then finished) and appends a history
record. Writing ``state.yaml`` for each would cost a file rewrite per transition; instead the
store keeps them pending and :meth:`GroupCommitter.commit` writes them all at once. The timer
plans the commit like any other deadline (the store's :meth:`flush_deadline`) and hands it to
the ``herdsched-flusher`` thread, so a slow disk never delays dispatching. A failed commit is
retried a second later; ``stop()`` always commits last. A commit refused because another
scheduler took the lease over (:class:`~herdsched.errors.LeadershipLostError`: the store wrote
nothing and dropped the work) is not retried: this scheduler steps down instead.
"""

from __future__ import annotations

import threading

from herdsched.engine.core import EngineCore
from herdsched.errors import LeadershipLostError

__all__ = ["GroupCommitter"]

_RETRY_SECONDS = 1.0


class GroupCommitter:
    """Plans and runs group commits for one scheduler (see the module docstring)."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self._wanted = threading.Event()
        self._thread: threading.Thread | None = None
        self._in_flight = False
        self._stopping = False
        self._retry_at: float | None = None

    def start(self) -> None:
        """Start the flusher thread."""
        self._stopping = False
        self._in_flight = False
        self._thread = threading.Thread(target=self._loop, name="herdsched-flusher", daemon=True)
        self._thread.start()

    def deadline(self) -> float | None:
        """When the next commit is due (monotonic): a retry after a failed one, else the
        store's deadline; ``None`` when nothing is pending or a commit is under way."""
        if self._in_flight:
            return None
        if self._retry_at is not None:
            return self._retry_at
        return self.core.store.flush_deadline()

    def commit_if_due(self, *, background: bool) -> None:
        """Commit when one is due: on the flusher thread (``background``) or right here (also
        on the flusher thread itself, a listener there calling ``stop()``, which waits)."""
        thread = self._thread
        if thread is threading.current_thread():  # asked of the flusher, which is here: it
            self._in_flight = False  # commits now, not once this call returned
        deadline = self.deadline()
        if deadline is None or self.core.clock.monotonic() < deadline:
            return
        if background and thread not in (None, threading.current_thread()) and thread.is_alive():
            self._in_flight = True
            self._wanted.set()
        else:
            self.commit()

    def commit(self) -> None:
        """Make every pending transition and record durable now; retried later on failure.

        Only a commit that had something to write tells that the store works again: one with
        nothing pending touches no file (a state file still damaged would pass it)."""
        had_work = self.core.store.flush_deadline() is not None
        try:
            self.core.store.flush()
            self._retry_at = None
            if had_work:
                self.core.store_health.worked()
        except LeadershipLostError as exc:  # the store dropped the work: nothing to retry
            self._retry_at = None
            self.core.state_error(exc)  # steps down
        except Exception as exc:
            self._retry_at = self.core.clock.monotonic() + _RETRY_SECONDS
            self.core.state_error(exc)

    def _loop(self) -> None:
        """The flusher thread: one commit each time the timer asks for one."""
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._stopping or self._thread is not threading.current_thread():
                self._in_flight = False  # stopped, or replaced by a restart stop() gave up on
                return
            try:
                self.commit()
            finally:
                self._in_flight = False
                self.core.wake.set()  # the timer plans the next commit
                self.core.listeners.deliver()

    def stop(self) -> None:
        """End the flusher thread (after a commit in progress), then commit what is left."""
        self._stopping = True
        self._wanted.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(5.0, self.core.settings.lock_timeout))
        self.commit()
