"""Models validate at construction (errors name the field); the converter round-trips them."""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from herdsched import (
    Agent,
    CronParseError,
    IntervalParseError,
    InvalidScheduleError,
    JobResult,
    RunRecord,
    RunStatus,
    Schedule,
    ScheduleState,
    ScheduleType,
    SkipReason,
    Status,
    ThreadedScheduler,
    TriggerInfo,
    TriggerResult,
    TriggerType,
)
from herdsched.cadence import Cron, Interval, Once
from herdsched.converter import (
    converter,
    record_from_dict,
    record_to_dict,
    state_from_dict,
    state_to_dict,
)
from herdsched.definitions import schedule_from_mapping, schedule_to_mapping
from herdsched.models import CatchUp, NotifyPolicy, Overlap

UTC = timezone.utc
T0 = datetime(2026, 11, 22, 5, 41, 48, 898000, tzinfo=UTC)


def job(info: TriggerInfo) -> str:
    return "done"


def _field_error(build: Callable[[], Any]) -> InvalidScheduleError:
    with pytest.raises(InvalidScheduleError) as info:
        build()
    return info.value


# --------------------------------------------------------------------------------------------
# Schedule factories


def test_interval_factory() -> None:
    schedule = Schedule.interval("5m", prompt="Check for ready issues.")
    assert schedule.type is ScheduleType.INTERVAL
    assert isinstance(schedule.cadence, Interval)
    assert schedule.cadence.every == timedelta(minutes=5)
    assert schedule.prompt == "Check for ready issues."
    assert schedule.enabled is True
    assert schedule.fires_on_timer is True
    # defaults
    assert schedule.overlap is Overlap.SKIP
    assert schedule.notify is NotifyPolicy.NEVER
    assert schedule.catch_up is None
    assert schedule.timeout is None


def test_interval_factory_options() -> None:
    schedule = Schedule.interval(
        timedelta(minutes=15),
        anchor="2026-01-01T00:00:00Z",
        start_at="2026-02-01T00:00:00Z",
        jitter_percent=10,
        timeout="10m",
        catch_up="skip",
        overlap="buffer_one",
        notify="conditional",
        enabled=False,
        job=job,
        metadata={"team": "ops"},
    )
    assert isinstance(schedule.cadence, Interval)
    assert schedule.cadence.anchor == datetime(2026, 1, 1, tzinfo=UTC)
    assert schedule.cadence.start_at == datetime(2026, 2, 1, tzinfo=UTC)
    assert schedule.cadence.jitter_percent == 10.0
    assert schedule.timeout == timedelta(minutes=10)
    assert schedule.catch_up is CatchUp.SKIP
    assert schedule.overlap is Overlap.BUFFER_ONE
    assert schedule.notify is NotifyPolicy.CONDITIONAL
    assert schedule.enabled is False
    assert schedule.job is job
    assert schedule.metadata == {"team": "ops"}


def test_cron_factory() -> None:
    schedule = Schedule.cron("0 9 * * 1-5", timezone="Europe/Berlin", prompt="Daily report.")
    assert schedule.type is ScheduleType.CRON
    assert isinstance(schedule.cadence, Cron)
    assert schedule.cadence.expression.canonical == "0 9 * * 1-5"
    assert schedule.cadence.timezone == "Europe/Berlin"


def test_once_factory() -> None:
    schedule = Schedule.once("2026-12-01T09:00:00Z", prompt="Run the migration.")
    assert schedule.type is ScheduleType.ONCE
    assert isinstance(schedule.cadence, Once)
    assert schedule.cadence.at == datetime(2026, 12, 1, 9, tzinfo=UTC)


def test_a_once_time_keeps_the_milliseconds_the_store_keeps() -> None:
    """A time made with ``datetime.now()`` was shown with microseconds (``once at
    ...17.968123+00:00``) and differed from the same schedule read back from the store."""
    schedule = Schedule.once(datetime(2026, 12, 1, 9, 0, 17, 968123, tzinfo=UTC))
    assert isinstance(schedule.cadence, Once)
    assert schedule.cadence.at == datetime(2026, 12, 1, 9, 0, 17, 968000, tzinfo=UTC)
    assert schedule.cadence.describe() == "once at 2026-12-01T09:00:17.968+00:00"
    stored = schedule_from_mapping(schedule_to_mapping(schedule, require_job_name=False))
    assert stored == schedule


@pytest.mark.parametrize(
    ("factory", "kind"),
    [
        (Schedule.manual, ScheduleType.MANUAL),
        (Schedule.webhook, ScheduleType.WEBHOOK),
        (Schedule.chat, ScheduleType.CHAT),
    ],
)
def test_trigger_only_factories(factory: Callable[..., Schedule], kind: ScheduleType) -> None:
    schedule = factory(prompt="Answer.")
    assert schedule.type is kind
    assert schedule.cadence is None
    assert schedule.fires_on_timer is False


def test_with_changes_revalidates() -> None:
    schedule = Schedule.interval("5m")
    changed = schedule.with_changes(prompt="new", enabled=False)
    assert (changed.prompt, changed.enabled) == ("new", False)
    assert schedule.prompt is None  # frozen: the original is untouched
    assert _field_error(lambda: schedule.with_changes(overlap="sometimes")).field == "overlap"


# --------------------------------------------------------------------------------------------
# Schedule validation: each error names its field


@pytest.mark.parametrize(
    ("build", "field", "phrase"),
    [
        (lambda: Schedule(type="hourly"), "type", "type must be one of interval, cron, once"),
        (lambda: Schedule.interval("5m", overlap="sometimes"), "overlap", "skip, buffer_one"),
        (lambda: Schedule.interval("5m", notify="loud"), "notify", "always, conditional, never"),
        (lambda: Schedule.interval("5m", catch_up="all"), "catch_up", "once, skip"),
        # None was kept: notify=None notified as "conditional", and a stored schedule with a
        # null notify or overlap was set aside at the next start
        (lambda: Schedule.interval("5m", notify=None), "notify", "never; got None"),
        (lambda: Schedule.interval("5m", overlap=None), "overlap", "buffer_one; got None"),
        (lambda: Schedule(type=None), "type", "type must be one of interval"),
        (lambda: Schedule.interval("5m", prompt=5), "prompt", "prompt must be a string"),
        (lambda: Schedule.interval("5m", owner=["a"]), "owner", "owner must be a string"),
        (lambda: Schedule.interval("5m", job="nope"), "job", "job must be callable"),
        # accepted, then every run failed with a TypeError
        (lambda: Schedule.interval("5m", job=lambda: 1), "job", "parameters are ()"),
        (lambda: Schedule.manual(job=lambda a, b: 1), "job", "cannot be called with one argument"),
        # an empty owner or work source was accepted (the fleet file refused it)
        (lambda: Schedule.manual(owner=""), "owner", "owner cannot be empty"),
        (lambda: Schedule.manual(owner="  "), "owner", "owner cannot be empty"),
        # a lone surrogate was kept, then failed every commit of the state (never saved)
        (lambda: Schedule.manual(owner="x\ud800"), "owner", "lone surrogate"),
        # a control character was kept as given ("\x85" was refused as empty)
        (lambda: Schedule.manual(owner="ann\t"), "owner", "owner contains a control character"),
        (lambda: Schedule.manual(owner="\x85"), "owner", "owner contains a control character"),
        (lambda: Schedule.manual(work_source=""), "work_source", "work_source cannot be empty"),
        # metadata that is not a mapping of text keys was a bare TypeError, or stored as given
        (lambda: Schedule.manual(metadata=[1]), "metadata", "metadata must be a mapping, got list"),
        (lambda: Schedule.manual(metadata={1: "x"}), "metadata", "keys must be strings, got int"),
        # metadata that is not JSON data broke the REST listing of every schedule (500)
        (lambda: Schedule.manual(metadata={"w": {1, 2}}), "metadata", "metadata.w is a set"),
        (lambda: Schedule.manual(metadata={"b": b"x"}), "metadata", "metadata.b is a bytes"),
        (lambda: Schedule.manual(metadata={"n": float("nan")}), "metadata", "JSON cannot hold"),
        # only the first culprit was named, a set told to "write a date or time as text"
        (
            lambda: Schedule.manual(metadata={"w": {1}, "n": float("nan"), "ok": 1}),
            "metadata",
            "metadata.w is a set ({1}): metadata holds text, numbers, booleans, null, lists and "
            "mappings (write a list); metadata.n is nan, which JSON cannot hold",
        ),
        (  # named up to ten: a body of thousands made a message of megabytes
            lambda: Schedule.manual(metadata={"n": [float("nan")] * 25}),
            "metadata",
            "metadata.n[9] is nan, which JSON cannot hold; and 15 more",
        ),
        (lambda: Schedule.manual(metadata={"s": "\udcff"}), "metadata", "metadata.s is not valid"),
        (lambda: Schedule.manual(metadata={"z": "a\x00"}), "metadata", "metadata.z contains a NUL"),
        (
            lambda: Schedule.manual(metadata={"d": [{"at": date(2026, 1, 1)}]}),
            "metadata",
            "metadata.d[0].at is a date",
        ),
        # a NUL in a prompt was kept, then failed every run of a command job
        (lambda: Schedule.manual(prompt="a\x00b"), "prompt", "prompt contains a NUL character"),
        (lambda: Schedule.manual(prompt="\ud800"), "prompt", "lone surrogate"),
        (lambda: Schedule.interval("5m", enabled="yes"), "enabled", "must be true or false"),
        (lambda: Schedule.interval("5m", persist_session=1), "persist_session", "true or false"),
        (lambda: Schedule.interval("5x"), "interval", 'Invalid time unit "x"'),
        # a bad timeout was blamed on the interval (field "interval"), even on a cron
        (
            lambda: Schedule.cron("0 9 * * *", timeout="0s"),
            "timeout",
            "Zero duration is not allowed in timeout",
        ),
        (
            lambda: Schedule.interval("5m", timeout="10"),
            "timeout",
            'Missing time unit (expected format "{number}{unit}", units: s, m, h, d) '
            'in timeout "10"',
        ),
        (lambda: Schedule.interval("5m", timeout=-1), "timeout", "Negative durations"),
        (lambda: Schedule.interval("5m", anchor="soon"), "anchor", "interval anchor 'soon'"),
        (lambda: Schedule.interval("5m", start_at="x"), "start_at", "interval start_at 'x'"),
        (lambda: Schedule.interval("5m", jitter_percent=300), "jitter_percent", "jitter_percent"),
        (lambda: Schedule.cron("0 9 * * *", timezone="Mars/Base"), "timezone", "'Mars/Base'"),
        (lambda: Schedule.once("not a date"), "at", "'not a date'"),
        # cadence and type must agree
        (lambda: Schedule(type="interval"), "cadence", "need an Interval cadence"),
        (lambda: Schedule(type="cron", cadence=Interval("5m")), "cadence", "Cron cadence"),
        (lambda: Schedule(type="once", cadence=Cron("@daily")), "cadence", "Once cadence"),
        (lambda: Schedule(type="manual", cadence=Interval("5m")), "type", "takes no cadence"),
        (lambda: Schedule(type="webhook", cadence=Once(T0)), "type", "takes no cadence"),
    ],
)
def test_schedule_validation(build: Callable[[], Any], field: str, phrase: str) -> None:
    error = _field_error(build)
    assert error.field == field
    assert phrase in str(error)


@pytest.mark.parametrize(
    ("arguments", "field", "phrase"),
    [
        # field "interval", value "1h", and a message that did not say "anchor"
        (
            {"anchor": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))},
            "anchor",
            "interval anchor 0001-01-01T00:00:00+05:00 is outside the calendar in UTC",
        ),
        # field "anchor": the field was guessed from the words of the message
        ({"start_at": "anchor"}, "start_at", "interval start_at 'anchor' is not"),
        ({"jitter_percent": 120}, "jitter_percent", "jitter_percent must be from 0 to 100"),
    ],
)
def test_an_interval_argument_error_names_that_argument_and_its_value(
    arguments: dict[str, Any], field: str, phrase: str
) -> None:
    error = _field_error(lambda: Schedule.interval("1h", **arguments))
    assert (error.field, error.value) == (field, arguments[field])
    assert phrase in str(error)


def test_a_job_is_judged_by_its_own_parameters_not_those_of_a_function_it_wraps() -> None:
    """A decorator that gives a job its session with ``functools.wraps`` made the job's
    signature read as the wrapped function's: a job whose runs worked was refused."""

    def with_session(function: Callable[[Any, str], None]) -> Callable[[Any], None]:
        @functools.wraps(function)
        def run(info: Any) -> None:
            function(info, "session")

        return run

    @with_session
    def nightly(info: Any, session: str) -> None: ...

    assert Agent("a", job=nightly).job is nightly
    assert Schedule.manual(job=functools.partial(lambda info, n: None, n=1)).job is not None


def test_schedule_cadence_errors_keep_their_own_class() -> None:
    with pytest.raises(CronParseError) as cron:
        Schedule.cron("0 25 * * *")
    assert cron.value.field == "hour"
    with pytest.raises(IntervalParseError, match="timeout"):
        Schedule.interval("5m", timeout="0m")


# --------------------------------------------------------------------------------------------
# Agent


def test_agent() -> None:
    nightly = Schedule.cron("0 3 * * *")
    agent = Agent("triage", max_concurrent=2, job=job, schedules={"nightly": nightly})
    assert (agent.name, agent.max_concurrent, agent.job) == ("triage", 2, job)
    assert dict(agent.schedules) == {"nightly": nightly}
    with_more = agent.with_schedule("on-demand", Schedule.manual())
    assert set(with_more.schedules) == {"nightly", "on-demand"}
    assert set(agent.schedules) == {"nightly"}
    assert set(with_more.without_schedule("nightly").schedules) == {"on-demand"}
    with pytest.raises(InvalidScheduleError, match="'manual' is reserved") as info:
        agent.with_schedule("manual", Schedule.manual())
    assert info.value.field == "name"
    assert Agent("a_b-1").max_concurrent == 1


# "a\n": a regular expression's ``$`` also matches before a final newline (it was accepted)
@pytest.mark.parametrize("name", ["bad name", "-x", "_x", "", "a/b", "ä", "a\n", 5, None])
def test_agent_names(name: object) -> None:
    error = _field_error(lambda: Agent(name))  # type: ignore[arg-type]
    assert error.field == "name"
    assert repr(name) in str(error)


@pytest.mark.parametrize("name", ["bad name", "", "a.b", "nightly\n"])
def test_schedule_names(name: str) -> None:
    error = _field_error(lambda: Agent("a", schedules={name: Schedule.manual()}))
    assert error.field == "name"
    assert "schedule name" in str(error)


@pytest.mark.parametrize("value", [0, -1, True, "2", 1.5, None])
def test_agent_max_concurrent(value: object) -> None:
    error = _field_error(lambda: Agent("a", max_concurrent=value))  # type: ignore[arg-type]
    assert error.field == "max_concurrent"
    assert "positive integer" in str(error)


def test_agent_default_prompt_is_checked_as_a_schedule_prompt_is() -> None:
    """``default_prompt=5`` was accepted; every run then crashed building its prompt."""
    assert _field_error(lambda: Agent("a", default_prompt=5)).field == "default_prompt"
    error = _field_error(lambda: Agent("a", default_prompt="x\x00"))
    assert "default_prompt contains a NUL character at position 1" in str(error)
    deep: dict[str, object] = {}
    inner = deep
    for _ in range(25):
        inner["x"] = {}
        inner = inner["x"]  # type: ignore[assignment]
    assert "nested more than 20 levels" in str(_field_error(lambda: Schedule.manual(metadata=deep)))
    kept = Schedule.manual(metadata={"a": [1, 2.5, True, None, {"b": "text"}]})
    assert kept.metadata == {"a": [1, 2.5, True, None, {"b": "text"}]}


def test_agent_job_and_schedules_are_checked() -> None:
    assert _field_error(lambda: Agent("a", job=42)).field == "job"  # type: ignore[arg-type]
    error = _field_error(lambda: Agent("a", schedules={"s": "5m"}))  # type: ignore[dict-item]
    assert error.field == "schedules.s"
    assert "must be a Schedule" in str(error)


# --------------------------------------------------------------------------------------------
# State and records


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: ScheduleState(status="sleeping"), "status"),
        (lambda: ScheduleState(last_result="great"), "last_result"),
        (lambda: ScheduleState(last_run_at=datetime(2026, 1, 1)), "last_run_at"),
        (lambda: ScheduleState(next_run_at="2026-01-01T00:00:00Z"), "next_run_at"),
        (lambda: ScheduleState(consecutive_failures=-1), "consecutive_failures"),
        (lambda: ScheduleState(consecutive_failures=True), "consecutive_failures"),
        (lambda: ScheduleState(last_error=5), "last_error"),
        (
            lambda: RunRecord(
                run_id="r", agent="a", schedule="s", trigger_type="daily", status="success"
            ),
            "trigger_type",
        ),
        (
            lambda: RunRecord(
                run_id="r", agent="a", schedule="s", trigger_type="cron", status="great"
            ),
            "status",
        ),
    ],
)
def test_state_and_record_validation(build: Callable[[], Any], field: str) -> None:
    assert _field_error(build).field == field


def test_schedule_state_defaults() -> None:
    state = ScheduleState()
    assert state.status is Status.IDLE
    assert (state.last_run_at, state.last_finished_at, state.next_run_at) == (None, None, None)
    assert state.consecutive_failures == 0
    assert state.last_result is None


def test_run_record_summary_and_duration() -> None:
    record = RunRecord(
        run_id="r1",
        agent="a",
        schedule="s",
        trigger_type="interval",
        status="success",
        started_at=T0,
        finished_at=T0 + timedelta(seconds=90),
        output_summary="x" * 1000,
    )
    assert record.output_summary == "x" * 500
    assert record.duration == timedelta(seconds=90)
    assert (
        RunRecord(
            run_id="r2", agent="a", schedule="s", trigger_type="manual", status="interrupted"
        ).duration
        is None
    )


def test_trigger_info_job_result_trigger_result() -> None:
    info = TriggerInfo(
        agent="a",
        schedule="s",
        prompt="p",
        trigger_type=TriggerType.CRON,
        scheduled_for=T0,
        fired_at=T0,
        run_id="r1",
    )
    assert info.cancelled is False
    info.cancel_event.set()
    assert info.cancelled is True
    assert isinstance(info.cancel_event, threading.Event)
    assert JobResult() == JobResult(output=None, session_id=None, notify=None, cost=None)
    skipped = TriggerResult(False, skipped=True, skip_reason=SkipReason.AT_CAPACITY)
    assert (skipped.success, skipped.skip_reason) == (False, SkipReason.AT_CAPACITY)


def test_enums_print_as_their_values() -> None:
    assert str(Status.PAUSED) == "paused"
    assert f"{RunStatus.TIMEOUT}" == "timeout"
    assert Status("completed") is Status.COMPLETED


# --------------------------------------------------------------------------------------------
# Converter round trips


def test_schedule_state_round_trip() -> None:
    state = ScheduleState(
        status="idle",
        last_run_at=T0,
        last_finished_at=T0 + timedelta(seconds=1, milliseconds=222),
        next_run_at=T0 + timedelta(minutes=5),
        last_result="success",
        consecutive_failures=0,
    )
    data = state_to_dict(state)
    assert data["last_run_at"] == "2026-11-22T05:41:48.898Z"
    assert data["last_finished_at"] == "2026-11-22T05:41:50.120Z"
    assert data["next_run_at"] == "2026-11-22T05:46:48.898Z"
    assert data["status"] == "idle" and type(data["status"]) is str
    assert data["last_result"] == "success" and type(data["last_result"]) is str
    # the documented keys are always written, optional ones only when set
    assert {"last_error", "session_id"} <= set(data)
    assert "disabled_reason" not in data
    assert state_from_dict(data) == state


def test_schedule_state_timestamps_are_quoted_in_yaml() -> None:
    text = yaml.safe_dump(state_to_dict(ScheduleState(next_run_at=T0)))
    line = next(line for line in text.splitlines() if line.startswith("next_run_at:"))
    assert line in (
        "next_run_at: '2026-11-22T05:41:48.898Z'",
        'next_run_at: "2026-11-22T05:41:48.898Z"',
    )
    # YAML reads it back as a string, which the converter turns into the same instant
    reloaded = yaml.safe_load(text)
    assert reloaded["next_run_at"] == "2026-11-22T05:41:48.898Z"
    assert state_from_dict(reloaded).next_run_at == T0


def test_schedule_state_from_herdctl_shapes() -> None:
    data = {
        "status": "running",
        "last_run_at": "2026-11-22T06:41:48.898+01:00",  # any offset: re-zoned to UTC
        "next_run_at": yaml.safe_load("t: 2026-11-22T05:46:48.898Z")["t"],  # YAML timestamp
        "last_error": None,
        "some_future_key": "kept by the store, ignored here",
    }
    state = state_from_dict(data)
    assert state.status is Status.RUNNING
    assert state.last_run_at == T0
    assert state.next_run_at == T0 + timedelta(minutes=5)


def test_run_record_round_trip() -> None:
    record = RunRecord(
        run_id="r1",
        agent="triage",
        schedule="check-issues",
        trigger_type="interval",
        scheduled_for=T0,
        started_at=T0 + timedelta(milliseconds=5),
        finished_at=T0 + timedelta(seconds=2),
        status="failed",
        error="boom",
        output_summary="partial output",
        notified=True,
        session_id="sess-1",
        work_item_id="issue-42",
        cost=0.25,
        turns=3,
    )
    data = record_to_dict(record)
    assert data["scheduled_for"] == "2026-11-22T05:41:48.898Z"
    assert data["started_at"] == "2026-11-22T05:41:48.903Z"
    assert data["finished_at"] == "2026-11-22T05:41:50.898Z"
    assert data["trigger_type"] == "interval" and data["status"] == "failed"
    assert record_from_dict(yaml.safe_load(yaml.safe_dump(data))) == record
    assert record_from_dict({**data, "unknown": 1}) == record


def test_converter_durations_are_seconds() -> None:
    assert converter.unstructure(timedelta(minutes=2)) == 120.0
    assert converter.structure(90, timedelta) == timedelta(seconds=90)


def test_record_times_are_cut_to_milliseconds_so_a_reload_is_equal() -> None:
    from herdsched.converter import record_from_dict, record_to_dict

    precise = T0.replace(microsecond=123456)
    record = RunRecord(
        run_id="r",
        agent="a",
        schedule="s",
        trigger_type="cron",
        status="success",
        started_at=precise,
    )
    assert record.started_at == T0.replace(microsecond=123000)
    assert record_from_dict(record_to_dict(record)) == record


def test_evolve_converts_and_validates_what_changes() -> None:
    from attrs import evolve

    from herdsched.models import ScheduleState

    base = ScheduleState(consecutive_failures=2)
    changed = evolve(base, status="running", next_run_at=T0.replace(microsecond=123456))
    assert changed == ScheduleState(
        status=Status.RUNNING, consecutive_failures=2, next_run_at=T0.replace(microsecond=123000)
    )
    assert base.status is Status.IDLE  # the original is untouched
    with pytest.raises(InvalidScheduleError, match="consecutive_failures"):
        evolve(base, consecutive_failures=-1)
    with pytest.raises(InvalidScheduleError, match="status must be one of"):
        evolve(base, status="sleeping")
    with pytest.raises(TypeError, match="'bogus'"):
        evolve(base, bogus=1)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"output": 5}, "JobResult.output must be a string or None, got int 5"),
        ({"session_id": 5}, "JobResult.session_id must be a string or None, got int 5"),
        ({"notify": "yes"}, "JobResult.notify must be True or False or None, got str 'yes'"),
        ({"cost": "0.2"}, "JobResult.cost must be a finite number or None, got str '0.2'"),
        ({"cost": float("nan")}, "JobResult.cost must be a finite number or None, got float nan"),
        ({"turns": 2.5}, "JobResult.turns must be a whole number of at least 0 or None"),
        ({"turns": -1}, "JobResult.turns must be a whole number of at least 0 or None"),
        ({"cost": 10**400}, "JobResult.cost must be a finite number or None, got int"),
    ],
)
def test_a_job_result_names_a_field_of_the_wrong_type(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        JobResult(**fields)
    assert JobResult(output="x", session_id="s", notify=False, cost=0, turns=3).cost == 0


def test_a_job_returning_a_bad_result_fails_its_run_and_keeps_its_record() -> None:
    """``JobResult(output=5)`` was taken as a success whose record could not be stored: the
    history lost the run while the state said it succeeded."""
    sched = ThreadedScheduler(state_dir=None)
    sched.add_agent(
        Agent("a", job=lambda info: JobResult(output=5), schedules={"s": Schedule.manual()})
    )
    with sched:
        result = sched.trigger("a", "s", wait=True)
    (record,) = sched.history("a", "s")
    assert not result.success and record.run_id == result.run_id
    assert record.status is RunStatus.FAILED
    assert "JobResult.output must be a string or None, got int 5" in (record.error or "")
    assert sched.get_status().schedules[0].last_result is RunStatus.FAILED


def test_a_work_items_labels_and_an_agents_description_are_checked() -> None:
    """``labels="bug"`` was kept as the labels ``b``, ``u``, ``g``; ``description=5`` was
    accepted (a fleet file refuses it)."""
    from herdsched.worksource import WorkItem

    with pytest.raises(
        TypeError, match=r"WorkItem\.labels must be a sequence of strings, got .bug."
    ):
        WorkItem(id="1", title="t", labels="bug")  # type: ignore[arg-type]
    assert WorkItem(id="1", title="t", labels=["bug", "ui"]).labels == ("bug", "ui")
    assert WorkItem(id="1", title="t", labels=(x for x in ["bug"])).labels == ("bug",)
    with pytest.raises(TypeError, match="got 5"):
        WorkItem(id="1", title="t", labels=5)  # type: ignore[arg-type]
    # an id or text of another type reached the run's record and failed every commit after it
    with pytest.raises(TypeError, match=r"WorkItem\.id must be a string, got UUID UUID\('"):
        WorkItem(id=uuid.UUID(int=7), title="t")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"WorkItem\.url must be a string or None, got PosixPath"):
        WorkItem(id="1", title="t", url=Path("/x"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"RunRecord\.work_item_id must be a string or None"):
        RunRecord(
            run_id="r", agent="a", schedule="s", trigger_type=TriggerType.MANUAL,
            status=RunStatus.SUCCESS, work_item_id=uuid.UUID(int=7),  # type: ignore[arg-type]
        )  # fmt: skip
    with pytest.raises(TypeError, match=r"Agent\.description must be a string or None, got int 5"):
        Agent("a", description=5)  # type: ignore[arg-type]
