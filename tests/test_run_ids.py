"""Run ids: unique, and not repeated by processes forked from one parent (gunicorn --preload)."""

from __future__ import annotations

import os

import pytest

from herdsched.runner import new_run_id


def test_run_ids_are_16_hex_digits_and_distinct() -> None:
    ids = [new_run_id() for _ in range(10_000)]
    assert all(len(i) == 16 and int(i, 16) >= 0 for i in ids)
    assert len(set(ids)) == len(ids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_does_not_repeat_the_parents_next_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids, then leave at once
        os.close(read)
        os.write(write, " ".join(new_run_id() for _ in range(5)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode().split()
    os.waitpid(pid, 0)
    parent = [new_run_id() for _ in range(5)]
    assert len(child) == 5
    assert not set(child) & set(parent)


def test_a_job_seeding_random_does_not_make_run_ids_repeat() -> None:
    import random

    random.seed(1234)
    first = new_run_id()
    random.seed(1234)
    assert new_run_id() != first
