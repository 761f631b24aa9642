"""The deadline a web request's store calls share (``herdsched.store.deadline``)."""

from __future__ import annotations

import contextvars
import threading

import pytest

from herdsched.errors import StateError
from herdsched.store.deadline import answer_within, current_deadline, held


def test_a_deadline_holds_inside_its_block_and_an_earlier_outer_one_wins() -> None:
    assert current_deadline() is None
    with answer_within(5):
        outer = current_deadline()
        assert outer is not None and 4 < outer.left() <= 5
        with answer_within(60):
            assert current_deadline() is outer
        with answer_within(1):
            inner = current_deadline()
            assert inner is not None and 0 < inner.left() <= 1
        assert current_deadline() is outer
    assert current_deadline() is None


def test_a_thread_started_with_the_requests_context_keeps_no_deadline() -> None:
    """Where new threads inherit the context (free-threaded Python), a job thread started
    inside a request would have failed every store call at once once the request's time ran
    out: the deadline holds only for the thread that set it."""
    seen: list[object] = []
    with answer_within(5):
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=context.run, args=(lambda: seen.append(current_deadline()),)
        )
        thread.start()
        thread.join(10)
    assert seen == [None]


def test_a_lock_held_elsewhere_is_waited_for_until_the_deadline_only() -> None:
    lock = threading.RLock()
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(10)
        refused = pytest.raises(StateError, match=r"within the request's 0\.2 s")
        with answer_within(0.2), refused, held(lock, "read the schedules"):
            pass
    finally:
        release.set()
        holder.join(10)
    with answer_within(0.2), held(lock, "read the schedules"):
        assert lock._is_owned()  # type: ignore[attr-defined]
