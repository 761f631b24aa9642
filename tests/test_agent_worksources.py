"""Work sources and prompts, end to end through a real ThreadedScheduler on a FakeClock."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from types import SimpleNamespace

import pytest
from agent_helpers import START, ListSource, Script, running, step

from herdsched import (
    Agent,
    InvalidScheduleError,
    JobFailed,
    JobSkipped,
    JobSucceeded,
    RunStatus,
    Schedule,
    SchedulerShutdownError,
    SkipReason,
    TriggerType,
    WorkItem,
    WorkOutcome,
    WorkSource,
    build_schedule_prompt,
)
from herdsched.prompts import DEFAULT_PROMPT, TEMPLATE_FIELDS, fill_prompt_template
from herdsched.runner import Run, execute_run
from herdsched.testing import FakeClock
from herdsched.timestamps import format_timestamp

ISSUE = WorkItem(
    id="wi-1",
    title="Fix the login bug",
    description="Users cannot log in with SSO.",
    source="github",
    external_id="acme/app#42",
    priority="high",
    labels=["bug", "auth"],
    url="https://github.com/acme/app/issues/42",
)

ISSUE_SECTION = (
    "## Work Item: Fix the login bug\n"
    "\n"
    "Users cannot log in with SSO.\n"
    "\n"
    "- **Source:** github\n"
    "- **ID:** acme/app#42\n"
    "- **Priority:** high\n"
    "- **Labels:** bug, auth\n"
    "- **URL:** https://github.com/acme/app/issues/42"
)


def triage(job: Script, **options: object) -> Agent:
    options.setdefault("work_source", "queue")
    schedule = Schedule.interval("5m", **options)  # type: ignore[arg-type]
    return Agent("triage", job=job, schedules={"check": schedule})


# ------------------------------------------------------------------------------ prompt texts


def test_no_prompt_and_no_item_is_the_default_prompt() -> None:
    assert build_schedule_prompt(None) == "Execute scheduled task."
    assert build_schedule_prompt("") == DEFAULT_PROMPT
    assert build_schedule_prompt(Schedule.interval("5m")) == "Execute scheduled task."


def test_prompt_without_item_is_the_prompt_itself() -> None:
    assert build_schedule_prompt("Check for ready issues.") == "Check for ready issues."
    schedule = Schedule.interval("5m", prompt="Check.")
    assert build_schedule_prompt(schedule) == "Check."


def test_prompt_and_item_is_prompt_blank_line_then_the_item_section() -> None:
    schedule = Schedule.interval("5m", prompt="Process this issue:")
    assert build_schedule_prompt(schedule, ISSUE) == "Process this issue:\n\n" + ISSUE_SECTION


def test_item_without_prompt_starts_at_the_heading() -> None:
    assert build_schedule_prompt(None, ISSUE) == ISSUE_SECTION
    assert build_schedule_prompt(Schedule.interval("5m"), ISSUE) == ISSUE_SECTION


def test_labels_line_is_omitted_when_there_are_none() -> None:
    item = WorkItem(id="7", title="T", source="jira", external_id="OPS-7", priority="low")
    assert build_schedule_prompt("Go.", item) == (
        "Go.\n\n## Work Item: T\n\n- **Source:** jira\n- **ID:** OPS-7\n- **Priority:** low"
    )


def test_minimal_item_uses_its_id_and_leaves_out_empty_fields() -> None:
    item = WorkItem(id="7", title="Only a title")
    assert build_schedule_prompt(None, item) == "## Work Item: Only a title\n\n- **ID:** 7"


def test_build_schedule_prompt_rejects_a_non_text_prompt() -> None:
    with pytest.raises(TypeError, match="prompt must be a string or a Schedule, got int"):
        build_schedule_prompt(42)  # type: ignore[arg-type]


def test_work_item_normalises_labels_and_is_a_work_source_type() -> None:
    assert WorkItem(id="1", title="t", labels=["a", "b"]).labels == ("a", "b")
    assert WorkItem(id="1", title="t", labels=None).labels == ()  # type: ignore[arg-type]
    assert isinstance(ListSource(), WorkSource)


def test_template_fills_known_fields_and_leaves_other_braces_alone() -> None:
    values = {"agent": "triage", "schedule": "check", "run_id": "r1"}
    text = 'Agent {agent}/{schedule} run {run_id} {"filter": {"state": "open"}} {other} {{agent}}'
    assert fill_prompt_template(text, values) == (
        'Agent triage/check run r1 {"filter": {"state": "open"}} {other} {triage}'
    )
    # a known field without a value stays as written
    assert fill_prompt_template("at {now}", {}) == "at {now}"
    assert TEMPLATE_FIELDS == ("agent", "schedule", "now", "date", "last_run", "run_id")


# ---------------------------------------------------------------------- through the scheduler


def test_claimed_item_reaches_the_job_prompt_and_its_outcome_is_reported() -> None:
    source = ListSource([ISSUE])
    job = Script("Fixed it.")
    with running(work_sources={"queue": source}) as (sched, _clock):
        sched.add_agent(triage(job, prompt="Process this issue:"))
        step(sched)
        [info] = job.calls
        assert info.prompt == "Process this issue:\n\n" + ISSUE_SECTION
        assert info.work_item == ISSUE
        assert source.claims == [("triage", "check")]
        assert source.reports == [
            (ISSUE, WorkOutcome(success=True, summary="Fixed it.", run_id=info.run_id))
        ]
        [record] = sched.history("triage", "check")
        assert record.status is RunStatus.SUCCESS
        assert record.work_item_id == "wi-1"


def test_failed_run_reports_failure_with_the_error() -> None:
    source = ListSource([ISSUE])
    job = Script(RuntimeError("repository unreachable"))
    with running(work_sources={"queue": source}) as (sched, _clock):
        sched.add_agent(triage(job))
        step(sched)
        [(item, outcome)] = source.reports
        assert item == ISSUE
        assert outcome == WorkOutcome(
            success=False,
            summary=None,
            error="RuntimeError: repository unreachable",
            run_id=job.calls[0].run_id,
        )
        [record] = sched.history("triage")
        assert record.status is RunStatus.FAILED
        assert record.work_item_id == "wi-1"


def test_success_without_output_reports_a_default_summary() -> None:
    source = ListSource([ISSUE])
    with running(work_sources={"queue": source}) as (sched, _clock):
        sched.add_agent(triage(Script(None)))
        step(sched)
        assert source.reports[0][1].summary == "Job completed"


def test_each_run_claims_and_reports_its_own_item() -> None:
    second = WorkItem(id="wi-2", title="Second")
    source = ListSource([ISSUE, second])
    job = Script("one", RuntimeError("two"))
    with running(work_sources={"queue": source}) as (sched, clock):
        sched.add_agent(triage(job))
        step(sched)
        step(sched, clock, "5m")
        assert [c.work_item for c in job.calls] == [ISSUE, second]
        assert [(i.id, o.success) for i, o in source.reports] == [("wi-1", True), ("wi-2", False)]


def test_no_item_skips_the_run_with_no_work_and_waits_one_interval() -> None:
    source = ListSource([])
    job = Script()
    skipped: list[JobSkipped] = []
    with running(work_sources={"queue": source}) as (sched, clock):
        sched.add_listener(skipped.append, JobSkipped)
        sched.add_agent(triage(job))
        step(sched)
        assert job.calls == []
        assert source.claims == [("triage", "check")]
        assert source.reports == []
        assert sched.history("triage") == []  # a skip is not a run
        [status] = sched.get_status().schedules
        assert status.next_run_at == START + timedelta(minutes=5)
        assert status.skip_reason is SkipReason.NO_WORK
        assert status.consecutive_failures == 0
        state = sched.store.get_schedule_state("triage", "check")
        assert state.next_run_at == START + timedelta(minutes=5)
        assert state.last_result is RunStatus.SKIPPED
        assert [(e.agent, e.schedule, e.reason) for e in skipped] == [
            ("triage", "check", SkipReason.NO_WORK)
        ]

        step(sched, clock, "4m")  # not due yet: nobody asks the source
        assert source.claims == [("triage", "check")]

        source.items.append(ISSUE)  # work arrives; the next check takes it
        step(sched, clock, "1m")
        assert [c.work_item for c in job.calls] == [ISSUE]
        [status] = sched.get_status().schedules
        assert status.skip_reason is SkipReason.NOT_DUE
        assert status.next_run_at == START + timedelta(minutes=10)


def test_a_run_now_that_finds_no_work_answers_skipped_and_is_recorded_under_its_id() -> None:
    """``trigger(wait=True)`` answered ``success=False`` with no error and no skip for a run
    that found no work, and its ``JobSkipped`` named no run. It left no record either, so the
    run id it answered could not be followed in the history (timer runs still leave none)."""
    skipped: list[JobSkipped] = []
    with running(work_sources={"queue": ListSource([])}) as (sched, _clock):
        sched.add_listener(skipped.append, JobSkipped)
        # manual: an interval due at once could be fired by the timer thread first
        manual = Schedule.manual(work_source="queue")
        sched.add_agent(Agent("triage", job=Script(), schedules={"check": manual}))
        result = sched.trigger("triage", "check", wait=True)
        assert (result.success, result.skipped, result.skip_reason) == (
            False,
            True,
            SkipReason.NO_WORK,
        )
        assert result.error == "its work source had no work"
        [record] = sched.history("triage")
        assert (record.run_id, record.status, record.error) == (
            result.run_id,
            RunStatus.SKIPPED,
            "its work source had no work",
        )
        assert record.trigger_type is TriggerType.MANUAL
        [status] = sched.get_status().schedules
        assert (status.last_result, status.consecutive_failures) == (RunStatus.SKIPPED, 0)
        [event] = skipped
        assert event.run_id == result.run_id is not None


def test_no_work_waits_one_interval_from_the_check_not_the_next_grid_point() -> None:
    class SlowEmpty(ListSource):
        def get_next_work_item(self, agent: str, schedule: str) -> WorkItem | None:
            clock.advance("2m")  # asking the tracker takes two minutes
            return super().get_next_work_item(agent, schedule)

    source = SlowEmpty()
    with running(work_sources={"queue": source}) as (sched, clock):
        # grid points 09:03, 09:13, 09:23...; the check starts at 09:03 and ends at 09:05
        anchored = Schedule.interval(
            "10m", anchor=START + timedelta(minutes=3), work_source="queue"
        )
        sched.add_agent(Agent("triage", job=Script(), schedules={"check": anchored}))
        step(sched, clock, "3m")
        assert source.claims == [("triage", "check")]
        assert sched.get_status().schedules[0].next_run_at == START + timedelta(minutes=15)


def test_a_claim_that_raises_warns_and_runs_with_the_plain_prompt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(ListSource):
        def get_next_work_item(self, agent: str, schedule: str) -> WorkItem | None:
            raise ConnectionError("tracker down")

    source = Broken()
    job = Script("ok")
    caplog.set_level(logging.WARNING, logger="herdsched")
    with running(work_sources={"queue": source}) as (sched, _clock):
        sched.add_agent(triage(job, prompt="Check for ready issues."))
        step(sched)
        [info] = job.calls
        assert info.prompt == "Check for ready issues."
        assert info.work_item is None
        assert source.reports == []
        [record] = sched.history("triage")
        assert record.status is RunStatus.SUCCESS
        assert record.work_item_id is None
    warnings = [r for r in caplog.records if "failed to give an item" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    assert "'queue'" in warnings[0].getMessage()
    assert "triage/check" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None


LOOK_ALIKE = SimpleNamespace(
    id=1, title="t", description="", source="", external_id=None, priority=None, labels=()
)


@pytest.mark.parametrize(
    ("returned", "described"),
    [
        ("wi-1", "str 'wi-1'"),
        ({"id": "wi-1"}, "dict {'id': 'wi-1'}"),
        (["wi-1"], "list ['wi-1']"),
        (
            LOOK_ALIKE,
            "SimpleNamespace namespace(id=1, title='t', description"
            "...rnal_id=None, priority=None, labels=())",
        ),
    ],
)
def test_a_source_returning_anything_but_a_work_item_fails_the_run_naming_it(
    returned: object, described: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A look-alike item with an int id left its schedule ``running`` for good, with no
    record (the record refused the id); a string or a dict failed with an AttributeError
    naming neither the source nor the value, and was reported back to the source."""

    class Odd(ListSource):
        def get_next_work_item(self, agent: str, schedule: str) -> WorkItem | None:
            super().get_next_work_item(agent, schedule)
            return returned  # type: ignore[return-value]

    source = Odd()
    job = Script()
    error = f"TypeError: work source 'queue' returned {described}, not a WorkItem or None"
    caplog.set_level(logging.ERROR, logger="herdsched")
    with running(work_sources={"queue": source}) as (sched, clock):
        sched.add_agent(triage(job))
        step(sched)
        assert job.calls == []
        assert source.reports == []
        [record] = sched.history("triage")
        assert (record.status, record.error, record.work_item_id) == (RunStatus.FAILED, error, None)
        [status] = sched.get_status().schedules
        assert (status.status.value, status.consecutive_failures) == ("idle", 1)
        assert status.next_run_at is not None and status.next_run_at > clock.now()
        step(sched, clock, status.next_run_at - clock.now())  # a failure's backoff, then again
        assert len(source.claims) == 2
        assert len(sched.history("triage")) == 2
    assert error.removeprefix("TypeError: ") in caplog.text


def test_a_work_item_whose_id_was_changed_fails_its_run_and_the_schedule_goes_on() -> None:
    """Its record could not be made, and the run was never recorded: the schedule stayed
    ``running`` for good. The run's outcome refuses such an id, and the run fails instead."""
    item = WorkItem(id="wi-1", title="t")
    object.__setattr__(item, "id", 7)  # around the frozen class's checks
    source = ListSource([item])
    with running(work_sources={"queue": source}) as (sched, clock):
        sched.add_agent(triage(Script("done")))
        step(sched)
        [record] = sched.history("triage")
        assert record.status is RunStatus.FAILED
        assert "work_item_id" in (record.error or "")
        [status] = sched.get_status().schedules
        assert status.status.value == "idle" and status.next_run_at is not None
        step(sched, clock, status.next_run_at - clock.now())
        assert len(source.claims) == 2


def test_a_raising_report_outcome_is_logged_and_does_not_fail_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Forgetful(ListSource):
        def report_outcome(self, item: WorkItem, outcome: WorkOutcome) -> None:
            raise RuntimeError("cannot comment on the issue")

    source = Forgetful([ISSUE])
    caplog.set_level(logging.WARNING, logger="herdsched")
    with running(work_sources={"queue": source}) as (sched, _clock):
        sched.add_agent(triage(Script("done")))
        step(sched)
        [record] = sched.history("triage")
        assert record.status is RunStatus.SUCCESS
        [status] = sched.get_status().schedules
        assert status.last_result is RunStatus.SUCCESS
        assert status.consecutive_failures == 0
    messages = [r.getMessage() for r in caplog.records]
    assert any("failed to record the outcome of item wi-1" in m for m in messages)


def test_a_job_that_exits_is_a_failure_and_its_item_is_reported() -> None:
    source = ListSource([ISSUE])
    with running(work_sources={"queue": source}) as (sched, clock):
        sched.add_agent(triage(Script(SystemExit(3))))
        step(sched)
        [record] = sched.history("triage")
        assert record.status is RunStatus.FAILED
        assert record.error == "SystemExit: 3"
        assert [o.success for _, o in source.reports] == [False]
        step(sched, clock, "5m")  # the slot was freed: the schedule keeps running
        assert len(source.claims) == 2


def test_a_timed_out_run_reports_its_item_as_failed() -> None:
    source = ListSource([ISSUE])
    started = threading.Event()

    def slow(info: object) -> str:
        started.set()
        assert info.cancel_event.wait(10)  # type: ignore[attr-defined]
        return "partial"

    with running(work_sources={"queue": source}) as (sched, clock):
        sched.add_agent(triage(Script(slow), timeout="30s"))
        sched.run_pending()
        assert started.wait(10)
        clock.advance("31s")
        step(sched)
        [record] = sched.history("triage")
        assert record.status is RunStatus.TIMEOUT
        [(_item, outcome)] = source.reports
        assert outcome.success is False
        assert outcome.error == "timed out after 30s"


class HeldSource(ListSource):
    """A source that takes as long as the test wants to answer (a slow issue tracker)."""

    def __init__(self, items: list[WorkItem]) -> None:
        super().__init__(items)
        self.asked, self.answer, self.reported = (threading.Event() for _ in range(3))

    def get_next_work_item(self, agent: str, schedule: str) -> WorkItem | None:
        self.asked.set()
        assert self.answer.wait(10)
        return super().get_next_work_item(agent, schedule)

    def report_outcome(self, item: WorkItem, outcome: WorkOutcome) -> None:
        super().report_outcome(item, outcome)
        self.reported.set()


def test_a_run_timed_out_while_its_source_answers_never_calls_its_job() -> None:
    """The run was recorded as timed out at its timeout, and its job was called all the same
    once the source answered: a job that does not read its cancel event did the work."""
    source = HeldSource([ISSUE])
    job = Script()
    recorded = threading.Event()
    with running(work_sources={"queue": source}) as (sched, clock):
        sched.add_listener(lambda event: recorded.set(), JobFailed)
        sched.add_agent(triage(job, timeout="30s"))
        sched.run_pending()
        assert source.asked.wait(10)
        clock.advance("31s")
        sched.run_pending()
        assert recorded.wait(10)  # at its timeout, the source still asked
        source.answer.set()
        assert sched.wait_until_idle(10)
        assert job.calls == []
        [record] = sched.history("triage")
        assert (record.status, record.error) == (RunStatus.TIMEOUT, "timed out after 30s")
        assert source.reports == [
            (ISSUE, WorkOutcome(success=False, error="timed out after 30s", run_id=record.run_id))
        ]


def test_a_run_given_up_by_stop_while_its_source_answers_never_calls_its_job() -> None:
    """Real time: ``stop(timeout=...)`` waits real seconds."""
    source = HeldSource([ISSUE])
    job = Script()
    with running(work_sources={"queue": source}) as (sched, _clock):
        sched.add_agent(triage(job))
        sched.run_pending()
        assert source.asked.wait(10)
        with pytest.raises(SchedulerShutdownError, match="1 job"):
            sched.stop(timeout=0.05)  # gives the run up
        source.answer.set()
        assert source.reported.wait(10)
        assert job.calls == []
        [(item, outcome)] = source.reports
        assert item == ISSUE
        assert (outcome.success, outcome.error) == (
            False,
            "stop() gave the run up before its job began",
        )


def test_a_run_past_its_deadline_when_its_source_answers_is_a_timeout_naming_the_item() -> None:
    """Settled after the claim (the timer had not looked yet), its record names the item."""
    clock = FakeClock(START)

    class Slow(ListSource):
        def get_next_work_item(self, agent: str, schedule: str) -> WorkItem | None:
            clock.advance("31s")
            return super().get_next_work_item(agent, schedule)

    source = Slow([ISSUE])
    job = Script()
    schedule = Schedule.interval("5m", work_source="queue", timeout="30s")
    run = Run(
        run_id="r1",
        agent="triage",
        schedule_name="check",
        schedule=schedule,
        job=job,
        trigger_type=TriggerType.INTERVAL,
        scheduled_for=START,
        fired_at=START,
        prompt=None,
        default_prompt=None,
        consecutive_failures=0,
        session_id=None,
        last_run_at=None,
    )
    run.deadline = clock.monotonic() + 30
    outcome = execute_run(run, clock=clock, work_sources={"queue": source})
    assert job.calls == []
    assert (outcome.status, outcome.error, outcome.work_item_id) == (
        RunStatus.TIMEOUT,
        "timed out after 30s",
        "wi-1",
    )
    assert source.reports == [
        (ISSUE, WorkOutcome(success=False, error="timed out after 30s", run_id="r1"))
    ]


def test_unknown_work_source_is_refused_naming_it() -> None:
    with running(work_sources={"queue": ListSource()}) as (sched, _clock):
        agent = Agent(
            "triage",
            job=Script(),
            schedules={"check": Schedule.interval("5m", work_source="jira")},
        )
        with pytest.raises(InvalidScheduleError, match=r"unknown work source 'jira' \(queue\)"):
            sched.add_agent(agent)


# ------------------------------------------------------------------------ prompt templates


def test_templates_are_filled_for_each_run_and_json_survives() -> None:
    prompt = (
        "agent={agent} schedule={schedule} now={now} date={date} last={last_run} run={run_id} "
        '{"query": {"labels": ["ready"]}} {unknown}'
    )
    job = Script()
    with running() as (sched, clock):
        sched.add_agent(
            Agent("triage", job=job, schedules={"check": Schedule.interval("1d", prompt=prompt)})
        )
        step(sched)
        step(sched, clock, "1d")
        first, second = job.calls
        tail = ' {"query": {"labels": ["ready"]}} {unknown}'
        assert first.prompt == (
            "agent=triage schedule=check now=2026-01-05T09:00:00.000Z date=2026-01-05 "
            f"last=never run={first.run_id}" + tail
        )
        assert second.prompt == (
            "agent=triage schedule=check now=2026-01-06T09:00:00.000Z date=2026-01-06 "
            f"last={format_timestamp(START)} run={second.run_id}" + tail
        )
        assert first.run_id != second.run_id


def test_last_run_is_the_previous_run_whatever_its_result_a_check_without_work_too() -> None:
    """``{last_run}`` is the schedule's ``last_run_at``, as its status shows it: a check that
    found no work is the previous run (the docs said "the start of the previous run" only)."""
    source = ListSource([ISSUE])
    job = Script()
    with running(work_sources={"queue": source}) as (sched, clock):
        sched.add_agent(triage(job, prompt="since {last_run}"))
        step(sched)
        step(sched, clock, "5m")  # no work: the job is not called
        source.items.append(WorkItem(id="wi-2", title="Second"))
        step(sched, clock, "5m")
        first, second = (prompt.splitlines()[0] for prompt in job.prompts)
        assert first == "since never"
        checked = START + timedelta(minutes=5)
        assert second == f"since {format_timestamp(checked)}"
        [status] = sched.get_status().schedules
        assert status.last_run_at == START + timedelta(minutes=10)


def test_templates_apply_to_a_trigger_prompt_and_to_the_agent_default_prompt() -> None:
    job = Script()
    with running() as (sched, _clock):
        sched.add_agent(
            Agent(
                "triage",
                job=job,
                default_prompt="Default for {agent}.",
                schedules={"check": Schedule.manual()},
            )
        )
        assert sched.trigger("triage", "check", wait=True).success
        assert sched.trigger("triage", "check", prompt="Now {schedule}!", wait=True).success
        assert job.prompts == ["Default for triage.", "Now check!"]


def test_template_fields_are_filled_before_the_item_section_is_added() -> None:
    item = WorkItem(id="1", title="Handle {agent}", description="literal {run_id}")
    source = ListSource([item])
    job = Script()
    with running(work_sources={"queue": source}) as (sched, _clock):
        sched.add_agent(triage(job, prompt="For {agent}:"))
        step(sched)
        assert job.prompts == [
            "For triage:\n\n## Work Item: Handle {agent}\n\nliteral {run_id}\n\n- **ID:** 1"
        ]


def test_an_item_is_reported_even_when_building_the_prompt_crashes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import herdsched.runner

    def broken(prompt: object, work_item: object = None) -> str:
        raise ValueError("template engine broke")

    monkeypatch.setattr(herdsched.runner, "build_schedule_prompt", broken)
    source = ListSource([ISSUE])
    job = Script()
    with running(work_sources={"queue": source}) as (sched, _clock):
        sched.add_agent(triage(job))
        step(sched)
        assert job.calls == []
        [record] = sched.history("triage")
        assert record.status is RunStatus.FAILED
        assert "template engine broke" in (record.error or "")
        [(_item, outcome)] = source.reports
        assert outcome.success is False
        assert outcome.error == "ValueError: template engine broke"


def test_a_run_without_a_source_that_crashes_before_the_job_fails_cleanly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import herdsched.runner

    def broken(prompt: object, work_item: object = None) -> str:
        raise ValueError("template engine broke")

    monkeypatch.setattr(herdsched.runner, "build_schedule_prompt", broken)
    job = Script()
    with running() as (sched, clock):
        sched.add_agent(Agent("plain", job=job, schedules={"s": Schedule.interval("5m")}))
        step(sched)
        assert job.calls == []
        assert sched.history("plain")[0].status is RunStatus.FAILED
        monkeypatch.undo()
        step(sched, clock, "5m")  # the schedule was not lost
        assert len(job.calls) == 1


def test_any_other_return_value_becomes_the_output_text() -> None:
    with running() as (sched, _clock):
        sched.add_agent(
            Agent("plain", job=Script({"answer": 42}), schedules={"s": Schedule.manual()})
        )
        assert sched.trigger("plain", "s", wait=True).success
        assert sched.history("plain")[0].output_summary == "{'answer': 42}"


def test_a_job_that_stops_at_once_on_timeout_is_still_recorded_as_a_timeout() -> None:
    """The job's own worker may settle the run before the timer's settling thread does: the
    run is a timeout either way."""
    worker_settled, job_may_return = threading.Event(), threading.Event()
    started = threading.Event()  # the job began: a run timed out before it never calls it
    held: list[bool] = []

    class HoldTheTimer(logging.Handler):
        """Holds the timer right after it marked the run timed out, until the job has returned
        and its worker has settled the run."""

        def emit(self, record: logging.LogRecord) -> None:
            if "timed out after" in record.getMessage():
                job_may_return.set()
                held.append(worker_settled.wait(10))

    def quick(info: object) -> str:
        started.set()
        assert job_may_return.wait(10)
        return "stopped early"

    source = ListSource([ISSUE])
    handler = HoldTheTimer()
    logger = logging.getLogger("herdsched")
    logger.addHandler(handler)
    try:
        with running(work_sources={"queue": source}) as (sched, clock):
            sched.add_listener(lambda event: worker_settled.set(), JobSucceeded, JobFailed)
            sched.add_agent(triage(Script(quick), timeout="30s"))
            sched.run_pending()
            assert started.wait(10)
            clock.advance("31s")
            step(sched)
            [record] = sched.history("triage")
            assert record.status is RunStatus.TIMEOUT
            assert record.error == "timed out after 30s"
            assert held == [True]  # the worker did settle it first
            [status] = sched.get_status().schedules
            assert status.consecutive_failures == 1
            assert status.next_run_at is not None
            assert [o.success for _, o in source.reports] == [False]
    finally:
        logger.removeHandler(handler)


def test_a_once_schedule_that_finds_no_work_ends_with_a_record_saying_so() -> None:
    """It has no next slot, so it is completed; it used to end without any record at all."""
    calls: list[object] = []
    with running(work_sources={"queue": ListSource()}) as (sched, clock):
        sched.add_agent(
            Agent(
                "triage",
                job=lambda info: calls.append(info) or "ok",
                schedules={
                    "one": Schedule.once(START + timedelta(minutes=10), work_source="queue")
                },
            )
        )
        step(sched, clock, timedelta(minutes=10))
        assert calls == []
        state = sched.store.get_schedule_state("triage", "one")
        assert state.status.value == "completed" and state.next_run_at is None
        [record] = sched.history("triage", "one")
        assert record.status is RunStatus.SKIPPED
        assert record.scheduled_for == START + timedelta(minutes=10)
        assert record.error is not None and "work source had no work" in record.error
