"""The REST API served by a scheduler that is not the active one (another web worker).

Two schedulers share one state directory, as two gunicorn workers do: ``leader`` holds the
leader lock, ``standby`` serves requests. Writes through the standby go through the state store
and the leader acts on them; "run now" is executed by the leader, never by the request thread.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.api import RestApi
from herdsched.testing import FakeClock, as_separate_processes
from herdsched.timestamps import parse_timestamp

pytestmark = pytest.mark.slow  # real threads and real time (poll interval 0.1 s)

Pair = tuple[ThreadedScheduler, ThreadedScheduler, "Recorder"]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, str]] = []  # schedule, prompt, thread name
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def job(self, info: TriggerInfo) -> str:
        self.calls.append((info.schedule, info.prompt, threading.current_thread().name))
        self.started.set()
        self.gate.wait(10)
        return "ok"


def build(state_dir: Path, recorder: Recorder, commit_delay: float = 0.05) -> ThreadedScheduler:
    sched = ThreadedScheduler(
        state_dir=state_dir, max_sleep=0.3, poll_interval=0.1, commit_delay=commit_delay
    )
    far = "2099-01-01T00:00:00Z"
    sched.add_agent(
        Agent(
            "triage",
            job=recorder.job,
            schedules={
                "check": Schedule.interval("1h", prompt="Check", start_at=far),
                "other": Schedule.interval("1h", prompt="Other", start_at=far),
            },
        )
    )
    return sched


def wait_for(predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    recorder = Recorder()
    leader = build(tmp_path, recorder)
    standby = build(tmp_path, recorder)
    with as_separate_processes():  # as two gunicorn workers
        leader.start()
        standby.start()
    try:
        assert leader.status == "running"
        assert standby.status == "standby"
        yield leader, standby, recorder
    finally:
        recorder.gate.set()
        standby.stop(timeout=10)
        leader.stop(timeout=10)


def call(
    sched: ThreadedScheduler, method: str, path: str, body: Any = None
) -> tuple[int, dict[str, Any]]:
    raw = json.dumps(body).encode() if body is not None else b""
    return RestApi(sched).handle(method, path, body=raw, content_type="application/json")


def field_when(
    sched: ThreadedScheduler, path: str, field: str, expected: Any = None
) -> dict[str, Any]:
    """The schedule JSON once ``field`` is set (or equals ``expected``)."""

    def ready() -> dict[str, Any] | None:
        status, body = call(sched, "GET", path)
        if status != 200:
            return None
        value = body.get(field)
        return body if (value == expected if expected is not None else value) else None

    result: dict[str, Any] = wait_for(ready)
    return result


def test_standby_reports_that_it_is_not_the_leader(pair: Pair) -> None:
    _, standby, _ = pair
    status, body = call(standby, "GET", "/api/status")
    assert status == 200
    assert body["status"] == "standby"
    assert body["is_leader"] is False
    assert body["leader"]["pid"] == os.getpid()


def test_run_now_through_a_standby_is_queued_and_run_by_the_leader(pair: Pair) -> None:
    leader, standby, recorder = pair
    status, body = call(standby, "POST", "/api/schedule/triage/check/run", {"prompt": "via"})
    assert status == 202, body
    assert body["queued"] is True
    wait_for(lambda: recorder.calls)
    leader.wait_until_idle(5)
    ((schedule, prompt, thread),) = recorder.calls
    assert (schedule, prompt) == ("check", "via")
    assert thread.startswith("herdsched-triage")  # a worker of the leader's pool

    # the history shows the run as queued, then running, then finished, under the id given
    def finished() -> list[dict[str, Any]] | None:
        runs = call(standby, "GET", "/api/schedule/triage/check/history")[1]["runs"]
        return runs if runs and runs[0]["status"] not in ("queued", "running") else None

    runs = wait_for(finished)
    assert runs[0]["status"] == "success"
    assert runs[0]["run_id"] == body["run_id"]


def test_a_run_the_leader_took_directly_is_traceable_from_every_worker(pair: Pair) -> None:
    """A run-now the leader answered itself (202, ``queued: false``) has no request in the
    store: ``GET .../runs/<run_id>`` answered 404 on every worker until the run's record was
    written. It is ``running`` from its schedule's state now, then its record."""
    leader, standby, recorder = pair
    recorder.gate.clear()
    status, body = call(leader, "POST", "/api/schedule/triage/check/run", {"prompt": "direct"})
    assert status == 202, body
    assert body["queued"] is False
    url = f"/api/schedule/triage/check/runs/{body['run_id']}"
    assert recorder.started.wait(5)

    def run_on(sched: ThreadedScheduler, expected: str) -> dict[str, Any] | None:
        status, run = call(sched, "GET", url)
        return run if status == 200 and run["status"] == expected else None

    for sched in (leader, standby):  # the standby once the leader's group commit is out
        run = wait_for(lambda sched=sched: run_on(sched, "running"))
        assert (run["run_id"], run["trigger_type"]) == (body["run_id"], "manual")
        assert run["started_at"] is not None
    recorder.gate.set()
    for sched in (leader, standby):
        wait_for(lambda sched=sched: run_on(sched, "success"))


def test_a_run_the_leader_took_directly_is_found_on_every_worker_before_its_commit(
    tmp_path: Path,
) -> None:
    """The run's start reaches other processes with the leader's group commit (here a minute
    away): until then ``GET .../runs/<run_id>`` on another worker answered 404 for the id the
    run-now had just returned. Its claim, durable before the job started, names it now."""
    recorder = Recorder()
    recorder.gate.clear()
    leader, standby = build(tmp_path, recorder, commit_delay=60), build(tmp_path, recorder)
    with as_separate_processes():
        leader.start()
        standby.start()
    try:
        status, body = call(leader, "POST", "/api/schedule/triage/check/run", {"prompt": "now"})
        assert status == 202 and body["queued"] is False, body
        status, run = call(standby, "GET", f"/api/schedule/triage/check/runs/{body['run_id']}")
        assert status == 200, run
        assert (run["status"], run["trigger_type"]) == ("running", "manual")
    finally:
        recorder.gate.set()
        standby.stop(timeout=10)
        leader.stop(timeout=10)


def test_run_through_a_standby_while_running_is_409(pair: Pair) -> None:
    leader, standby, recorder = pair
    recorder.gate.clear()
    assert leader.trigger("triage", "check").success
    assert recorder.started.wait(5)
    leader.store.flush()  # the run's claim is on disk for the other process

    def refused() -> dict[str, Any] | None:
        status, body = call(standby, "POST", "/api/schedule/triage/check/run", {})
        return body if status == 409 else None

    body = wait_for(refused)
    assert body["details"][0]["message"] == "already_running"
    # the schedule as the standby shows it says so too (it said "not_due" beside "running")
    shown = field_when(standby, "/api/schedule/triage/check", "status", "running")
    assert shown["skip_reason"] == "already_running"


def test_run_through_a_standby_when_the_agent_is_at_capacity_is_409(pair: Pair) -> None:
    leader, standby, recorder = pair
    recorder.gate.clear()
    assert leader.trigger("triage", "check").success  # max_concurrent is 1
    assert recorder.started.wait(5)
    leader.store.flush()

    def refused() -> dict[str, Any] | None:
        status, body = call(standby, "POST", "/api/schedule/triage/other/run", {})
        return body if status == 409 else None

    body = wait_for(refused)
    assert body["details"][0]["message"] == "at_capacity"


def test_pause_through_a_standby_stops_the_leader_firing(pair: Pair) -> None:
    leader, standby, _ = pair
    status, body = call(standby, "PATCH", "/api/schedule/triage/check", {"enabled": False})
    assert status == 200
    assert body["status"] == "paused"
    field_when(leader, "/api/schedule/triage/check", "status", "paused")
    status, body = call(standby, "PATCH", "/api/schedule/triage/check", {"enabled": True})
    assert body["status"] == "idle"
    field_when(leader, "/api/schedule/triage/check", "status", "idle")


def test_pause_lands_while_the_leader_has_unflushed_transitions(tmp_path: Path) -> None:
    """The leader's group commit may merge the other process's write before its next poll;
    the poll must still see the change."""
    recorder = Recorder()
    today = datetime.now(timezone.utc).replace(hour=8, minute=0, second=0, microsecond=0)
    clock = FakeClock(today)
    # its lease is stamped on the fake clock and read by the standby on the real one: the
    # longest ttl (a day) outlasts the difference and keeps the standby from taking it over
    leader = ThreadedScheduler(state_dir=tmp_path, clock=clock, poll_interval=1.0, lease_ttl=86400)
    leader.add_agent(
        Agent("triage", job=recorder.job, schedules={"check": Schedule.cron("0 9 * * *")})
    )
    standby = build(tmp_path, recorder)
    with as_separate_processes():
        leader.start()
        standby.start()
    try:
        leader.store.record_transition("triage", "check", last_error=None)  # pending
        status, _ = call(standby, "PATCH", "/api/schedule/triage/check", {"enabled": False})
        assert status == 200
        leader.store.flush()  # the timer's group commit, before its next poll
        clock.advance("2s")
        leader.run_pending()  # polls other processes
        assert call(leader, "GET", "/api/schedule/triage/check")[1]["status"] == "paused"
    finally:
        standby.stop(timeout=10)
        leader.stop(timeout=10)


def test_schedule_created_through_a_standby_is_planned_and_run_by_the_leader(
    pair: Pair,
) -> None:
    leader, standby, recorder = pair
    status, body = call(
        standby, "PUT", "/api/schedule/triage/soon", {"interval": "1h", "prompt": "new"}
    )
    assert status == 201, body
    assert body["next_run_at"] is not None  # previewed by the standby
    wait_for(lambda: recorder.calls)  # an interval with no history is due at once
    assert recorder.calls[0][:2] == ("soon", "new")
    leader.wait_until_idle(5)
    body = field_when(standby, "/api/schedule/triage/soon", "last_result")
    assert body["last_result"] == "success"


def test_a_cadence_changed_through_a_standby_is_answered_with_its_new_next_run(
    pair: Pair,
) -> None:
    """A standby answered a PATCH or PUT of a cadence with the next run the old cadence gave
    (``"type": "once", "at": 2030-06-01`` beside the old interval's next run in one body):
    the stored plan is the active scheduler's, which had not taken the change in yet."""
    leader, standby, recorder = pair
    status, _ = call(leader, "PUT", "/api/schedule/triage/every", {"interval": "3h"})
    assert status == 201
    wait_for(lambda: [c for c in recorder.calls if c[0] == "every"])  # due at once: it runs
    leader.wait_until_idle(5)
    ran = field_when(standby, "/api/schedule/triage/every", "last_result")
    finished = parse_timestamp(ran["last_run_at"])
    planned = field_when(standby, "/api/schedule/triage/every", "next_run_at")
    assert parse_timestamp(planned["next_run_at"]) >= finished + timedelta(hours=3)
    status, body = call(standby, "PATCH", "/api/schedule/triage/every", {"interval": "5h"})
    assert status == 200, body
    answered = body["next_run_at"]
    assert parse_timestamp(answered) >= finished + timedelta(hours=5)
    field_when(leader, "/api/schedule/triage/every", "next_run_at", answered)  # as it planned
    status, body = call(standby, "PUT", "/api/schedule/triage/every", {"at": "2030-06-01T12:00Z"})
    assert status == 200, body
    assert (body["type"], body["next_run_at"]) == ("once", "2030-06-01T12:00:00.000Z")
    field_when(leader, "/api/schedule/triage/every", "next_run_at", body["next_run_at"])
    # a once schedule that ran is completed: given a new time, the leader opens it again
    soon = (datetime.now(timezone.utc) + timedelta(seconds=1)).isoformat()
    status, body = call(leader, "PUT", "/api/schedule/triage/every", {"at": soon})
    assert status == 200, body
    field_when(standby, "/api/schedule/triage/every", "status", "completed")
    status, body = call(standby, "PATCH", "/api/schedule/triage/every", {"at": "2031-01-01T09:00Z"})
    assert status == 200, body
    assert (body["status"], body["next_run_at"]) == ("idle", "2031-01-01T09:00:00.000Z")
    field_when(leader, "/api/schedule/triage/every", "next_run_at", body["next_run_at"])


@pytest.mark.parametrize("through", ["standby", "leader"])
def test_a_completed_once_given_a_new_time_while_a_run_now_of_it_goes_on_runs_at_it(
    pair: Pair, through: str
) -> None:
    """Given a new time through a standby while a run-now of it ran, the completed once stayed
    completed once that run ended: the leader reopened it only when no run went on (a change
    made through the leader itself did), so the new time never fired; the standby's answer had
    said it was open."""
    leader, standby, recorder = pair
    soon = (datetime.now(timezone.utc) + timedelta(seconds=1)).isoformat()
    assert call(leader, "PUT", "/api/schedule/triage/o", {"at": soon})[0] == 201
    field_when(standby, "/api/schedule/triage/o", "status", "completed")
    recorder.gate.clear()
    recorder.started.clear()
    assert call(leader, "POST", "/api/schedule/triage/o/run")[0] == 202
    assert recorder.started.wait(5)
    changer = standby if through == "standby" else leader
    status, body = call(changer, "PATCH", "/api/schedule/triage/o", {"at": "2031-01-01T09:00Z"})
    assert status == 200, body
    field_when(leader, "/api/schedule/triage/o", "at", "2031-01-01T09:00:00.000Z")
    for sched in (leader, standby):  # open again, and its run-now still goes on
        field_when(sched, "/api/schedule/triage/o", "status", "running")
    recorder.gate.set()
    assert leader.wait_until_idle(5)
    for sched in (leader, standby):  # the run's end written: open, planned for the new time
        body = field_when(sched, "/api/schedule/triage/o", "status", "idle")
        assert body["next_run_at"] == "2031-01-01T09:00:00.000Z"


def test_a_new_time_taken_in_while_a_run_nows_end_is_written_is_planned(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change reached the leader after the run-now's end was written (completed, nothing
    planned) and before the run was settled: the once was opened again but never planned, and
    its new time never fired."""
    from herdsched.engine import dispatch

    leader, standby, recorder = pair
    soon = (datetime.now(timezone.utc) + timedelta(seconds=1)).isoformat()
    assert call(leader, "PUT", "/api/schedule/triage/o", {"at": soon})[0] == 201
    field_when(standby, "/api/schedule/triage/o", "status", "completed")
    later = (datetime.now(timezone.utc) + timedelta(seconds=2)).replace(microsecond=0)
    settled = dispatch.Dispatcher._settled

    def in_the_window(self: Any, run: Any) -> None:
        if run.schedule_name == "o" and run.trigger_type == "manual":
            assert (
                call(standby, "PATCH", "/api/schedule/triage/o", {"at": later.isoformat()})[0]
                == 200
            )
            field_when(leader, "/api/schedule/triage/o", "at")  # the leader took it in
            leader.refresh()
        settled(self, run)

    monkeypatch.setattr(dispatch.Dispatcher, "_settled", in_the_window)
    recorder.calls.clear()
    assert call(leader, "POST", "/api/schedule/triage/o/run")[0] == 202
    wait_for(lambda: len([c for c in recorder.calls if c[0] == "o"]) == 2, timeout=10)


def test_schedule_created_through_the_leader_is_served_by_a_standby(pair: Pair) -> None:
    leader, standby, _ = pair
    status, _ = call(leader, "PUT", "/api/schedule/triage/later", {"cron": "0 9 * * *"})
    assert status == 201
    body = field_when(standby, "/api/schedule/triage/later", "next_run_at")
    assert body["cron"] == "0 9 * * *"
    status, _ = call(leader, "DELETE", "/api/schedule/triage/later")
    assert status == 200
    wait_for(lambda: call(standby, "GET", "/api/schedule/triage/later")[0] == 404)


def test_a_definition_changed_through_one_worker_is_told_by_the_leader_alone(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """Every other worker of every host logged each REST write again at INFO ("The definition
    of ... changed in another process": five lines per write on two hosts of three workers);
    the leader, which plans it, tells it, and a standby's view follows at DEBUG."""
    leader, standby, _ = pair
    assert call(standby, "PUT", "/api/schedule/triage/later", {"cron": "0 9 * * *"})[0] == 201
    caplog.clear()
    with caplog.at_level(logging.DEBUG, "herdsched"):
        assert call(standby, "PATCH", "/api/schedule/triage/later", {"cron": "0 8 * * *"})[0] == 200
        other = build(Path(leader.state_dir or ""), Recorder())
        with as_separate_processes():
            other.start()  # a second standby, whose view was taken before the change below
        try:
            assert call(leader, "PATCH", "/api/schedule/triage/later", {"prompt": "x"})[0] == 200
            field_when(other, "/api/schedule/triage/later", "prompt", "x")
        finally:
            other.stop(timeout=10)
        leader.refresh()
    told = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if "The definition of triage/later changed in another process" in r.getMessage()
    ]
    assert told and {level for level, _ in told} == {logging.DEBUG, logging.INFO}, told
    assert [level for level, _ in told].count(logging.INFO) == 1, told


def test_a_stopped_web_process_queues_runs_for_the_scheduler_process(tmp_path: Path) -> None:
    recorder = Recorder()
    runner = build(tmp_path, recorder)  # the scheduler's own process (manage.py herdsched)
    web = build(tmp_path, recorder)  # a web process that never starts its scheduler
    runner.start()
    try:
        status, body = call(web, "POST", "/api/schedule/triage/check/run", {"prompt": "web"})
        assert status == 202, body
        assert body["queued"] is True
        wait_for(lambda: recorder.calls)
        assert recorder.calls[0][:2] == ("check", "web")
        runner.wait_until_idle(5)
        runner.store.flush()
        body = field_when(web, "/api/schedule/triage/check", "last_result")
        assert body["last_result"] == "success"
        assert call(web, "GET", "/api/status")[1]["status"] == "stopped"
    finally:
        runner.stop(timeout=10)


def test_a_request_answers_in_time_while_the_standbys_try_to_lead_waits_for_the_store(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bug (a partition probe): a standby tries to take the lease holding the engine's
    lock, and on a host cut off from its database that try waited up to 10 s to connect;
    every request of the worker waited for the lock without bound, after its own store calls
    had given up at the request's deadline, so gunicorn killed the worker. The request now
    waits for the lock no longer than its deadline and answers 503."""
    _, standby, _ = pair
    trying, release = threading.Event(), threading.Event()

    def unanswered(holder: str, ttl: float) -> None:
        trying.set()
        release.wait(30)

    monkeypatch.setattr(standby.store, "acquire_lease", unanswered)
    answers: list[tuple[int, dict[str, Any]]] = []
    api = RestApi(standby, request_timeout=1)
    asking = threading.Thread(
        target=lambda: answers.append(api.handle("GET", "/api/schedule/triage/check"))
    )
    try:
        assert trying.wait(10)  # the standby's timer holds the lock in its try
        asking.start()
        asking.join(10)  # before: until the try returned
        assert not asking.is_alive()
    finally:
        release.set()
        asking.join(10)
    ((status, body),) = answers
    assert status == 503
    assert "within the request's 1 s" in body["error"]
    assert call(standby, "GET", "/api/schedule/triage/check")[0] == 200  # the lock is free again
