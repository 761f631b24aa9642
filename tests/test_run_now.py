"""Run-now through another process: durable when answered, run under the id it was given,
traceable from queued to finished, and never lost.

Two schedulers share one state directory with the leader lock on, as two web workers do: the
``leader`` is active, the ``standby`` queues requests in the store. Time is a FakeClock: the
leader polls the store when the test advances it past ``poll_interval`` and runs a pass.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from scheduler_helpers import T0, wait_until

from herdsched import Agent, RunStatus, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.api import RestApi
from herdsched.cli import main
from herdsched.engine.requests import RunRequests
from herdsched.errors import LeadershipLostError, StateError
from herdsched.runner import new_run_id
from herdsched.store.yaml_store import YamlStateStore
from herdsched.testing import FakeClock, as_separate_processes

Pair = tuple[ThreadedScheduler, ThreadedScheduler, "Jobs", FakeClock]


class Jobs:
    """The agent's job: records each run id; ``gate`` holds jobs until it is set."""

    def __init__(self) -> None:
        self.run_ids: list[str] = []
        self.prompts: list[str | None] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def __call__(self, info: TriggerInfo) -> str:
        self.run_ids.append(info.run_id)
        self.prompts.append(info.prompt)
        self.started.set()
        assert self.gate.wait(10)
        return "ok"


def build(state_dir: Path, clock: FakeClock, jobs: Jobs, *, slots: int = 1) -> ThreadedScheduler:
    sched = ThreadedScheduler(state_dir=state_dir, clock=clock, poll_interval=1.0, timezone="UTC")
    sched.add_agent(
        Agent(
            "a",
            job=jobs,
            max_concurrent=slots,
            schedules={"s": Schedule.manual(), "t": Schedule.manual()},
        )
    )
    return sched


@pytest.fixture(autouse=True)
def _as_two_processes() -> Iterator[None]:
    """The schedulers of a test stand for separate processes (a leader and standbys)."""
    with as_separate_processes():
        yield


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    clock = FakeClock(T0)
    jobs = Jobs()
    leader, standby = build(tmp_path, clock, jobs), build(tmp_path, clock, jobs)
    leader.start()
    standby.start()
    try:
        assert (leader.status, standby.status) == ("running", "standby")
        yield leader, standby, jobs, clock
    finally:
        jobs.gate.set()
        standby.stop(timeout=10)
        leader.stop(timeout=10)


def poll(leader: ThreadedScheduler, clock: FakeClock) -> None:
    """Let the leader poll the store once, and wait for the runs it started.

    The leader's timer thread follows the FakeClock too and may be the one that polls."""
    clock.advance("2s")
    leader.run_pending()
    assert leader.wait_until_idle(10)


def drive(leader: ThreadedScheduler, clock: FakeClock, done: Callable[[], bool]) -> None:
    """Poll until ``done()``: the timer thread may still be finishing a poll when
    :func:`poll` returns, so each round also gives it a moment (real time, not clock time)."""
    pause = threading.Event()
    for _ in range(100):
        if done():
            return
        poll(leader, clock)
        pause.wait(0.01)
    assert done()


def statuses(sched: ThreadedScheduler, schedule: str = "s") -> dict[str, RunStatus]:
    return {r.run_id: r.status for r in sched.history("a", schedule, limit=50)}


def test_every_request_queued_through_a_standby_runs_once_under_its_id(pair: Pair) -> None:
    """The bug: the leader took every queued request at once and, finding the schedule busy
    with the first, dropped the others; the id a standby gave was not the run's id either."""
    leader, standby, jobs, clock = pair
    given = [standby.trigger("a", "s", prompt=f"p{i}").run_id for i in range(4)]
    assert all(run_id is not None and len(run_id) == 16 for run_id in given)
    drive(leader, clock, lambda: len(jobs.run_ids) >= 4)
    drive(leader, clock, lambda: not leader.store.trigger_requests())  # settled
    assert jobs.run_ids == given  # each once, in the order asked
    assert jobs.prompts == ["p0", "p1", "p2", "p3"]
    assert statuses(standby) == dict.fromkeys(given, RunStatus.SUCCESS)


def test_a_standby_refuses_a_run_now_as_the_leader_would(pair: Pair) -> None:
    """A run-now of a running schedule was refused by the leader (``already_running``) but
    queued by a standby, and ran once the first run ended: one request, two answers,
    whichever process took it. A standby now judges from the store as the leader does."""
    leader, standby, jobs, clock = pair
    jobs.gate.clear()
    first = leader.trigger("a", "s")
    assert first.success and jobs.started.wait(5)
    leader.store.flush()  # the group commit: the store shows s running
    again = [sched.trigger("a", "s") for sched in (leader, standby)]
    assert [(r.success, r.skip_reason) for r in again] == [(False, "already_running")] * 2
    full = [sched.trigger("a", "t") for sched in (leader, standby)]  # one slot, s holds it
    assert [(r.success, r.skip_reason) for r in full] == [(False, "at_capacity")] * 2
    assert "at capacity" in (full[1].error or "")
    queued = standby.trigger("a", "t", bypass_concurrency=True)
    assert queued.success and queued.run_id is not None
    jobs.gate.set()
    drive(leader, clock, lambda: statuses(leader, "t").get(queued.run_id) is RunStatus.SUCCESS)
    assert jobs.run_ids == [first.run_id, queued.run_id]
    assert statuses(leader) == {first.run_id: RunStatus.SUCCESS}


def test_requests_start_in_order_when_a_run_ends_during_a_poll(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bug (seen under load): a poll found p1 waiting for its schedule, the running p0
    ended before the same poll came to p2, and p2 started first. A later request now waits
    behind an earlier one for the same schedule or slot."""
    leader, standby, jobs, clock = pair
    jobs.gate.clear()
    first = leader.trigger("a", "s", prompt="p0").run_id  # runs at once, held by the gate
    assert jobs.started.wait(5)
    second = standby.trigger("a", "s", prompt="p1").run_id
    third = standby.trigger("a", "s", prompt="p2").run_id
    original = RunRequests._try_start

    def run_ends_after_the_second_waits(self: RunRequests, request: Any, *args: Any) -> bool:
        started = original(self, request, *args)
        if request.run_id == second and not jobs.gate.is_set():
            jobs.gate.set()  # p0 returns and frees its schedule before the poll reaches p2
            assert leader.wait_until_idle(10)
        return started

    monkeypatch.setattr(RunRequests, "_try_start", run_ends_after_the_second_waits)
    drive(leader, clock, lambda: len(jobs.run_ids) >= 3)
    drive(leader, clock, lambda: not leader.store.trigger_requests())
    assert jobs.run_ids == [first, second, third]
    assert jobs.prompts == ["p0", "p1", "p2"]


def test_a_request_waiting_for_its_agent_and_the_fleet_is_not_overtaken_by_another_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``max_total_concurrent=1`` a request for agent a waits for a's slot and the fleet's;
    the run holding both ends during the poll; a later request for agent b must not start
    first (it did while only the agent's wait held back later requests)."""
    clock = FakeClock(T0)
    jobs = Jobs()

    def fleet() -> ThreadedScheduler:
        sched = ThreadedScheduler(
            state_dir=tmp_path, clock=clock, poll_interval=1.0, max_total_concurrent=1
        )
        manual = {"s": Schedule.manual(), "t": Schedule.manual()}
        sched.add_agent(Agent("a", job=jobs, schedules=manual))
        sched.add_agent(Agent("b", job=jobs, schedules={"s": Schedule.manual()}))
        return sched

    leader, standby = fleet(), fleet()
    leader.start()
    standby.start()
    try:
        jobs.gate.clear()
        busy = leader.trigger("a", "s", prompt="busy").run_id  # a's slot and the fleet's
        assert jobs.started.wait(5)
        first = standby.trigger("a", "t", prompt="first").run_id
        standby.trigger("b", "s", prompt="later")
        original = RunRequests._try_start

        def run_ends_after_the_first_waits(self: RunRequests, request: Any, *args: Any) -> bool:
            started = original(self, request, *args)
            if request.run_id == first and not jobs.gate.is_set():
                jobs.gate.set()
                assert leader.wait_until_idle(10)
            return started

        monkeypatch.setattr(RunRequests, "_try_start", run_ends_after_the_first_waits)
        drive(leader, clock, lambda: len(jobs.run_ids) >= 3)
        assert jobs.prompts == ["busy", "first", "later"]
        assert jobs.run_ids[:2] == [busy, first]
    finally:
        jobs.gate.set()
        standby.stop(timeout=10)
        leader.stop(timeout=10)


def test_a_request_waiting_for_its_schedule_does_not_hold_up_another_schedule(
    tmp_path: Path,
) -> None:
    clock = FakeClock(T0)
    jobs = Jobs()
    leader, standby = build(tmp_path, clock, jobs, slots=2), build(tmp_path, clock, jobs, slots=2)
    leader.start()
    standby.start()
    try:
        jobs.gate.clear()
        busy = leader.trigger("a", "s").run_id  # holds schedule s, one of two slots
        assert jobs.started.wait(5)
        waiting = standby.trigger("a", "s").run_id
        other = standby.trigger("a", "t").run_id
        clock.advance("2s")
        leader.run_pending()
        assert wait_until(lambda: len(jobs.run_ids) == 2)
        assert jobs.run_ids == [busy, other]
        assert statuses(standby)[waiting] is RunStatus.QUEUED  # type: ignore[index]
        jobs.gate.set()
        drive(leader, clock, lambda: len(jobs.run_ids) == 3)
        assert jobs.run_ids == [busy, other, waiting]
    finally:
        jobs.gate.set()
        standby.stop(timeout=10)
        leader.stop(timeout=10)


def test_a_request_is_durable_when_trigger_returns(pair: Pair, tmp_path: Path) -> None:
    _, standby, _, _ = pair
    run_id = standby.trigger("a", "s").run_id
    (request,) = YamlStateStore(tmp_path).trigger_requests()  # what another process reads
    assert (request.run_id, request.agent, request.schedule) == (run_id, "a", "s")
    assert request.started_at is None


def test_history_follows_a_request_from_queued_to_running_to_finished(pair: Pair) -> None:
    leader, standby, jobs, clock = pair
    run_id = standby.trigger("a", "s").run_id
    assert run_id is not None
    assert statuses(standby)[run_id] is RunStatus.QUEUED
    assert statuses(leader)[run_id] is RunStatus.QUEUED
    jobs.gate.clear()
    clock.advance("2s")
    leader.run_pending()
    assert jobs.started.wait(5)
    assert statuses(standby)[run_id] is RunStatus.RUNNING
    (running,) = standby.history("a", "s")
    assert running.started_at == clock.now()
    jobs.gate.set()
    assert leader.wait_until_idle(10)
    drive(leader, clock, lambda: not leader.store.trigger_requests())
    assert statuses(standby) == {run_id: RunStatus.SUCCESS}


def test_requests_wait_while_the_agent_is_at_capacity_then_run(pair: Pair) -> None:
    leader, standby, jobs, clock = pair
    jobs.gate.clear()
    busy = leader.trigger("a", "t")  # the leader runs it at once: its one slot is taken
    assert busy.success and busy.run_id is not None
    assert jobs.started.wait(5)
    waiting = standby.trigger("a", "s").run_id
    clock.advance("2s")
    leader.run_pending()
    assert jobs.run_ids == [busy.run_id]
    assert statuses(standby)[waiting] is RunStatus.QUEUED  # type: ignore[index]
    jobs.gate.set()
    drive(leader, clock, lambda: len(jobs.run_ids) == 2)
    assert jobs.run_ids == [busy.run_id, waiting]


def test_a_request_for_an_agent_without_a_job_is_skipped_and_the_others_run(
    tmp_path: Path,
) -> None:
    """A first fix of a refused ``trigger(agent)`` raised from the ad hoc entry itself, which
    the leader's request handling reached too: every timer pass failed on such a request and
    the requests queued behind it never ran."""
    clock = FakeClock(T0)
    jobs = Jobs()
    leader = build(tmp_path, clock, jobs)
    leader.add_agent(Agent("idle"))
    other = YamlStateStore(tmp_path)
    leader.start()
    try:
        idle = other.request_trigger("idle", "manual")
        wanted = other.request_trigger("a", "s")
        drive(leader, clock, lambda: not leader.store.trigger_requests())
        assert jobs.run_ids == [wanted]
        (record,) = leader.history("idle", "manual")
        assert (record.run_id, record.status) == (idle, RunStatus.SKIPPED)
        assert (record.error or "").startswith("no job:")
    finally:
        other.close()
        leader.stop(timeout=10)


def test_a_request_for_a_removed_schedule_is_recorded_as_skipped(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    jobs = Jobs()
    leader = build(tmp_path, clock, jobs)
    leader.add_schedule("a", "later", Schedule.interval("1h", start_at="2099-01-01"), persist=True)
    standby = build(tmp_path, clock, jobs)
    leader.start()
    standby.start()
    try:
        run_id = standby.trigger("a", "later").run_id
        leader.remove_schedule("a", "later")
        drive(leader, clock, lambda: not leader.store.trigger_requests())
        (record,) = standby.history("a", "later")
        assert (record.run_id, record.status) == (run_id, RunStatus.SKIPPED)
        assert record.error is not None and record.error.startswith("removed:")
        assert jobs.run_ids == []
        assert leader.store.trigger_requests() == []
    finally:
        standby.stop(timeout=10)
        leader.stop(timeout=10)


def _started_after_a_dead_scheduler(
    tmp_path: Path, jobs: Jobs
) -> tuple[str, FakeClock, ThreadedScheduler]:
    """A request a dead scheduler marked started, its run never recorded, and the leader
    started three hours later: the request's run id, the leader's clock, the leader."""
    store = YamlStateStore(tmp_path)
    run_id = store.request_trigger("a", "s", prompt="once")
    store.mark_trigger_started(run_id, T0)
    store.close()
    clock = FakeClock(T0 + timedelta(hours=3))
    leader = build(tmp_path, clock, jobs)
    leader.start()
    return run_id, clock, leader


def test_a_request_started_by_a_scheduler_that_died_is_recorded_not_rerun(
    tmp_path: Path,
) -> None:
    """A request marked started whose run never reached the history: the job may have run,
    so the next active scheduler records it as interrupted and never runs it again."""
    jobs = Jobs()
    run_id, clock, leader = _started_after_a_dead_scheduler(tmp_path, jobs)
    try:
        drive(leader, clock, lambda: not leader.store.trigger_requests())
        assert jobs.run_ids == []
        (record,) = leader.history("a", "s")
        assert (record.run_id, record.status, record.started_at, record.duration) == (
            run_id,
            RunStatus.INTERRUPTED,
            T0,
            None,  # not three hours: when the run stopped is not known
        )
    finally:
        leader.stop(timeout=10)


@pytest.mark.parametrize("lost", [True, False])
def test_a_request_of_a_dead_scheduler_is_not_said_recorded_when_its_write_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, lost: bool
) -> None:
    """A leader whose lead had just been taken over logged the request "recorded as
    interrupted and not run again": its write was refused, and the new leader ran it. A commit
    failing for another reason holds the record for the next one, which is said at once."""
    run_id, clock, leader = _started_after_a_dead_scheduler(tmp_path, Jobs())
    refused = (
        LeadershipLostError("the lease of this scheduler was taken over")
        if lost
        else StateError("No space left on device")
    )
    try:
        flush = leader.store.flush
        leader.store.flush = lambda: (_ for _ in ()).throw(refused)  # type: ignore[method-assign]
        with caplog.at_level(logging.WARNING, logger="herdsched"):
            leader.run_pending()
            said = "recorded as interrupted and not run again" in caplog.text
            assert said is not lost
            assert [r.run_id for r in leader.store.trigger_requests()] == [run_id]  # kept
            leader.store.flush = flush  # type: ignore[method-assign]
            drive(leader, clock, lambda: not leader.store.trigger_requests())
        assert not leader.store.trigger_requests()
        assert [(r.run_id, r.status) for r in leader.history("a", "s")] == [
            (run_id, RunStatus.INTERRUPTED)
        ]
    finally:
        leader.stop(timeout=10)


def test_a_request_whose_record_waits_for_a_commit_stays_until_the_record_is_durable(
    tmp_path: Path,
) -> None:
    """A commit failed (a full disk) with the interrupted record of a dead scheduler's request
    held back: the next poll found the record in the history (pending records included) and
    removed the request, though the record was written nowhere. The process dying then, no
    trace of the run was left."""
    run_id, clock, leader = _started_after_a_dead_scheduler(tmp_path, Jobs())
    try:
        leader.store.flush = lambda: (_ for _ in ()).throw(  # type: ignore[method-assign]
            StateError("No space left on device")
        )
        for _ in range(2):
            poll(leader, clock)
        fresh = YamlStateStore(tmp_path)  # what a process dying now leaves
        assert [r.run_id for r in fresh.trigger_requests()] == [run_id]
        fresh.close()
    finally:
        del leader.store.flush  # the store's own again
        leader.stop(timeout=10)


def test_requests_left_waiting_by_a_stopped_leader_run_under_the_next_one(
    pair: Pair, tmp_path: Path
) -> None:
    leader, standby, jobs, clock = pair
    jobs.gate.clear()
    first = standby.trigger("a", "s").run_id
    second = standby.trigger("a", "s").run_id
    clock.advance("2s")
    leader.run_pending()
    assert jobs.started.wait(5)
    jobs.gate.set()
    leader.stop(timeout=10)  # `second` still waits in the store
    clock.advance("6s")  # a standby tries to take over every 5 s
    standby.run_pending()
    assert standby.status == "running"
    drive(standby, clock, lambda: not standby.store.trigger_requests())
    assert jobs.run_ids == [first, second]
    assert statuses(standby) == {first: RunStatus.SUCCESS, second: RunStatus.SUCCESS}


def test_an_unreadable_request_is_logged_at_error_and_set_aside(
    pair: Pair, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    leader, standby, jobs, clock = pair
    good = standby.trigger("a", "s").run_id
    bad = tmp_path / "requests" / f"{1:020d}-{new_run_id()}.json"
    bad.write_text('{"agent": "a"')
    caplog.set_level(logging.ERROR, logger="herdsched")
    drive(leader, clock, lambda: not leader.store.trigger_requests())
    assert jobs.run_ids == [good]
    assert any(str(bad) in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    assert not bad.exists() and bad.with_name(bad.name + ".corrupt").exists()


def test_trigger_in_the_leader_runs_at_once_under_the_id_it_returns(pair: Pair) -> None:
    leader, _, jobs, _ = pair
    result = leader.trigger("a", "s")
    assert result.success and result.run_id is not None
    assert leader.wait_until_idle(10)
    assert jobs.run_ids == [result.run_id]
    assert statuses(leader) == {result.run_id: RunStatus.SUCCESS}


# -- REST ---------------------------------------------------------------------------------------
def call(sched: ThreadedScheduler, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    return RestApi(sched).handle(method, path, **kwargs)


def test_a_run_posted_to_a_standby_is_followed_by_its_id_on_every_worker(pair: Pair) -> None:
    leader, standby, jobs, clock = pair
    status, body = call(standby, "POST", "/api/schedule/a/s/run", body={"prompt": "rest"})
    assert status == 202 and body["queued"] is True
    run_id = body["run_id"]
    for sched in (standby, leader):
        status, run = call(sched, "GET", f"/api/schedule/a/s/runs/{run_id}")
        assert status == 200
        assert (run["run_id"], run["status"], run["schedule"]) == (run_id, "queued", "s")
    drive(leader, clock, lambda: not leader.store.trigger_requests())
    status, run = call(standby, "GET", f"/api/schedule/a/s/runs/{run_id}")
    assert (status, run["status"]) == (200, "success")
    assert jobs.run_ids == [run_id] and jobs.prompts == ["rest"]


def test_the_runs_route_answers_404_for_an_unknown_run_or_schedule(pair: Pair) -> None:
    _, standby, _, _ = pair
    run_id = standby.trigger("a", "s").run_id
    status, body = call(standby, "GET", f"/api/schedule/a/t/runs/{run_id}")  # another schedule
    assert status == 404 and run_id in body["error"]
    assert call(standby, "GET", "/api/schedule/a/nope/runs/x")[0] == 404
    assert call(standby, "POST", f"/api/schedule/a/s/runs/{run_id}")[0] == 405
    status, body = call(standby, "GET", f"/api/schedule/a/s/runs/{run_id}", query={"x": "1"})
    assert status == 400 and body["details"][0]["field"] == "x"


def test_a_skipped_run_of_a_removed_schedule_is_still_found_by_an_admin(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    jobs = Jobs()
    leader = build(tmp_path, clock, jobs)
    leader.add_schedule("a", "later", Schedule.interval("1h", start_at="2099-01-01"), persist=True)
    standby = build(tmp_path, clock, jobs)
    leader.start()
    standby.start()
    try:
        status, body = call(standby, "POST", "/api/schedule/a/later/run")
        assert status == 202
        leader.remove_schedule("a", "later")
        drive(leader, clock, lambda: not leader.store.trigger_requests())
        path = f"/api/schedule/a/later/runs/{body['run_id']}"
        status, run = call(standby, "GET", path)
        assert (status, run["status"]) == (200, "skipped")
        assert run["error"].startswith("removed:")
        assert call(standby, "GET", path, owner="someone")[0] == 404
    finally:
        standby.stop(timeout=10)
        leader.stop(timeout=10)


def test_a_request_whose_run_was_cut_short_by_a_crash_has_one_record_under_its_id(
    tmp_path: Path,
) -> None:
    """The state shows the schedule running (the group commit went out) and the request is
    marked started: restart recovery records the interrupted run under the request's id, once
    (it used to add a second record under an id of its own)."""
    store = YamlStateStore(tmp_path)
    run_id = store.request_trigger("a", "s")
    store.mark_trigger_started(run_id, T0)
    store.update_schedule_state("a", "s", status="running", last_run_at=T0)
    store.close()
    clock = FakeClock(T0)
    jobs = Jobs()
    leader = build(tmp_path, clock, jobs)
    leader.start()
    try:
        drive(leader, clock, lambda: not leader.store.trigger_requests())
        assert jobs.run_ids == []
        records = leader.history("a", "s")
        assert [(r.run_id, r.status) for r in records] == [(run_id, RunStatus.INTERRUPTED)]
    finally:
        leader.stop(timeout=10)


def test_an_ad_hoc_request_runs_the_agents_job_under_its_id(pair: Pair) -> None:
    leader, standby, jobs, clock = pair
    run_id = standby.trigger("a").run_id
    assert statuses(standby, "manual") == {run_id: RunStatus.QUEUED}
    drive(leader, clock, lambda: not leader.store.trigger_requests())
    assert jobs.run_ids == [run_id]
    assert statuses(standby, "manual") == {run_id: RunStatus.SUCCESS}


# -- CLI ----------------------------------------------------------------------------------------
def test_the_cli_prints_the_run_id_and_history_follows_it(
    pair: Pair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    leader, _, jobs, clock = pair
    leader.store.flush()  # the group commit that writes the schedules the CLI reads
    assert main(["trigger", "a/s", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("queued a run of a/s as run ")
    run_id = out.split(" as run ")[1].split()[0]
    assert main(["history", "a/s", "--state-dir", str(tmp_path), "--json"]) == 0
    (queued,) = json.loads(capsys.readouterr().out)
    assert (queued["run_id"], queued["status"]) == (run_id, "queued")
    assert main(["history", "--state-dir", str(tmp_path)]) == 0  # the fleet's: queued first
    assert run_id in capsys.readouterr().out
    drive(leader, clock, lambda: not leader.store.trigger_requests())
    assert jobs.run_ids == [run_id]
    assert main(["history", "a/s", "--state-dir", str(tmp_path), "--json"]) == 0
    (done,) = json.loads(capsys.readouterr().out)
    assert (done["run_id"], done["status"]) == (run_id, "success")


class EmptySource:
    """A work source with nothing to do."""

    def get_next_work_item(self, agent: str, schedule: str) -> None:
        return None

    def report_outcome(self, item: object, outcome: object) -> None:
        raise AssertionError("no item was claimed")


def test_a_cli_run_now_that_finds_no_work_is_followed_to_its_skipped_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command printed a run id that never showed in the history: a run that found no
    work wrote no record."""
    clock = FakeClock(T0)
    jobs = Jobs()
    leader = ThreadedScheduler(
        state_dir=tmp_path,
        clock=clock,
        poll_interval=1.0,
        timezone="UTC",
        work_sources={"queue": EmptySource()},
    )
    leader.add_agent(Agent("a", job=jobs, schedules={"s": Schedule.manual(work_source="queue")}))
    leader.start()
    try:
        leader.store.flush()  # the group commit that writes the schedules the CLI reads
        assert main(["trigger", "a/s", "--state-dir", str(tmp_path)]) == 0
        run_id = capsys.readouterr().out.split(" as run ")[1].split()[0]
        drive(leader, clock, lambda: not leader.store.trigger_requests())
        assert jobs.run_ids == []
        assert main(["history", "a/s", "--state-dir", str(tmp_path), "--json"]) == 0
        (done,) = json.loads(capsys.readouterr().out)
        assert (done["run_id"], done["status"], done["error"]) == (
            run_id,
            "skipped",
            "its work source had no work",
        )
    finally:
        leader.stop(timeout=10)


def test_a_request_the_store_could_not_mark_started_keeps_its_turn(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed write of the first request's start must not let the next one go first."""
    leader, standby, jobs, clock = pair
    given = [standby.trigger("a", "s", prompt=f"p{i}").run_id for i in range(3)]
    real = leader.store.mark_trigger_started
    failed: list[str] = []

    def mark_once_failing(run_id: str, at: datetime) -> None:
        if not failed:
            failed.append(run_id)
            raise StateError("disk full for a moment")
        real(run_id, at)

    monkeypatch.setattr(leader.store, "mark_trigger_started", mark_once_failing)
    drive(leader, clock, lambda: len(jobs.run_ids) >= 3)
    assert failed == [given[0]]
    assert jobs.run_ids == given


@pytest.mark.parametrize("prompt", ["", "  \n"])
def test_an_empty_run_now_prompt_is_refused_by_every_face_and_nothing_is_queued(
    pair: Pair, tmp_path: Path, capsys: pytest.CaptureFixture[str], prompt: str
) -> None:
    """It ran with the default prompt ("Execute scheduled task."), neither the schedule's
    nor none."""
    leader, standby, jobs, _ = pair
    for sched in (leader, standby):
        with pytest.raises(ValueError, match="is empty: leave it out"):
            sched.trigger("a", "s", prompt=prompt)
        raw = json.dumps({"prompt": prompt})
        answer = RestApi(sched).handle(
            "POST", "/api/schedule/a/s/run", body=raw, content_type="application/json"
        )
        assert answer.status == 400 and answer.body["details"][0]["field"] == "prompt"
    assert main(["trigger", "a/s", "--prompt", prompt, "--state-dir", str(tmp_path)]) == 2
    assert "is empty: leave it out" in capsys.readouterr().err
    assert YamlStateStore(tmp_path).trigger_requests() == [] and jobs.prompts == []
