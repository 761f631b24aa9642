"""The per-agent worker pool: bounded threads, started only when all others are busy."""

from __future__ import annotations

import threading
import time

import pytest

from herdsched.workers import WorkerPool


def test_runs_calls_and_reuses_one_idle_thread() -> None:
    pool = WorkerPool(4, "herdsched-test")
    names: list[str] = []
    done = threading.Semaphore(0)

    def call(value: int) -> None:
        names.append(f"{threading.current_thread().name}:{value}")
        done.release()

    for value in range(5):
        pool.submit(call, value)
        assert done.acquire(timeout=10)
        deadline = time.monotonic() + 10
        while pool.busy and time.monotonic() < deadline:  # the call returned; let it finish
            threading.Event().wait(0.001)
        assert pool.busy == 0
    pool.shutdown()
    assert pool.thread_count == 1  # each call found the first thread free
    assert names == [f"herdsched-test_0:{v}" for v in range(5)]


def test_never_more_threads_than_its_size() -> None:
    pool = WorkerPool(3, "herdsched-test")
    release = threading.Event()
    started = threading.Semaphore(0)
    seen: set[str] = set()
    lock = threading.Lock()

    def block(_: object) -> None:
        with lock:
            seen.add(threading.current_thread().name)
        started.release()
        release.wait(10)

    for _ in range(5):
        pool.submit(block, None)
    for _ in range(3):
        assert started.acquire(timeout=10)
    assert not started.acquire(timeout=0.05)  # two calls wait for a free thread
    assert pool.thread_count == 3
    release.set()
    for _ in range(2):
        assert started.acquire(timeout=10)
    pool.shutdown()
    assert seen == {"herdsched-test_0", "herdsched-test_1", "herdsched-test_2"}


def test_a_raising_call_is_logged_and_the_thread_lives_on(caplog: pytest.LogCaptureFixture) -> None:
    pool = WorkerPool(1, "herdsched-test")
    done = threading.Event()

    def boom(_: object) -> None:
        raise RuntimeError("boom")

    pool.submit(boom, None)
    pool.submit(lambda _: done.set(), None)
    assert done.wait(10)
    pool.shutdown()
    assert "boom" in caplog.text
    assert pool.thread_count == 1


def test_shutdown_finishes_queued_calls_then_refuses_more() -> None:
    pool = WorkerPool(1, "herdsched-test")
    gate = threading.Event()
    ran: list[int] = []
    pool.submit(lambda _: gate.wait(10), None)
    pool.submit(ran.append, 1)
    pool.shutdown()
    pool.shutdown()  # idempotent
    gate.set()
    with pytest.raises(RuntimeError, match=r"herdsched-test.*shut down"):
        pool.submit(ran.append, 2)
    for thread in threading.enumerate():
        if thread.name == "herdsched-test_0":
            thread.join(10)
    assert ran == [1]


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "2"])
def test_bad_size_is_refused(size: object) -> None:
    with pytest.raises(ValueError, match="positive integer size"):
        WorkerPool(size, "x")  # type: ignore[arg-type]


def test_every_call_accepted_while_shutting_down_still_runs() -> None:
    # a submit racing a shutdown must either be refused or run, never be queued behind the
    # threads' stop signals and forgotten (the run would stay "running" for ever)
    for _ in range(100):
        pool = WorkerPool(2, "herdsched-race")
        ran = threading.Semaphore(0)
        accepted = 0
        start = threading.Barrier(2)

        def stop(pool: WorkerPool = pool, start: threading.Barrier = start) -> None:
            start.wait(5)
            pool.shutdown()

        stopper = threading.Thread(target=stop)
        stopper.start()
        start.wait(5)
        for _ in range(20):
            try:
                pool.submit(lambda _, ran=ran: ran.release(), None)
            except RuntimeError:
                break
            accepted += 1
        stopper.join(5)
        for _ in range(accepted):
            assert ran.acquire(timeout=5), f"an accepted call never ran ({accepted} accepted)"
