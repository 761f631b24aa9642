"""Web servers with several worker processes: one active scheduler, exactly once per slot.

The slow tests run a real ``gunicorn -w 4`` (with and without ``--preload``) serving
``tests/apps/gunicorn_app.py`` (a 1 s interval schedule whose job logs each run), check that
every slot ran exactly once in one worker, kill that worker with SIGKILL and see another
worker take over. The fast tests cover the pre-fork and uwsgi rules in-process.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gunicorn_helpers import WORKERS, children_of, get_json, gunicorn, read_runs, wait_for

from herdsched import ThreadedScheduler
from herdsched import contrib as embedding
from herdsched.contrib import EmbeddedScheduler, UwsgiThreadsError, check_server
from herdsched.errors import StateError
from herdsched.store.leases import read_leader_info

WINDOW = 7.0  # seconds of 1 s interval runs watched before the leader is killed


# --------------------------------------------------------------------------- real gunicorn


def assert_each_slot_ran_once(runs: list[dict[str, Any]]) -> None:
    """No slot twice, no run id twice, and no two runs overlapping in time."""
    assert len({r["run_id"] for r in runs}) == len(runs)
    slots = [r["slot"] for r in runs]
    assert None not in slots
    assert len(set(slots)) == len(slots), f"a slot ran twice: {sorted(slots)}"
    ordered = sorted(runs, key=lambda r: r["start"])
    for before, after in itertools.pairwise(ordered):
        assert after["start"] >= before["end"], f"runs overlap: {before} and {after}"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads worker pids from /proc")
@pytest.mark.parametrize("preload", [False, True], ids=["workers-load-app", "preload"])
def test_gunicorn_four_workers_run_each_slot_once_and_hand_over(
    tmp_path: Path, preload: bool
) -> None:
    pytest.importorskip("gunicorn")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    with gunicorn(state_dir, preload=preload) as (master, base):
        try:
            status = wait_for(lambda: get_json(f"{base}/api/status"), 30, "gunicorn to serve")
            assert status["status"] in ("running", "standby")
            workers = wait_for(
                lambda: len(children_of(master.pid)) >= WORKERS and children_of(master.pid),
                15,
                "4 workers",
            )
            leader = wait_for(lambda: read_leader_info(state_dir), 15, "an active scheduler")
            leader_pid = leader["pid"]
            assert leader_pid in workers, "the active scheduler must be a worker, not the master"

            time.sleep(WINDOW)
            runs = read_runs(state_dir)
            assert len(runs) >= WINDOW / 2, runs  # 1 s interval + 0.2 s job: about 6
            assert {r["pid"] for r in runs} == {leader_pid}  # one worker ran them all
            assert_each_slot_ran_once(runs)

            # every worker serves the API, whichever answers; the history matches the log
            answers = [get_json(f"{base}/api/status") for _ in range(12)]
            for answer in answers:
                assert answer["status"] == ("running" if answer["pid"] == leader_pid else "standby")
                assert answer["leader"]["pid"] == leader_pid

            def history_caught_up() -> list[dict[str, Any]] | None:
                url = f"{base}/api/schedule/clock/tick/history?limit=200"
                done = [r for r in get_json(url)["runs"] if r["status"] == "success"]
                logged = {r["run_id"] for r in read_runs(state_dir)}
                return done if logged <= {r["run_id"] for r in done} else None

            wait_for(history_caught_up, 10, "the history to show every logged run")

            os.kill(leader_pid, signal.SIGKILL)
            killed_at = time.time()
            new_leader = wait_for(
                lambda: (
                    (info := read_leader_info(state_dir)) and info["pid"] != leader_pid and info
                ),
                15,
                "another worker to take over",
            )
            assert new_leader["pid"] != master.pid
            wait_for(
                lambda: len([r for r in read_runs(state_dir) if r["start"] > killed_at]) >= 2,
                15,
                "runs after the handover",
            )
            runs = read_runs(state_dir)
            after = {r["pid"] for r in runs if r["start"] > killed_at}
            assert after == {new_leader["pid"]}
            assert_each_slot_ran_once(runs)
        except AssertionError:
            sys.stderr.write((state_dir / "gunicorn.log").read_text(errors="replace")[-4000:])
            raise


# ------------------------------------------------------------------- pre-fork rules, fast


@pytest.fixture
def only(monkeypatch: pytest.MonkeyPatch) -> Callable[[EmbeddedScheduler], None]:
    """Let the fork/exit hooks see only the given wrapper (not those of other tests)."""

    def use(item: EmbeddedScheduler) -> None:
        registry: weakref.WeakSet[EmbeddedScheduler] = weakref.WeakSet([item])
        monkeypatch.setattr(embedding, "_embedded", registry)

    return use


def server(monkeypatch: pytest.MonkeyPatch, prefork: bool, master: bool | None) -> None:
    monkeypatch.setattr(embedding, "_server", lambda: embedding._Server(prefork, master))


def test_without_a_prefork_server_the_scheduler_starts_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server(monkeypatch, False, None)
    sched = ThreadedScheduler(state_dir=None)
    embedded = EmbeddedScheduler(sched)
    try:
        embedded.start()
        assert sched.is_running()
    finally:
        embedded.stop()
    assert not sched.is_running()


def test_under_gunicorn_a_worker_without_requests_starts_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server(monkeypatch, True, None)
    sched = ThreadedScheduler(state_dir=None)
    embedded = EmbeddedScheduler(sched, prefork_grace=0.05)
    try:
        embedded.start()
        assert not sched.is_running()  # could still be a master about to fork
        wait_for(sched.is_running, 5, "the deferred start")
    finally:
        embedded.stop()


def test_under_gunicorn_the_first_request_starts_it_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server(monkeypatch, True, None)
    sched = ThreadedScheduler(state_dir=None)
    embedded = EmbeddedScheduler(sched, prefork_grace=60)
    try:
        embedded.start()
        assert not sched.is_running()
        embedded.mark_serving()
        assert sched.is_running()
        embedded.mark_serving()  # idempotent
    finally:
        embedded.stop()


def test_stop_cancels_a_deferred_start(monkeypatch: pytest.MonkeyPatch) -> None:
    server(monkeypatch, True, None)
    sched = ThreadedScheduler(state_dir=None)
    embedded = EmbeddedScheduler(sched, prefork_grace=0.05)
    embedded.start()
    embedded.stop()
    time.sleep(0.2)
    assert not sched.is_running()


def test_uwsgi_master_never_starts_and_its_workers_start_after_the_fork(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker = {"id": 0}
    earlier: list[str] = []
    fake = SimpleNamespace(
        opt={b"enable-threads": True},
        worker_id=lambda: worker["id"],
        post_fork_hook=lambda: earlier.append("app's own hook"),
    )
    monkeypatch.setitem(sys.modules, "uwsgi", fake)
    sched = ThreadedScheduler(state_dir=None)
    embedded = EmbeddedScheduler(sched, prefork_grace=0.01)
    try:
        embedded.start()
        embedded.start()  # the hook is installed once
        embedded.mark_serving()
        time.sleep(0.1)
        assert not sched.is_running()  # the uwsgi master waits for its workers
        worker["id"] = 2  # uwsgi forks a worker and calls its post-fork hook there
        fake.post_fork_hook()
        assert sched.is_running()
        assert earlier == ["app's own hook"]
    finally:
        embedded.stop()


def test_uwsgi_worker_starts_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = SimpleNamespace(opt={"threads": b"4"}, worker_id=lambda: 1)
    monkeypatch.setitem(sys.modules, "uwsgi", fake)
    sched = ThreadedScheduler(state_dir=None)
    embedded = EmbeddedScheduler(sched)
    try:
        embedded.start()
        assert sched.is_running()
        assert not hasattr(fake, "post_fork_hook")
    finally:
        embedded.stop()


@pytest.mark.parametrize(
    "options",
    [{}, {"enable-threads": b"false"}, {"threads": b"1"}, {"threads": "many"}, {"threads": []}],
)
def test_uwsgi_without_threads_fails_loudly(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    monkeypatch.setitem(sys.modules, "uwsgi", SimpleNamespace(opt=options, worker_id=lambda: 1))
    with pytest.raises(UwsgiThreadsError, match="--enable-threads"):
        check_server()
    sched = ThreadedScheduler(state_dir=None)
    with pytest.raises(UwsgiThreadsError):
        EmbeddedScheduler(sched).start()
    assert not sched.is_running()


@pytest.mark.parametrize(
    "options",
    [
        {"enable-threads": True},
        {b"enable-threads": b"1"},
        {"enable-threads": [b"true"]},
        {"threads": b"4"},
        {b"threads": [b"1", b"8"]},
    ],
)
def test_uwsgi_with_threads_is_accepted(
    monkeypatch: pytest.MonkeyPatch, options: dict[Any, Any]
) -> None:
    monkeypatch.setitem(sys.modules, "uwsgi", SimpleNamespace(opt=options))
    check_server()


def test_no_uwsgi_no_check() -> None:
    assert "uwsgi" not in sys.modules
    check_server()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_master_that_forks_hands_the_scheduler_to_its_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, only: Callable[[EmbeddedScheduler], None]
) -> None:
    server(monkeypatch, True, None)
    sched = ThreadedScheduler(state_dir=tmp_path, max_sleep=0.5)
    embedded = EmbeddedScheduler(sched, prefork_grace=60)
    only(embedded)
    embedded.start()
    sched.start()  # as if the grace had passed: the master is active before it forks
    assert sched.is_leader
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read_end)
        verdict = sched.status.encode()
        os.write(write_end, verdict)
        try:
            sched.stop(timeout=5)
        finally:
            os._exit(0)
    os.close(write_end)
    verdict = os.read(read_end, 20)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert verdict == b"running"  # the child became the active scheduler
    assert embedded.handed_over
    assert not sched.is_running()  # the master gave it up before the fork
    embedded.mark_serving()
    assert not sched.is_running()  # and does not take it back


def test_a_serving_worker_that_forks_keeps_its_scheduler(
    monkeypatch: pytest.MonkeyPatch, only: Callable[[EmbeddedScheduler], None]
) -> None:
    server(monkeypatch, True, False)
    sched = ThreadedScheduler(state_dir=None)
    embedded = EmbeddedScheduler(sched)
    only(embedded)
    try:
        embedded.start()
        embedded.mark_serving()
        embedding._before_fork()
        assert sched.is_running()
        assert not embedded.handed_over
        embedding._after_fork_in_child()  # nothing handed over: nothing to start
        assert sched.is_running()
    finally:
        embedded.stop()


def test_exit_stops_running_schedulers_and_pending_starts(
    monkeypatch: pytest.MonkeyPatch, only: Callable[[EmbeddedScheduler], None]
) -> None:
    server(monkeypatch, False, None)
    sched = ThreadedScheduler(state_dir=None)
    embedded = EmbeddedScheduler(sched)
    only(embedded)
    embedded.start()
    embedding._at_exit()
    assert not sched.is_running()
    server(monkeypatch, True, None)
    embedded = EmbeddedScheduler(sched, prefork_grace=0.05)
    only(embedded)
    embedded.start()
    embedding._at_exit()
    time.sleep(0.2)
    assert not sched.is_running()


def test_a_worker_told_to_exit_at_once_while_it_stops_prints_no_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gunicorn raises ``SystemExit`` in a worker whose exit waits past ``--timeout`` (its
    SIGABRT handler): it came out of the exit hook, and Python printed "Exception ignored in"
    with a traceback, and a second scheduler of the worker was not stopped."""
    first, second = ThreadedScheduler(state_dir=None), ThreadedScheduler(state_dir=None)
    cut, other = EmbeddedScheduler(first), EmbeddedScheduler(second)
    monkeypatch.setattr(embedding, "_embedded", weakref.WeakSet([cut, other]))

    def abort(**_: Any) -> None:
        first.stop()
        raise SystemExit(1)

    monkeypatch.setattr(cut, "stop", abort)
    cut.start()
    other.start()
    embedding._at_exit()
    assert not first.is_running() and not second.is_running()


def test_a_failed_start_in_the_child_is_logged_and_tried_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sched = ThreadedScheduler(state_dir=None)
    embedded = EmbeddedScheduler(sched, retry_delay=0.05)
    embedded.wanted = True
    embedded.handed_over = True
    calls: list[float] = []

    def broken() -> None:
        calls.append(time.monotonic())
        raise RuntimeError("cannot start")

    monkeypatch.setattr(embedded, "_start_now", broken)
    try:
        embedded._after_fork_in_child()
        assert "herdsched could not start in pid" in caplog.text
        assert "it tries again in 0.05 s: cannot start" in caplog.text
        wait_for(lambda: len(calls) >= 3, 5, "two more tries")
        assert "tries again in 0.1 s" in caplog.text  # the delay doubles
    finally:
        embedded.stop()
    tried = len(calls)
    time.sleep(0.5)
    assert len(calls) == tried  # stop() ends the tries


def test_a_start_that_fails_for_a_request_does_not_fail_it_and_is_tried_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Under gunicorn the first request starts the scheduler: when the state cannot be reached
    then, the request goes on, and the worker starts its scheduler once it can."""
    server(monkeypatch, True, None)
    state_dir = tmp_path / "state"
    sched = ThreadedScheduler(state_dir=state_dir)
    state_dir.write_text("not a directory")  # what a missing mount looks like to the start
    embedded = EmbeddedScheduler(sched, prefork_grace=60, retry_delay=0.1)
    try:
        embedded.start()
        embedded.mark_serving()  # raised the start's error into the request before
        assert not sched.is_running()
        assert f"herdsched could not start in pid {os.getpid()}" in caplog.text
        assert str(state_dir) in caplog.text
        state_dir.unlink()
        wait_for(sched.is_running, 10, "the start tried again")
        wait_for(lambda: embedded.failed_starts == 0, 5, "the count of failures to be reset")
    finally:
        embedded.stop()
    assert not sched.is_running()


def test_a_start_made_at_once_raises_for_the_apps_set_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server(monkeypatch, False, None)
    state_dir = tmp_path / "state"
    embedded = EmbeddedScheduler(ThreadedScheduler(state_dir=state_dir), retry_delay=0.05)
    state_dir.write_text("not a directory")
    with pytest.raises(StateError, match=re.escape(str(state_dir))):
        embedded.start()
    time.sleep(0.3)
    assert not embedded.scheduler.is_running()  # and nothing tries again behind its back


def test_server_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "uwsgi", raising=False)
    monkeypatch.delitem(sys.modules, "gunicorn.arbiter", raising=False)
    assert embedding._server() == (False, None)
    monkeypatch.setitem(sys.modules, "gunicorn.arbiter", SimpleNamespace())
    assert embedding._server() == (True, None)  # master or worker: cannot tell
    monkeypatch.setitem(sys.modules, "uwsgi", SimpleNamespace(worker_id=lambda: 0))
    assert embedding._server() == (True, True)
    monkeypatch.setitem(sys.modules, "uwsgi", SimpleNamespace(worker_id=lambda: 3))
    assert embedding._server() == (True, False)
    monkeypatch.setitem(sys.modules, "uwsgi", SimpleNamespace())
    assert embedding._server() == (True, None)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads worker pids from /proc")
def test_a_worker_stopped_while_a_job_runs_finishes_it_and_leaves_no_phantom_run(
    tmp_path: Path,
) -> None:
    """SIGTERM to the active worker while ``slow`` runs and ``tick`` falls due each second.

    The worker's scheduler used to be stopped only after Python had shut its thread pools
    down: meanwhile the timer claimed ``tick`` slots the pools refused, one stayed "running"
    for good, the stop waited 10 s for it, and the next leader recorded it as interrupted.
    """
    pytest.importorskip("gunicorn")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    with gunicorn(state_dir, preload=False, app="gunicorn_exit_app:app") as (_master, base):
        try:
            wait_for(lambda: get_json(f"{base}/api/status"), 30, "gunicorn to serve")
            started = wait_for((state_dir / "slow.started").read_text, 30, "slow")
            leader_pid = int(started)
            os.kill(leader_pid, signal.SIGTERM)
            stopped_at = time.time()
            wait_for(
                lambda: (info := read_leader_info(state_dir)) and info["pid"] != leader_pid,
                20,
                "another worker to take over",
            )
            wait_for(
                lambda: len([r for r in read_runs(state_dir) if r["start"] > stopped_at]) >= 3,
                15,
                "runs after the handover",
            )
            runs = read_runs(state_dir)
            assert [r["pid"] for r in runs if r["job"] == "slow"] == [leader_pid]  # it finished
            ticks = [r for r in runs if r["job"] == "tick"]
            assert_each_slot_ran_once(ticks)
            records = get_json(f"{base}/api/schedule/clock/tick/history?limit=200")["runs"]
            wrong = [r for r in records if r["status"] in ("interrupted", "missed", "skipped")]
            assert [r for r in wrong if "refused" in (r.get("error") or "")] == []
            assert [r for r in wrong if r["status"] == "interrupted"] == []
            log = (state_dir / "gunicorn.log").read_text(errors="replace")
            assert "did not stop cleanly" not in log
            assert "cannot schedule new futures" not in log
        except AssertionError:
            sys.stderr.write((state_dir / "gunicorn.log").read_text(errors="replace")[-4000:])
            raise
