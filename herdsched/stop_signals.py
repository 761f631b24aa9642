"""SIGINT, SIGTERM and SIGHUP answered by a thread of their own, never inside a signal handler.

Python runs a signal handler in the main thread between two bytecodes, wherever that thread
is: inside ``Event.wait`` holding the event's lock, inside a store holding one of its locks, or
half-way through writing a log line. A handler that sets an event, saves state or logs can then
wait for a lock the code it interrupted holds (forever), or fail with "reentrant call" and be
lost (python/cpython#126434). So the handler installed here does nothing: the interpreter writes
each signal's number to a socket (:func:`signal.set_wakeup_fd`) and a daemon thread,
``herdsched-signals``, reads it and calls back, free to lock, log and save like any thread.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

__all__ = ["STOP_SIGNALS", "StopSignals", "run_until_stopped"]

#: The signals that ask a scheduler process to stop: Ctrl-C, ``kill``, and the hang-up of a
#: closed terminal or ssh session (its default would end the process at once, leaving its
#: command jobs running unwatched; under ``nohup``, which ignores it, it stays ignored).
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def _answered_elsewhere(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: nothing, the watcher thread answers (see the module's text)."""


class StopSignals:
    """Calls ``on_signal`` from the ``herdsched-signals`` thread for each stop signal.

    :meth:`install` takes over the :data:`STOP_SIGNALS` (but one ignored, as ``nohup`` does)
    and the process's wakeup descriptor until :meth:`restore` gives back what was there
    before. Both must be called from the main thread (Python's rule for signals); elsewhere
    :meth:`install` does nothing and returns ``False``.
    """

    def __init__(self, on_signal: Callable[[signal.Signals], None]) -> None:
        self._on_signal = on_signal
        self._previous: dict[int, Any] = {}
        self._previous_fd = -1
        self._writer: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def install(self) -> bool:
        """Route the stop signals to the watcher thread; ``False`` off the main thread."""
        if threading.current_thread() is not threading.main_thread() or self._writer:
            return False
        reader, writer = socket.socketpair()
        writer.setblocking(False)  # set_wakeup_fd's rule: the interpreter must never block
        self._previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._writer = writer
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
                self._previous[sig] = signal.signal(sig, _answered_elsewhere)
        handled = frozenset(self._previous)
        self._thread = threading.Thread(
            target=self._watch, args=(reader, handled), name="herdsched-signals", daemon=True
        )
        self._thread.start()
        return True

    def restore(self) -> None:
        """Give back the handlers and wakeup descriptor found at :meth:`install`; the watcher
        ends once it has answered the signals already received."""
        if self._writer is None:
            return
        for sig, handler in self._previous.items():  # first, so no signal falls in between
            signal.signal(sig, handler)
        self._previous.clear()
        signal.set_wakeup_fd(self._previous_fd)
        self._writer.close()  # the reader sees the end of the stream
        self._writer = None
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    def _watch(self, reader: socket.socket, handled: frozenset[int]) -> None:
        with reader:
            while received := reader.recv(64):
                for number in received:
                    if number in handled:  # the descriptor hears every handled signal
                        self._on_signal(signal.Signals(number))


class _Stoppable(Protocol):
    """What :func:`run_until_stopped` needs of a scheduler."""

    log: Any

    @property
    def status(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


def run_until_stopped(scheduler: _Stoppable) -> None:
    """Start ``scheduler`` (if needed) and block until a stop signal or its ``stop()``, then
    stop it gracefully (``ThreadedScheduler.run_forever``)."""
    stop_requested = threading.Event()

    def requested(sig: signal.Signals) -> None:
        scheduler.log.info("%s received: stopping.", sig.name)
        stop_requested.set()

    signals = StopSignals(requested)
    signals.install()
    try:
        scheduler.start()
        while not stop_requested.wait(0.2) and scheduler.status != "stopped":
            pass
    finally:
        signals.restore()
        scheduler.stop()
