"""Wake-ups across hosts: a thread that LISTENs for the changes other hosts announce.

Every change the store writes sends ``NOTIFY herdsched_changes, '<namespace>'`` in its own
transaction, so listeners hear of it when it commits. The listener runs on a connection of its
own (a LISTEN needs a session that stays idle), marks the store's view stale and calls the
scheduler back, which then polls at once instead of at its next ``poll_interval``. Polling stays
as the fallback: while the listener is disconnected the store checks the database on every
refresh, and after a reconnect it reports a change, since notifications sent meanwhile are lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psycopg

from herdsched.store.postgres.connection import one_line
from herdsched.store.postgres.rows import CHANNEL

__all__ = ["Listener"]

log = logging.getLogger("herdsched")

_RECONNECT_DELAY = 1.0  # seconds between attempts while the server is away
_WAIT = 1.0  # how long one wait for notifications lasts (how soon close() is noticed)
_TELL_EVERY = 60.0  # seconds between two WARNINGs of a stop


class Listener:
    """The ``herdsched-listener`` thread of one store (started by :meth:`start`)."""

    def __init__(
        self,
        conninfo: str,
        namespace: str,
        on_change: Callable[[], None],
        own_pid: Callable[[], int | None],
        where: str,
    ) -> None:
        self._conninfo = conninfo
        self._namespace = namespace
        self._on_change = on_change
        self._own_pid = own_pid
        self._where = where
        self._stop = threading.Event()
        self._failures = 0  # tries to listen that failed in a row
        self._told_at = float("-inf")  # monotonic: when a stop was last told as a WARNING
        self._told = False  # whether the latest stop was
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="herdsched-listener", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end: it closes its connection and ends within ``_WAIT`` seconds
        (not waited for, so that ``stop()`` of a scheduler is not held up by it)."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception as exc:  # a database error, or one of a callback: listen again
                self.connected.clear()
                self._failures += 1
                if self._failures == 1:
                    self._told = False
                if not self._told and not self._stop.is_set():
                    self._tell_stopped(exc)
                self._stop.wait(_RECONNECT_DELAY)

    def _tell_stopped(self, exc: Exception) -> None:
        """Say it stopped listening: a WARNING at most once per :data:`_TELL_EVERY` seconds
        (a server ending idle sessions every few seconds would fill the log), else DEBUG at
        its first failed try, and a WARNING once the stop has lasted past that; its return is
        told at INFO when its stop was told as a WARNING."""
        now = time.monotonic()
        quiet = now - self._told_at <= _TELL_EVERY
        if quiet and self._failures > 1:
            return
        if not quiet:
            self._told, self._told_at = True, now
        log.log(
            logging.DEBUG if quiet else logging.WARNING,
            "Stopped listening for changes of the PostgreSQL store at %s (%s); polling until "
            "it listens again.",
            self._where,
            one_line(str(exc)),
        )

    def _listen(self) -> None:
        with psycopg.connect(self._conninfo, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.connected.set()
            if self._failures:
                log.log(
                    logging.INFO if self._told else logging.DEBUG,
                    "Listening again for changes of the PostgreSQL store at %s.",
                    self._where,
                )
                self._failures = 0
            self._on_change()  # whatever was announced while not listening is unknown
            while not self._stop.is_set():
                for note in conn.notifies(timeout=_WAIT):
                    if note.payload == self._namespace and note.pid != self._own_pid():
                        self._on_change()
        self.connected.clear()
