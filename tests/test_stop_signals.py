"""SIGINT/SIGTERM are answered off the interrupted thread: real signals sent to this process.

A Python signal handler runs in the main thread wherever that thread is; the cases here are the
ones where work done inside the handler lost the signal or hung the process.
"""

from __future__ import annotations

import io
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from herdsched import ThreadedScheduler, cli
from herdsched.errors import LeadershipLostError
from herdsched.stop_signals import StopSignals
from herdsched.store import MemoryStateStore


@pytest.fixture(autouse=True)
def _main_thread_only() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach Python handlers only on the main thread")


def settles(condition: Callable[[], object], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def stopper() -> Iterator[cli._Stopper]:
    stopper = cli._Stopper()
    stopper.install()
    yield stopper
    stopper.restore()


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    codes: list[int] = []
    monkeypatch.setattr(cli.os, "_exit", codes.append)
    return codes


class SignalMidWrite(io.RawIOBase):
    """A log destination that receives SIGINT while the buffered writer above it is mid-write,
    as a full pipe (``herdsched run | less``) interrupted by Ctrl-C does."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.armed = False

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        if self.armed:
            self.armed = False
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs here, with the writer's lock held
        self.data += bytes(b)
        return len(b)


def test_a_stop_signal_that_lands_while_the_log_is_written_is_not_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = SignalMidWrite()
    stream = io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", line_buffering=True)
    monkeypatch.setattr(sys, "stderr", stream)
    undo = cli._setup_logging(logging.INFO)
    stopper = cli._Stopper()
    stopper.install()
    try:
        raw.armed = True
        logging.getLogger("herdsched.cli").info("a job succeeded")
        assert settles(stopper.event.is_set), raw.data.decode()
        assert settles(lambda: b"SIGINT received: stopping" in raw.data)
        assert b"Logging error" not in raw.data
    finally:
        stopper.restore()
        undo()


def test_a_second_signal_while_the_main_thread_holds_a_store_lock_saves_and_quits(
    stopper: cli._Stopper, exits: list[int]
) -> None:
    lock = threading.Lock()  # stands for a store's lock the interrupted main thread holds
    saved: list[bool] = []

    def flush() -> None:
        if not lock.acquire(timeout=3):
            raise TimeoutError("the save waited for a lock the thread it runs on holds")
        saved.append(True)
        lock.release()

    stopper.flush = flush
    with lock:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        assert settles(lambda: stopper.signals == 2)
    assert settles(lambda: exits == [130])
    assert saved == [True]


def test_a_second_signal_quits_when_saving_hangs(
    stopper: cli._Stopper,
    exits: list[int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(cli, "FINAL_SAVE_WAIT", 0.2)
    never = threading.Event()
    stopper.flush = lambda: never.wait(30) and None
    stopper.received(signal.SIGTERM)
    assert stopper.event.is_set() and exits == []
    with caplog.at_level(logging.INFO, logger="herdsched"):
        stopper.received(signal.SIGTERM)  # returns only because _exit is a stand-in here
    never.set()
    assert exits == [130]
    assert "could not save state within 0.2 s: quitting anyway" in caplog.text


@pytest.mark.parametrize("stopped", [True, False])
def test_the_final_save_refused_for_a_lease_let_go_is_told_only_when_another_leads(
    stopped: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A second Ctrl-C while ``stop()`` ended: the save came after ``stop()`` had made the
    last commit and let the lease go, and was refused: an ERROR with a traceback followed the
    scheduler's "stopped", though nothing was lost."""

    class LetGo(MemoryStateStore):
        def flush(self) -> None:
            raise LeadershipLostError("this scheduler holds no lease any more")

    sched = ThreadedScheduler(store=LetGo())
    if not stopped:
        sched.start()
    try:
        with caplog.at_level(logging.INFO, logger="herdsched"):
            cli._final_save(sched)
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        text = caplog.text
    finally:
        sched.stop()
    assert lines == (
        []
        if stopped
        else [
            "could not save state before quitting: this scheduler no longer holds the lease "
            "(the active one records its runs)"
        ]
    )
    assert "Traceback" not in text


def test_restore_gives_back_the_handlers_and_wakeup_descriptor_and_ends_the_watcher() -> None:
    def previous_handler(signum: int, frame: object) -> None:
        raise AssertionError("not called in this test")

    signal.signal(signal.SIGTERM, previous_handler)
    sigint_before = signal.getsignal(signal.SIGINT)
    received: list[signal.Signals] = []
    signals = StopSignals(received.append)
    try:
        assert signals.install()
        assert not signals.install()  # once is enough
        os.kill(os.getpid(), signal.SIGTERM)
        assert settles(lambda: received == [signal.SIGTERM])
        signals.restore()
        assert signal.getsignal(signal.SIGTERM) is previous_handler
        assert signal.getsignal(signal.SIGINT) is sigint_before
        assert signal.set_wakeup_fd(-1) == -1  # none was set before
        assert not [t for t in threading.enumerate() if t.name == "herdsched-signals"]
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_install_off_the_main_thread_takes_nothing_over() -> None:
    installed: list[bool] = []
    before = signal.getsignal(signal.SIGINT)
    worker = threading.Thread(target=lambda: installed.append(StopSignals(print).install()))
    worker.start()
    worker.join()
    assert installed == [False]
    assert signal.getsignal(signal.SIGINT) is before
