"""Session reuse (persist_session, SessionNotFound) and Deferred, through a real scheduler."""

from __future__ import annotations

from datetime import timedelta

import pytest
from agent_helpers import START, Script, running, step

from herdsched import (
    Agent,
    Deferred,
    Event,
    IntervalParseError,
    JobDeferred,
    JobResult,
    RunStatus,
    Schedule,
    SessionNotFound,
    Status,
)


def chat_agent(job: Script, **options: object) -> Agent:
    options.setdefault("persist_session", True)
    schedule = Schedule.interval("5m", **options)  # type: ignore[arg-type]
    return Agent("chat", job=job, schedules={"loop": schedule})


def test_the_stored_session_id_is_handed_to_the_next_run() -> None:
    job = Script(JobResult(output="hi", session_id="s-1"), JobResult(output="again"))
    with running() as (sched, clock):
        sched.add_agent(chat_agent(job))
        step(sched)
        assert sched.store.get_schedule_state("chat", "loop").session_id == "s-1"
        step(sched, clock, "5m")
        assert [c.session_id for c in job.calls] == [None, "s-1"]
        # a run that returns no session id keeps the stored one
        assert sched.store.get_schedule_state("chat", "loop").session_id == "s-1"
        newest, oldest = sched.history("chat")
        assert (oldest.session_id, newest.session_id) == ("s-1", "s-1")


def test_a_new_session_id_replaces_the_stored_one() -> None:
    job = Script(JobResult(session_id="s-1"), JobResult(session_id="s-2"), "x")
    with running() as (sched, clock):
        sched.add_agent(chat_agent(job))
        step(sched)
        step(sched, clock, "5m")
        step(sched, clock, "5m")
        assert [c.session_id for c in job.calls] == [None, "s-1", "s-2"]


def test_without_persist_session_no_session_is_passed_or_stored() -> None:
    job = Script(JobResult(session_id="s-1"), "x")
    with running() as (sched, clock):
        sched.add_agent(chat_agent(job, persist_session=False))
        step(sched)
        step(sched, clock, "5m")
        assert [c.session_id for c in job.calls] == [None, None]
        assert sched.store.get_schedule_state("chat", "loop").session_id is None
        assert [r.session_id for r in sched.history("chat")] == [None, None]


def test_session_not_found_clears_the_id_and_retries_once_in_the_same_run() -> None:
    def resume(info: object) -> JobResult:
        if info.session_id is not None:  # type: ignore[attr-defined]
            raise SessionNotFound(info.session_id)  # type: ignore[attr-defined]
        return JobResult(output="fresh start", session_id="s-2")

    job = Script(JobResult(session_id="s-1"), default=resume)
    with running() as (sched, clock):
        sched.add_agent(chat_agent(job))
        step(sched)
        step(sched, clock, "5m")
        assert [c.session_id for c in job.calls] == [None, "s-1", None]
        assert len({c.run_id for c in job.calls[1:]}) == 1  # both calls belong to one run
        newest, _ = sched.history("chat")
        assert newest.status is RunStatus.SUCCESS
        assert newest.session_id == "s-2"
        state = sched.store.get_schedule_state("chat", "loop")
        assert state.session_id == "s-2"
        assert state.consecutive_failures == 0


def test_retry_that_returns_no_session_leaves_none_stored() -> None:
    job = Script(JobResult(session_id="s-1"), SessionNotFound("gone"), "ok without session")
    with running() as (sched, clock):
        sched.add_agent(chat_agent(job))
        step(sched)
        step(sched, clock, "5m")
        assert sched.store.get_schedule_state("chat", "loop").session_id is None
        assert sched.history("chat")[0].status is RunStatus.SUCCESS


def test_a_second_session_not_found_fails_the_run() -> None:
    job = Script(JobResult(session_id="s-1"), default=SessionNotFound("still unknown"))
    with running() as (sched, clock):
        sched.add_agent(chat_agent(job))
        step(sched)
        step(sched, clock, "5m")
        assert [c.session_id for c in job.calls] == [None, "s-1", None]  # exactly one retry
        newest, _ = sched.history("chat")
        assert newest.status is RunStatus.FAILED
        assert newest.error == "SessionNotFound: still unknown"
        state = sched.store.get_schedule_state("chat", "loop")
        assert state.session_id is None  # the unknown id is not offered again
        assert state.consecutive_failures == 1


def test_session_not_found_without_a_stored_session_fails_at_once() -> None:
    job = Script(SessionNotFound("no such session"))
    with running() as (sched, _clock):
        sched.add_agent(chat_agent(job))
        step(sched)
        assert len(job.calls) == 1
        assert sched.history("chat")[0].status is RunStatus.FAILED


def test_a_failed_run_keeps_the_stored_session() -> None:
    job = Script(JobResult(session_id="s-1"), RuntimeError("model overloaded"), "x")
    with running() as (sched, clock):
        sched.add_agent(chat_agent(job))
        step(sched)
        step(sched, clock, "5m")
        assert sched.store.get_schedule_state("chat", "loop").session_id == "s-1"
        step(sched, clock, "5m")
        assert job.calls[-1].session_id == "s-1"


# ------------------------------------------------------------------------------- Deferred


def test_a_deferral_past_a_century_fails_the_run_with_a_clear_error() -> None:
    with pytest.raises(IntervalParseError, match=r"Deferred delay .* too long"):
        Deferred(timedelta(days=3_000_000))

    def too_far(info: object) -> None:
        raise Deferred(timedelta(days=3_000_000))  # raises the error above instead

    with running() as (sched, _clock):
        sched.add_agent(chat_agent(Script(too_far)))
        step(sched)
        [record] = sched.history("chat")
        assert record.status is RunStatus.FAILED
        assert "Deferred delay" in (record.error or "")
        [status] = sched.get_status().schedules
        assert status.next_run_at is not None  # planned as after any failure


def test_deferred_reschedules_after_the_delay_and_is_not_a_failure() -> None:
    job = Script(Deferred("2m", "session busy"), "done")
    with running() as (sched, clock):
        sched.add_agent(chat_agent(job))
        step(sched)
        [record] = sched.history("chat")
        assert record.status is RunStatus.DEFERRED
        assert record.error == "session busy"
        [status] = sched.get_status().schedules
        assert status.next_run_at == START + timedelta(minutes=2)
        assert status.consecutive_failures == 0
        assert status.status is Status.IDLE
        assert status.last_result is RunStatus.DEFERRED

        step(sched, clock, "119s")
        assert len(job.calls) == 1
        step(sched, clock, "1s")
        assert len(job.calls) == 2
        assert sched.history("chat")[0].status is RunStatus.SUCCESS


def test_a_deferred_run_ends_its_events_with_job_deferred() -> None:
    """A listener that pairs each JobStarted with an ending event finds one for a deferral."""
    job = Script(Deferred("2m", "session busy"))
    events: list[Event] = []
    with running() as (sched, _clock):
        sched.add_listener(events.append)
        sched.add_agent(chat_agent(job))
        step(sched)
    kinds = [type(e).__name__ for e in events if hasattr(e, "schedule")]
    assert kinds == ["JobSubmitted", "JobStarted", "JobDeferred"]
    [deferred] = [e for e in events if isinstance(e, JobDeferred)]
    assert (deferred.agent, deferred.schedule) == ("chat", "loop")
    assert deferred.record.status is RunStatus.DEFERRED
    assert deferred.record.error == "session busy"
    assert deferred.record == sched.history("chat")[0]


def test_deferred_leaves_the_failure_count_alone() -> None:
    job = Script(RuntimeError("boom"), Deferred(60), "ok")
    with running() as (sched, clock):
        sched.add_agent(chat_agent(job))
        step(sched)
        step(sched, clock, "5m")
        state = sched.store.get_schedule_state("chat", "loop")
        assert state.last_result is RunStatus.DEFERRED
        assert state.consecutive_failures == 1
        assert state.next_run_at == START + timedelta(minutes=6)


def test_a_deferred_once_schedule_still_runs_later() -> None:
    job = Script(Deferred("10m", "session busy"), "migrated")
    with running() as (sched, clock):
        at = START + timedelta(hours=1)
        sched.add_agent(Agent("ops", job=job, schedules={"migrate": Schedule.once(at)}))
        step(sched, clock, "1h")
        [status] = sched.get_status().schedules
        assert status.status is Status.IDLE
        assert status.next_run_at == at + timedelta(minutes=10)
        step(sched, clock, "10m")
        assert len(job.calls) == 2
        [status] = sched.get_status().schedules
        assert status.status is Status.COMPLETED
        assert status.next_run_at is None


def test_deferred_through_trigger_wait_reports_not_successful() -> None:
    job = Script(Deferred("1m", "session busy"))
    with running() as (sched, _clock):
        # not due yet, so the timer cannot start the run first and make the trigger a skip
        sched.add_agent(chat_agent(job, start_at=START + timedelta(hours=1)))
        result = sched.trigger("chat", "loop", wait=True)
        assert not result.success
        assert result.error == "session busy"
        assert sched.store.get_schedule_state("chat", "loop").consecutive_failures == 0
