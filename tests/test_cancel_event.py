"""The cancel event a job receives: a full ``threading.Event`` whose lock comes on demand."""

from __future__ import annotations

import threading

from herdsched.runner import CancelEvent


def test_behaves_like_a_threading_event() -> None:
    event = CancelEvent()
    assert isinstance(event, threading.Event)
    assert not event.is_set()
    assert event.wait(0.01) is False
    event.set()
    assert event.is_set() and event.wait(0) is True
    event.clear()
    assert not event.is_set()


def test_a_set_from_another_thread_wakes_a_waiter() -> None:
    event = CancelEvent()
    woke = threading.Event()

    def waiter() -> None:
        if event.wait(10):
            woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    threading.Timer(0.05, event.set).start()
    thread.join(10)
    assert woke.is_set()


def test_is_set_builds_no_lock_and_set_builds_one() -> None:
    event = CancelEvent()
    assert not event.is_set()
    assert "_lazy_cond" not in vars(event)  # polling jobs never pay for the condition
    event.set()
    assert isinstance(vars(event)["_lazy_cond"], threading.Condition)


def test_concurrent_first_use_shares_one_condition() -> None:
    event = CancelEvent()
    barrier = threading.Barrier(8)
    seen: list[threading.Condition] = []

    def use() -> None:
        barrier.wait()
        seen.append(event._cond)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(seen) == 8 and all(cond is seen[0] for cond in seen)


def test_it_cannot_be_pickled_or_deep_copied_even_unused() -> None:
    import copy
    import pickle

    import pytest

    event = CancelEvent()  # never set nor waited on: no lock inside yet
    with pytest.raises(TypeError, match="cannot pickle"):
        pickle.dumps(event)
    with pytest.raises(TypeError, match="cannot pickle"):
        copy.deepcopy(event)
